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

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use vigil_tests::{alive_ids, node_id, nodes_view, poll_every, scheduler_of, start_member, Node};

const NODES: usize = 50;
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

fn scheduler_changes(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .map(|n| n.log().matches("scheduler changed").count())
        .sum()
}

#[test]
#[ignore = "50 vigil processes: run by hand (see the module doc)"]
fn fifty_nodes_converge_elect_and_survive_the_schedulers_kill() {
    let mut nodes = Vec::with_capacity(NODES);
    let mut seed: Option<SocketAddr> = None;
    let started = Instant::now();
    // Keys before the first table header land in `[cluster]` (start_member's last table).
    let extra = format!(
        "{}\n[storage]\nenabled = false\n",
        std::env::var("VIGIL_FIFTY_CLUSTER").unwrap_or_default()
    );
    for i in 0..NODES {
        let priority = 10 * (i as u32 + 1);
        let (node, gossip) = start_member(i, seed, KEY, priority, &extra);
        seed.get_or_insert(gossip);
        nodes.push(node);
    }
    let all_up = Instant::now();
    let mut want: Vec<String> = nodes.iter().map(node_id).collect();
    want.sort();
    let converged = first_times(
        &nodes,
        all_up,
        Duration::from_secs(120),
        "all 50 alive in every view",
        |n| alive_ids(n).as_ref() == Some(&want),
    );
    let first = node_id(&nodes[0]);
    let elected = first_times(
        &nodes,
        all_up,
        Duration::from_secs(60),
        "node 1 agreed as scheduler",
        |n| scheduler_of(n).as_deref() == Some(&first),
    );
    let changes_at_election = scheduler_changes(&nodes);

    // Gossip volume and stability of the idle cluster over 10 s.
    let before: Vec<u64> = nodes.iter().filter_map(gossip_sent).collect();
    std::thread::sleep(Duration::from_secs(10));
    let after: Vec<u64> = nodes.iter().filter_map(gossip_sent).collect();
    assert_eq!(before.len(), NODES);
    let per_node =
        after.iter().zip(&before).map(|(a, b)| a - b).sum::<u64>() as f64 / NODES as f64 / 10.0;
    let changes_idle = scheduler_changes(&nodes) - changes_at_election;

    // kill -9 of the scheduler: the 49 survivors agree on node 2.
    let second = node_id(&nodes[1]);
    nodes[0].kill();
    let killed = Instant::now();
    let failover = first_times(
        &nodes[1..],
        killed,
        Duration::from_secs(60),
        "node 2 agreed by the survivors",
        |n| scheduler_of(n).as_deref() == Some(&second),
    );
    println!(
        "50-node run: {NODES} nodes started in {:.1?}",
        all_up - started
    );
    println!(
        "  membership converged (all 50 alive with a report), median / slowest node, after the \
         last start: {}",
        spread(converged)
    );
    println!(
        "  node 1 agreed as scheduler, median / slowest node: {}",
        spread(elected)
    );
    println!("  scheduler changes logged by all nodes until then: {changes_at_election}");
    println!("  gossip {per_node:.0} bytes/s sent per node (idle, 10 s)");
    println!("  scheduler changes logged by all nodes in those idle 10 s: {changes_idle}");
    println!(
        "  node 2 agreed after kill -9 of node 1, median / slowest survivor: {}",
        spread(failover)
    );
}
