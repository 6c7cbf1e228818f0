//! What the cluster tests share: members started on 127.0.0.x with one gossip key, and
//! the wait for one agreed scheduler (membership waits are the harness's).

pub use std::net::SocketAddr;
pub use std::path::Path;
pub use std::time::{Duration, Instant};

pub use vigil_tests::demo_viewer_placed_on;
pub use vigil_tests::{
    alive_ids, free_udp, node_id, nodes_view, rfc3339, scheduler_of, wait_sees_streaming,
};
pub use vigil_tests::{assert_ctl_nodes_lists, ctl, serial, wait_converged};
pub use vigil_tests::{
    ffmpeg_decode, gst_decode_h264, poll_until, Node, NodeBuilder, RtspConn, DEMO_CAMERA,
};

pub const KEY: &str = "test-cluster-key-0123456789";

/// The `[cluster]` table of a member.
pub fn cluster_conf(gossip: SocketAddr, seeds: &[SocketAddr], key: &str, priority: u32) -> String {
    let seeds: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "[cluster]\nenabled = true\ngossip_listen = \"{gossip}\"\nseeds = [{}]\nkey = \"{key}\"\npriority = {priority}\n",
        seeds.join(", ")
    )
}

pub fn storage(root: &Path) -> String {
    format!(
        "[storage]\nroot = \"{}\"\nsegment_secs = 1.0",
        root.display()
    )
}

/// Member i's extra config: the shared root for all, and on member 0 the demo camera (so it
/// holds and records it).
pub fn root_and_demo_on_first(root: &Path) -> impl Fn(usize) -> String + '_ {
    move |i| {
        let mut s = storage(root);
        if i == 0 {
            s.push('\n');
            s.push_str(DEMO_CAMERA);
        }
        s
    }
}

pub use vigil_storage::now_ms;

pub struct Member {
    pub node: Node,
    pub gossip: SocketAddr,
}

/// Starts members on 127.0.0.1.., the first being the seed of the others.
pub fn start_cluster(n: usize, extra: impl Fn(usize) -> String) -> Vec<Member> {
    start_cluster_with(n, |_| String::new(), extra)
}

/// As [`start_cluster`], with extra keys for member i's `[cluster]` table.
pub fn start_cluster_with(
    n: usize,
    cluster_extra: impl Fn(usize) -> String,
    extra: impl Fn(usize) -> String,
) -> Vec<Member> {
    let mut out: Vec<Member> = Vec::new();
    for i in 0..n {
        let ip = format!("127.0.0.{}", i + 1);
        let gossip: SocketAddr = format!("{ip}:{}", free_udp(&ip)).parse().unwrap();
        let seeds: Vec<SocketAddr> = out.first().map(|m| vec![m.gossip]).unwrap_or_default();
        let node = NodeBuilder::new()
            .ip(&ip)
            .extra(&cluster_conf(gossip, &seeds, KEY, 10 * (i as u32 + 1)))
            .extra(&cluster_extra(i))
            .extra(&extra(i))
            .start();
        out.push(Member { node, gossip });
    }
    out
}

pub fn wait_agreed_scheduler(members: &[&Node], timeout: Duration) -> String {
    poll_until(timeout, "one scheduler agreed by all", || {
        let s: Vec<Option<String>> = members.iter().map(|n| scheduler_of(n)).collect();
        let first = s[0].clone()?;
        s.iter()
            .all(|x| x.as_deref() == Some(&first))
            .then_some(first)
    })
}
