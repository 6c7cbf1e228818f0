//! The lab's cluster: N `vigil serve` processes (`vigil_testkit::serve`, the binary beside
//! this one) on 127.0.0.1…N or each on a host of a bed (`--hosts netns`), one shared
//! storage root, cluster certificates (placement over
//! QUIC, REM's session moves), and each arm's placement policy in their `[cluster]` table.
//! Started per arm and killed after it, so every arm starts from cold caches and an empty
//! scheduler view.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use vigil_sim::scenario::{Arm, Scenario};
use vigil_testkit::bed_node::{API_PORT, GOSSIP_PORT, RPC_PORT, RTSP_PORT};
use vigil_testkit::certs::Certs;
use vigil_testkit::hosts::{Bed, BedError, Host};
use vigil_testkit::ports::{try_free_port, try_free_udp};
use vigil_testkit::serve::{self, ServeProcess};

/// Cluster key of a lab run's gossip and redirect markers (loopback only, never shipped).
const KEY: &str = "vigil-lab-cluster-key-not-a-secret";
/// Admin token of the lab's nodes, for the lab's own writes (loopback only, never shipped).
pub const TOKEN: &str = "vigil-lab-admin-token-not-a-secret";

/// What every arm's cluster shares: the storage root and the certificates, and the hosts
/// the nodes run on when not on loopback.
pub struct Site {
    pub dir: PathBuf,
    pub root: PathBuf,
    certs: Certs,
    /// Node i's host (`--hosts netns`): its namespace and address; fixed ports there.
    hosts: Option<Vec<Host>>,
}

/// Puts the site's nodes on a bed of hosts (`vigil lab --hosts netns`): one host per node
/// and one for the clients, returned with the bed (which removes them all when dropped).
pub fn on_hosts(site: &mut Site, count: usize) -> anyhow::Result<(Bed, Host)> {
    let mut bed = match Bed::new() {
        Ok(b) => b,
        Err(e @ BedError::Unavailable(_)) => bail!("{e} (--hosts netns needs root)"),
        Err(e) => return Err(e.into()),
    };
    let clients = bed.add_host("clients")?;
    let hosts = (0..count)
        .map(|i| bed.add_host(&format!("n{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    site.hosts = Some(hosts);
    Ok((bed, clients))
}

/// One running node; a lab run that fails half-way (a bail on the way out) leaves no
/// process behind (the process is killed on drop).
pub struct LabNode {
    pub(crate) process: ServeProcess,
    pub id: String,
    pub ip: String,
    pub rtsp: SocketAddr,
    /// Admin API base URL (`http://ip:port`).
    pub api: String,
}

impl LabNode {
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

pub struct Cluster {
    pub nodes: Vec<LabNode>,
}

impl Site {
    /// Certificates for nodes `lab-n0 … lab-n{count-1}` under `dir`.
    pub fn new(dir: &Path, count: usize) -> anyhow::Result<Site> {
        let root = dir.join("rec");
        std::fs::create_dir_all(&root)?;
        let ids: Vec<String> = (0..count).map(node_id).collect();
        Ok(Site {
            dir: dir.to_path_buf(),
            root,
            certs: Certs::make(dir, &ids)?,
            hosts: None,
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

/// The `[limits]` of every lab process: the lab's clients all come from 127.0.0.1.
pub const LIMITS: &str = "[limits]
describes_per_sec = 100000.0
describe_burst = 100000
requests_per_sec = 1000.0
max_sessions_per_address = 100000
max_connections_per_address = 100000
";

impl LabNode {
    /// Starts `vigil serve` (`VIGIL_BIN`, else the `vigil` beside this binary) with
    /// `config` in `dir`, its log there too. Does not wait for it.
    pub fn start(
        dir: &Path,
        config: serve::NodeConfig,
        netns: Option<&str>,
    ) -> anyhow::Result<LabNode> {
        let bin = serve::sibling_vigil()?;
        let process =
            ServeProcess::spawn_in(netns, &bin, dir, &config.id, &config.render(), "warn", &[])?;
        Ok(LabNode {
            process,
            rtsp: serve::rtsp_socket(&config)?,
            api: config.api_url(),
            id: config.id,
            ip: config.ip,
        })
    }
}

/// `GET api+path` as JSON, with the lab's token (its nodes may be on hosts, beyond
/// loopback); `None` when the node does not answer (yet).
pub(crate) fn get_json(api: &str, path: &str) -> Option<serde_json::Value> {
    serve::api_json_as(api, path, Some(TOKEN))
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

    /// Starts `n` nodes, node i with `config(i)`, and waits until every one sees all
    /// members alive and node 0 (lowest priority value) elected.
    pub fn spawn(
        site: &Site,
        n: usize,
        run: usize,
        config: impl Fn(usize) -> NodeConfig,
    ) -> anyhow::Result<Cluster> {
        let mut nodes: Vec<LabNode> = Vec::with_capacity(n);
        let mut seed: Option<String> = None;
        for i in 0..n {
            let host = site.hosts.as_ref().and_then(|h| h.get(i));
            // A host of its own has every port free; on loopback they are searched.
            let (ip, [gossip_port, rpc_port, rtsp_port, api_port]) = match host {
                Some(h) => (
                    h.ip.to_string(),
                    [GOSSIP_PORT, RPC_PORT, RTSP_PORT, API_PORT],
                ),
                None => {
                    let ip = format!("127.0.0.{}", i + 1);
                    let ports = [
                        try_free_udp(&ip)?,
                        try_free_udp(&ip)?,
                        try_free_port(&ip)?,
                        try_free_port(&ip)?,
                    ];
                    (ip, ports)
                }
            };
            let id = node_id(i);
            let plaintext = if host.is_some() {
                "allow_plaintext = true\n"
            } else {
                ""
            };
            let gossip = format!("{ip}:{gossip_port}");
            let rpc = format!("{ip}:{rpc_port}");
            let udp_min = 61_000 + 800 * (i as u16 % 5);
            let NodeConfig {
                limits,
                cluster_keys,
                tables,
            } = config(i);
            let cluster = vigil_testkit::cluster::Member {
                gossip: &gossip,
                seed: seed.as_deref(),
                key: KEY,
                priority: 10 * (i as u32 + 1),
                rpc: Some((&rpc, &site.certs, &id)),
                keys: &cluster_keys,
            }
            .table();
            let node = LabNode::start(
                &site.dir.join(format!("run{run}-{id}")),
                serve::NodeConfig {
                    id: id.clone(),
                    rtsp_port,
                    api_port,
                    udp: (udp_min, udp_min + 799),
                    token: TOKEN.into(),
                    tables: format!("{LIMITS}{limits}\n{cluster}{tables}"),
                    // On a bed of hosts the nodes listen beyond loopback, in clear text
                    // as the lab's figures are measured.
                    rtsp: plaintext.into(),
                    http: plaintext.into(),
                    ip,
                },
                host.map(|h| h.ns.as_str()),
            )?;
            seed.get_or_insert(gossip);
            nodes.push(node);
        }
        let mut cluster = Cluster { nodes };
        cluster.wait_formed()?;
        Ok(cluster)
    }

    /// Also returns at once, with its log, when a node has exited (a bad configuration).
    fn wait_formed(&mut self) -> anyhow::Result<()> {
        let n = self.nodes.len();
        let first = node_id(0);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        for node in &mut self.nodes {
            let api = node.api.clone();
            node.process.wait_for(
                "the cluster to form",
                deadline.saturating_duration_since(std::time::Instant::now()),
                Duration::from_millis(100),
                || {
                    get_json(&api, "/api/cluster/nodes")
                        .filter(|v| vigil_testkit::cluster::formed(v, n, &first))
                },
            )?;
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
