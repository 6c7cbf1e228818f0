//! A report far larger than a datagram reaches every peer over the real gossip (chitchat
//! over the authenticated UDP transport on loopback).

use super::*;
use crate::cluster::report_keys::tests::big_report;
use crate::cluster::transport::{AuthTransport, GossipStats};
use chitchat::transport::Transport;
use chitchat::{spawn_chitchat, ChitchatConfig, ChitchatHandle, FailureDetectorConfig};
use std::net::SocketAddr;

fn free_udp() -> SocketAddr {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

async fn start(
    id: &str,
    addr: SocketAddr,
    seeds: Vec<String>,
) -> (ChitchatHandle, Arc<GossipStats>) {
    let stats = Arc::new(GossipStats::default());
    let transport = AuthTransport::new(b"test-key-test-key", stats.clone());
    let interval = Duration::from_millis(100);
    let config = ChitchatConfig {
        chitchat_id: ChitchatId::new(id.into(), 1, addr),
        cluster_id: "vigil".into(),
        gossip_interval: interval,
        listen_addr: addr,
        seed_nodes: seeds,
        failure_detector_config: FailureDetectorConfig {
            initial_interval: interval,
            ..Default::default()
        },
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: None,
    };
    let t: &dyn Transport = &transport;
    let handle = spawn_chitchat(config, Vec::new(), t).await.unwrap();
    (handle, stats)
}

/// What `peer` assembles of `of`'s report, if it has all of it.
async fn seen(peer: &ChitchatHandle, of: &ChitchatId) -> Option<(u64, Report)> {
    let cc = peer.chitchat();
    let cc = cc.lock().await;
    let (version, a) = gather(cc.node_state(of)?, None)?;
    let Assembly::Ready { head, chunks } = a else {
        return None;
    };
    Some((version, report_keys::assemble(&head, &chunks)?))
}

async fn wait_seen(peer: &ChitchatHandle, of: &ChitchatId, want: &Report) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((v, r)) = seen(peer, of).await {
            if r == *want {
                return v;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the report never arrived whole"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_larger_than_a_datagram_reaches_every_peer() {
    let addrs: Vec<SocketAddr> = (0..3).map(|_| free_udp()).collect();
    let seed = vec![addrs[0].to_string()];
    let mut nodes = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        nodes.push(start(&format!("n{i}"), *a, seed.clone()).await);
    }
    // Node 1's state as the issue sized it: 5000 sessions, 1000 cached cameras, 500 live.
    let mut big = big_report(5000, 1000, 500);
    let json = serde_json::to_string(&big).unwrap().len();
    assert!(json > 65_507 * 4, "{json} bytes of JSON");
    let author = nodes[1].0.chitchat_id().clone();
    {
        let cc = nodes[1].0.chitchat();
        let mut cc = cc.lock().await;
        publish_split(cc.self_node_state(), report_keys::split(big.clone()));
    }
    let v0 = wait_seen(&nodes[0].0, &author, &big).await;
    let v2 = wait_seen(&nodes[2].0, &author, &big).await;
    assert_eq!(v0, v2);

    // A change (every position moves, as playback does) arrives whole as well.
    for s in &mut big.streams {
        s.position_ms += 4000;
    }
    big.at_ms += 1;
    {
        let cc = nodes[1].0.chitchat();
        let mut cc = cc.lock().await;
        publish_split(cc.self_node_state(), report_keys::split(big.clone()));
    }
    assert!(wait_seen(&nodes[0].0, &author, &big).await > v0);
    assert!(wait_seen(&nodes[2].0, &author, &big).await > v2);
    for (h, _) in nodes {
        let _ = h.shutdown().await;
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn an_id_gossiped_from_two_addresses_is_a_conflict_a_restart_is_not() {
    let a = addr("127.0.0.1:7000");
    let b = addr("127.0.0.3:7000");
    let c = addr("127.0.0.2:7000");
    // A restart: two generations of "n2" at one address.
    let live = [
        ("n1", a),
        ("n2", c),
        ("n2", c),
        ("n1", b),
        ("n3", addr("127.0.0.4:1")),
    ];
    assert_eq!(
        shared_ids(live),
        vec![IdConflict {
            id: "n1".into(),
            gossip: vec![a, b],
        }]
    );
    assert!(shared_ids([("n1", a), ("n2", b)]).is_empty());
    assert!(shared_ids(std::iter::empty()).is_empty());
}
