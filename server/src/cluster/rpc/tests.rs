//! The caller rules of the cluster RPC and the node certificate's names and validity.
use super::*;
use crate::handoff::MigrationCall;

fn caller(names: &[&str]) -> Caller {
    Caller {
        names: names.iter().map(|n| n.to_string()).collect(),
        ..Caller::default()
    }
}

fn place(from: &str) -> RpcRequest {
    RpcRequest::Place {
        request: PlaceRequest {
            from: from.into(),
            camera: "c".into(),
            time_ms: 0,
            vbr_bps: 1.0,
            live: false,
        },
    }
}

/// Issue 44, H2: a certificate from the cluster CA is not membership. `node-1` and
/// `node-2` are live; `node-9` is a decommissioned node, `operator` an operator's.
#[test]
fn only_live_members_may_move_start_or_drain() {
    let member = |id: &str| id == "node-1" || id == "node-2";
    let drain = RpcRequest::Migration(MigrationCall::Drain { undrain: false });
    let take = RpcRequest::TakeCamera {
        camera: "c".into(),
        timeout_ms: 1,
    };
    let mv = RpcRequest::MoveCamera {
        camera: "c".into(),
        to: "node-2".into(),
    };
    let stop = RpcRequest::Migration(MigrationCall::Stop {
        session: "s".into(),
    });
    for req in [&drain, &take, &mv, &stop] {
        assert!(authorize(req, &caller(&["node-1", "host.example"]), &member).is_ok());
        for outsider in [&["node-9"][..], &["operator"], &[]] {
            let e = authorize(req, &caller(outsider), &member).unwrap_err();
            assert!(e.contains("not a live member"), "{e}");
        }
    }
    // Status asks, it does not act: any holder of a cluster certificate.
    let status = RpcRequest::Migration(MigrationCall::Status {
        sessions: vec!["s".into()],
    });
    assert!(authorize(&status, &caller(&["operator"]), &member).is_ok());
    // A placement question from an operator's tool, but never in a member's name.
    assert!(authorize(&place("vigil-cli"), &caller(&["operator"]), &member).is_ok());
    assert!(authorize(&place("node-2"), &caller(&["operator"]), &member).is_err());
    assert!(authorize(&place("node-2"), &caller(&["node-1"]), &member).is_err());
    assert!(authorize(&place("node-2"), &caller(&["NODE-2"]), &member).is_ok());
}

#[test]
fn a_node_certificate_names_its_node_and_ends() {
    let dir = tempfile::tempdir().expect("temp dir");
    make_ca(dir.path()).expect("ca");
    let hosts = ["cams.example".to_string(), "198.18.0.11".to_string()];
    make_node_cert(dir.path(), "node-1", dir.path(), &hosts, 30).expect("cert");
    let pem = dir.path().join("node-1.pem");
    let leaf = CertificateDer::pem_file_iter(&pem)
        .expect("pem")
        .next()
        .expect("a certificate")
        .expect("parsed");
    assert_eq!(dns_names(&leaf), ["node-1", "cams.example"]);
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(leaf.as_ref()).expect("x509");
    let days = (cert.validity().not_after.timestamp()
        - time::OffsetDateTime::now_utc().unix_timestamp())
        / 86_400;
    assert!((29..=30).contains(&days), "{days} days");
    assert!(make_node_cert(dir.path(), "node-2", dir.path(), &[], 0).is_err());
}
