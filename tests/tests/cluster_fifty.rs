//! The 50-node run of issue 13: 50 `vigil` processes on 127.0.0.1–50 gossiping; membership
//! converges, one scheduler is elected and agreed by all, and after its `kill -9` the 49
//! survivors agree on the next one. Ignored by default (50 processes on the test machine);
//! run it, with its figures printed, by
//! `cargo test -p vigil-tests --test cluster_fifty -- --ignored --nocapture`.
//! The figures are printed, not asserted (the deadlines only bound the test).
//!
//! `VIGIL_FIFTY_CLUSTER="failure_timeout_ms = 0"` adds keys to every node's `[cluster]` (that
//! one: the phi-accrual detector of before issue 13, for comparison); `VIGIL_BIN` runs another
//! build (a release one).
//!
//! Each node is watched by its own thread polling its API every 200 ms, so a figure is when
//! the last node got there (within a poll), not the length of a sweep over 50 APIs.
//!
//! The big node: the last node started carries, once the cluster has elected, the state of
//! issue 13's busy node — 5000 playback streams, 500 live cameras, 1000 cached ranges — and
//! the run measures when every other node's view shows it whole (stream count, live cameras
//! and cached ranges equal to the big node's view of itself) and the gossip bytes meanwhile.
//! That state is **synthetic**: the node is started with the test-only hook
//! `VIGIL_FAULT_SYNTHETIC_REPORT` (`server/src/cluster/synthetic.rs`), which pads its report
//! with made-up entries (5000 real RTSP sessions beside 49 other nodes exceed the machine);
//! `VIGIL_FIFTY_PADDING` changes the amounts (`streams=N live=N cached=N`).
//! `VIGIL_FIFTY_NODES` runs another member count (5, 20).
//!
//! Issue 29 §2: the members have cluster certificates (QUIC between them, so the scheduler
//! watch runs unless `VIGIL_FIFTY_CLUSTER` says `scheduler_timeout_ms = 0`).
//! `VIGIL_FIFTY_FAILOVERS=N` kills the scheduler N times (restarting it and waiting until it
//! is elected again in between) and prints, per failover, the timeline read from the
//! survivors' logs — when each logged the old scheduler dead and why, when each logged the
//! new one elected — and when the new scheduler first answered a placement (a `Place` call
//! over QUIC, as a member asks it) in its new term; then p50 / p99 / max over the failovers.
//! `VIGIL_FIFTY_QUIET_S` is the length of the idle window (10 s by default) in which false
//! deaths ("member dead" logged by anyone) are counted; `VIGIL_FIFTY_LOAD=N` adds a window
//! as long with N live viewers of an always-on demo camera on node 3 (`vigil-lab bench
//! live`), false deaths counted again.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use vigil_server::cluster::rpc;
use vigil_testkit::certs::Certs;
use vigil_tests::{
    alive_ids, default_node_id, free_port, free_udp, node_id, nodes_view, poll_every, scheduler_of,
    vigil_lab_bin, Node, NodeBuilder, DEMO_CAMERA,
};

const NODES: usize = 50;
const PADDING: &str = "streams=5000 live=500 cached=1000";
const KEY: &str = "fifty-node-cluster-key-0123456789";
const POLL: Duration = Duration::from_millis(200);

fn gossip_sent(n: &Node) -> Option<u64> {
    nodes_view(n)?["gossip"]["bytes_sent"].as_u64()
}

/// How long after `since` each node first met `cond` (one polling thread per node).
fn first_times(
    nodes: &[Node],
    since: Instant,
    timeout: Duration,
    what: &str,
    cond: impl Fn(&Node) -> bool + Sync,
) -> Vec<Duration> {
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|n| {
                let cond = &cond;
                s.spawn(move || {
                    poll_every(POLL, timeout, what, || cond(n).then(|| since.elapsed()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("poller"))
            .collect()
    })
}

/// "median / slowest node" of per-node times.
fn spread(mut t: Vec<Duration>) -> String {
    t.sort();
    format!("{:.1?} / {:.1?}", t[t.len() / 2], t[t.len() - 1])
}

/// Gossip bytes sent so far by every node, in node order.
fn gossip_sent_all(nodes: &[Node]) -> Vec<u64> {
    let v: Vec<u64> = nodes.iter().filter_map(gossip_sent).collect();
    assert_eq!(v.len(), nodes.len(), "a node's gossip counters");
    v
}

/// Mean bytes per second sent per node between two samples `secs` apart.
fn per_node_rate(before: &[u64], after: &[u64], secs: f64) -> f64 {
    after.iter().zip(before).map(|(a, b)| a - b).sum::<u64>() as f64 / before.len() as f64 / secs
}

/// Node `id` as `n` sees it: (streams, live cameras, cached ranges).
fn state_of(n: &Node, id: &str) -> Option<(u64, usize, u64)> {
    let v = nodes_view(n)?;
    let e = v["nodes"].as_array()?.iter().find(|e| e["id"] == id)?;
    Some((
        e["streams"].as_u64()?,
        e["live"].as_array()?.len(),
        e["cached_ranges"].as_u64()?,
    ))
}

fn scheduler_changes(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .map(|n| n.log().matches("scheduler changed").count())
        .sum()
}

/// The members: node i on 127.0.0.(i+1) with its id and RPC address, certificates from one
/// CA (and an `admin` one for the test's own placement calls).
struct Members {
    nodes: Vec<Node>,
    ids: Vec<String>,
    rpcs: Vec<SocketAddr>,
    certs: Certs,
    _tmp: tempfile::TempDir,
}

/// Starts `count` members, `extra(i)` appended to node i's `[cluster]` table (further
/// tables may follow in it) and `env(i)` in its environment. Every member is seeded with
/// nodes 1 and 2, so a restarted node 1 finds the cluster again.
fn start_members(
    count: usize,
    extra: impl Fn(usize) -> String,
    env: impl Fn(usize) -> Vec<(String, String)>,
) -> Members {
    let tmp = tempfile::tempdir().expect("temp dir");
    let certs = Certs::ca(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
    certs.add("admin").unwrap_or_else(|e| panic!("{e}"));
    let plan: Vec<(String, u16, String, String, SocketAddr)> = (0..count)
        .map(|i| {
            let ip = format!("127.0.0.{}", i + 1);
            let port = free_port(&ip);
            let id = default_node_id(&ip, port);
            certs.add(&id).unwrap_or_else(|e| panic!("{e}"));
            let gossip = format!("{ip}:{}", free_udp(&ip));
            let rpc = format!("{ip}:{}", free_udp(&ip))
                .parse()
                .expect("rpc address");
            (ip, port, id, gossip, rpc)
        })
        .collect();
    let mut nodes = Vec::with_capacity(count);
    for (i, (ip, port, id, gossip, rpc)) in plan.iter().enumerate() {
        let seeds: Vec<String> = plan
            .iter()
            .take(2)
            .filter(|p| p.3 != *gossip)
            .map(|p| format!("\"{}\"", p.3))
            .collect();
        let table = format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{gossip}\"\nseeds = [{}]\n\
             key = \"{KEY}\"\npriority = {}\nrpc_listen = \"{rpc}\"\nca_cert = \"{}\"\n\
             node_cert = \"{}\"\nnode_key = \"{}\"\n{}\n",
            seeds.join(", "),
            10 * (i + 1),
            certs.ca_pem().display(),
            certs.cert(id).display(),
            certs.key(id).display(),
            extra(i)
        );
        let mut b = NodeBuilder::new().ip(ip).rtsp_port(*port).extra(&table);
        for (k, v) in env(i) {
            b = b.env(&k, &v);
        }
        nodes.push(b.start());
    }
    Members {
        nodes,
        ids: plan.iter().map(|p| p.2.clone()).collect(),
        rpcs: plan.iter().map(|p| p.4).collect(),
        certs,
        _tmp: tmp,
    }
}

fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// Milliseconds since the epoch of a node's log line (its `2026-12-05T06:20:11.123456Z`
/// prefix, UTC).
fn line_ms(line: &str) -> Option<i64> {
    let t = line.split_whitespace().next()?;
    vigil_proto::rtsp::UtcTime::parse_rfc3339(t)
        .ok()
        .map(|t| t.unix_millis)
}

/// The first line of `log` at or after `since_ms` containing every one of `all`: its time
/// after `since_ms` and the line.
fn first_after<'a>(log: &'a str, since_ms: i64, all: &[&str]) -> Option<(i64, &'a str)> {
    log.lines().find_map(|l| {
        let t = line_ms(l)?;
        (t >= since_ms && all.iter().all(|a| l.contains(a))).then_some((t - since_ms, l))
    })
}

/// Lines logged by all `nodes` within `[from_ms, to_ms]` containing `what`.
fn logged_between(nodes: &[Node], from_ms: i64, to_ms: i64, what: &str) -> Vec<String> {
    nodes
        .iter()
        .flat_map(|n| {
            n.log()
                .lines()
                .filter(|l| {
                    l.contains(what) && line_ms(l).is_some_and(|t| (from_ms..=to_ms).contains(&t))
                })
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One `Place` call to `node` at `addr`, as a member asks the scheduler.
fn place(
    rt: &tokio::runtime::Runtime,
    config: &rpc::ClientConfig,
    addr: SocketAddr,
    node: &str,
) -> Option<rpc::WireDecision> {
    let req = rpc::RpcRequest::Place {
        request: rpc::PlaceRequest {
            from: "admin".into(),
            camera: "demo".into(),
            time_ms: epoch_ms() - 60_000,
            vbr_bps: 1e6,
            live: false,
        },
    };
    match rt.block_on(rpc::call_once(
        config.clone(),
        addr,
        node,
        &req,
        Duration::from_millis(500),
    )) {
        Ok(rpc::RpcResponse::Decision(d)) => Some(d),
        _ => None,
    }
}

/// p50 / p99 / max of `v` (ms), nearest rank.
fn percentiles(mut v: Vec<i64>) -> String {
    v.sort();
    let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    format!("{} / {} / {} ms", at(0.5), at(0.99), v[v.len() - 1])
}

/// Kills the scheduler (node 1), prints the failover's timeline, restarts node 1 and waits
/// until all members elected it again. Returns the failover time: the slowest survivor's
/// "scheduler changed" to node 2 or node 2's first placement in its new term, the later.
fn failover(
    m: &mut Members,
    round: usize,
    rt: &tokio::runtime::Runtime,
    admin: &rpc::ClientConfig,
) -> i64 {
    let (id1, id2) = (m.ids[0].clone(), m.ids[1].clone());
    // Each member takes the next term on its own at an election and adopts a higher one it
    // sees: once all show one term, node 2 passes it only by electing itself.
    let term_before = poll_every(
        Duration::from_millis(100),
        Duration::from_secs(30),
        "one term on every member",
        || {
            let terms: Vec<u64> = m
                .nodes
                .iter()
                .map(|n| nodes_view(n)?["term"].as_u64())
                .collect::<Option<_>>()?;
            terms.iter().all(|t| *t == terms[0]).then_some(terms[0])
        },
    );
    assert!(
        place(rt, admin, m.rpcs[1], &id2).is_some(),
        "node 2 answers a placement before the kill"
    );
    let kill_ms = epoch_ms();
    m.nodes[0].kill();
    let killed = Instant::now();
    let placed = poll_every(
        Duration::from_millis(20),
        Duration::from_secs(30),
        "a placement by node 2 in a new term",
        || {
            place(rt, admin, m.rpcs[1], &id2)
                .filter(|d| d.term > term_before)
                .map(|_| killed.elapsed().as_millis() as i64)
        },
    );
    poll_every(
        Duration::from_millis(100),
        Duration::from_secs(30),
        "node 2 agreed by every survivor",
        || {
            m.nodes[1..]
                .iter()
                .all(|n| scheduler_of(n).as_deref() == Some(id2.as_str()))
                .then_some(())
        },
    );
    let (mut dead, mut changed) = (Vec::new(), Vec::new());
    let (mut by_watch, mut by_heartbeat) = (0, 0);
    for n in &m.nodes[1..] {
        let log = n.log();
        if let Some((t, line)) = first_after(&log, kill_ms, &["member dead", &id1]) {
            dead.push(t);
            if line.contains("scheduler watch lost") {
                by_watch += 1;
            } else {
                by_heartbeat += 1;
            }
        }
        if let Some((t, _)) = first_after(&log, kill_ms, &["scheduler changed", &id2]) {
            changed.push(t);
        }
    }
    dead.sort();
    changed.sort();
    assert_eq!(
        changed.len(),
        m.nodes.len() - 1,
        "every survivor logged node 2 elected"
    );
    let slowest = changed[changed.len() - 1];
    println!(
        "  failover {round}: node 1 dead in the survivors' logs first / median / slowest \
         {} / {} / {} ms ({by_watch} by the scheduler watch, {by_heartbeat} by the heartbeat); \
         node 2 elected median / slowest {} / {slowest} ms; node 2's first placement in its \
         new term {placed} ms",
        dead.first().copied().unwrap_or(-1),
        dead.get(dead.len() / 2).copied().unwrap_or(-1),
        dead.last().copied().unwrap_or(-1),
        changed[changed.len() / 2],
    );
    m.nodes[0].restart();
    poll_every(
        Duration::from_millis(200),
        Duration::from_secs(60),
        "node 1 elected again by every member",
        || {
            m.nodes
                .iter()
                .all(|n| scheduler_of(n).as_deref() == Some(id1.as_str()))
                .then_some(())
        },
    );
    slowest.max(placed)
}

#[test]
#[ignore = "50 vigil processes: run by hand (see the module doc)"]
fn fifty_nodes_converge_elect_and_survive_the_schedulers_kill() {
    let count: usize = std::env::var("VIGIL_FIFTY_NODES").ok().map_or(NODES, |v| {
        v.parse().expect("VIGIL_FIFTY_NODES: a member count")
    });
    assert!(
        count >= 3,
        "at least 3 members (the scheduler, its successor, the big node)"
    );
    let padding_dir = tempfile::tempdir().expect("padding dir");
    let padding_file = padding_dir.path().join("padding");
    let padding_env = padding_file.to_str().expect("utf-8 temp path").to_string();
    let env_num = |k: &str, default: u64| {
        std::env::var(k).ok().map_or(default, |v| {
            v.parse().unwrap_or_else(|_| panic!("{k}: a number"))
        })
    };
    let failovers = env_num("VIGIL_FIFTY_FAILOVERS", 1);
    let quiet = Duration::from_secs(env_num("VIGIL_FIFTY_QUIET_S", 10));
    let load = env_num("VIGIL_FIFTY_LOAD", 0);
    let started = Instant::now();
    let cluster_keys = std::env::var("VIGIL_FIFTY_CLUSTER").unwrap_or_default();
    let mut m = start_members(
        count,
        |i| {
            // The camera the load window's viewers watch, on node 3 (not the scheduler).
            // Its limits let one address open them all (the load generator is one client).
            let camera = if i == 2 && load > 0 {
                format!(
                    "{DEMO_CAMERA}\n[limits]\nmax_sessions = 5000\nmax_readers_per_path = 5000\n\
                     max_connections = 10000\nmax_connections_per_address = 10000\n\
                     max_sessions_per_address = 10000\ndescribes_per_sec = 100000.0\n\
                     describe_burst = 100000\n"
                )
            } else {
                String::new()
            };
            format!("{cluster_keys}\n[storage]\nenabled = false\n{camera}\n")
        },
        |i| {
            // The last node carries the big (synthetic) state later.
            if i == count - 1 {
                vec![(
                    "VIGIL_FAULT_SYNTHETIC_REPORT".to_string(),
                    padding_env.clone(),
                )]
            } else {
                Vec::new()
            }
        },
    );
    let nodes = &m.nodes;
    let all_up = Instant::now();
    let mut want: Vec<String> = nodes.iter().map(node_id).collect();
    want.sort();
    let converged = first_times(
        nodes,
        all_up,
        Duration::from_secs(120),
        "all members alive in every view",
        |n| alive_ids(n).as_ref() == Some(&want),
    );
    let first = node_id(&nodes[0]);
    let elected = first_times(
        nodes,
        all_up,
        Duration::from_secs(60),
        "node 1 agreed as scheduler",
        |n| scheduler_of(n).as_deref() == Some(&first),
    );
    let changes_at_election = scheduler_changes(nodes);

    // Gossip volume and stability of the idle cluster (a fixed window: what happens in it
    // is the measurement).
    let before = gossip_sent_all(nodes);
    let quiet_from = epoch_ms();
    std::thread::sleep(quiet);
    let per_node = per_node_rate(&before, &gossip_sent_all(nodes), quiet.as_secs_f64());
    let changes_idle = scheduler_changes(nodes) - changes_at_election;
    let deaths_idle = logged_between(nodes, quiet_from, epoch_ms(), "member dead");

    // The big node: its report padded (synthetic) from now on; when does every other node's
    // view show it whole, and what does the gossip send meanwhile and after?
    let padding = std::env::var("VIGIL_FIFTY_PADDING").unwrap_or_else(|_| PADDING.into());
    let big = &nodes[count - 1];
    let big_id = node_id(big);
    let before = gossip_sent_all(nodes);
    let big_before = gossip_sent(big).expect("big node's counters");
    std::fs::write(&padding_file, &padding).expect("write the padding file");
    let armed = Instant::now();
    let want = poll_every(
        POLL,
        Duration::from_secs(60),
        "the big node's own report",
        || state_of(big, &big_id).filter(|s| s.0 > 0 && s.1 > 0 && s.2 > 0),
    );
    let own = armed.elapsed();
    let seen = first_times(
        &m.nodes[..count - 1],
        armed,
        Duration::from_secs(180),
        "the big node's state whole in every view",
        |n| state_of(n, &big_id) == Some(want),
    );
    let whole_after = armed.elapsed();
    let during = per_node_rate(&before, &gossip_sent_all(nodes), whole_after.as_secs_f64());
    let big_during = (gossip_sent(big).expect("big node's counters") - big_before) as f64
        / whole_after.as_secs_f64();
    // Steady state with the big node (its positions advance, so each report changes).
    let before = gossip_sent_all(nodes);
    std::thread::sleep(Duration::from_secs(10));
    let with_big = per_node_rate(&before, &gossip_sent_all(nodes), 10.0);
    let still_whole = nodes[..count - 1]
        .iter()
        .filter(|n| state_of(n, &big_id) == Some(want))
        .count();
    let changes_big = scheduler_changes(nodes) - changes_at_election - changes_idle;

    // Under load: `load` live viewers of node 3's camera for as long as the idle window.
    let deaths_load = (load > 0).then(|| {
        let n3 = &m.nodes[2];
        let from = epoch_ms();
        let out = vigil_tests::run_with_timeout(
            std::process::Command::new(vigil_lab_bin())
                .env("VIGIL_API_TOKEN", vigil_tests::ADMIN_TOKEN)
                .args([
                    "bench",
                    "live",
                    "--url",
                    &n3.url("live/demo"),
                    "--readers",
                    &load.to_string(),
                    "--duration",
                    &quiet.as_secs().to_string(),
                    "--api",
                    &format!("http://{}", n3.api),
                ]),
            quiet + Duration::from_secs(180),
        );
        println!(
            "  load window: vigil-lab bench live, {load} viewers of node 3's demo camera:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        logged_between(&m.nodes, from, epoch_ms(), "member dead")
    });

    // kill -9 of the scheduler, `failovers` times: the 49 survivors agree on node 2.
    println!("{count}-node run, {failovers} failover(s) (kill -9 of node 1, restarted after):");
    let rt = vigil_tests::secure_cluster::runtime();
    let admin = rpc::client_config(
        &m.certs.ca_pem(),
        Some((&m.certs.cert("admin"), &m.certs.key("admin"))),
    )
    .expect("admin client config");
    let times: Vec<i64> = (1..=failovers as usize)
        .map(|round| failover(&mut m, round, &rt, &admin))
        .collect();
    println!(
        "{count}-node run: {count} nodes started in {:.1?}",
        all_up - started
    );
    println!(
        "  membership converged (all alive with a report), median / slowest node, after the \
         last start: {}",
        spread(converged)
    );
    println!(
        "  node 1 agreed as scheduler, median / slowest node: {}",
        spread(elected)
    );
    println!("  scheduler changes logged by all nodes until then: {changes_at_election}");
    println!("  gossip {per_node:.0} bytes/s sent per node (idle, {quiet:?})");
    println!("  scheduler changes logged by all nodes in that idle window: {changes_idle}");
    println!(
        "  big node ({padding}, synthetic): its own view showed it after {own:.1?} \
         ({} streams, {} live, {} cached ranges)",
        want.0, want.1, want.2
    );
    println!(
        "  big node's state whole in every other view, median / slowest node: {} (all {:.1?})",
        spread(seen),
        whole_after
    );
    println!(
        "  gossip while it spread: {during:.0} bytes/s sent per node, {big_during:.0} by the \
         big node"
    );
    println!(
        "  gossip with the big node (10 s after): {with_big:.0} bytes/s sent per node; \
         {still_whole} of {} views still had its state whole at the end",
        count - 1
    );
    println!("  scheduler changes logged meanwhile: {changes_big}");
    println!(
        "  failover (slowest survivor's election of node 2, or node 2's first placement in its \
         new term, the later), p50 / p99 / max over {failovers}: {}",
        percentiles(times)
    );
    println!(
        "  false deaths (\"member dead\" logged) in the {quiet:?} idle window: {}{}",
        deaths_idle.len(),
        deaths_idle
            .iter()
            .map(|l| format!("\n    {l}"))
            .collect::<String>()
    );
    if let Some(d) = deaths_load {
        println!(
            "  false deaths in the {quiet:?} window with {load} viewers: {}{}",
            d.len(),
            d.iter().map(|l| format!("\n    {l}")).collect::<String>()
        );
    }
}
