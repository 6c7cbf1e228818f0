//! A `vigil serve` on a host of a [`Bed`]: what the hosts tests and `vigil-lab chaos` start
//! on every node host. Every host uses the same ports (each has its own network stack), so
//! a node is named by its host's address alone.

use crate::certs::Certs;
use crate::hosts::{Bed, Host};
use crate::serve::{HarnessError, NodeConfig, ServeProcess};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const RTSP_PORT: u16 = 8554;
pub const API_PORT: u16 = 8080;
pub const GOSSIP_PORT: u16 = 7000;
pub const RPC_PORT: u16 = 7001;

/// What to start: the node's id, more keys of its `[rtsp]` table, and the tables after
/// `[node]`, `[rtsp]` and `[http]` (cluster, storage, cameras).
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub id: String,
    pub rtsp: String,
    pub tables: String,
    /// The admin API's token (a node listening beyond loopback requires one).
    pub token: String,
    pub bin: PathBuf,
}

/// A running node on a host; killed on drop (its log printed if the thread is panicking).
pub struct BedNode {
    pub id: String,
    pub host: Host,
    spec: NodeSpec,
    process: ServeProcess,
    dir: tempfile::TempDir,
}

impl BedNode {
    /// Starts `spec` on `host` and returns once its API answers `control` (another host).
    pub fn spawn(
        bed: &Bed,
        control: &Host,
        host: &Host,
        spec: NodeSpec,
    ) -> Result<BedNode, HarnessError> {
        let dir = tempfile::tempdir().map_err(HarnessError::io("creating a node's temp dir"))?;
        let process = start(bed, control, host, &spec, dir.path())?;
        Ok(BedNode {
            id: spec.id.clone(),
            host: host.clone(),
            spec,
            process,
            dir,
        })
    }

    /// Starts the node again with the same config and directory (after [`BedNode::kill`]).
    pub fn restart(&mut self, bed: &Bed, control: &Host) -> Result<(), HarnessError> {
        self.process.kill();
        self.process = start(bed, control, &self.host, &self.spec, self.dir.path())?;
        Ok(())
    }

    pub fn api(&self) -> String {
        format!("http://{}:{API_PORT}", self.host.ip)
    }

    pub fn url(&self, path: &str) -> String {
        format!("rtsp://{}:{RTSP_PORT}/{path}", self.host.ip)
    }

    /// `GET path` on its API with its token, 3 s bound: the body of a 2xx answer. Call it
    /// from a thread inside another host ([`Bed::within`]).
    pub fn get(&self, path: &str) -> Option<String> {
        get(&self.api(), path, &self.spec.token)
    }

    /// `POST path` with a JSON body: the status and the body (0 when unreachable).
    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        let r = ureq::post(&format!("{}{path}", self.api()))
            .header("Authorization", &format!("Bearer {}", self.spec.token))
            .header("Content-Type", "application/json")
            .config()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            .build()
            .send(body);
        match r {
            Ok(mut r) => (
                r.status().as_u16(),
                r.body_mut().read_to_string().unwrap_or_default(),
            ),
            Err(e) => (0, e.to_string()),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// SIGKILL, like a crash.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    pub fn log(&self) -> String {
        self.process.log()
    }
}

impl Drop for BedNode {
    fn drop(&mut self) {
        self.process.kill();
        if std::thread::panicking() {
            eprintln!("---- vigil log ({}) ----\n{}", self.id, self.process.log());
        }
    }
}

fn start(
    bed: &Bed,
    control: &Host,
    host: &Host,
    spec: &NodeSpec,
    dir: &Path,
) -> Result<ServeProcess, HarnessError> {
    let config = NodeConfig {
        id: spec.id.clone(),
        ip: host.ip.to_string(),
        rtsp_port: RTSP_PORT,
        api_port: API_PORT,
        udp: (20_000, 20_999),
        token: spec.token.clone(),
        // The bed's links are the test's own, and what its tests measure is the plain
        // protocol across them; a node beyond loopback says so explicitly.
        rtsp: format!("allow_plaintext = true\n{}", spec.rtsp),
        http: "allow_plaintext = true\n".into(),
        tables: spec.tables.clone(),
    };
    let mut process = ServeProcess::spawn_in(
        Some(&host.ns),
        &spec.bin,
        dir,
        &spec.id,
        &config.render(),
        "info,vigil_server=debug",
        &[],
    )?;
    let api = format!("http://{}:{API_PORT}", host.ip);
    process.wait_for(
        "its admin API",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || bed.within(control, || get(&api, "/api/health", &spec.token)),
    )?;
    Ok(process)
}

/// `GET base+path` with `token`, 3 s bound: the body of a 2xx answer.
pub fn get(base: &str, path: &str, token: &str) -> Option<String> {
    let mut r = ureq::get(&format!("{base}{path}"))
        .header("Authorization", &format!("Bearer {token}"))
        .config()
        .timeout_global(Some(Duration::from_secs(3)))
        .build()
        .call()
        .ok()?;
    r.body_mut().read_to_string().ok()
}

/// The `[cluster]` and `[storage]` tables of node `i` (`node{i+1}`) of a cluster seeded by
/// `seed`'s host, priority by position (node 0 is elected), recording to `root` (the
/// shared storage every host mounts), `extra` appended; registers its certificate.
pub fn cluster_tables(
    host: &Host,
    i: usize,
    seed: &Host,
    certs: &Certs,
    key: &str,
    root: &Path,
    extra: &str,
) -> Result<String, HarnessError> {
    let id = format!("node{}", i + 1);
    certs.add(&id)?;
    let ip = host.ip;
    let cluster = crate::cluster::Member {
        gossip: &format!("{ip}:{GOSSIP_PORT}"),
        seed: (i > 0)
            .then(|| format!("{}:{GOSSIP_PORT}", seed.ip))
            .as_deref(),
        key,
        priority: 10 * (i as u32 + 1),
        rpc: Some((&format!("{ip}:{RPC_PORT}"), certs, &id)),
        keys: "",
    }
    .table();
    Ok(format!(
        "{cluster}\n[storage]\nroot = \"{}\"\nsegment_secs = 1.0\nlease_ttl_secs = 2.0\n{extra}\n",
        root.display()
    ))
}

/// A camera farm's `[[camera]]` tables: each of `cameras` the node's demo source, always on.
pub fn farm_cameras<S: AsRef<str>>(cameras: &[S]) -> String {
    cameras
        .iter()
        .map(|c| {
            let c = c.as_ref();
            format!("[[camera]]\nid = \"{c}\"\nsource = \"demo\"\non_demand = false\n")
        })
        .collect()
}

/// The `[live]` and `[[camera]]` tables of a cluster node pulling each of `cameras` from
/// the farm on `farm`, always on, reconnecting within 100–400 ms when the pull breaks.
pub fn pulled_cameras<S: AsRef<str>>(farm: &Host, cameras: &[S]) -> String {
    let pulls: String = cameras
        .iter()
        .map(|c| {
            let c = c.as_ref();
            format!(
                "[[camera]]\nid = \"{c}\"\nsource = \"rtsp://{}:{RTSP_PORT}/live/{c}\"\non_demand = false\n",
                farm.ip
            )
        })
        .collect();
    format!("[live]\nreconnect_min_ms = 100\nreconnect_max_ms = 400\n\n{pulls}")
}
