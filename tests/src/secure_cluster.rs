//! A cluster of real nodes on 127.0.0.x with cluster certificates (QUIC node-to-node calls
//! with mutual TLS), a shared recording root, and node 1 recording the demo camera: what the
//! placement-by-scheduler and migration tests start from.

use crate::{ctl, free_port, free_udp, nodes_view, poll_until, run_with_timeout, scheduler_of};
use crate::{vigil_bin, Node, NodeBuilder, DEMO_CAMERA};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vigil_testkit::certs::Certs;
use vigil_testkit::client::{play, ClientTransport, PlayOptions, Player};

pub const CLUSTER_KEY: &str = "test-cluster-key-0123456789";

/// `[cluster]` keys that make REM act on three 0.6 Mb/s demo playbacks at Scale 3: load is
/// 100 · N (network only), N = Σ k·VBR / 10 Mb/s; a stream read from storage (k = 2; T_max
/// 0.5 s keeps every stream a storage reader) is ≈ 12 at 1×, ≈ 37 at 3×, so three of them
/// at 1× stay under Load_min (p = 0) and at 3× pass Load_max (p = 1).
pub const REM_KEYS: &str = "bandwidth_bps = 10e6\n[cluster.scheduler]\nload_min = 50.0\n\
    load_max = 60.0\np_max = 1.0\nt_min_ms = 100\nt_max_ms = 500\n\
    weights = { cpu = 0.0, mem = 0.0, net = 1.0 }";

/// With [`REM_KEYS`]: Scale 3 sends every frame (not keyframes only).
pub const REM_EXTRA: &str = "[playback]\nkeyframes_only_above_scale = 4.0\n";

/// `vigil ARGS`, bounded; panics with its stderr unless it succeeds.
pub fn vigil_ok(args: &[&str]) {
    let out = run_with_timeout(
        Command::new(vigil_bin()).args(args),
        Duration::from_secs(10),
    );
    assert!(
        out.status.success(),
        "vigil {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `url` with a redirect marker signed by the test cluster's key: served by the node it
/// names without placing again (a marker is good for one connection and 10 s: make one per
/// client, right before it connects).
pub fn placed(url: &str) -> String {
    crate::placed_by_hand(url, CLUSTER_KEY)
}

pub struct Member {
    pub node: Node,
    /// The node id (`test-<rtsp port>`, known before it starts).
    pub id: String,
    pub ip: String,
    pub rpc: SocketAddr,
}

pub struct SecureCluster {
    pub members: Vec<Member>,
    pub root: PathBuf,
    pub ca: PathBuf,
    pub certs: PathBuf,
    pub tmp: tempfile::TempDir,
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Nodes with this many alive members that advertise an RTSP URL, as `n` sees them.
pub fn alive_members(n: &Node) -> Option<usize> {
    Some(vigil_testkit::cluster::alive_ids(&nodes_view(n)?).len())
}

/// Starts `n` nodes on 127.0.0.1..n (node 1 has the lowest priority value: it becomes the
/// scheduler, and it records the demo camera with 1 s segments to the shared root).
/// `cluster_keys` go into every node's `[cluster]` table; `extra(i)` adds tables to node i
/// (0-based). Returns once every node sees all of them and node 1 elected.
pub fn start(n: usize, cluster_keys: &str, extra: impl Fn(usize) -> String) -> SecureCluster {
    start_with_ports(n, cluster_keys, extra, None)
}

/// [`start`] with `ports` UDP ports per node (for hundreds of UDP sessions), node i taking
/// 61000 + 1000·i on: above Linux's ephemeral range, so no other socket takes them.
pub fn start_with_ports(
    n: usize,
    cluster_keys: &str,
    extra: impl Fn(usize) -> String,
    ports: Option<u16>,
) -> SecureCluster {
    start_full(
        n,
        |_| cluster_keys.to_string(),
        extra,
        ports,
        |_| Vec::new(),
    )
}

/// [`start`] with `cluster_keys(i)` in node i's `[cluster]` table (members that differ,
/// e.g. in how soon they declare a silent peer dead).
pub fn start_with_keys(
    n: usize,
    cluster_keys: impl Fn(usize) -> String,
    extra: impl Fn(usize) -> String,
) -> SecureCluster {
    start_full(n, cluster_keys, extra, None, |_| Vec::new())
}

/// [`start`] with environment variables `env(i)` for node i (fault injection).
pub fn start_with_env(
    n: usize,
    cluster_keys: &str,
    extra: impl Fn(usize) -> String,
    env: impl Fn(usize) -> Vec<(String, String)>,
) -> SecureCluster {
    start_full(n, |_| cluster_keys.to_string(), extra, None, env)
}

fn start_full(
    n: usize,
    cluster_keys: impl Fn(usize) -> String,
    extra: impl Fn(usize) -> String,
    ports: Option<u16>,
    env: impl Fn(usize) -> Vec<(String, String)>,
) -> SecureCluster {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path().join("rec");
    let certs = Certs::ca(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
    let mut members: Vec<Member> = Vec::new();
    let mut seed: Option<String> = None;
    for i in 0..n {
        let ip = format!("127.0.0.{}", i + 1);
        let port = free_port(&ip);
        let id = crate::default_node_id(&ip, port);
        certs.add(&id).unwrap_or_else(|e| panic!("{e}"));
        let gossip = format!("{ip}:{}", free_udp(&ip));
        let rpc: SocketAddr = format!("{ip}:{}", free_udp(&ip)).parse().expect("addr");
        let rpc_s = rpc.to_string();
        let keys = cluster_keys(i);
        let mut cfg = vigil_testkit::cluster::Member {
            gossip: &gossip,
            seed: seed.as_deref(),
            key: CLUSTER_KEY,
            priority: 10 * (i as u32 + 1),
            rpc: Some((&rpc_s, &certs, &id)),
            keys: &keys,
        }
        .table();
        cfg.push_str(&format!(
            "\n[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n",
            s(&root)
        ));
        if i == 0 {
            cfg.push_str(DEMO_CAMERA);
            cfg.push('\n');
        }
        cfg.push_str(&extra(i));
        let mut b = NodeBuilder::new().ip(&ip).rtsp_port(port).extra(&cfg);
        if let Some(p) = ports {
            let min = 61_000 + 1_000 * i as u16;
            b = b.udp_ports(min, min + p.min(998));
        }
        for (k, v) in env(i) {
            b = b.env(&k, &v);
        }
        let node = b.start();
        seed.get_or_insert(gossip);
        members.push(Member { node, id, ip, rpc });
    }
    for m in &members {
        poll_until(Duration::from_secs(20), "membership to converge", || {
            (alive_members(&m.node)? == n).then_some(())
        });
    }
    let first = members[0].id.clone();
    for m in &members {
        poll_until(Duration::from_secs(10), "node 1 elected by all", || {
            (scheduler_of(&m.node)? == first).then_some(())
        });
    }
    SecureCluster {
        members,
        root,
        ca: certs.ca_dir().to_path_buf(),
        certs: certs.certs_dir().to_path_buf(),
        tmp,
    }
}

impl SecureCluster {
    /// A certificate from the cluster CA for `id` (a node, an operator, an impostor), made
    /// by `vigil cluster cert` into the certificate directory: `<id>.pem`, `<id>.key`.
    pub fn add_cert(&self, id: &str) {
        vigil_ok(&[
            "cluster",
            "cert",
            "--ca",
            &s(&self.ca),
            "--node",
            id,
            "--out",
            &s(&self.certs),
        ]);
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.members[i].node
    }

    /// Waits until the demo recording on the shared root spans `ms`; its first time.
    pub fn recorded_for(&self, ms: i64) -> i64 {
        crate::demo_recorded_for(self.node(0), ms)
    }
}

// ---------------------------------------------------------------------------------------
// Viewers of migrating sessions

/// 25 fps at 90 kHz.
pub const FRAME_TICKS: u32 = 3600;

/// A received video packet, as the test checks it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub from: Option<SocketAddr>,
    pub ssrc: u32,
    pub seq: u16,
    pub ts: u32,
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The next packet of `track` within 10 s (the stream must go on).
pub async fn next_packet_of(p: &mut Player, track: usize) -> vigil_testkit::client::ReceivedPacket {
    loop {
        let pkt = tokio::time::timeout(Duration::from_secs(10), p.next_packet())
            .await
            .expect("a packet within 10 s")
            .expect("no client error")
            .expect("the stream goes on");
        if pkt.track == track {
            return pkt;
        }
    }
}

/// The index of the player's video track.
pub fn video_track(p: &Player) -> usize {
    p.tracks()
        .iter()
        .position(|t| t.codec.is_video())
        .expect("video track")
}

/// Plays `url` over UDP with the project's client on a thread of its own, recording every
/// video packet until the stream ends; with `scale`, after 25 packets it asks for that
/// Scale (PLAY without Range: the playback continues at that rate).
pub fn spawn_viewer(
    url: String,
    scale: Option<f64>,
) -> (Arc<Mutex<Vec<Seen>>>, std::thread::JoinHandle<()>) {
    viewer_thread(url, scale, None)
}

/// Plays `url` (live) over UDP with the project's client until `stop`, recording every
/// video packet; then TEARDOWN.
pub fn spawn_live_viewer(
    url: String,
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<Vec<Seen>>>, std::thread::JoinHandle<()>) {
    viewer_thread(url, None, Some(stop))
}

fn viewer_thread(
    url: String,
    scale: Option<f64>,
    stop: Option<Arc<AtomicBool>>,
) -> (Arc<Mutex<Vec<Seen>>>, std::thread::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let h = std::thread::spawn(move || {
        runtime().block_on(async move {
            let mut p: Player = play(&url, PlayOptions::new(ClientTransport::Udp))
                .await
                .expect("play");
            let video = video_track(&p);
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
                    p.teardown().await.expect("TEARDOWN");
                    break;
                }
                assert!(Instant::now() < deadline, "the viewer ran 60 s");
                let Ok(got) =
                    tokio::time::timeout(Duration::from_millis(200), p.next_packet()).await
                else {
                    continue;
                };
                let Some(pkt) = got.expect("no client error") else {
                    assert!(stop.is_none(), "the live stream ended");
                    break;
                };
                if pkt.track != video {
                    continue;
                }
                let n = {
                    let mut o = out.lock().unwrap();
                    o.push(Seen {
                        at: pkt.at,
                        from: pkt.from,
                        ssrc: pkt.header.ssrc,
                        seq: pkt.header.sequence,
                        ts: pkt.header.timestamp,
                    });
                    o.len()
                };
                if let (Some(s), 25) = (scale, n) {
                    let answer = p
                        .play(vigil_testkit::client::PlayRequest::new().scale(s))
                        .await
                        .expect("PLAY with Scale");
                    assert!(answer.range.is_some(), "PLAY answer without Range");
                }
            }
        })
    });
    (seen, h)
}

/// Waits until every node's view says node 1 holds the demo camera live.
pub fn holder_known(c: &SecureCluster) {
    holder_of_known(c, "demo");
}

/// Waits until every node's view says node 1 holds `camera` live.
pub fn holder_of_known(c: &SecureCluster, camera: &str) {
    holder_of_known_on(c, 0, camera);
}

/// Waits until every node's view says node `holder` (0-based) holds `camera` live.
pub fn holder_of_known_on(c: &SecureCluster, holder: usize, camera: &str) {
    for m in &c.members {
        poll_until(
            Duration::from_secs(15),
            "the holder holds the camera live",
            || {
                nodes_view(&m.node)?["nodes"]
                    .as_array()?
                    .iter()
                    .any(|n| {
                        n["id"] == c.members[holder].id.as_str()
                            && n["live"]
                                .as_array()
                                .is_some_and(|l| l.iter().any(|x| x == camera))
                    })
                    .then_some(())
            },
        );
    }
}

/// The UDP viewer session of `live/demo` steered by `n` (its Transport names client ports;
/// an edge's relay reads over TCP), once it plays.
pub fn live_session(n: &Node) -> String {
    live_session_of(n, "live/demo")
}

/// [`live_session`] of `path`.
pub fn live_session_of(n: &Node, path: &str) -> String {
    poll_until(Duration::from_secs(10), "the live viewer session", || {
        n.api_json("/api/sessions")
            .as_array()?
            .iter()
            .find(|s| {
                s["kind"] == "play"
                    && s["path"] == path
                    && s["steered_by"].is_null()
                    && s["transport"]
                        .as_str()
                        .is_some_and(|t| t.contains("client_port="))
            })
            .and_then(|s| s["id"].as_str().map(str::to_string))
    })
}

/// The playback session on `n` (steered there), once it plays.
pub fn playback_session(n: &Node) -> String {
    poll_until(Duration::from_secs(10), "the playback session", || {
        n.api_json("/api/sessions")
            .as_array()?
            .iter()
            .find(|s| s["kind"] == "playback" && s["steered_by"].is_null())
            .and_then(|s| s["id"].as_str().map(str::to_string))
    })
}

/// Packets node `n` has sent for session `id` (hosted or its own).
pub fn packets_on(n: &Node, id: &str) -> u64 {
    n.api_json("/api/sessions")
        .as_array()
        .and_then(|v| v.iter().find(|s| s["id"] == id))
        .and_then(|s| s["packets"].as_u64())
        .unwrap_or(0)
}

pub fn packets_from(seen: &Mutex<Vec<Seen>>, ip: &str) -> usize {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|s| s.from.is_some_and(|a| a.ip().to_string() == ip))
        .count()
}

/// Moves session `id` (steered by node 0) to each of `hops` (member indexes) in turn in
/// `mode`, each
/// new sender playing a second of media (100 packets) before the next move.
pub fn move_through(
    c: &SecureCluster,
    id: &str,
    hops: impl IntoIterator<Item = usize>,
    mode: &str,
) {
    for i in hops {
        let n = c.node(i);
        let before = packets_on(n, id);
        migrate(c.node(0), id, &c.members[i].id, mode);
        poll_until(
            Duration::from_secs(5),
            "a second of media from the new node",
            || (packets_on(n, id) > before + 100).then_some(()),
        );
    }
}

/// `vigil ctl migrate` through node `via`, expecting success; returns its output.
pub fn migrate(via: &Node, session: &str, to: &str, mode: &str) -> String {
    let out = ctl(via, &["migrate", session, to, "--mode", mode]);
    assert!(out.contains("moved from"), "{out}");
    out
}

/// The stream is one: one SSRC, contiguous sequence numbers, timestamps that never jump
/// by more than two frames or go back; returns the handoff gaps (ms) at source changes.
pub fn assert_one_stream(seen: &[Seen], what: &str) -> Vec<f64> {
    assert!(seen.len() > 100, "{what}: only {} packets", seen.len());
    let ssrcs: BTreeSet<u32> = seen.iter().map(|s| s.ssrc).collect();
    assert_eq!(ssrcs.len(), 1, "{what}: SSRCs {ssrcs:?}");
    let mut gaps = Vec::new();
    for w in seen.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        assert_eq!(
            b.seq,
            a.seq.wrapping_add(1),
            "{what}: sequence {} after {} (from {:?} after {:?})",
            b.seq,
            a.seq,
            b.from,
            a.from
        );
        let step = b.ts.wrapping_sub(a.ts);
        assert!(
            step <= 2 * FRAME_TICKS,
            "{what}: timestamp step {step} ticks (from {:?} after {:?})",
            b.from,
            a.from
        );
        if a.from.is_some() && b.from.is_some() && a.from != b.from {
            gaps.push(b.at.duration_since(a.at).as_secs_f64() * 1000.0);
        }
    }
    gaps
}

/// A viewer thread of [`spawn_viewer`]: what it saw, and the thread.
pub type Viewer = (Arc<Mutex<Vec<Seen>>>, std::thread::JoinHandle<()>);

/// The REM scenario (with [`REM_KEYS`]): three playbacks on node 2, one second apart, each
/// going to Scale 3 after its 25th packet.
pub fn rem_scenario() -> (SecureCluster, Vec<Viewer>) {
    let c = start(3, REM_KEYS, |_| REM_EXTRA.into());
    let first = c.recorded_for(20_000);
    let n2 = c.node(1);
    let viewers = (0..3)
        .map(|k| {
            let url = placed(&format!(
                "{}?start={}&end={}",
                n2.url("playback/demo"),
                crate::rfc3339(first + 1000 * k),
                crate::rfc3339(first + 20_000)
            ));
            spawn_viewer(url, Some(3.0))
        })
        .collect();
    (c, viewers)
}

/// The scheduler's (node 1's) REM records that moved a session, once there are `n`.
pub fn rem_moves(c: &SecureCluster, n: usize) -> Vec<serde_json::Value> {
    poll_until(Duration::from_secs(20), "REM moves", || {
        let v = c.node(0).api_json("/api/cluster/scheduler");
        let done: Vec<serde_json::Value> = v["migrations"]
            .as_array()?
            .iter()
            .filter(|m| m["result"].as_str().is_some_and(|r| r.starts_with("moved")))
            .cloned()
            .collect();
        (done.len() >= n).then_some(done)
    })
}
