//! What every test on the bed of hosts shares: the bed, nodes on its hosts, and the reads of
//! their APIs, recordings and packets from another host.

use std::path::Path;
use std::time::{Duration, Instant};
use vigil_testkit::bed_node::{cluster_tables, BedNode, NodeSpec};
use vigil_testkit::certs::Certs;
use vigil_testkit::hosts::{Bed, BedError, Host};
use vigil_tests::{poll_every, vigil_bin, ADMIN_TOKEN, DEMO_CAMERA};

pub(crate) const KEY: &str = "hosts-cluster-key-0123456789abcdef";

/// A bed with the operator's host (`ops`, first: the harness reaches every node's API
/// from it), the viewers' host (`viewer`) and a host per name in `roles`; `None` (skip)
/// where this machine cannot make one outside CI.
pub(crate) fn bed_of(roles: &[&str]) -> Option<(Bed, Host, Host, Vec<Host>)> {
    let mut bed = bed_or_skip()?;
    let mut add = |role: &str| {
        bed.add_host(role)
            .unwrap_or_else(|e| panic!("host {role}: {e}"))
    };
    let (ops, viewer) = (add("ops"), add("viewer"));
    let hosts = roles.iter().map(|r| add(r)).collect();
    Some((bed, ops, viewer, hosts))
}

/// The five node hosts of a cluster, `node1` … `node5`.
pub(crate) const FIVE: [&str; 5] = ["node1", "node2", "node3", "node4", "node5"];

/// A bed, or `None` (skip) where this machine cannot make one outside CI.
pub(crate) fn bed_or_skip() -> Option<Bed> {
    match Bed::new() {
        Ok(bed) => Some(bed),
        Err(e @ BedError::Unavailable(_)) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("no bed of hosts: {e}"),
    }
}

/// A `vigil serve` on a host of the bed.
pub(crate) type HostNode = BedNode;

/// Node `i` of a cluster seeded by the first node's host, priority by position (node 0 is
/// elected), recording to `root` (the shared storage every host mounts).
pub(crate) fn start_node(
    bed: &Bed,
    host: &Host,
    i: usize,
    seed: &Host,
    certs: &Certs,
    root: &Path,
    extra: &str,
) -> HostNode {
    let tables =
        cluster_tables(host, i, seed, certs, KEY, root, extra).unwrap_or_else(|e| panic!("{e}"));
    spawn(bed, host, &format!("node{}", i + 1), "", &tables)
}

/// `vigil serve` on `host` as `id`, its RTSP, API and UDP ports the same on every host,
/// `rtsp` more keys of its `[rtsp]` table, `tables` after the `[node]`, `[rtsp]` and
/// `[http]` tables; returns once its API answers the operator's host.
pub(crate) fn spawn(bed: &Bed, host: &Host, id: &str, rtsp: &str, tables: &str) -> HostNode {
    let spec = NodeSpec {
        id: id.to_string(),
        rtsp: rtsp.to_string(),
        tables: tables.to_string(),
        token: ADMIN_TOKEN.into(),
        bin: vigil_bin(),
    };
    BedNode::spawn(bed, &bed.hosts()[0], host, spec).unwrap_or_else(|e| panic!("{e}"))
}

/// `GET` with the admin token (reads from beyond loopback need it), 3 s bound.
pub(crate) fn get(base: &str, path: &str) -> Option<String> {
    vigil_testkit::bed_node::get(base, path, ADMIN_TOKEN)
}

/// `node`'s `/api/cluster/nodes` from the operator's host.
pub(crate) fn view(bed: &Bed, control: &Host, node: &HostNode) -> Option<serde_json::Value> {
    let body = bed.within(control, || get(&node.api(), "/api/cluster/nodes"))?;
    serde_json::from_str(&body).ok()
}

/// Whether every one of `nodes` sees exactly `alive` alive and `scheduler` elected.
pub(crate) fn agreed(
    bed: &Bed,
    control: &Host,
    nodes: &[&HostNode],
    alive: usize,
    scheduler: &str,
) -> bool {
    nodes.iter().all(|n| {
        view(bed, control, n).is_some_and(|v| vigil_testkit::cluster::formed(&v, alive, scheduler))
    })
}

/// How long until every one of `nodes` sees exactly `alive` alive and `scheduler` elected.
pub(crate) fn time_to_agree(
    bed: &Bed,
    control: &Host,
    nodes: &[&HostNode],
    alive: usize,
    scheduler: &str,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        if agreed(bed, control, nodes, alive, scheduler) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "within {within:?}, not every node saw {alive} alive with {scheduler} elected: {:?}",
            nodes
                .iter()
                .map(|n| (
                    n.id.clone(),
                    view(bed, control, n).map(|v| (
                        vigil_testkit::cluster::alive_ids(&v),
                        vigil_testkit::cluster::scheduler(&v).map(str::to_string)
                    ))
                ))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The first recorded time of the demo camera once its first recorded range spans `ms`
/// (a playback from it plays that long without a gap).
pub(crate) fn recorded_for(bed: &Bed, control: &Host, node: &HostNode, ms: i64) -> i64 {
    recorded(bed, control, node, "demo", ms, true)
}

/// The last placement `via` recorded (the node a viewer asked): (chosen node, redirected).
pub(crate) fn last_placement(bed: &Bed, control: &Host, via: &HostNode) -> (String, bool) {
    let body = bed
        .within(control, || get(&via.api(), "/api/cluster/scheduler"))
        .unwrap_or_else(|| panic!("{}: no /api/cluster/scheduler", via.id));
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let d = &v["decisions"][0];
    (
        d["node"].as_str().unwrap_or("").to_string(),
        d["redirected"] == true,
    )
}

/// The JSON `path` of `node` answers the operator's host, if it does.
pub(crate) fn api_json(
    bed: &Bed,
    control: &Host,
    node: &HostNode,
    path: &str,
) -> Option<serde_json::Value> {
    let body = bed.within(control, || get(&node.api(), path))?;
    serde_json::from_str(&body).ok()
}

/// The cameras `node` has live (`live/<camera>` with a producer).
pub(crate) fn live_cameras(bed: &Bed, control: &Host, node: &HostNode) -> Vec<String> {
    api_json(bed, control, node, "/api/paths")
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|p| p["live"] == true)
        .filter_map(|p| Some(p["path"].as_str()?.strip_prefix("live/")?.to_string()))
        .collect()
}

/// The cameras `node` is writing to storage now.
pub(crate) fn recording_cameras(bed: &Bed, control: &Host, node: &HostNode) -> Vec<String> {
    api_json(bed, control, node, "/api/recordings")
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|r| r["state"] == "recording")
        .filter_map(|r| Some(r["camera"].as_str()?.to_string()))
        .collect()
}

pub(crate) const CAMERAS: [&str; 4] = ["cam1", "cam2", "cam3", "cam4"];

/// The first recorded time of `camera` once its recordings span `ms`, gaps included.
pub(crate) fn recorded_for_camera(
    bed: &Bed,
    control: &Host,
    node: &HostNode,
    camera: &str,
    ms: i64,
) -> i64 {
    recorded(bed, control, node, camera, ms, false)
}

/// The first recorded time of `camera` once `ms` of it are on the shared storage: in its
/// first range (`contiguous`) or from its first range's start to its last one's end.
pub(crate) fn recorded(
    bed: &Bed,
    control: &Host,
    node: &HostNode,
    camera: &str,
    ms: i64,
    contiguous: bool,
) -> i64 {
    let what = format!("{ms} ms of {camera} recorded");
    let timeout = Duration::from_millis(ms as u64 + 20_000);
    poll_every(Duration::from_millis(200), timeout, &what, || {
        let v = api_json(bed, control, node, &format!("/api/recordings/{camera}"))?;
        let ranges = v["ranges"].as_array()?;
        let a = ranges.first()?["start_ms"].as_i64()?;
        let last = if contiguous {
            ranges.first()?
        } else {
            ranges.last()?
        };
        (last["end_ms"].as_i64()? - a >= ms).then_some(a)
    })
}

/// Plays `url` from `viewer` over `transport` for `within`, handing each video packet to
/// `each` (the project's client: it reports what arrived, packet by packet).
pub(crate) fn video_packets(
    bed: &Bed,
    viewer: &Host,
    url: &str,
    transport: vigil_testkit::client::ClientTransport,
    within: Duration,
    mut each: impl FnMut(&vigil_testkit::client::ReceivedPacket) + Send,
) {
    use vigil_testkit::client::{play, PlayOptions};
    bed.within(viewer, || {
        let rt = vigil_tests::multi_thread_runtime();
        rt.block_on(async {
            let mut p = play(url, PlayOptions::new(transport))
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            let end = tokio::time::Instant::now() + within;
            while let Ok(Ok(Some(pkt))) = tokio::time::timeout_at(end, p.next_packet()).await {
                if pkt.track == 0 {
                    each(&pkt);
                }
            }
        })
    })
}

/// Over UDP for `within`: the largest RTP packet that arrived (bytes, header included) and
/// how many sequence numbers never arrived.
pub(crate) fn udp_packets(bed: &Bed, viewer: &Host, url: &str, within: Duration) -> (usize, u64) {
    let (mut largest, mut missing, mut last) = (0usize, 0u64, None::<u16>);
    let udp = vigil_testkit::client::ClientTransport::Udp;
    video_packets(bed, viewer, url, udp, within, |pkt| {
        largest = largest.max(12 + pkt.payload.len());
        if let Some(l) = last {
            missing += u64::from(pkt.header.sequence.wrapping_sub(l).wrapping_sub(1));
        }
        last = Some(pkt.header.sequence);
    });
    (largest, missing)
}

/// Over TCP for `within`: how many keyframes of video arrived (distinct RTP timestamps of
/// packets that start one) and how many video packets.
pub(crate) fn tcp_keyframes(bed: &Bed, viewer: &Host, url: &str, within: Duration) -> (usize, u64) {
    use vigil_proto::codec::{starts_keyframe, Codec};
    let (mut keyframes, mut packets) = (std::collections::BTreeSet::new(), 0u64);
    let tcp = vigil_testkit::client::ClientTransport::Tcp;
    video_packets(bed, viewer, url, tcp, within, |pkt| {
        packets += 1;
        if starts_keyframe(Codec::H264, &pkt.payload) {
            keyframes.insert(pkt.header.timestamp);
        }
    });
    (keyframes.len(), packets)
}

/// `POST /api/sessions/{id}/migrate` on `via` from the operator's host: status and body.
pub(crate) fn post_migrate(
    bed: &Bed,
    control: &Host,
    via: &HostNode,
    id: &str,
    to: &str,
    mode: &str,
) -> (u16, String) {
    let url = format!("{}/api/sessions/{id}/migrate", via.api());
    let body = serde_json::json!({ "to": to, "mode": mode }).to_string();
    bed.within(control, || {
        ureq::post(&url)
            .header("Authorization", &format!("Bearer {ADMIN_TOKEN}"))
            .header("Content-Type", "application/json")
            .config()
            .timeout_global(Some(Duration::from_secs(15)))
            .http_status_as_error(false)
            .build()
            .send(body.as_bytes())
            .map(|mut r| {
                (
                    r.status().as_u16(),
                    r.body_mut().read_to_string().unwrap_or_default(),
                )
            })
            .unwrap_or_else(|e| panic!("POST {url}: {e}"))
    })
}

/// [`post_migrate`], which must move the session.
pub(crate) fn migrate(bed: &Bed, control: &Host, via: &HostNode, id: &str, to: &str, mode: &str) {
    let (status, body) = post_migrate(bed, control, via, id, to, mode);
    assert_eq!(status, 200, "migrate {id} to {to} ({mode}): {body}");
}

/// Packets `node` has sent for session `id` (hosted or its own), from its API.
pub(crate) fn packets_on(bed: &Bed, control: &Host, node: &HostNode, id: &str) -> u64 {
    api_json(bed, control, node, "/api/sessions")
        .and_then(|v| {
            v.as_array()?
                .iter()
                .find(|s| s["id"] == id)
                .and_then(|s| s["packets"].as_u64())
        })
        .unwrap_or(0)
}

/// A playback session `node` owns that is not in `known`, once there is one and it plays.
pub(crate) fn new_playback_session(
    bed: &Bed,
    control: &Host,
    node: &HostNode,
    known: &mut Vec<String>,
) -> String {
    let what = format!("a new playback session on {}", node.id);
    let id = poll_every(
        Duration::from_millis(100),
        Duration::from_secs(10),
        &what,
        || {
            api_json(bed, control, node, "/api/sessions")?
                .as_array()?
                .iter()
                .filter(|s| s["kind"] == "playback" && s["steered_by"].is_null())
                .filter_map(|s| s["id"].as_str())
                .find(|id| !known.iter().any(|k| k == id))
                .map(str::to_string)
        },
    );
    known.push(id.clone());
    // Listed from its SETUP; a move before its PLAY is refused (409, "has not started
    // playing yet"): wait for its first media.
    poll_every(
        Duration::from_millis(100),
        Duration::from_secs(10),
        &format!("session {id} on {} to play", node.id),
        || (packets_on(bed, control, node, &id) > 0).then_some(()),
    );
    id
}

/// Moves session `id` (steered by node 1, playing) to node 2, node 3 and back, letting each sender
/// play at least 100 packets.
pub(crate) fn move_around(bed: &Bed, control: &Host, nodes: &[HostNode], id: &str, mode: &str) {
    for to in [1usize, 2, 0] {
        let before = packets_on(bed, control, &nodes[to], id);
        migrate(bed, control, &nodes[0], id, &nodes[to].id, mode);
        let what = format!("{mode}: media from {}", nodes[to].id);
        poll_every(
            Duration::from_millis(100),
            Duration::from_secs(5),
            &what,
            || (packets_on(bed, control, &nodes[to], id) >= before + 100).then_some(()),
        );
    }
}

/// The cluster's shared storage and certificates, in a temp dir removed on drop.
pub(crate) struct Site {
    pub(crate) certs: Certs,
    pub(crate) root: std::path::PathBuf,
    _tmp: tempfile::TempDir,
}

impl Site {
    pub(crate) fn new() -> Site {
        let tmp = tempfile::tempdir().expect("temp dir");
        let certs = Certs::ca(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        let root = tmp.path().join("rec");
        Site {
            certs,
            root,
            _tmp: tmp,
        }
    }

    /// A node on each of `hosts`, node i with `extra(i)` after its tables.
    pub(crate) fn nodes(
        &self,
        bed: &Bed,
        hosts: &[Host],
        extra: impl Fn(usize) -> String,
    ) -> Vec<HostNode> {
        hosts
            .iter()
            .enumerate()
            .map(|(i, h)| start_node(bed, h, i, &hosts[0], &self.certs, &self.root, &extra(i)))
            .collect()
    }
}

/// Three nodes on `hosts`, the first recording the demo camera, agreed on node1 as the
/// scheduler: the bed of the migration tests.
pub(crate) fn demo_trio(bed: &Bed, control: &Host, site: &Site, hosts: &[Host]) -> Vec<HostNode> {
    let nodes = site.nodes(bed, hosts, |i| {
        if i == 0 { DEMO_CAMERA } else { "" }.to_string()
    });
    let all: Vec<&HostNode> = nodes.iter().collect();
    time_to_agree(bed, control, &all, 3, "node1", Duration::from_secs(30));
    nodes
}

/// The median time (ms) of `n` TCP handshakes with the host:port of `base`
/// (`http://host:port`), from the calling thread's host: one round trip each.
pub(crate) fn handshake_ms(base: &str, n: usize) -> f64 {
    let addr: std::net::SocketAddr = base
        .trim_start_matches("http://")
        .parse()
        .unwrap_or_else(|e| panic!("{base}: {e}"));
    let mut v: Vec<f64> = (0..n)
        .filter_map(|_| {
            let t = Instant::now();
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
            Some(t.elapsed().as_secs_f64() * 1000.0)
        })
        .collect();
    assert!(v.len() * 2 > n, "{} of {n} handshakes with {addr}", v.len());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
