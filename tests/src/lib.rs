//! Harness for the end-to-end tests: start real `vigil` node processes on loopback with a
//! generated config, wait for them by polling (never by sleeping), run real clients against
//! them, and clean up on drop.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The workspace root (parent of this crate).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The `vigil` binary, built once per test process (a cargo test of this crate does not
/// build another package's binaries by itself).
pub fn vigil_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-q", "-p", "vigil-server", "--bin", "vigil"])
            .current_dir(workspace())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building the vigil binary failed");
        let target = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| workspace().join("target"));
        target.join("debug").join("vigil")
    })
    .clone()
}

/// Poll `f` until it returns Some, or panic with `what` after `timeout`.
pub fn poll_until<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free TCP port on `ip` (bound then released; the OS does not hand it out again at once).
pub fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// Disjoint UDP port ranges for nodes started by this test process.
fn udp_range() -> (u16, u16) {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let slot = NEXT.fetch_add(1, Ordering::Relaxed);
    // Spread test processes (one per test file) by pid; 200 ports per node.
    let base = 30000 + ((std::process::id() as u16 % 50) * 600) % 24000 + (slot % 3) * 200;
    (base, base + 199)
}

/// Options for a node under test; `start()` launches it.
#[derive(Default, Clone)]
pub struct NodeBuilder {
    ip: Option<String>,
    rtsp_port: Option<u16>,
    rtsp: String,
    extra: String,
    udp: Option<(u16, u16)>,
}

impl NodeBuilder {
    pub fn new() -> Self {
        Self::default()
    }
    /// Loopback address to listen on (127.0.0.x), default 127.0.0.1.
    pub fn ip(mut self, ip: &str) -> Self {
        self.ip = Some(ip.into());
        self
    }
    /// Fixed RTSP port (to restart a node on the same address).
    pub fn rtsp_port(mut self, port: u16) -> Self {
        self.rtsp_port = Some(port);
        self
    }
    /// Extra keys for the `[rtsp]` table.
    pub fn rtsp(mut self, toml: &str) -> Self {
        self.rtsp.push_str(toml);
        self.rtsp.push('\n');
        self
    }
    /// Extra tables (`[limits]`, `[live]`, `[[camera]]`…) appended to the config.
    pub fn extra(mut self, toml: &str) -> Self {
        self.extra.push_str(toml);
        self.extra.push('\n');
        self
    }
    pub fn udp_ports(mut self, min: u16, max: u16) -> Self {
        self.udp = Some((min, max));
        self
    }
    pub fn start(self) -> Node {
        Node::start(self)
    }
}

/// A running `vigil serve` process; killed on drop.
pub struct Node {
    child: Option<Child>,
    pub ip: String,
    pub rtsp: SocketAddr,
    pub api: SocketAddr,
    pub dir: tempfile::TempDir,
    builder: NodeBuilder,
}

impl Node {
    fn start(b: NodeBuilder) -> Node {
        let ip = b.ip.clone().unwrap_or_else(|| "127.0.0.1".into());
        let rtsp_port = b.rtsp_port.unwrap_or_else(|| free_port(&ip));
        let api_port = free_port(&ip);
        let (umin, umax) = b.udp.unwrap_or_else(udp_range);
        let dir = tempfile::tempdir().expect("temp dir");
        let config = format!(
            "[node]\nid = \"test-{rtsp_port}\"\n\n[rtsp]\nlisten = \"{ip}:{rtsp_port}\"\nudp_port_min = {umin}\nudp_port_max = {umax}\n{}\n[http]\nlisten = \"{ip}:{api_port}\"\n\n{}",
            b.rtsp, b.extra
        );
        let path = dir.path().join("vigil.toml");
        std::fs::write(&path, config).expect("write config");
        let log = std::fs::File::create(dir.path().join("vigil.log")).expect("log file");
        let child = Command::new(vigil_bin())
            .args(["serve", "--config"])
            .arg(&path)
            .env("VIGIL_LOG", "info,vigil_server=debug")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .current_dir(dir.path())
            .spawn()
            .expect("spawn vigil");
        let mut node = Node {
            child: Some(child),
            rtsp: format!("{ip}:{rtsp_port}").parse().expect("addr"),
            api: format!("{ip}:{api_port}").parse().expect("addr"),
            ip,
            dir,
            builder: b,
        };
        node.wait_ready();
        node
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.try_api("/api/health").is_some() {
                return;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("vigil exited during start-up ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "vigil did not come up:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Restart a killed node with the same config and addresses.
    pub fn restart(&mut self) {
        let b = self.builder.clone().rtsp_port(self.rtsp.port());
        let mut fresh = Node::start(NodeBuilder {
            ip: Some(self.ip.clone()),
            udp: b.udp.or(Some(udp_range())),
            ..b
        });
        std::mem::swap(self, &mut fresh);
    }

    pub fn url(&self, path: &str) -> String {
        format!("rtsp://{}/{}", self.rtsp, path.trim_start_matches('/'))
    }

    pub fn try_api(&self, path: &str) -> Option<String> {
        let mut resp = ureq::get(&format!("http://{}{path}", self.api))
            .config()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .call()
            .ok()?;
        resp.body_mut().read_to_string().ok()
    }

    pub fn api_json(&self, path: &str) -> serde_json::Value {
        let body = self
            .try_api(path)
            .unwrap_or_else(|| panic!("GET {path} failed"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// The `/api/paths` entry of `path`, if present.
    pub fn path_info(&self, path: &str) -> Option<serde_json::Value> {
        self.api_json("/api/paths")
            .as_array()?
            .iter()
            .find(|p| p["path"] == path)
            .cloned()
    }

    /// Wait until `path` is live (a producer attached).
    pub fn wait_live(&self, path: &str) {
        poll_until(Duration::from_secs(20), &format!("{path} live"), || {
            self.path_info(path)
                .filter(|p| p["live"] == true)
                .map(|_| ())
        });
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL, like a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait (bounded) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut c = self.child.take().expect("node running");
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        poll_until(
            Duration::from_secs(10),
            "vigil to exit after SIGTERM",
            || c.try_wait().ok().flatten(),
        )
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("vigil.log")).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- vigil log ({}) ----\n{}", self.rtsp, self.log());
        }
    }
}

/// Run a command with a time limit; kill it past the limit.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

/// A background process (publisher) killed on drop.
pub struct Background(pub Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn_background(cmd: &mut Command) -> Background {
    Background(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")),
    )
}

/// Media files made once per machine with ffmpeg's synthetic sources, under
/// target/test-fixtures. 10 s, 25 fps, a keyframe every second (250 frames).
pub fn fixture(name: &str) -> PathBuf {
    let dir = workspace().join("target").join("test-fixtures");
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let path = dir.join(name);
    if path.exists() {
        return path;
    }
    let tmp = dir.join(format!("{}.{}.tmp", name, std::process::id()));
    let video = ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"];
    let audio = ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"];
    let mut args: Vec<&str> = vec!["-v", "error", "-y"];
    match name {
        "h264_aac.mp4" => {
            args.extend(video);
            args.extend(audio);
            args.extend([
                "-t",
                "10",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-g",
                "25",
                "-keyint_min",
                "25",
                "-sc_threshold",
                "0",
                "-pix_fmt",
                "yuv420p",
                "-c:a",
                "aac",
                "-b:a",
                "64k",
                "-f",
                "mp4",
            ]);
        }
        "h264.mp4" => {
            args.extend(video);
            args.extend([
                "-t",
                "10",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-g",
                "25",
                "-keyint_min",
                "25",
                "-sc_threshold",
                "0",
                "-pix_fmt",
                "yuv420p",
                "-f",
                "mp4",
            ]);
        }
        "h265.mp4" => {
            args.extend(video);
            args.extend([
                "-t",
                "10",
                "-c:v",
                "libx265",
                "-preset",
                "ultrafast",
                "-x265-params",
                "keyint=25:min-keyint=25:scenecut=0:log-level=error",
                "-pix_fmt",
                "yuv420p",
                "-tag:v",
                "hvc1",
                "-f",
                "mp4",
            ]);
        }
        "h264_2mbps.mp4" => {
            args.extend(["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25"]);
            args.extend([
                "-t",
                "20",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-g",
                "25",
                "-keyint_min",
                "25",
                "-sc_threshold",
                "0",
                "-b:v",
                "2M",
                "-maxrate",
                "2M",
                "-bufsize",
                "1M",
                "-pix_fmt",
                "yuv420p",
                "-f",
                "mp4",
            ]);
        }
        other => panic!("unknown fixture {other}"),
    }
    let out = Command::new("ffmpeg")
        .args(&args)
        .arg(&tmp)
        .output()
        .expect("run ffmpeg (apt-get install ffmpeg)");
    assert!(
        out.status.success(),
        "making fixture {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &path).expect("rename fixture");
    path
}
