//! The scheduler cannot be steered from outside: a burst of 10 000 playback DESCRIBEs from one
//! address is mostly refused by the per-address limit, what got through lapses within the
//! reservation time, a real viewer is served meanwhile, and `GET /api/ingest` reserves nothing.

use bytes::BytesMut;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use vigil_proto::rtsp::{parse_frame, Frame, Limits};
use vigil_tests::{connect_from, poll_until, rfc3339, Node, RtspConn};

const KEY: &str = "test-cluster-key-steering-0123456789";
const BURST: usize = 10_000;
const CONNECTIONS: usize = 10;

/// Send `n` pipelined DESCRIBEs of `url` and read the `n` answers: their status codes.
fn pipelined_describes(from: &str, to: SocketAddr, url: &str, n: usize) -> Vec<u16> {
    let mut s = connect_from(from, to);
    let mut out = Vec::new();
    for i in 1..=n {
        out.extend_from_slice(format!("DESCRIBE {url} RTSP/1.0\r\nCSeq: {i}\r\n\r\n").as_bytes());
    }
    s.write_all(&out).expect("send the burst");
    let mut buf = BytesMut::new();
    let mut statuses = Vec::with_capacity(n);
    let mut chunk = [0u8; 65536];
    while statuses.len() < n {
        match parse_frame(&buf, &Limits::default()) {
            Ok(Some((Frame::Response(r), used))) => {
                let _ = buf.split_to(used);
                statuses.push(r.status.0);
            }
            Ok(Some((_, used))) => {
                let _ = buf.split_to(used);
            }
            Ok(None) => {
                let got = s.read(&mut chunk).expect("read answers");
                assert!(got > 0, "closed after {} answers", statuses.len());
                buf.extend_from_slice(&chunk[..got]);
            }
            Err(e) => panic!("bad answer: {e}"),
        }
    }
    statuses
}

fn reserved(n: &Node) -> Vec<u64> {
    n.api_json("/api/cluster/nodes")["nodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| m["reserved"].as_u64().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_describe_burst_from_one_address_does_not_steer_placement() {
    let (_root, _n1, n2) = vigil_tests::two_node_cluster(KEY, "");
    let first_ms = vigil_tests::demo_recorded_for(&n2, 3000);
    poll_until(
        Duration::from_secs(20),
        "both nodes in node 2's view",
        || (reserved(&n2).len() == 2).then_some(()),
    );
    let url = format!("{}?start={}", n2.url("playback/demo"), rfc3339(first_ms));

    // The burst, from 127.0.0.5 over 10 pipelined connections at once.
    let started = Instant::now();
    let attackers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (to, url) = (n2.rtsp, url.clone());
            std::thread::spawn(move || {
                pipelined_describes("127.0.0.5", to, &url, BURST / CONNECTIONS)
            })
        })
        .collect();
    let statuses: Vec<u16> = attackers
        .into_iter()
        .flat_map(|t| t.join().expect("attacker"))
        .collect();
    let elapsed = started.elapsed();
    let limited = statuses.iter().filter(|s| **s == 503).count();
    let placed = statuses.iter().filter(|s| **s == 302 || **s == 200).count();
    // Burst of 500, then 50/s (the defaults).
    let allowed = 500 + (50.0 * elapsed.as_secs_f64()).ceil() as usize;
    assert!(
        placed <= allowed && placed + limited == BURST,
        "{placed} placed, {limited} limited of {BURST} in {elapsed:?} (allowed {allowed})"
    );
    // Refused by the DESCRIBE limit of the address or the request limit of the connection.
    let refused = ["describe_rate", "request_rate"]
        .iter()
        .map(|l| {
            vigil_tests::metric_value(&n2, &format!("vigil_limit_refusals_total{{limit=\"{l}\"}}"))
        })
        .sum::<f64>();
    assert!(
        refused >= limited as f64,
        "{refused} counted, {limited} seen"
    );

    // A real viewer from another address is placed right away, not refused.
    let mut viewer = RtspConn::connect(n2.rtsp);
    let r = viewer.request("DESCRIBE", &url, &[], None);
    assert!(
        r.status.0 == 302 || r.status.0 == 200,
        "real viewer: {} {}",
        r.status.0,
        r.reason
    );
    // What the burst reserved lapses (2 s by default) without any session reaching PLAY.
    poll_until(
        Duration::from_secs(4),
        "the burst's reservations to lapse",
        || reserved(&n2).iter().all(|r| *r == 0).then_some(()),
    );
    // Asking where cameras should push is a read: it reserves nothing.
    for i in 0..50 {
        let _ = n2.try_api(&format!("/api/ingest/new-cam-{i}"));
    }
    assert!(reserved(&n2).iter().all(|r| *r == 0), "{:?}", reserved(&n2));
}
