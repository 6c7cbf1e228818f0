//! Live edges (issue 11 §3): one camera's viewers spread over several nodes. Node 1 holds
//! the demo camera; with `holder_load = 0` every new viewer goes to the node with the lowest
//! estimated load after taking it (network-only load, so the estimates are the viewers'
//! bitrates and not the machine's noisy CPU), and the other nodes relay the camera from
//! node 1 — one upstream per edge however many viewers — until their last viewer leaves.

use std::time::Duration;

use vigil_testkit::client::{play, ClientTransport, PlayOptions, Player};
use vigil_tests::secure_cluster::{self, holder_known, placed, runtime};
use vigil_tests::{ffmpeg_decode, poll_until, Node};

const KEYS: &str = "bandwidth_bps = 10e6\n\
    [cluster.scheduler]\nweights = { cpu = 0.0, mem = 0.0, net = 1.0 }\n\
    [cluster.edge]\nholder_load = 0.0\nidle_ms = 1000";

const VIEWERS: usize = 6;

/// Play sessions on `n` of `live/demo`.
fn play_sessions(n: &Node) -> usize {
    n.api_json("/api/sessions").as_array().map_or(0, |v| {
        v.iter()
            .filter(|s| s["kind"] == "play" && s["path"] == "live/demo")
            .count()
    })
}

/// `live/demo` on `n`: (source, live, readers), if the path exists.
fn demo_path(n: &Node) -> Option<(String, bool, u64)> {
    let p = n.path_info("live/demo")?;
    Some((
        p["source"].as_str()?.to_string(),
        p["live"] == true,
        p["readers"].as_u64()?,
    ))
}

#[test]
fn viewers_of_a_loaded_holder_land_on_edges_that_relay_it_once() {
    let c = secure_cluster::start(3, KEYS, |_| String::new());
    let holder = c.node(0);
    holder.wait_live("live/demo");
    holder_known(&c);
    let rt = runtime();
    let url = holder.url("live/demo");
    // One viewer after the other, each asking node 1, as a crowd arriving would.
    let mut players: Vec<Player> = Vec::new();
    for _ in 0..VIEWERS {
        let mut p = rt
            .block_on(play(&url, PlayOptions::new(ClientTransport::Tcp)))
            .expect("play through the scheduler");
        let first = rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(5), p.next_packet()).await })
            .expect("a first packet within 5 s")
            .expect("no client error");
        assert!(first.is_some(), "the stream ended at once");
        players.push(p);
    }
    // Where each viewer landed: the host of its SETUP URL.
    let on = |m: &secure_cluster::Member| {
        let host = format!("{}:", m.ip);
        players
            .iter()
            .filter(|p| p.tracks()[0].url.contains(&host))
            .count()
    };
    let counts: Vec<usize> = c.members.iter().map(on).collect();
    assert_eq!(counts.iter().sum::<usize>(), VIEWERS, "{counts:?}");
    // Some went to edges. (How evenly depends on when each node's report replaces the
    // scheduler's estimates; the spread itself is `vigil_cluster::edge`'s unit tests' and
    // the 2000-viewer bench's.)
    let edges: Vec<usize> = (1..3).filter(|&i| counts[i] > 0).collect();
    assert!(!edges.is_empty(), "no viewer went to an edge: {counts:?}");
    for &i in &edges {
        let n = c.node(i);
        let (source, live, readers) = demo_path(n).expect("the edge's relay path");
        assert_eq!(source, format!("relay from {}", c.members[0].id));
        assert!(live);
        assert_eq!(readers as usize, counts[i], "readers on edge {i}");
        assert_eq!(play_sessions(n), counts[i], "viewer sessions on edge {i}");
    }
    // The holder serves its own viewers plus exactly one upstream per edge.
    assert_eq!(play_sessions(holder), counts[0] + edges.len(), "{counts:?}");

    // A real client through an edge: ffmpeg placed on node 3 (a marker as node 1 would
    // give it), and ffmpeg asking node 1 and following wherever it is sent.
    let via_edge = ffmpeg_decode(
        &placed(&c.node(2).url("live/demo")),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "50"],
        Duration::from_secs(30),
    );
    via_edge.assert_plays("ffmpeg on edge node 3", 50, 50);
    let (source, _, _) = demo_path(c.node(2)).expect("node 3's relay path");
    assert_eq!(source, format!("relay from {}", c.members[0].id));
    let via_holder = ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "50"],
        Duration::from_secs(30),
    );
    via_holder.assert_plays("ffmpeg via node 1", 50, 50);

    // The last viewer leaves: each edge drops its upstream after idle_ms (1 s).
    drop(players);
    for i in 1..3 {
        poll_until(
            Duration::from_secs(15),
            "the edge to release its relay",
            || {
                demo_path(c.node(i))
                    .is_none_or(|(source, live, _)| !live && !source.starts_with("relay"))
                    .then_some(())
            },
        );
    }
    poll_until(
        Duration::from_secs(15),
        "no session left on the holder",
        || (play_sessions(holder) == 0).then_some(()),
    );
    // The holder kept the camera (and its recording) all along.
    assert!(demo_path(holder).is_some_and(|(s, live, _)| s == "demo" && live));
}
