//! Harness for the end-to-end tests: start real `vigil` node processes on loopback with a
//! generated config, wait for them by polling (never by sleeping), run real clients against
//! them, and clean up on drop. The process harness itself, the light client, certificates,
//! ports and media fixtures are `vigil-testkit`'s, shared with the lab; this crate adds
//! what only tests do (panicking waits, external clients, per-test temp dirs).

pub mod auth;
pub mod browser;
mod clients;
pub mod export;
pub mod fuzz;
pub mod glass;
pub mod handoff;
mod process;
pub mod report;
mod rtsp_conn;
pub mod secure_cluster;
pub mod tls;

pub use clients::*;
pub use process::*;
pub use rtsp_conn::*;
pub use vigil_testkit::fixtures::*;
pub use vigil_testkit::ports::{free_port, free_udp, udp_port_pair};
pub use vigil_testkit::workspace;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use vigil_testkit::ports::udp_range;
use vigil_testkit::serve::{HarnessError, NodeConfig, ServeProcess};

/// The `vigil` binary, built once per test process (a cargo test of this crate does not
/// build another package's binaries by itself); `VIGIL_BIN` names another one instead (a
/// release build, or an older build to compare with).
pub fn vigil_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| built("VIGIL_BIN", "vigil-server", "vigil"))
        .clone()
}

/// The `vigil-lab` binary (`lab`, `bench`, `sim`), found like [`vigil_bin`];
/// `VIGIL_LAB_BIN` names another one.
pub fn vigil_lab_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| built("VIGIL_LAB_BIN", "vigil-lab", "vigil-lab"))
        .clone()
}

/// `$env` if set, else `bin` of `package` built by `cargo build` into this build's target
/// directory.
fn built(env: &str, package: &str, bin: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-q", "-p", package, "--bin", bin])
        .current_dir(workspace())
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building the {bin} binary failed");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace().join("target"));
    target.join("debug").join(bin)
}

/// One heavy test of a test binary at a time (hold the guard for the test's length): cluster
/// tests share loopback addresses, and several clusters with UDP viewers at once on a 2-core
/// machine starve the viewers' sockets (a lost RTP packet is a decode error).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A runtime for a test's async clients: two workers, as many as the machines CI runs on.
pub fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
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

/// Options for a node under test; `start()` launches it.
#[derive(Default, Clone)]
pub struct NodeBuilder {
    ip: Option<String>,
    rtsp_port: Option<u16>,
    node_id: Option<String>,
    rtsp: String,
    http: String,
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
    /// The `[node] id` (default [`default_node_id`]); written as a TOML basic string, so no
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
    /// Extra keys for the `[http]` table (the admin API).
    pub fn http(mut self, toml: &str) -> Self {
        self.http.push_str(toml);
        self.http.push('\n');
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

/// A test node's id: unique per address and port. Ports alone are not, since the kernel
/// hands out the same free port on 127.0.0.1 and 127.0.0.3, and two nodes sharing an id
/// are one node to the cluster (a CI run once elected in circles over exactly that).
pub fn default_node_id(ip: &str, rtsp_port: u16) -> String {
    format!("test-{}-{rtsp_port}", ip.replace('.', "-"))
}

/// A running `vigil serve` process; killed on drop.
pub struct Node {
    process: ServeProcess,
    pub ip: String,
    pub rtsp: SocketAddr,
    pub api: SocketAddr,
    pub dir: tempfile::TempDir,
    builder: NodeBuilder,
}

impl Node {
    /// Starts the node; one that exits because a port it was given is taken starts again on
    /// ports chosen afresh (where the test left the choice to the harness), at most twice
    /// more. A port found free and released can be taken before the node binds it, by any
    /// socket on the machine: an outgoing connection's ephemeral port is drawn from the same
    /// range (a CI run lost a webhooks test to exactly that).
    fn start(b: NodeBuilder) -> Node {
        let mut retries = 2;
        loop {
            match Node::try_start(b.clone()) {
                Ok(node) => return node,
                Err(HarnessError::Exited { log, .. })
                    if retries > 0 && log.contains("Address already in use") =>
                {
                    retries -= 1;
                    eprintln!("a port the node was given was taken; starting it on others");
                }
                Err(e) => panic!("vigil did not come up: {e}"),
            }
        }
    }

    fn try_start(b: NodeBuilder) -> Result<Node, HarnessError> {
        let ip = b.ip.clone().unwrap_or_else(|| "127.0.0.1".into());
        let rtsp_port = b.rtsp_port.unwrap_or_else(|| free_port(&ip));
        let config = NodeConfig {
            id: b
                .node_id
                .clone()
                .unwrap_or_else(|| default_node_id(&ip, rtsp_port)),
            rtsp_port,
            api_port: free_port(&ip),
            udp: b.udp.unwrap_or_else(udp_range),
            token: ADMIN_TOKEN.into(),
            rtsp: b.rtsp.clone(),
            http: b.http.clone(),
            tables: b.extra.clone(),
            ip,
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let process = ServeProcess::spawn(
            &vigil_bin(),
            dir.path(),
            &config.id,
            &config.render(),
            "info,vigil_server=debug",
            &b.env,
        )?;
        let mut node = Node {
            process,
            rtsp: vigil_testkit::serve::rtsp_socket(&config).expect("addr"),
            api: format!("{}:{}", config.ip, config.api_port)
                .parse()
                .expect("addr"),
            ip: config.ip,
            dir,
            builder: b,
        };
        let api = format!("http://{}", node.api);
        node.process.wait_for(
            "its admin API",
            Duration::from_secs(20),
            Duration::from_millis(20),
            || vigil_testkit::serve::api_get(&api, "/api/health").ok(),
        )?;
        Ok(node)
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
        vigil_testkit::serve::api_get_as(&format!("http://{}", self.api), path, Some(ADMIN_TOKEN))
            .ok()
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
        self.process.pid()
    }

    /// SIGKILL, like a crash.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGTERM and wait (bounded) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut c = self.process.take_child().expect("node running");
        signal(c.id(), libc::SIGTERM);
        poll_until(
            Duration::from_secs(10),
            "vigil to exit after SIGTERM",
            || c.try_wait().ok().flatten(),
        )
    }

    pub fn log(&self) -> String {
        self.process.log()
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

/// Waits until `/api/sessions` no longer lists a session of the client at `client`
/// (`ip:port`, as the API shows it).
pub fn wait_session_ended(node: &Node, client: &str, timeout: Duration) {
    poll_until(timeout, &format!("the session of {client} to end"), || {
        let sessions = node.api_json("/api/sessions");
        let listed = sessions.as_array()?.iter().any(|s| s["client"] == client);
        (!listed).then_some(())
    });
}

/// Everything `s` receives until the peer closes it (EOF or reset); panics if it is still
/// open after `within` without a byte.
pub fn read_until_closed(s: &mut std::net::TcpStream, within: Duration, what: &str) -> Vec<u8> {
    use std::io::Read;
    s.set_read_timeout(Some(within)).expect("read timeout");
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{what}: the node did not close the connection ({e})"),
    }
    got
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

/// `vigil ctl --api http://API ARGS` with the admin token in its environment.
fn ctl_command(api: SocketAddr, args: &[&str]) -> Command {
    let mut cmd = Command::new(vigil_bin());
    cmd.env("VIGIL_API_TOKEN", ADMIN_TOKEN)
        .arg("ctl")
        .arg("--api")
        .arg(format!("http://{api}"))
        .args(args);
    cmd
}

/// Runs `vigil ctl ARGS` (with `input` on stdin when given) against `api`: its output.
fn run_ctl(api: SocketAddr, args: &[&str], input: Option<&str>, within: Duration) -> Output {
    let mut cmd = ctl_command(api, args);
    match input {
        Some(text) => crate::process::run_with_stdin(&mut cmd, text, within),
        None => run_with_timeout(&mut cmd, within),
    }
}

fn ctl_ok(node: &Node, args: &[&str], input: Option<&str>) -> String {
    let out = run_ctl(node.api, args, input, Duration::from_secs(10));
    assert!(
        out.status.success(),
        "vigil ctl {args:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ctl_err(api: SocketAddr, args: &[&str], input: Option<&str>) -> String {
    let out = run_ctl(api, args, input, Duration::from_secs(20));
    assert!(!out.status.success(), "vigil ctl {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Run `vigil ctl ARGS` against `node`'s admin API; panics with its stderr if it fails.
pub fn ctl(node: &Node, args: &[&str]) -> String {
    ctl_ok(node, args, None)
}

/// [`ctl`] with `input` on stdin (a password: `vigil ctl` takes them from stdin only).
pub fn ctl_stdin(node: &Node, args: &[&str], input: &str) -> String {
    ctl_ok(node, args, Some(input))
}

/// Run `vigil ctl ARGS` against the admin API at `api`, expecting it to fail; its stderr.
pub fn ctl_fails(api: SocketAddr, args: &[&str]) -> String {
    ctl_err(api, args, None)
}

/// [`ctl_fails`] with `input` on stdin.
pub fn ctl_fails_stdin(api: SocketAddr, args: &[&str], input: &str) -> String {
    ctl_err(api, args, Some(input))
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
    vigil_server::cluster::signed_redirect_url(
        key.as_bytes(),
        &base,
        url,
        "",
        vigil_storage::now_ms(),
    )
}

/// A playback of the demo recording on `n`, from 1 s to 4 s after `first_ms`: a moment
/// near a viewer playing from `first_ms`, which the similarity policy places with it.
pub fn nearby_playback_url(n: &Node, first_ms: i64) -> String {
    format!(
        "{}?start={}&end={}",
        n.url("playback/demo"),
        rfc3339(first_ms + 1000),
        rfc3339(first_ms + 4000)
    )
}

/// An ffmpeg viewer (TCP, in the background) of the demo camera's recording from `start_ms`
/// on node `n`, placed there by hand ([`placed_by_hand`]): a stream similarity placement
/// can then build on.
pub fn demo_viewer_placed_on(n: &Node, start_ms: i64, key: &str) -> Background {
    let url = placed_by_hand(
        &format!("{}?start={}", n.url("playback/demo"), rfc3339(start_ms)),
        key,
    );
    spawn_background(&mut ffmpeg_decode_cmd(
        &url,
        &["-rtsp_transport", "tcp"],
        &[],
    ))
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

/// A playback URL's time parameter for `ms` since the Unix epoch (the server's own form).
pub use vigil_proto::rtsp::rfc3339;

/// `GET /api/cluster/nodes` of `n`, if it answers.
pub fn nodes_view(n: &Node) -> Option<serde_json::Value> {
    serde_json::from_str(&n.try_api("/api/cluster/nodes")?).ok()
}

/// Waits until `observer`'s gossip view shows node `id` sending at least one stream (what
/// similarity placement then builds on).
pub fn wait_sees_streaming(observer: &Node, id: &str, timeout: Duration) {
    poll_until(
        timeout,
        &format!("{} to see {id} streaming", observer.api),
        || {
            nodes_view(observer)?["nodes"]
                .as_array()?
                .iter()
                .any(|x| x["id"] == id && x["streams"].as_u64() >= Some(1))
                .then_some(())
        },
    );
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
    let member = |gossip: &str, seed: Option<&str>, priority: u32| {
        member_table(gossip, seed, key, priority, keys)
    };
    let g1 = format!("127.0.0.1:{}", free_udp("127.0.0.1"));
    let n1 = NodeBuilder::new()
        .extra(&member(&g1, None, 10))
        .extra(&storage)
        .extra(DEMO_CAMERA)
        .start();
    let g2 = format!("127.0.0.2:{}", free_udp("127.0.0.2"));
    let n2 = NodeBuilder::new()
        .ip("127.0.0.2")
        .extra(&member(&g2, Some(&g1), 20))
        .extra(&storage)
        .start();
    (root, n1, n2)
}

/// The `[cluster]` table of a member without certificates (gossip on `gossip`, joining
/// through `seed`), `keys` added to it.
pub fn member_table(
    gossip: &str,
    seed: Option<&str>,
    key: &str,
    priority: u32,
    keys: &str,
) -> String {
    vigil_testkit::cluster::Member {
        gossip,
        seed,
        key,
        priority,
        rpc: None,
        keys,
    }
    .table()
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
    let mut ids = vigil_testkit::cluster::alive_ids(&nodes_view(n)?);
    ids.sort();
    Some(ids)
}

/// Waits until every member sees exactly the members alive (with a report), all within one
/// `timeout`; returns their ids, sorted.
pub fn wait_converged(members: &[&Node], timeout: Duration) -> Vec<String> {
    let mut want: Vec<String> = members.iter().map(|n| node_id(n)).collect();
    want.sort();
    let deadline = Instant::now() + timeout;
    for n in members {
        let left = deadline.saturating_duration_since(Instant::now());
        poll_until(left, "membership to converge", || {
            (alive_ids(n)? == want).then_some(())
        });
    }
    want
}

/// `vigil ctl nodes` on every member lists every id in `ids`.
pub fn assert_ctl_nodes_lists(members: &[&Node], ids: &[String]) {
    for n in members {
        let table = ctl(n, &["nodes"]);
        for id in ids {
            assert!(
                table.contains(id.as_str()),
                "ctl nodes on {} lacks {id}: {table}",
                n.api
            );
        }
    }
}

/// The scheduler `n` currently recognises.
pub fn scheduler_of(n: &Node) -> Option<String> {
    vigil_testkit::cluster::scheduler(&nodes_view(n)?).map(str::to_string)
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
    let (gossip_s, seed) = (gossip.to_string(), seed.map(|s| s.to_string()));
    let cluster = vigil_testkit::cluster::Member {
        gossip: &gossip_s,
        seed: seed.as_deref(),
        key,
        priority,
        rpc: None,
        keys: "",
    };
    let mut b = NodeBuilder::new()
        .ip(&ip)
        .extra(&format!("{}\n{extra}", cluster.table()));
    for (k, v) in env {
        b = b.env(k, v);
    }
    (b.start(), gossip)
}

/// `METHOD path` on `node`'s admin API with the admin token, `headers` and an optional
/// `(content type, body)`: the status and the body, whatever the status.
pub fn api_send(
    node: &Node,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    api_send_as(node, method, path, body, headers, &bearer)
}

/// [`api_send`] with `authorization` as the `Authorization` header (a user's Basic
/// credentials, another token).
pub fn api_send_as(
    node: &Node,
    method: &str,
    path: &str,
    body: Option<(&str, &str)>,
    headers: &[(&str, &str)],
    authorization: &str,
) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", node.api))
        .header("Authorization", authorization);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let (ct, text) = body.unwrap_or(("application/json", ""));
    let req = req
        .header("Content-Type", ct)
        .body(text.to_string())
        .expect("a request");
    let mut resp = agent
        .run(req)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(256 << 20)
        .read_to_string()
        .unwrap_or_default();
    (status, body)
}

/// The status code of a raw HTTP/1.1 (or RTSP) answer's first line; 0 when it has none.
pub fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Every file under `dir`, read as text (lossy): what a test greps for a secret.
pub fn files_text(dir: &std::path::Path) -> String {
    let mut out = String::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push_str(&String::from_utf8_lossy(
                    &std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    out
}
