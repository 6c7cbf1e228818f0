//! The lab's cluster: N `vigil serve` processes of this very binary on 127.0.0.1…N, one
//! shared storage root, cluster certificates (placement over QUIC, REM's session moves),
//! and each arm's placement policy in their `[cluster]` table. Started per arm and killed
//! after it, so every arm starts from cold caches and an empty scheduler view.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use vigil_sim::scenario::{Arm, Scenario};

/// Cluster key of a lab run's gossip and redirect markers (loopback only, never shipped).
const KEY: &str = "vigil-lab-cluster-key-not-a-secret";
/// Admin token of the lab's nodes, for the lab's own writes (loopback only, never shipped).
pub const TOKEN: &str = "vigil-lab-admin-token-not-a-secret";

/// What every arm's cluster shares: the storage root and the certificates.
pub struct Site {
    pub dir: PathBuf,
    pub root: PathBuf,
    ca: PathBuf,
    certs: PathBuf,
}

/// One running node.
pub struct LabNode {
    pub(crate) child: Option<Child>,
    pub id: String,
    pub ip: String,
    pub rtsp: SocketAddr,
    /// Admin API base URL (`http://ip:port`).
    pub api: String,
    pub(crate) log: PathBuf,
}

impl LabNode {
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A lab run that fails half-way (a bail on the way out) leaves no process behind.
impl Drop for LabNode {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct Cluster {
    pub nodes: Vec<LabNode>,
}

impl Site {
    /// Certificates for nodes `lab-n0 … lab-n{count-1}` under `dir`.
    pub fn new(dir: &Path, count: usize) -> anyhow::Result<Site> {
        let root = dir.join("rec");
        let ca = dir.join("ca");
        let certs = dir.join("certs");
        std::fs::create_dir_all(&root)?;
        crate::cluster::rpc::make_ca(&ca)?;
        for i in 0..count {
            crate::cluster::rpc::make_node_cert(&ca, &node_id(i), &certs)?;
        }
        Ok(Site {
            dir: dir.to_path_buf(),
            root,
            ca,
            certs,
        })
    }
}

/// Each node's `[storage.emulate] read_mbps`: the scenario's shared storage bandwidth split
/// evenly among the nodes (a node's bucket is its own; the simulation's one FIFO is shared
/// by all nodes, which the even split matches when every node reads). `None` without
/// emulation.
pub fn node_read_mbps(sc: &Scenario) -> Option<f64> {
    let (lo, hi) = vigil_conf::StorageEmulation::READ_MBPS_RANGE;
    sc.storage
        .read_mbps()
        .map(|mbps| (mbps / sc.nodes.count.max(1) as f64).clamp(lo, hi))
}

/// The nodes' `[storage.emulate]` table for the scenario (empty without emulation).
fn emulation_table(sc: &Scenario) -> String {
    match node_read_mbps(sc) {
        Some(read_mbps) => format!(
            "[storage.emulate]\nread_latency_ms = {}\nread_mbps = {read_mbps}\n",
            sc.storage.latency_ms.round() as u64
        ),
        None => String::new(),
    }
}

/// What every lab report says of the storage emulation its nodes ran with.
pub fn emulation_note(sc: &Scenario) -> String {
    match node_read_mbps(sc) {
        Some(read_mbps) => format!(
            "`[storage.emulate] read_latency_ms = {}, read_mbps = {read_mbps}` on every node: each segment read waits that long, then passes the node's read bandwidth, which all its concurrent reads share (FIFO). The scenario's storage is one LUN of {} Mb/s shared by all {} nodes; each node gets an even share, where the simulation queues all nodes' reads in one FIFO (the same when every node reads; a node reading alone has the whole LUN in the simulation, only its share here).",
            sc.storage.latency_ms.round(),
            sc.storage.bandwidth_mbps,
            sc.nodes.count
        ),
        None => "None (`--no-emulation`): the nodes run without `[storage.emulate]` and read segments from the machine's disk — in practice its page cache, the recordings having just been written — so a storage read costs a file read and the segment's parse; the simulation reads in zero time.".into(),
    }
}

pub fn node_id(i: usize) -> String {
    format!("lab-n{i}")
}

/// A port the OS says is free on `ip` now (TCP, or UDP when `udp`).
pub(crate) fn free_port(ip: &str, udp: bool) -> anyhow::Result<u16> {
    let addr = format!("{ip}:0");
    Ok(if udp {
        std::net::UdpSocket::bind(&addr)?.local_addr()?.port()
    } else {
        std::net::TcpListener::bind(&addr)?.local_addr()?.port()
    })
}

/// The `[limits]` of every lab process: the lab's clients all come from 127.0.0.1.
pub const LIMITS: &str = "[limits]
describes_per_sec = 100000.0
describe_burst = 100000
requests_per_sec = 1000.0
max_sessions_per_address = 100000
max_connections_per_address = 100000
";

/// Starts `vigil serve` (this binary) with `config` written in `dir`; its log is there too.
pub fn spawn_serve(bin: &Path, dir: &Path, config: &str) -> anyhow::Result<(Child, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("vigil.toml");
    std::fs::write(&path, config)?;
    let log_path = dir.join("vigil.log");
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(bin)
        .args(["serve", "--config"])
        .arg(&path)
        .env("VIGIL_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .current_dir(dir)
        .spawn()
        .context("starting a node")?;
    Ok((child, log_path))
}

pub(crate) fn get_json(api: &str, path: &str) -> Option<serde_json::Value> {
    let body = crate::bench::get(api, path).ok()?;
    serde_json::from_str(&body).ok()
}

/// What a node's config holds beyond what every lab node has (addresses, limits, the
/// cluster's membership and certificates): set per scenario kind.
#[derive(Default)]
pub struct NodeConfig {
    /// Keys added to the `[limits]` table (a session cap).
    pub limits: String,
    /// Keys of the `[cluster]` table (policy, Bord…).
    pub cluster_keys: String,
    /// Tables after `[cluster]` (storage, cache, `[cluster.*]`, cameras…).
    pub tables: String,
}

impl Cluster {
    /// Every node's admin API address, in node order.
    pub fn apis(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.api.clone()).collect()
    }

    /// Every node's id, in node order.
    pub fn ids(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.id.clone()).collect()
    }

    /// Starts the nodes for `arm` of a placement scenario and waits until every one sees
    /// all members alive and node 0 (lowest priority value) elected.
    pub fn start(site: &Site, sc: &Scenario, arm: Arm, run: usize) -> anyhow::Result<Cluster> {
        let Arm::Place { policy, rem } = arm else {
            bail!("arm {arm} is not a placement policy");
        };
        Self::start_with(site, sc, policy, rem, &|_| Ok(String::new()), run)
    }

    /// [`Cluster::start`] with `policy` and REM given, and `extra(i)` appended to node i's
    /// configuration (tables of its own: cameras, the planner).
    pub fn start_with(
        site: &Site,
        sc: &Scenario,
        policy: vigil_cluster::Policy,
        rem: bool,
        extra: &dyn Fn(usize) -> anyhow::Result<String>,
        run: usize,
    ) -> anyhow::Result<Cluster> {
        // The scenario's `[cluster.scheduler]` (§A), `[cluster.knn]` and `[cluster.feedback]`
        // (§C) as the serializer writes them: the server reads the same structs.
        let sched = {
            let mut c = toml::Table::new();
            let k = &sc.cluster;
            c.insert(
                "scheduler".into(),
                toml::Value::try_from(k.sched).context("scheduler constants")?,
            );
            c.insert(
                "knn".into(),
                toml::Value::try_from(&k.knn).context("knn constants")?,
            );
            c.insert(
                "feedback".into(),
                toml::Value::try_from(k.feedback).context("feedback constants")?,
            );
            let mut t = toml::Table::new();
            t.insert("cluster".into(), c.into());
            toml::to_string(&t).context("scheduler constants")?
        };
        let max_sessions = match sc.nodes.max_sessions {
            0 => vigil_conf::Limits::default().max_sessions,
            m => m as usize,
        };
        let extras = (0..sc.nodes.count)
            .map(extra)
            .collect::<anyhow::Result<Vec<String>>>()?;
        Cluster::spawn(site, sc.nodes.count, run, |i| NodeConfig {
            limits: format!("max_sessions = {max_sessions}\n"),
            cluster_keys: format!(
                "election_grace_ms = 0\npolicy = \"{policy}\"\nbandwidth_bps = {}\n",
                sc.nodes.bord_mbps * 1e6 * sc.nodes.capacity_of(i)
            ),
            tables: format!(
                r#"[storage]
root = "{root}"
segment_secs = {segment}

{emulate}
[cache]
budget_mb = {cache}
read_ahead_segments = {read_ahead}
start_share = {start_share}

[cluster.migration]
rem = {rem}

{sched}
{extra}
"#,
                root = site.root.display(),
                segment = sc.workload.segment_secs,
                emulate = emulation_table(sc),
                cache = sc.nodes.cache_mb.round() as u64,
                read_ahead = sc.nodes.read_ahead_segments,
                start_share = sc.nodes.cache_start_share,
                extra = extras[i],
            ),
        })
    }

    /// Starts `n` nodes of this binary, node i with `config(i)`, and waits until every one
    /// sees all members alive and node 0 (lowest priority value) elected.
    pub fn spawn(
        site: &Site,
        n: usize,
        run: usize,
        config: impl Fn(usize) -> NodeConfig,
    ) -> anyhow::Result<Cluster> {
        let bin = std::env::current_exe().context("locating the vigil binary")?;
        let mut nodes: Vec<LabNode> = Vec::with_capacity(n);
        let mut seed: Option<String> = None;
        for i in 0..n {
            let ip = format!("127.0.0.{}", i + 1);
            let id = node_id(i);
            let rtsp = free_port(&ip, false)?;
            let api = free_port(&ip, false)?;
            let gossip = format!("{ip}:{}", free_port(&ip, true)?);
            let rpc = format!("{ip}:{}", free_port(&ip, true)?);
            let seeds = seed
                .as_ref()
                .map(|s| format!("\"{s}\""))
                .unwrap_or_default();
            let udp_min = 61_000 + 800 * (i as u32 % 5);
            let NodeConfig {
                limits,
                cluster_keys,
                tables,
            } = config(i);
            let config = format!(
                r#"[node]
id = "{id}"

[rtsp]
listen = "{ip}:{rtsp}"
udp_port_min = {udp_min}
udp_port_max = {udp_max}

[http]
listen = "{ip}:{api}"
token = "{TOKEN}"

{LIMITS}{limits}
[cluster]
enabled = true
gossip_listen = "{gossip}"
seeds = [{seeds}]
key = "{KEY}"
priority = {priority}
rpc_listen = "{rpc}"
ca_cert = "{ca}"
node_cert = "{cert}"
node_key = "{key}"
{cluster_keys}
{tables}"#,
                udp_max = udp_min + 799,
                priority = 10 * (i + 1),
                ca = site.ca.join("ca.pem").display(),
                cert = site.certs.join(format!("{id}.pem")).display(),
                key = site.certs.join(format!("{id}.key")).display(),
            );
            let dir = site.dir.join(format!("run{run}-{id}"));
            let (child, log) = spawn_serve(&bin, &dir, &config)?;
            seed.get_or_insert(gossip);
            nodes.push(LabNode {
                child: Some(child),
                id,
                rtsp: format!("{ip}:{rtsp}").parse()?,
                api: format!("http://{ip}:{api}"),
                ip,
                log,
            });
        }
        let mut cluster = Cluster { nodes };
        cluster.wait_formed()?;
        Ok(cluster)
    }

    /// Also returns at once, with its log, when a node has exited (a bad configuration).
    fn wait_formed(&mut self) -> anyhow::Result<()> {
        let n = self.nodes.len();
        let first = node_id(0);
        let deadline = Instant::now() + Duration::from_secs(60);
        for node in &mut self.nodes {
            loop {
                if let Some(status) = node
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten())
                {
                    bail!(
                        "node {} exited ({status}) before the cluster formed; its log:\n{}",
                        node.id,
                        std::fs::read_to_string(&node.log).unwrap_or_default()
                    );
                }
                let v = get_json(&node.api, "/api/cluster/nodes");
                let ok = v.as_ref().is_some_and(|v| {
                    let alive = v["nodes"].as_array().map_or(0, |a| {
                        a.iter()
                            .filter(|x| x["alive"] == true && x["rtsp"].is_string())
                            .count()
                    });
                    alive == n && v["scheduler"].as_str() == Some(first.as_str())
                });
                if ok {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "node {} did not see the cluster form within 60 s; its log:\n{}",
                        node.id,
                        std::fs::read_to_string(&node.log).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// The node whose RTSP address is `ip` (127.0.0.x identifies it).
    pub fn index_of_ip(&self, ip: std::net::IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.rtsp.ip() == ip)
    }

    pub fn stop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_emulate_the_scenarios_storage_unless_told_not_to() {
        let mut sc = vigil_sim::scenario::builtin("seed-vod-lab").expect("built in");
        // 4000 Mb/s shared by 5 nodes, 10 ms per read.
        assert_eq!(node_read_mbps(&sc), Some(800.0));
        assert_eq!(
            emulation_table(&sc),
            "[storage.emulate]\nread_latency_ms = 10\nread_mbps = 800\n"
        );
        assert!(emulation_note(&sc).contains("read_mbps = 800"));
        sc.storage.emulate = false;
        assert_eq!(node_read_mbps(&sc), None);
        assert_eq!(emulation_table(&sc), "");
        assert!(emulation_note(&sc).starts_with("None (`--no-emulation`)"));
    }
}
