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

/// What every arm's cluster shares: the storage root and the certificates.
pub struct Site {
    pub dir: PathBuf,
    pub root: PathBuf,
    ca: PathBuf,
    certs: PathBuf,
}

/// One running node.
pub struct LabNode {
    child: Option<Child>,
    pub id: String,
    pub ip: String,
    pub rtsp: SocketAddr,
    /// Admin API base URL (`http://ip:port`).
    pub api: String,
    log: PathBuf,
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

pub fn node_id(i: usize) -> String {
    format!("lab-n{i}")
}

/// A port the OS says is free on `ip` now (TCP, or UDP when `udp`).
fn free_port(ip: &str, udp: bool) -> anyhow::Result<u16> {
    let addr = format!("{ip}:0");
    Ok(if udp {
        std::net::UdpSocket::bind(&addr)?.local_addr()?.port()
    } else {
        std::net::TcpListener::bind(&addr)?.local_addr()?.port()
    })
}

fn get_json(api: &str, path: &str) -> Option<serde_json::Value> {
    let body = crate::bench::get(api, path).ok()?;
    serde_json::from_str(&body).ok()
}

impl Cluster {
    /// Starts the nodes for `arm` and waits until every one sees all members alive and
    /// node 0 (lowest priority value) elected.
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
        let bin = std::env::current_exe().context("locating the vigil binary")?;
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
        let n = sc.nodes.count;
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
            let config = format!(
                r#"[node]
id = "{id}"

[rtsp]
listen = "{ip}:{rtsp}"
udp_port_min = {udp_min}
udp_port_max = {udp_max}

[http]
listen = "{ip}:{api}"

[limits]
describes_per_sec = 100000.0
describe_burst = 100000
requests_per_sec = 1000.0
max_sessions_per_address = 100000
max_connections_per_address = 100000
max_sessions = {max_sessions}

[storage]
root = "{root}"
segment_secs = {segment}

[storage.emulate]
read_latency_ms = {latency}

[cache]
budget_mb = {cache}
read_ahead_segments = {read_ahead}

[cluster]
enabled = true
gossip_listen = "{gossip}"
seeds = [{seeds}]
key = "{KEY}"
priority = {priority}
policy = "{policy}"
bandwidth_bps = {bord}
election_grace_ms = 0
rpc_listen = "{rpc}"
ca_cert = "{ca}"
node_cert = "{cert}"
node_key = "{key}"

[cluster.migration]
rem = {rem}

{sched}
{extra}
"#,
                udp_max = udp_min + 799,
                root = site.root.display(),
                segment = sc.workload.segment_secs,
                latency = sc.storage.latency_ms.round() as u64,
                cache = sc.nodes.cache_mb.round() as u64,
                read_ahead = sc.nodes.read_ahead_segments,
                priority = 10 * (i + 1),
                extra = extra(i)?,
                max_sessions = match sc.nodes.max_sessions {
                    0 => vigil_conf::Limits::default().max_sessions,
                    m => m as usize,
                },
                bord = sc.nodes.bord_mbps * 1e6 * sc.nodes.capacity_of(i),
                ca = site.ca.join("ca.pem").display(),
                cert = site.certs.join(format!("{id}.pem")).display(),
                key = site.certs.join(format!("{id}.key")).display(),
            );
            let dir = site.dir.join(format!("run{run}-{id}"));
            std::fs::create_dir_all(&dir)?;
            let path = dir.join("vigil.toml");
            std::fs::write(&path, config)?;
            let log_path = dir.join("vigil.log");
            let log = std::fs::File::create(&log_path)?;
            let child = Command::new(&bin)
                .args(["serve", "--config"])
                .arg(&path)
                .env("VIGIL_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .current_dir(&dir)
                .spawn()
                .context("starting a node")?;
            seed.get_or_insert(gossip);
            nodes.push(LabNode {
                child: Some(child),
                id,
                rtsp: format!("{ip}:{rtsp}").parse()?,
                api: format!("http://{ip}:{api}"),
                ip,
                log: log_path,
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
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}
