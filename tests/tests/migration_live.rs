//! Live UDP viewers move between nodes while they play (issue 7 §1): node 1 holds the demo
//! camera; a viewer on node 1 is moved to node 2 (which becomes an edge relaying the camera
//! from node 1) and back, with `vigil ctl migrate`. The viewer sees one stream: one SSRC, no
//! sequence gap, no timestamp jump beyond one frame, and ffmpeg decodes every frame.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vigil_tests::secure_cluster::{
    self, assert_one_stream, holder_known, live_session, migrate, packets_from, placed,
    spawn_live_viewer, FRAME_TICKS,
};
use vigil_tests::{poll_until, spawn_ffmpeg_decode, Node};

/// Whether node `n` lists session `id`.
fn lists(n: &Node, id: &str) -> bool {
    n.api_json("/api/sessions")
        .as_array()
        .is_some_and(|v| v.iter().any(|s| s["id"] == id))
}

/// The project's client and ffmpeg, each a UDP viewer of `live/demo` on node 1, moved
/// 1 → 2 → 1 → 2 → 1: one stream throughout (each handoff continues right after the last
/// packet sent), and TEARDOWN releases the session on both nodes.
#[test]
fn live_viewers_move_and_keep_one_stream() {
    let c = secure_cluster::start(2, "", |_| String::new());
    let (a, b) = (c.node(0), c.node(1));
    a.wait_live("live/demo");
    holder_known(&c);
    let hops = [
        (1usize, "127.0.0.2"),
        (0, "127.0.0.1"),
        (1, "127.0.0.2"),
        (0, "127.0.0.1"),
    ];

    let stop = Arc::new(AtomicBool::new(false));
    let (seen, viewer) = spawn_live_viewer(placed(&a.url("live/demo")), stop.clone());
    let id = live_session(a);
    poll_until(Duration::from_secs(5), "media from node 1", || {
        (packets_from(&seen, "127.0.0.1") > 25).then_some(())
    });
    for (i, ip) in hops {
        let before = packets_from(&seen, ip);
        eprintln!("{}", migrate(a, &id, &c.members[i].id, "own"));
        poll_until(Duration::from_secs(5), "media from the new node", || {
            (packets_from(&seen, ip) > before + 25).then_some(())
        });
    }
    // Once more to node 2, then TEARDOWN there: both nodes let the session go.
    migrate(a, &id, &c.members[1].id, "own");
    let before = packets_from(&seen, "127.0.0.2");
    poll_until(Duration::from_secs(5), "media from node 2", || {
        (packets_from(&seen, "127.0.0.2") > before + 25).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    viewer.join().expect("viewer");
    for n in [a, b] {
        poll_until(Duration::from_secs(5), "the session released", || {
            (!lists(n, &id)).then_some(())
        });
    }
    let seen = seen.lock().unwrap().clone();
    let gaps = assert_one_stream(&seen, "live 1→2→1→2→1→2");
    assert_eq!(gaps.len(), 5, "five handoffs: {gaps:?}");
    for w in seen.windows(2) {
        if w[0].from != w[1].from {
            let step = w[1].ts.wrapping_sub(w[0].ts);
            assert!(step <= FRAME_TICKS, "timestamp step {step} at a handoff");
        }
    }
    eprintln!("live handoff gaps at the client (ms): {gaps:?}");

    // ffmpeg: 12 s of the camera while it moves four times, every frame decoded.
    let ff = spawn_ffmpeg_decode(
        &placed(&a.url("live/demo")),
        &["-rtsp_transport", "udp"],
        &["-t", "12"],
        Duration::from_secs(60),
    );
    let id = live_session(a);
    secure_cluster::move_through(&c, &id, hops.map(|(i, _)| i));
    ff.join()
        .expect("ffmpeg")
        .assert_plays("ffmpeg live through 1→2→1→2→1", 299, 301);
}
