//! `vigil ctl doctor` (issue 28 §3) against real nodes: a healthy two-node cluster on one
//! shared root passes every check that does not depend on this machine's limits; a config
//! naming a missing root and an expired CA certificate fails with lines that say what to
//! fix, and a config with a typo fails on the config itself, each with a non-zero exit; a
//! member recording to another directory fails the same-root check by the root ids.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;
use vigil_tests::{run_with_timeout, secure_cluster, vigil_bin, Node};

fn doctor(node: &Node, config: &Path) -> (Output, String) {
    let out = run_with_timeout(
        Command::new(vigil_bin())
            .env_remove("VIGIL_API_TOKEN")
            .args(["ctl", "--api", &format!("http://{}", node.api), "--config"])
            .arg(config)
            .arg("doctor"),
        Duration::from_secs(30),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// The finding of check `check` at `level` (`OK`, `WARN`, `FAIL`): its line and the
/// indented lines under it (the rest of its detail, its fix).
fn finding(text: &str, level: &str, check: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let i = lines.iter().position(|l| {
        l.strip_prefix(level)
            .is_some_and(|rest| rest.trim_start().starts_with(check))
    })?;
    let more = lines[i + 1..].iter().take_while(|l| l.starts_with(' '));
    Some(
        std::iter::once(&lines[i])
            .chain(more)
            .copied()
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

#[test]
fn doctor_passes_a_healthy_cluster_and_names_the_fix_for_a_broken_setup() {
    let _serial = vigil_tests::serial();
    let c = secure_cluster::start(2, "", |_| String::new());
    let node = c.node(0);
    let config = node.dir.path().join("vigil.toml");

    let (out, text) = doctor(node, &config);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("FAIL "), "{text}");
    for (check, says) in [
        ("config", "parses and validates"),
        ("node API", &c.members[0].id),
        ("storage root", "is writable, fsync"),
        ("same root", "the same on 1 other member"),
        ("clock skew", "1 member(s) compared"),
        ("certificate", "[cluster] ca_cert"),
        ("certificate", "[cluster] node_cert"),
    ] {
        let found = text
            .lines()
            .filter(|l| l.starts_with("OK") && l.contains(check))
            .any(|l| l.contains(says));
        assert!(found, "no OK {check} line saying {says:?}:\n{text}");
    }
    // The probe cleans up after itself.
    let left: Vec<_> = std::fs::read_dir(&c.root)
        .expect("root")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".vigil-doctor"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // A missing root and an expired CA certificate.
    let broken_dir = tempfile::tempdir().expect("temp dir");
    let expired = broken_dir.path().join("expired-ca.pem");
    let mut params = rcgen::CertificateParams::new(vec!["vigil-ca".to_string()]).expect("params");
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let key = rcgen::KeyPair::generate().expect("key");
    std::fs::write(&expired, params.self_signed(&key).expect("cert").pem()).expect("write");
    let missing = broken_dir.path().join("not-mounted");
    let text0 = std::fs::read_to_string(&config).expect("config");
    let ca = c.ca.join("ca.pem").display().to_string();
    let root = c.root.display().to_string();
    assert!(text0.contains(&ca) && text0.contains(&root), "{text0}");
    let broken = text0
        .replace(&ca, &expired.display().to_string())
        .replace(&root, &missing.display().to_string());
    let broken_cfg = broken_dir.path().join("vigil.toml");
    std::fs::write(&broken_cfg, broken).expect("write");
    let (out, text) = doctor(node, &broken_cfg);
    assert!(!out.status.success(), "{text}");
    let f = finding(&text, "FAIL", "storage root").unwrap_or_else(|| panic!("{text}"));
    assert!(
        f.contains("does not exist") && f.contains("fix: mount the shared volume"),
        "{f}"
    );
    let f = finding(&text, "FAIL", "certificate").unwrap_or_else(|| panic!("{text}"));
    assert!(
        f.contains("expired at 2021-01-01") && f.contains("vigil cluster cert"),
        "{f}"
    );
    assert!(text.contains("2 FAIL"), "{text}");
    assert!(!missing.exists(), "doctor must not create the root");
    assert!(
        !text.contains(secure_cluster::CLUSTER_KEY) && !text.contains(vigil_tests::ADMIN_TOKEN),
        "a secret in the output:\n{text}"
    );

    // A typo: the config's own typed error, and nothing else checked on it.
    let typo = broken_dir.path().join("typo.toml");
    std::fs::write(&typo, text0.replace("[storage]\nroot", "[storage]\nrot")).expect("write");
    let (out, text) = doctor(node, &typo);
    assert!(!out.status.success(), "{text}");
    let f = finding(&text, "FAIL", "config").unwrap_or_else(|| panic!("{text}"));
    assert!(
        f.contains("unknown field `rot`") && f.contains("fix:"),
        "{f}"
    );
}

/// Two members recording to two directories (one node's share not mounted): doctor on
/// either fails "same root" and names the other member, as read from that member's API.
#[test]
fn doctor_fails_when_a_member_records_to_another_root() {
    let _serial = vigil_tests::serial();
    let roots = [
        tempfile::tempdir().expect("root 1"),
        tempfile::tempdir().expect("root 2"),
    ];
    let key = "doctor-test-cluster-key-0123";
    let mut nodes: Vec<Node> = Vec::new();
    let mut seed: Option<String> = None;
    for (i, root) in roots.iter().enumerate() {
        let ip = format!("127.0.0.{}", i + 1);
        let gossip = format!("{ip}:{}", vigil_tests::free_udp(&ip));
        let table = vigil_testkit::cluster::Member {
            gossip: &gossip,
            seed: seed.as_deref(),
            key,
            priority: 10 * (i as u32 + 1),
            rpc: None,
            keys: "",
        }
        .table();
        let node = vigil_tests::NodeBuilder::new()
            .ip(&ip)
            .extra(&format!(
                "{table}\n[storage]\nroot = \"{}\"\n",
                root.path().display()
            ))
            .start();
        seed.get_or_insert(gossip);
        nodes.push(node);
    }
    let refs: Vec<&Node> = nodes.iter().collect();
    vigil_tests::wait_converged(&refs, Duration::from_secs(20));
    let other = vigil_tests::node_id(&nodes[1]);
    let (out, text) = doctor(&nodes[0], &nodes[0].dir.path().join("vigil.toml"));
    assert!(!out.status.success(), "{text}");
    let f = finding(&text, "FAIL", "same root").unwrap_or_else(|| panic!("{text}"));
    let id2 = std::fs::read_to_string(roots[1].path().join("VIGIL-STORAGE-ID")).expect("id");
    assert!(
        f.contains(&format!("{other} (id {})", id2.trim())) && f.contains("fix: mount the one"),
        "{f}"
    );
    assert!(text.contains("1 FAIL"), "{text}");
}
