//! Harness for the end-to-end tests: start real `vigil` node processes on loopback with a
//! generated config, wait for them by polling (never by sleeping), run real clients against
//! them, and clean up on drop.

pub mod auth;
pub mod browser;
pub mod export;
pub mod fuzz;
pub mod report;
pub mod secure_cluster;

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
/// build another package's binaries by itself); `VIGIL_BIN` names another one instead (a
/// release build, or an older build to compare with).
pub fn vigil_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("VIGIL_BIN") {
            return PathBuf::from(bin);
        }
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

/// One heavy test of a test binary at a time (hold the guard for the test's length): cluster
/// tests share loopback addresses, and several clusters with UDP viewers at once on a 2-core
/// machine starve the viewers' sockets (a lost RTP packet is a decode error).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Poll `f` until it returns Some, or panic with `what` after `timeout`.
pub fn poll_until<T>(timeout: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    poll_every(Duration::from_millis(20), timeout, what, f)
}

/// [`poll_until`] every `every` (many pollers at once: 50 nodes' APIs).
pub fn poll_every<T>(
    every: Duration,
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(every);
    }
}

/// A free TCP port on `ip` (bound then released), never one this process was given before:
/// the OS may hand a just-released ephemeral port out again at once (a node's RTSP and API
/// ports once came out equal).
pub fn free_port(ip: &str) -> u16 {
    fresh_port("tcp", ip, || {
        TcpListener::bind((ip, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("bind an ephemeral port")
    })
}

/// A port from `bind` that this process has not handed out before for (`proto`, `ip`).
fn fresh_port(proto: &'static str, ip: &str, bind: impl Fn() -> u16) -> u16 {
    static GIVEN: std::sync::Mutex<Vec<(&'static str, String, u16)>> =
        std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = bind();
        if !given
            .iter()
            .any(|(k, i, p)| *k == proto && i == ip && *p == port)
        {
            given.push((proto, ip.to_string(), port));
            return port;
        }
    }
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
    node_id: Option<String>,
    rtsp: String,
    extra: String,
    udp: Option<(u16, u16)>,
    env: Vec<(String, String)>,
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
    /// The `[node] id` (default `test-<rtsp port>`); written as a TOML basic string, so no
    /// `"` or `\` in it.
    pub fn node_id(mut self, id: &str) -> Self {
        self.node_id = Some(id.into());
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
    /// An environment variable of the node process.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
    pub fn start(self) -> Node {
        Node::start(self)
    }
}

/// The admin API token of every test node (`[http] token`): write routes need it.
pub const ADMIN_TOKEN: &str = "vigil-test-admin-token";

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
        let id = b
            .node_id
            .clone()
            .unwrap_or_else(|| format!("test-{rtsp_port}"));
        let config = format!(
            "[node]\nid = \"{id}\"\n\n[rtsp]\nlisten = \"{ip}:{rtsp_port}\"\nudp_port_min = {umin}\nudp_port_max = {umax}\n{}\n[http]\nlisten = \"{ip}:{api_port}\"\ntoken = \"{ADMIN_TOKEN}\"\n\n{}",
            b.rtsp, b.extra
        );
        let path = dir.path().join("vigil.toml");
        std::fs::write(&path, config).expect("write config");
        let log = std::fs::File::create(dir.path().join("vigil.log")).expect("log file");
        let child = Command::new(vigil_bin())
            .args(["serve", "--config"])
            .arg(&path)
            .env("VIGIL_LOG", "info,vigil_server=debug")
            .envs(b.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
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
    // Drain both pipes while the child runs: one that prints more than a pipe holds
    // (64 KiB; gst-launch -v does within a few seconds) would otherwise block on its write.
    fn drain(
        pipe: Option<impl std::io::Read + Send + 'static>,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut out);
            }
            out
        })
    }
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().expect("wait for the killed child");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
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
    // Tests run in parallel threads: one makes a fixture while the others wait for it (two
    // ffmpegs writing one temp file made a corrupt fixture on a fresh checkout).
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|p| p.into_inner());
    if path.exists() {
        return path;
    }
    let tmp = dir.join(format!("{}.{}.tmp", name, std::process::id()));
    let video = ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"];
    let audio = ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"];
    // H.264 with a keyframe every second (25 frames) and no scene-cut keyframes.
    let x264 = [
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
    ];
    let mut args: Vec<&str> = vec!["-v", "error", "-y"];
    match name {
        "h264_aac.mp4" => {
            args.extend(video);
            args.extend(audio);
            args.extend(["-t", "10"]);
            args.extend(x264);
            args.extend(["-c:a", "aac", "-b:a", "64k"]);
        }
        "h264.mp4" => {
            args.extend(video);
            args.extend(["-t", "10"]);
            args.extend(x264);
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
            ]);
        }
        "h264_2mbps.mp4" => {
            args.extend([
                "-f",
                "lavfi",
                "-i",
                "testsrc2=size=1280x720:rate=25",
                "-t",
                "20",
            ]);
            args.extend(x264);
            args.extend(["-b:v", "2M", "-maxrate", "2M", "-bufsize", "1M"]);
        }
        other => panic!("unknown fixture {other}"),
    }
    args.extend(["-f", "mp4"]);
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

// ---------------------------------------------------------------------------------------
// Real clients (ffmpeg, ffprobe, GStreamer) and a raw RTSP connection, for the end-to-end
// tests of ffmpeg.rs, gstreamer.rs, pull.rs, bad_input.rs and lifecycle.rs.

/// The bundled demo clip as an always-on camera at `live/demo` (for `NodeBuilder::extra`).
pub const DEMO_CAMERA: &str = "[[camera]]\nid = \"demo\"\nsource = \"demo\"\non_demand = false";

/// Frames of every fixture (10 s at 25 fps) and of one GOP (a keyframe every second).
pub const FIXTURE_FRAMES: u64 = 250;
pub const GOP: u64 = 25;

/// The frame window a reader of a whole fixture publish must decode, when it was started
/// `joined` after the publisher. The reader starts at the newest keyframe (the GOP cache),
/// so it gets at least every frame from the moment it joined and at most all of them:
/// `[250 - frames elapsed - one GOP of tolerance, 250]`.
pub fn expected_window(joined: Duration) -> (u64, u64) {
    let elapsed = (joined.as_secs_f64() * 25.0).ceil() as u64;
    (FIXTURE_FRAMES.saturating_sub(elapsed + GOP), FIXTURE_FRAMES)
}

/// What an ffmpeg reader decoded.
#[derive(Debug)]
pub struct Decoded {
    pub frames: u64,
    /// The output position ffmpeg reached (`out_time_us` of `-progress`), if it reported one.
    pub out_time: Option<Duration>,
    /// What ffmpeg printed at error level (at `-v error`, everything it printed).
    pub stderr: String,
    /// A UDP reader's warnings (missed or late RTP packets), kept out of `stderr`.
    pub warnings: String,
    pub status: ExitStatus,
    pub elapsed: Duration,
    /// Datagrams the kernel dropped on receipt while this reader ran (any socket on the
    /// machine), when /proc/net/snmp could be read.
    pub kernel_udp_drops: Option<u64>,
}

impl Decoded {
    /// "Plays": exit 0, nothing at all on stderr at `-v error`, and `min..=max` frames.
    pub fn assert_plays(&self, what: &str, min: u64, max: u64) {
        assert!(
            self.stderr.trim().is_empty(),
            "{what}: ffmpeg reported errors (meanwhile the kernel dropped {:?} UDP datagrams \
             on receipt):\n{}\nits warnings:\n{}",
            self.kernel_udp_drops,
            self.stderr,
            self.warnings
        );
        assert!(
            self.status.success(),
            "{what}: ffmpeg failed ({}) after {:?}",
            self.status,
            self.elapsed
        );
        assert!(
            (min..=max).contains(&self.frames),
            "{what}: decoded {} frames, expected {min}..={max}",
            self.frames
        );
    }
}

/// The last `frame=N` of ffmpeg's `-progress` output.
pub fn progress_frames(stdout: &str) -> u64 {
    stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("frame=")?.trim().parse().ok())
        .unwrap_or(0)
}

/// `ffmpeg -v error [input options] -i URL [output options] -f null -` (a UDP reader:
/// `-v level+warning`) with frames reported on stdout by `-progress`. The RTSP socket timeout (5 s) bounds every wait on the server.
pub fn ffmpeg_decode_cmd(url: &str, input: &[&str], output: &[&str]) -> Command {
    let udp = input.windows(2).any(|w| w == ["-rtsp_transport", "udp"]);
    // A UDP reader also logs warnings, each line tagged with its level: `ffmpeg_decode`
    // keeps the errors apart, and the warnings (missed or late RTP packets) say why a
    // failed reader's picture broke.
    let level = if udp { "level+warning" } else { "error" };
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-hide_banner", "-nostdin", "-nostats", "-v", level])
        .args(["-timeout", "5000000"]);
    if udp {
        // A UDP reader's socket gets the system default receive buffer (208 KiB here),
        // about a second of the fixtures' packets counting the kernel's per-datagram
        // overhead: a CI machine that keeps ffmpeg off the CPU that long drops datagrams in
        // the kernel, which no server can prevent. 4 MiB (as a surveillance client would
        // ask for) keeps the test about the server's stream.
        // ffmpeg waits only 0.1 s for an RTP packet that arrives out of order over UDP
        // before it gives it up (GStreamer's rtspsrc waits 2 s, VLC 1 s); a session that
        // migrates has two senders on two nodes one after the other, and a loaded 2-core
        // machine can deliver the first node's last packets late. 0.5 s, as a client on
        // a real network would allow; a packet the server never sent still breaks the
        // picture.
        cmd.args(udp_client_ports())
            .args(["-buffer_size", "4194304", "-max_delay", "500000"]);
    }
    cmd.args(input)
        .args(["-i", url])
        .args(output)
        .args(["-f", "null", "-", "-progress", "pipe:1"]);
    cmd
}

/// Decode `url` with ffmpeg to the null muxer and count the frames.
pub fn ffmpeg_decode(url: &str, input: &[&str], output: &[&str], timeout: Duration) -> Decoded {
    let start = Instant::now();
    let drops_before = vigil_server::procfs::udp_in_errors();
    let out = run_with_timeout(&mut ffmpeg_decode_cmd(url, input, output), timeout);
    let kernel_udp_drops = vigil_server::procfs::udp_in_errors()
        .zip(drops_before)
        .map(|(a, b)| a.saturating_sub(b));
    let progress = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (warnings, errors): (Vec<&str>, Vec<&str>) =
        stderr.lines().partition(|l| l.contains("[warning] "));
    Decoded {
        frames: progress_frames(&progress),
        out_time: progress
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("out_time_us=")?.trim().parse().ok())
            .map(Duration::from_micros),
        stderr: errors.join("\n"),
        warnings: warnings.join("\n"),
        status: out.status,
        elapsed: start.elapsed(),
        kernel_udp_drops,
    }
}

/// [`ffmpeg_decode`] on a thread of its own, so several readers run at once.
pub fn spawn_ffmpeg_decode(
    url: &str,
    input: &[&str],
    output: &[&str],
    timeout: Duration,
) -> std::thread::JoinHandle<Decoded> {
    let url = url.to_string();
    let input: Vec<String> = input.iter().map(|s| s.to_string()).collect();
    let output: Vec<String> = output.iter().map(|s| s.to_string()).collect();
    std::thread::spawn(move || {
        let input: Vec<&str> = input.iter().map(String::as_str).collect();
        let output: Vec<&str> = output.iter().map(String::as_str).collect();
        ffmpeg_decode(&url, &input, &output, timeout)
    })
}

/// `ffmpeg -re -i FILE -c copy -f rtsp [-rtsp_transport tcp] URL` in the background.
pub fn ffmpeg_publish(file: &Path, url: &str, tcp: bool) -> Background {
    let mut cmd = Command::new("ffmpeg");
    cmd.args([
        "-hide_banner",
        "-nostdin",
        "-nostats",
        "-v",
        "error",
        "-re",
        "-i",
    ])
    .arg(file)
    .args(["-c", "copy", "-f", "rtsp"]);
    if tcp {
        cmd.args(["-rtsp_transport", "tcp"]);
    } else {
        cmd.args(udp_client_ports());
    }
    cmd.arg(url);
    spawn_background(&mut cmd)
}

/// `-min_port`/`-max_port` options giving an ffmpeg RTSP client over UDP 16 local ports
/// that are free right now. By default every ffmpeg starts at port 5000, so concurrent UDP
/// clients on one machine collide, and ffmpeg prints each failed bind as an error before it
/// moves on to the next port. The ranges are taken below 30000, away from the nodes' RTP
/// ports and the ephemeral range.
pub fn udp_client_ports() -> [String; 4] {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    for _ in 0..500 {
        let slot = u32::from(NEXT.fetch_add(1, Ordering::Relaxed));
        let base = 10_000 + ((std::process::id().wrapping_mul(7919) + slot * 16) % 20_000) as u16;
        let base = base & !1;
        let free = (base..base + 16)
            .map(|p| std::net::UdpSocket::bind(("127.0.0.1", p)))
            .collect::<Result<Vec<_>, _>>()
            .is_ok();
        if free {
            return [
                "-min_port".into(),
                base.to_string(),
                "-max_port".into(),
                (base + 15).to_string(),
            ];
        }
    }
    panic!("no free range of 16 UDP ports below 30000");
}

/// Wait (bounded) for a background process to exit; its status and stderr.
pub fn wait_background(bg: &mut Background, timeout: Duration) -> (ExitStatus, String) {
    let status = poll_until(timeout, "background process to exit", || {
        bg.0.try_wait().ok().flatten()
    });
    let mut err = String::new();
    if let Some(mut e) = bg.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (status, err)
}

/// `ffprobe -show_streams` of an RTSP URL: the `streams` array. Asserts a clean run.
pub fn ffprobe_streams(url: &str, transport: &str) -> Vec<serde_json::Value> {
    let out = run_with_timeout(
        Command::new("ffprobe")
            .args(["-hide_banner", "-v", "error", "-timeout", "5000000"])
            .args(["-rtsp_transport", transport])
            .args(["-show_streams", "-of", "json", url]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "ffprobe {url} over {transport}: {}: {err}",
        out.status
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ffprobe JSON");
    v["streams"].as_array().cloned().unwrap_or_default()
}

/// What a GStreamer `rtspsrc` pipeline decoded.
#[derive(Debug)]
pub struct GstDecoded {
    /// Decoded frames that reached the sink.
    pub frames: u64,
    /// Caps of the decoded video (`width=(int)…`).
    pub caps: String,
    /// gst-launch's messages and every ERROR-level log line of any element
    /// (`GST_DEBUG=*:1`, libav's decoder errors included), in order.
    pub output: String,
    /// The ERROR lines (messages and logs) before the pipeline reached end of stream.
    pub errors: Vec<String>,
    /// ERROR lines after end of stream, while the pipeline shut down (rtspsrc of GStreamer
    /// 1.22 sometimes fails its PAUSE/TEARDOWN race there: not a playback error).
    pub teardown_errors: Vec<String>,
    pub status: ExitStatus,
    pub elapsed: Duration,
}

/// Decode `frames` H.264 frames from `url` with `rtspsrc protocols=…`, then stop (EOS).
pub fn gst_decode_h264(url: &str, protocols: &str, frames: u64, timeout: Duration) -> GstDecoded {
    let start = Instant::now();
    // One stream for messages (stdout, flushed per line) and logs (stderr): their order
    // tells errors while playing from errors while shutting down.
    let out = run_with_timeout(
        Command::new("sh")
            .args(["-c", "exec \"$@\" 2>&1", "sh", "gst-launch-1.0"])
            .env("GST_DEBUG", "*:1")
            .env("GST_DEBUG_NO_COLOR", "1")
            .args(["-e", "-v", "rtspsrc"])
            .arg(format!("location={url}"))
            .arg(format!("protocols={protocols}"))
            .args([
                "latency=200",
                "tcp-timeout=5000000",
                "!",
                "rtph264depay",
                "!",
            ])
            .args(["h264parse", "!", "avdec_h264", "!", "identity"])
            // identity turns the (N+1)th buffer into EOS: N frames reach the sink.
            .arg(format!("eos-after={}", frames + 1))
            .args(["!", "fakesink", "silent=false"]),
        timeout,
    );
    let output = String::from_utf8_lossy(&out.stdout).into_owned();
    let frames = output
        .lines()
        .filter(|l| l.contains("last-message = chain") && l.contains("(fakesink0:sink)"))
        .count() as u64;
    let caps = output
        .lines()
        .find(|l| l.contains("GstFakeSink:fakesink0.GstPad:sink: caps = video/x-raw"))
        .unwrap_or_default()
        .to_string();
    let (mut errors, mut teardown_errors) = (Vec::new(), Vec::new());
    let mut eos = false;
    for line in output.lines() {
        eos |= line.starts_with("Got EOS from element");
        if line.contains("ERROR") {
            let list = if eos {
                &mut teardown_errors
            } else {
                &mut errors
            };
            list.push(line.to_string());
        }
    }
    GstDecoded {
        frames,
        caps,
        output,
        errors,
        teardown_errors,
        status: out.status,
        elapsed: start.elapsed(),
    }
}

/// `gst-launch-1.0 filesrc ! qtdemux ! h264parse ! rtspclientsink protocols=…` in the
/// background (it publishes in real time: the sink synchronises on the clock).
pub fn gst_publish_h264(file: &Path, url: &str, protocols: &str) -> Background {
    spawn_background(
        Command::new("gst-launch-1.0")
            .env("GST_DEBUG", "*:1")
            .env("GST_DEBUG_NO_COLOR", "1")
            .args(["-q", "filesrc"])
            .arg(format!("location={}", file.display()))
            .args(["!", "qtdemux", "!", "h264parse", "!", "rtspclientsink"])
            .arg(format!("location={url}"))
            .arg(format!("protocols={protocols}")),
    )
}

/// A value of the node's `/metrics` (0 when the series has not been written yet).
pub fn metric_value(node: &Node, name: &str) -> f64 {
    let text = node.try_api("/metrics").unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            (k == name).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// What a raw RTSP connection received.
#[derive(Debug)]
pub enum Incoming {
    Response(vigil_proto::rtsp::Response),
    Data {
        channel: u8,
        payload: bytes::Bytes,
    },
    /// The server closed the connection (EOF or reset).
    Closed,
}

/// A hand-driven RTSP connection over `std::net::TcpStream`, for exact requests, malformed
/// input and reading interleaved media. Every read is bounded by a 5 s socket timeout.
pub struct RtspConn {
    pub stream: std::net::TcpStream,
    buf: bytes::BytesMut,
    cseq: u32,
    /// Session id from the last response that carried one.
    pub session: Option<String>,
}

impl RtspConn {
    pub fn connect(addr: SocketAddr) -> RtspConn {
        let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .expect("write timeout");
        stream.set_nodelay(true).expect("nodelay");
        RtspConn {
            stream,
            buf: bytes::BytesMut::with_capacity(64 * 1024),
            cseq: 0,
            session: None,
        }
    }

    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        std::io::Write::write_all(&mut self.stream, bytes)
    }

    /// The next response or interleaved frame. A read timeout is an error (the server
    /// neither answered nor closed); EOF and connection reset are `Closed`.
    pub fn receive(&mut self) -> std::io::Result<Incoming> {
        use vigil_proto::rtsp::{parse_frame, Frame, Limits};
        let limits = Limits {
            max_header_bytes: 64 * 1024,
            max_body_bytes: 1 << 20,
        };
        loop {
            match parse_frame(&self.buf, &limits) {
                Ok(Some((frame, used))) => {
                    let _ = self.buf.split_to(used);
                    match frame {
                        Frame::Response(r) => return Ok(Incoming::Response(r)),
                        Frame::Interleaved { channel, payload } => {
                            return Ok(Incoming::Data { channel, payload })
                        }
                        Frame::Request(r) => {
                            return Err(std::io::Error::other(format!(
                                "server sent a request: {r:?}"
                            )))
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(std::io::Error::other(format!("unparsable answer: {e}"))),
            }
            let mut chunk = [0u8; 16 * 1024];
            match std::io::Read::read(&mut self.stream, &mut chunk) {
                Ok(0) => return Ok(Incoming::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Ok(Incoming::Closed)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The next response, skipping interleaved data; None when the server closed.
    pub fn response(&mut self) -> std::io::Result<Option<vigil_proto::rtsp::Response>> {
        loop {
            match self.receive()? {
                Incoming::Response(r) => return Ok(Some(r)),
                Incoming::Data { .. } => {}
                Incoming::Closed => return Ok(None),
            }
        }
    }

    /// Send a request (CSeq added, and Session when one is known and not given) and wait
    /// for its answer. Panics if the server closes or does not answer.
    pub fn request(
        &mut self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, &str)>,
    ) -> vigil_proto::rtsp::Response {
        self.cseq += 1;
        let mut text = format!("{method} {url} RTSP/1.0\r\nCSeq: {}\r\n", self.cseq);
        for (k, v) in headers {
            text.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(s) = &self.session {
            if !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("Session"))
            {
                text.push_str(&format!("Session: {s}\r\n"));
            }
        }
        if let Some((ct, b)) = body {
            text.push_str(&format!(
                "Content-Type: {ct}\r\nContent-Length: {}\r\n",
                b.len()
            ));
            text.push_str("\r\n");
            text.push_str(b);
        } else {
            text.push_str("\r\n");
        }
        self.send(text.as_bytes())
            .unwrap_or_else(|e| panic!("{method} {url}: send: {e}"));
        let resp = self
            .response()
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"))
            .unwrap_or_else(|| panic!("{method} {url}: connection closed without an answer"));
        assert_eq!(
            resp.cseq(),
            Some(self.cseq),
            "{method} {url}: CSeq not echoed"
        );
        if let Some(id) = resp.session_id() {
            self.session = Some(id.to_string());
        }
        resp
    }

    /// DESCRIBE, SETUP every track (`trackID=N`) over TCP interleaved (channels 2N, 2N+1)
    /// and PLAY. Returns the DESCRIBE answer's SDP.
    pub fn play_tcp(&mut self, url: &str) -> String {
        let d = self.request("DESCRIBE", url, &[("Accept", "application/sdp")], None);
        assert_eq!(d.status.0, 200, "DESCRIBE {url}: {}", d.reason);
        let sdp = String::from_utf8_lossy(&d.body).into_owned();
        let tracks = sdp.lines().filter(|l| l.starts_with("m=")).count();
        for t in 0..tracks {
            let transport = format!("RTP/AVP/TCP;unicast;interleaved={}-{}", 2 * t, 2 * t + 1);
            let s = self.request(
                "SETUP",
                &format!("{url}/trackID={t}"),
                &[("Transport", &transport)],
                None,
            );
            assert_eq!(s.status.0, 200, "SETUP {url} track {t}: {}", s.reason);
        }
        let p = self.request("PLAY", url, &[("Range", "npt=0.000-")], None);
        assert_eq!(p.status.0, 200, "PLAY {url}: {}", p.reason);
        sdp
    }
}

/// A minimal 2-track (H.264 + AAC) SDP for raw ANNOUNCE, controls `streamid=0` and `=1`.
pub const TWO_TRACK_SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=test\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1;sprop-parameter-sets=Z2QADazZQUH7ARAAAAMAEAAAAwMg8UKZYA==,aO+Pyw==\r\n\
a=control:streamid=0\r\n\
m=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/44100/1\r\n\
a=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1208\r\n\
a=control:streamid=1\r\n";

/// An even/odd pair of UDP sockets on 127.0.0.1 for a `client_port=` (RTP, RTCP, RTP port).
pub fn udp_port_pair() -> (std::net::UdpSocket, std::net::UdpSocket, u16) {
    for _ in 0..100 {
        let rtp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind UDP");
        let port = rtp.local_addr().expect("addr").port();
        if !port.is_multiple_of(2) || port == u16::MAX {
            continue;
        }
        if let Ok(rtcp) = std::net::UdpSocket::bind(("127.0.0.1", port + 1)) {
            return (rtp, rtcp, port);
        }
    }
    panic!("no free even/odd UDP port pair");
}

/// Run `vigil ctl ARGS` against `node`'s admin API; panics with its stderr if it fails.
pub fn ctl(node: &Node, args: &[&str]) -> String {
    let out = run_with_timeout(
        Command::new(vigil_bin())
            .env("VIGIL_API_TOKEN", ADMIN_TOKEN)
            .arg("ctl")
            .arg("--api")
            .arg(format!("http://{}", node.api))
            .args(args),
        Duration::from_secs(10),
    );
    assert!(
        out.status.success(),
        "vigil ctl {args:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `vigil ctl ARGS` against the admin API at `api`, expecting it to fail; its stderr.
pub fn ctl_fails(api: SocketAddr, args: &[&str]) -> String {
    let out = run_with_timeout(
        Command::new(vigil_bin())
            .env("VIGIL_API_TOKEN", ADMIN_TOKEN)
            .arg("ctl")
            .arg("--api")
            .arg(format!("http://{api}"))
            .args(args),
        Duration::from_secs(20),
    );
    assert!(!out.status.success(), "vigil ctl {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `url` (on a node of a cluster with `key`) with a placement marker signed by the key, as
/// another node's redirect would carry it: the node serves it without placing it (a viewer
/// placed there by hand). Good for one connection, within the marker's lifetime.
pub fn placed_by_hand(url: &str, key: &str) -> String {
    let u = url::Url::parse(url).expect("URL");
    let base = format!(
        "rtsp://{}:{}",
        u.host_str().expect("host"),
        u.port().expect("port")
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    vigil_server::cluster::signed_redirect_url(key.as_bytes(), &base, url, "", now)
}

/// A TCP connection to `to` from the loopback address `from` (the attacker's own address).
pub fn connect_from(from: &str, to: SocketAddr) -> std::net::TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let stream = rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().expect("socket");
        s.bind(format!("{from}:0").parse().expect("addr"))
            .expect("bind");
        s.connect(to).await.expect("connect")
    });
    let std = stream.into_std().expect("std stream");
    std.set_nonblocking(false).expect("blocking");
    std.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    std
}

/// A free UDP port on `ip` (bound then released), e.g. for a node's gossip socket.
pub fn free_udp(ip: &str) -> u16 {
    fresh_port("udp", ip, || {
        std::net::UdpSocket::bind((ip, 0))
            .and_then(|s| s.local_addr())
            .map(|a| a.port())
            .expect("bind a UDP port")
    })
}

/// A playback URL's time parameter for `ms` since the Unix epoch.
pub fn rfc3339(ms: i64) -> String {
    vigil_proto::rtsp::UtcTime { unix_millis: ms }.to_rfc3339()
}

/// `GET /api/cluster/nodes` of `n`, if it answers.
pub fn nodes_view(n: &Node) -> Option<serde_json::Value> {
    serde_json::from_str(&n.try_api("/api/cluster/nodes")?).ok()
}

/// Waits until `n` lists a first recorded range of the demo camera at least `ms` long (the
/// recording of the shared root a playback test plays); returns its first time.
pub fn demo_recorded_for(n: &Node, ms: i64) -> i64 {
    poll_until(
        Duration::from_millis(ms as u64 + 20_000),
        &format!("{} s of demo recording", ms / 1000),
        || {
            let v: serde_json::Value =
                serde_json::from_str(&n.try_api("/api/recordings/demo")?).ok()?;
            let r = &v["ranges"][0];
            let (a, b) = (r["start_ms"].as_i64()?, r["end_ms"].as_i64()?);
            (b - a >= ms).then_some(a)
        },
    )
}

/// Two nodes on 127.0.0.1 and 127.0.0.2 in one gossip cluster (no certificates), node 1 the
/// scheduler recording the demo camera to a shared root (1 s segments); `keys` go into both
/// `[cluster]` tables. The root lives as long as the returned directory.
pub fn two_node_cluster(key: &str, keys: &str) -> (tempfile::TempDir, Node, Node) {
    let root = tempfile::tempdir().expect("shared root");
    let storage = format!(
        "[storage]\nroot = \"{}\"\nsegment_secs = 1.0",
        root.path().display()
    );
    let g1 = format!("127.0.0.1:{}", free_udp("127.0.0.1"));
    let n1 = NodeBuilder::new()
        .extra(&format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{g1}\"\nkey = \"{key}\"\npriority = 10\n{keys}\n"
        ))
        .extra(&storage)
        .extra(DEMO_CAMERA)
        .start();
    let g2 = format!("127.0.0.2:{}", free_udp("127.0.0.2"));
    let n2 = NodeBuilder::new()
        .ip("127.0.0.2")
        .extra(&format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{g2}\"\nseeds = [\"{g1}\"]\nkey = \"{key}\"\npriority = 20\n{keys}\n"
        ))
        .extra(&storage)
        .start();
    (root, n1, n2)
}

/// The node id `n` reports in `/api/node`.
pub fn node_id(n: &Node) -> String {
    n.api_json("/api/node")["id"]
        .as_str()
        .expect("node id")
        .to_string()
}

/// Ids of the nodes `n` sees alive with a report, sorted.
pub fn alive_ids(n: &Node) -> Option<Vec<String>> {
    let mut ids: Vec<String> = nodes_view(n)?["nodes"]
        .as_array()?
        .iter()
        .filter(|x| x["alive"] == true && x["rtsp"].is_string())
        .map(|x| x["id"].as_str().unwrap_or("").to_string())
        .collect();
    ids.sort();
    Some(ids)
}

/// The scheduler `n` currently recognises.
pub fn scheduler_of(n: &Node) -> Option<String> {
    nodes_view(n)?["scheduler"].as_str().map(str::to_string)
}

/// Starts cluster member `i` (0-based) on 127.0.0.<i+1> with gossip on a free port, joining
/// through `seed` (none for the first), with `extra` appended to its config (other tables).
/// Returns the node and its gossip address (the next members' seed).
pub fn start_member(
    i: usize,
    seed: Option<SocketAddr>,
    key: &str,
    priority: u32,
    extra: &str,
) -> (Node, SocketAddr) {
    start_member_env(i, seed, key, priority, extra, &[])
}

/// [`start_member`] with environment variables for the node process.
pub fn start_member_env(
    i: usize,
    seed: Option<SocketAddr>,
    key: &str,
    priority: u32,
    extra: &str,
    env: &[(&str, &str)],
) -> (Node, SocketAddr) {
    let ip = format!("127.0.0.{}", i + 1);
    let gossip: SocketAddr = format!("{ip}:{}", free_udp(&ip))
        .parse()
        .expect("gossip address");
    let seeds = seed.map(|s| format!("\"{s}\"")).unwrap_or_default();
    let mut b = NodeBuilder::new().ip(&ip).extra(&format!(
        "[cluster]\nenabled = true\ngossip_listen = \"{gossip}\"\nseeds = [{seeds}]\nkey = \"{key}\"\npriority = {priority}\n\n{extra}"
    ));
    for (k, v) in env {
        b = b.env(k, v);
    }
    (b.start(), gossip)
}
