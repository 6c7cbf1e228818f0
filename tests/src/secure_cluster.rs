//! A cluster of real nodes on 127.0.0.x with cluster certificates (QUIC node-to-node calls
//! with mutual TLS), a shared recording root, and node 1 recording the demo camera: what the
//! placement-by-scheduler and migration tests start from.

use crate::{free_port, free_udp, nodes_view, poll_until, run_with_timeout, scheduler_of};
use crate::{vigil_bin, Node, NodeBuilder, DEMO_CAMERA};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub const CLUSTER_KEY: &str = "test-cluster-key-0123456789";

/// `vigil ARGS`, bounded; panics with its stderr unless it succeeds.
pub fn vigil_ok(args: &[&str]) {
    let out = run_with_timeout(
        Command::new(vigil_bin()).args(args),
        Duration::from_secs(10),
    );
    assert!(
        out.status.success(),
        "vigil {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub struct Member {
    pub node: Node,
    /// The node id (`test-<rtsp port>`, known before it starts).
    pub id: String,
    pub ip: String,
    pub rpc: SocketAddr,
}

pub struct SecureCluster {
    pub members: Vec<Member>,
    pub root: PathBuf,
    pub ca: PathBuf,
    pub certs: PathBuf,
    pub tmp: tempfile::TempDir,
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Nodes with this many alive members that advertise an RTSP URL, as `n` sees them.
pub fn alive_members(n: &Node) -> Option<usize> {
    let v = nodes_view(n)?;
    Some(
        v["nodes"]
            .as_array()?
            .iter()
            .filter(|x| x["alive"] == true && x["rtsp"].is_string())
            .count(),
    )
}

/// Starts `n` nodes on 127.0.0.1..n (node 1 has the lowest priority value: it becomes the
/// scheduler, and it records the demo camera with 1 s segments to the shared root).
/// `extra(i)` adds config to node i (0-based). Returns once every node sees all of them
/// and node 1 elected.
pub fn start(n: usize, extra: impl Fn(usize) -> String) -> SecureCluster {
    let tmp = tempfile::tempdir().expect("temp dir");
    let root = tmp.path().join("rec");
    let ca = tmp.path().join("ca");
    let certs = tmp.path().join("certs");
    vigil_ok(&["cluster", "ca", "--out", &s(&ca)]);
    let mut members: Vec<Member> = Vec::new();
    let mut seed: Option<SocketAddr> = None;
    for i in 0..n {
        let ip = format!("127.0.0.{}", i + 1);
        let port = free_port(&ip);
        let id = format!("test-{port}");
        vigil_ok(&[
            "cluster",
            "cert",
            "--ca",
            &s(&ca),
            "--node",
            &id,
            "--out",
            &s(&certs),
        ]);
        let gossip: SocketAddr = format!("{ip}:{}", free_udp(&ip)).parse().expect("addr");
        let rpc: SocketAddr = format!("{ip}:{}", free_udp(&ip)).parse().expect("addr");
        let seeds = seed.map(|s| format!("\"{s}\"")).unwrap_or_default();
        let mut cfg = format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{gossip}\"\nseeds = [{seeds}]\nkey = \"{CLUSTER_KEY}\"\n\
             priority = {}\nrpc_listen = \"{rpc}\"\nca_cert = \"{}\"\nnode_cert = \"{}\"\nnode_key = \"{}\"\n\n\
             [storage]\nroot = \"{}\"\nsegment_secs = 1.0\n",
            10 * (i + 1),
            s(&ca.join("ca.pem")),
            s(&certs.join(format!("{id}.pem"))),
            s(&certs.join(format!("{id}.key"))),
            s(&root),
        );
        if i == 0 {
            cfg.push_str(DEMO_CAMERA);
            cfg.push('\n');
        }
        cfg.push_str(&extra(i));
        let node = NodeBuilder::new()
            .ip(&ip)
            .rtsp_port(port)
            .extra(&cfg)
            .start();
        seed.get_or_insert(gossip);
        members.push(Member { node, id, ip, rpc });
    }
    for m in &members {
        poll_until(Duration::from_secs(20), "membership to converge", || {
            (alive_members(&m.node)? == n).then_some(())
        });
    }
    let first = members[0].id.clone();
    for m in &members {
        poll_until(Duration::from_secs(10), "node 1 elected by all", || {
            (scheduler_of(&m.node)? == first).then_some(())
        });
    }
    SecureCluster {
        members,
        root,
        ca,
        certs,
        tmp,
    }
}

impl SecureCluster {
    pub fn node(&self, i: usize) -> &Node {
        &self.members[i].node
    }

    /// Waits until the demo recording on the shared root spans `ms`; its first time.
    pub fn recorded_for(&self, ms: i64) -> i64 {
        let n1 = self.node(0);
        poll_until(
            Duration::from_secs(ms as u64 / 1000 + 20),
            "the demo recording",
            || {
                let v: serde_json::Value =
                    serde_json::from_str(&n1.try_api("/api/recordings/demo")?).ok()?;
                let r = &v["ranges"][0];
                let (a, b) = (r["start_ms"].as_i64()?, r["end_ms"].as_i64()?);
                (b - a >= ms).then_some(a)
            },
        )
    }
}
