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

/// The migration calls (Prepare, Start, Stop, MoveOut, Drain…) ride the cluster's mutual-TLS
/// QUIC endpoint: a peer presenting no certificate, a node certificate (with a member's own
/// name) from another CA — whose CA has the very same name as the cluster's — or a
/// self-signed certificate is refused, whatever it calls; so is a certificate from the
/// cluster CA that names no live member (an operator's, a retired node's) for every call
/// that acts; the control, such a certificate asking a Status, is answered. Nothing changed: the session plays on from A, never moved,
/// B hosts nothing and no node drains.
#[test]
fn migration_calls_need_a_cluster_certificate() {
    use vigil_server::cluster::rpc::{self, RpcRequest, RpcResponse};
    use vigil_server::handoff::{MigrationCall, MigrationReply, PrepareSpec};
    use vigil_server::node::command::SourceMode;
    use vigil_tests::secure_cluster::{self as sc, vigil_ok};

    let c = sc::start(2, "", |_| String::new());
    let first = c.recorded_for(10_000);
    let (a, b) = (c.node(0), c.node(1));
    let url = sc::placed(&format!(
        "{}?start={}&end={}",
        a.url("playback/demo"),
        vigil_tests::rfc3339(first),
        vigil_tests::rfc3339(first + 8_000)
    ));
    let (seen, viewer) = sc::spawn_viewer(url, None);
    let id = sc::playback_session(a);
    poll_until(Duration::from_secs(5), "media from A", || {
        (sc::packets_from(&seen, "127.0.0.1") > 25).then_some(())
    });
    let s = |p: &std::path::Path| p.display().to_string();
    let rogue = c.tmp.path().join("rogue");
    vigil_ok(&["cluster", "ca", "--out", &s(&rogue)]);
    let b_id = c.members[1].id.clone();
    vigil_ok(&[
        "cluster",
        "cert",
        "--ca",
        &s(&rogue),
        "--node",
        &b_id,
        "--out",
        &s(&rogue),
    ]);
    c.add_cert("operator");
    let ca_pem = c.ca.join("ca.pem");
    let call = |i: usize, identity: Option<(&std::path::Path, &std::path::Path)>, call| {
        let m = &c.members[i];
        let config = rpc::client_config(&ca_pem, identity).expect("client config");
        sc::runtime().block_on(rpc::call_once(
            config,
            m.rpc,
            &m.id,
            &RpcRequest::Migration(call),
            Duration::from_secs(5),
        ))
    };
    // A Prepare that would have B stream A's session to the attacker, and the calls that
    // would take A's session away or empty A.
    let attacks = || {
        vec![
            (
                1,
                MigrationCall::Prepare(PrepareSpec {
                    session: id.clone(),
                    from: c.members[0].id.clone(),
                    camera: "demo".into(),
                    start_ms: first,
                    end_ms: None,
                    client: "127.0.0.9:5000".parse().unwrap(),
                    dests: Vec::new(),
                    mode: SourceMode::Own,
                    cname: "rogue".into(),
                    position_ms: first,
                    live: false,
                }),
            ),
            (
                0,
                MigrationCall::MoveOut {
                    session: id.clone(),
                    to: b_id.clone(),
                    mode: None,
                },
            ),
            (0, MigrationCall::Drain { undrain: false }),
            (
                0,
                MigrationCall::Stop {
                    session: id.clone(),
                },
            ),
        ]
    };
    let (leaf, self_signed) = (
        (
            rogue.join(format!("{b_id}.pem")),
            rogue.join(format!("{b_id}.key")),
        ),
        (rogue.join("ca.pem"), rogue.join("ca.key")),
    );
    for (what, identity) in [
        ("no certificate", None),
        ("another CA's node certificate", Some((&*leaf.0, &*leaf.1))),
        (
            "a self-signed certificate",
            Some((&*self_signed.0, &*self_signed.1)),
        ),
    ] {
        for (i, attack) in attacks() {
            let r = call(i, identity, attack.clone());
            eprintln!("{what}, {attack:?}: {r:?}");
            assert!(r.is_err(), "{what}: {attack:?} answered {r:?}");
        }
    }
    for n in [a, b] {
        poll_until(Duration::from_secs(5), "the refused peers logged", || {
            (n.log().matches("cluster RPC peer refused").count() >= 3).then_some(())
        });
    }
    // Issue 44, H2: a certificate from the cluster CA is not membership. An operator's, and
    // a decommissioned node's (its name is no live member), are refused for every call
    // that acts, with the reason.
    c.add_cert("node-retired");
    let operator = (c.certs.join("operator.pem"), c.certs.join("operator.key"));
    let retired = (
        c.certs.join("node-retired.pem"),
        c.certs.join("node-retired.key"),
    );
    for (what, identity) in [("an operator's", &operator), ("a retired node's", &retired)] {
        for (i, attack) in attacks() {
            let r = call(i, Some((&identity.0, &identity.1)), attack.clone());
            assert!(
                matches!(&r, Ok(RpcResponse::Error(e)) if e.contains("not a live member")),
                "{what} certificate: {attack:?} answered {r:?}"
            );
        }
    }
    // The control: a certificate from the cluster CA may still ask, without acting.
    let r = call(
        1,
        Some((&operator.0, &operator.1)),
        MigrationCall::Status {
            sessions: vec!["no-such-session".into()],
        },
    );
    assert!(
        matches!(&r, Ok(RpcResponse::Migration(MigrationReply::Status(v))) if v.len() == 1 && !v[0].hosted),
        "{r:?}"
    );
    // Nothing changed.
    let before = sc::packets_from(&seen, "127.0.0.1");
    poll_until(Duration::from_secs(5), "A still sending", || {
        (sc::packets_from(&seen, "127.0.0.1") > before + 25).then_some(())
    });
    let sessions = a.api_json("/api/sessions");
    let mine = sessions
        .as_array()
        .and_then(|v| v.iter().find(|x| x["id"] == id.as_str()))
        .cloned()
        .expect("the session on A");
    assert_eq!(mine["moves"], 0, "{mine}");
    assert_eq!(mine["node"], c.members[0].id.as_str(), "{mine}");
    assert_eq!(
        b.api_json("/api/sessions"),
        serde_json::json!([]),
        "B hosts"
    );
    for n in [a, b] {
        let v = vigil_tests::nodes_view(n).expect("nodes");
        assert!(
            v["nodes"]
                .as_array()
                .is_some_and(|ns| ns.iter().all(|x| x["draining"] == false)),
            "{v}"
        );
    }
    viewer.join().expect("viewer");
    let seen = seen.lock().unwrap().clone();
    let gaps = sc::assert_one_stream(&seen, "under attack");
    assert!(gaps.is_empty(), "the source changed: {gaps:?}");
}

/// Issue 44, H2: a cluster certificate can be retired before it ends. A second certificate
/// for a live member's name (as if its key leaked), signed by the cluster CA, passes every
/// check a member's own does — until its fingerprint (`vigil cluster cert-fingerprint`,
/// the same as openssl's) is put on `[cluster] retired_certs` and the node gets SIGHUP:
/// then every call it makes is refused, even a Status, while the member's own certificate
/// still works and the cluster stays whole.
#[test]
fn a_retired_certificate_is_refused_whatever_it_names() {
    use vigil_server::cluster::rpc::{self, RpcRequest, RpcResponse};
    use vigil_server::handoff::MigrationCall;
    use vigil_tests::secure_cluster::{self as sc, vigil_ok};

    let c = sc::start(2, "", |_| String::new());
    let s = |p: &std::path::Path| p.display().to_string();
    let a_id = c.members[0].id.clone();
    let stolen = c.tmp.path().join("stolen");
    std::fs::create_dir_all(&stolen).expect("dir");
    vigil_ok(&[
        "cluster",
        "cert",
        "--ca",
        &s(&c.ca),
        "--node",
        &a_id,
        "--out",
        &s(&stolen),
    ]);
    let stolen_cert = (
        stolen.join(format!("{a_id}.pem")),
        stolen.join(format!("{a_id}.key")),
    );
    let own_cert = (
        c.certs.join(format!("{a_id}.pem")),
        c.certs.join(format!("{a_id}.key")),
    );
    let ca_pem = c.ca.join("ca.pem");
    let call = |identity: &(std::path::PathBuf, std::path::PathBuf), call: MigrationCall| {
        let b = &c.members[1];
        let config =
            rpc::client_config(&ca_pem, Some((&identity.0, &identity.1))).expect("client config");
        sc::runtime().block_on(rpc::call_once(
            config,
            b.rpc,
            &b.id,
            &RpcRequest::Migration(call),
            Duration::from_secs(5),
        ))
    };
    let status = || MigrationCall::Status {
        sessions: vec!["none".into()],
    };
    let undrain = || MigrationCall::Drain { undrain: true };
    // Before: the stolen certificate acts as member A.
    for probe in [status(), undrain()] {
        let r = call(&stolen_cert, probe.clone());
        assert!(
            matches!(r, Ok(RpcResponse::Migration(_))),
            "{probe:?}: {r:?}"
        );
    }
    // Its fingerprint, as vigil and openssl print it.
    let out = vigil_tests::run_with_timeout(
        std::process::Command::new(vigil_tests::vigil_bin())
            .args(["cluster", "cert-fingerprint"])
            .arg(&stolen_cert.0),
        Duration::from_secs(10),
    );
    assert!(out.status.success());
    let fp = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let openssl = vigil_tests::run_with_timeout(
        std::process::Command::new("openssl")
            .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
            .arg(&stolen_cert.0),
        Duration::from_secs(10),
    );
    let theirs = String::from_utf8_lossy(&openssl.stdout)
        .rsplit('=')
        .next()
        .unwrap_or_default()
        .trim()
        .replace(':', "")
        .to_ascii_lowercase();
    assert_eq!(fp, theirs, "vigil's fingerprint is openssl's");
    // Retired on B (as openssl spells it: colons and capitals), reloaded by SIGHUP.
    let b = c.node(1);
    let config = b.dir.path().join("vigil.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    let spelled = String::from_utf8_lossy(&openssl.stdout)
        .rsplit('=')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let retired = text.replacen(
        "[cluster]\n",
        &format!("[cluster]\nretired_certs = [\"{spelled}\"]\n"),
        1,
    );
    assert_ne!(retired, text, "the [cluster] table found");
    std::fs::write(&config, retired).expect("write config");
    vigil_tests::signal(b.pid().expect("pid"), libc::SIGHUP);
    poll_until(Duration::from_secs(10), "B reloads the list", || {
        b.log()
            .contains("retired cluster certificates reloaded")
            .then_some(())
    });
    for probe in [status(), undrain()] {
        let r = call(&stolen_cert, probe.clone());
        assert!(
            matches!(&r, Ok(RpcResponse::Error(e)) if e.contains("retired")),
            "{probe:?}: {r:?}"
        );
    }
    assert!(b.log().contains("retired certificate refused"), "logged");
    // Member A's own certificate is another certificate: it still works, and the cluster
    // is whole.
    let r = call(&own_cert, status());
    assert!(matches!(r, Ok(RpcResponse::Migration(_))), "{r:?}");
    for n in [c.node(0), b] {
        let v = vigil_tests::nodes_view(n).expect("nodes");
        let alive = v["nodes"]
            .as_array()
            .map_or(0, |ns| ns.iter().filter(|x| x["alive"] == true).count());
        assert_eq!(alive, 2, "{v}");
    }
}
