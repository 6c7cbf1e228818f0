//! RTSP authentication across a cluster: a redirect carries the viewer's login as a marker
//! signed with the cluster key, which the target takes once and no one can forge.

use std::time::Duration;
use vigil_proto::rtsp::auth::Algorithm;
use vigil_tests::auth::*;
use vigil_tests::{ffmpeg_decode, poll_until, NodeBuilder, RtspConn, DEMO_CAMERA};

/// Two nodes of a cluster with the same `[auth]`: node 1 holds `live/demo`. A viewer who
/// logs in on node 2 is redirected to node 1 and is not asked to log in again (node 1 takes
/// node 2's signed marker); the marker works on one connection only, and a hand-made one is
/// ignored (401 without credentials).
#[test]
fn a_redirect_carries_the_login_and_markers_cannot_be_forged_or_replayed() {
    const KEY: &str = "test-cluster-key-auth-0123456789";
    let auth = auth_section("");
    let gossip1 = format!("127.0.0.1:{}", vigil_tests::free_udp("127.0.0.1"));
    let n1 = NodeBuilder::new()
        .extra(&format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{gossip1}\"\nkey = \"{KEY}\"\npriority = 10\n"
        ))
        .extra(&auth)
        .extra(DEMO_CAMERA)
        .start();
    let gossip2 = format!("127.0.0.2:{}", vigil_tests::free_udp("127.0.0.2"));
    let n2 = NodeBuilder::new()
        .ip("127.0.0.2")
        .extra(&format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{gossip2}\"\nseeds = [\"{gossip1}\"]\nkey = \"{KEY}\"\npriority = 20\n"
        ))
        .extra(&auth)
        .start();
    n1.wait_live("live/demo");
    let url2 = n2.url("live/demo");
    // Log in on node 2 until its gossip view knows node 1 holds demo: then 302.
    let location = poll_until(Duration::from_secs(20), "node 2 to redirect demo", || {
        let mut c = RtspConn::connect(n2.rtsp);
        let r = login_response(
            &mut c,
            &url2,
            Algorithm::Sha256,
            ("viewer", "view-pw", REALM),
        );
        (r.status.0 == 302)
            .then(|| r.headers.get("Location").map(str::to_string))
            .flatten()
    });
    assert!(
        location.starts_with(&n1.url("live/demo?vigil_placed=")),
        "{location}"
    );
    // The marker: served on node 1 without credentials, SETUP and PLAY included…
    let mut placed = RtspConn::connect(n1.rtsp);
    placed.play_tcp(&location);
    // …once: another connection with the same URL must log in.
    let mut replay = RtspConn::connect(n1.rtsp);
    assert_eq!(
        replay.request("DESCRIBE", &location, &[], None).status.0,
        401,
        "replayed marker"
    );
    // Hand-made and tampered markers are ignored.
    let forged = format!("{}?vigil_placed=1", n1.url("live/demo"));
    assert_eq!(
        RtspConn::connect(n1.rtsp)
            .request("DESCRIBE", &forged, &[], None)
            .status
            .0,
        401
    );
    let tampered = location.replace("viewer", "admin");
    let tampered = if tampered == location {
        format!("{location}0")
    } else {
        tampered
    };
    assert_eq!(
        RtspConn::connect(n1.rtsp)
            .request("DESCRIBE", &tampered, &[], None)
            .status
            .0,
        401
    );

    // ffmpeg logs in on node 2 only and plays from node 1.
    let run = ffmpeg_decode(
        &with_creds(&n2, "viewer", "view-pw", "live/demo"),
        &["-rtsp_transport", "tcp"],
        &["-frames:v", "50"],
        Duration::from_secs(30),
    );
    run.assert_plays("ffmpeg redirected with its login", 50, 50);
    // guard has no right on demo: node 2 answers 403 rather than redirecting.
    let mut g = RtspConn::connect(n2.rtsp);
    assert_eq!(
        login(&mut g, &url2, Algorithm::Md5, ("guard", "guard-pw", REALM)),
        403
    );
}
