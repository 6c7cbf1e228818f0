//! The chaos run's shell: builds the bed (operator, camera farm, viewers and five node
//! hosts, the shared storage a size-limited tmpfs so it can be filled), starts the nodes,
//! the viewers and the samplers, carries out the plan step by step, and hands what it saw
//! to the checker.

use super::checker::{self, Event, Observed, SchedulerSample, SessionRow, SessionSample};
use super::schedule::{self, Action, Fault, Params, Step};
use super::viewers::{self, Shared};
use anyhow::{bail, Context};
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vigil_testkit::bed_node::{
    cluster_tables, farm_cameras, pulled_cameras, BedNode, NodeSpec, RTSP_PORT,
};
use vigil_testkit::certs::Certs;
use vigil_testkit::hosts::{Bed, BedError, Host};

const KEY: &str = "chaos-cluster-key-0123456789abcdef";
const TOKEN: &str = "chaos-admin-token-0123456789";

/// What `vigil-lab chaos` was asked for.
#[derive(Debug, Clone)]
pub struct Opts {
    pub duration: Duration,
    pub seed: u64,
    pub live_viewers: usize,
    pub playback_viewers: usize,
    pub params: Params,
    pub limits: checker::Limits,
    pub bin: PathBuf,
}

/// The run's result: the checker's verdict, how many viewers and sessions it saw, and
/// what an investigation of a broken invariant starts from.
pub struct Outcome {
    pub verdict: checker::Verdict,
    pub spans: usize,
    pub viewers: usize,
    /// Each node's log (id, text), the camera farm's included.
    pub node_logs: Vec<(String, String)>,
    /// Each camera's stored segments (start, end ms) at the end of the run.
    pub segments: BTreeMap<String, Vec<(i64, i64)>>,
    /// Each event's label, start and end (ms since the epoch), to line up with the logs.
    pub timeline: Vec<(String, i64, i64)>,
}

/// The shared storage: a tmpfs of a known size, unmounted on drop.
struct Share {
    dir: PathBuf,
}

impl Share {
    fn mount(dir: &Path, mib: u64) -> anyhow::Result<Share> {
        std::fs::create_dir_all(dir)?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "chaos-share"])
            .arg(dir)
            .status()
            .context("mount")?;
        anyhow::ensure!(status.success(), "mounting a tmpfs on {}", dir.display());
        Ok(Share {
            dir: dir.to_path_buf(),
        })
    }

    fn ballast(&self) -> PathBuf {
        self.dir.join("ballast")
    }

    /// Fills what is free: every recording on it fails with ENOSPC.
    fn fill(&self) -> anyhow::Result<()> {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "cat /dev/zero > {} 2>/dev/null; true",
                self.ballast().display()
            ))
            .status()?;
        anyhow::ensure!(status.success(), "filling the share");
        Ok(())
    }

    fn free(&self) {
        let _ = std::fs::remove_file(self.ballast());
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

fn now_ms() -> i64 {
    vigil_storage::now_ms()
}

pub fn run(o: &Opts) -> anyhow::Result<Outcome> {
    let mut bed = match Bed::new() {
        Ok(b) => b,
        Err(e @ BedError::Unavailable(_)) => bail!("{e} (chaos needs root: network namespaces)"),
        Err(e) => return Err(e.into()),
    };
    let ops = bed.add_host("ops")?;
    let farm_host = bed.add_host("farm")?;
    let viewer_host = bed.add_host("viewers")?;
    let node_hosts: Vec<Host> = (1..=o.params.nodes)
        .map(|i| bed.add_host(&format!("node{i}")))
        .collect::<Result<_, _>>()?;
    let tmp = tempfile::tempdir()?;
    // 4 cameras at 0.6 Mb/s: ≈ 20 MB a minute; twice that plus room.
    let minutes = o.duration.as_secs().div_ceil(60).max(1);
    let share = Share::mount(&tmp.path().join("share"), 64 + 40 * minutes)?;
    let root = share.dir.join("rec");
    let certs = Certs::ca(tmp.path())?;
    let cameras: Vec<String> = (1..=o.params.cameras).map(|i| format!("cam{i}")).collect();
    let spec = |id: &str, tables: String| NodeSpec {
        id: id.to_string(),
        rtsp: String::new(),
        tables,
        token: TOKEN.into(),
        bin: o.bin.clone(),
    };
    let farm = BedNode::spawn(&bed, &ops, &farm_host, spec("farm", farm_cameras(&cameras)))?;
    let extra = pulled_cameras(&farm_host, &cameras);
    let mut nodes = Vec::new();
    for (i, h) in node_hosts.iter().enumerate() {
        let tables = cluster_tables(h, i, &node_hosts[0], &certs, KEY, &root, &extra)?;
        nodes.push(BedNode::spawn(
            &bed,
            &ops,
            h,
            spec(&format!("node{}", i + 1), tables),
        )?);
    }
    let ids: Vec<String> = nodes.iter().map(|n| n.id.clone()).collect();

    let mut rng = rand::rngs::StdRng::seed_from_u64(o.seed);
    let steps = schedule::plan(&o.params, &mut rng);
    let epoch = Instant::now();
    let epoch_ms = now_ms();
    let shared = Arc::new(Shared {
        nodes: nodes
            .iter()
            .map(|n| (n.id.clone(), format!("rtsp://{}:{RTSP_PORT}", n.host.ip)))
            .collect(),
        down: Mutex::new(BTreeMap::new()),
        cameras: cameras.clone(),
        end: epoch + o.duration,
        epoch,
        epoch_ms,
        recorded_from_ms: epoch_ms + 5_000,
    });

    // The viewers, on their own host.
    let viewers = {
        let (s, seed) = (shared.clone(), o.seed);
        let (live, playback) = (o.live_viewers, o.playback_viewers);
        let warmup = o.params.warmup;
        bed.spawn_within(&viewer_host, move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime for the viewers");
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for id in 0..live + playback {
                    let s = s.clone();
                    let is_live = id < live;
                    tasks.push(tokio::spawn(async move {
                        if !is_live {
                            // Recordings to play back from.
                            tokio::time::sleep(warmup).await;
                        }
                        viewers::viewer(id, is_live, id % 2 == 0, seed, s).await
                    }));
                }
                let mut logs = Vec::new();
                for t in tasks {
                    if let Ok(l) = t.await {
                        logs.push(l);
                    }
                }
                logs
            })
        })
    };

    // The samplers: every node's scheduler each second, every camera's lease holder.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let apis: Vec<(String, String)> = nodes.iter().map(|n| (n.id.clone(), n.api())).collect();
        let (stop, shared) = (stop.clone(), shared.clone());
        let (root, cameras) = (root.clone(), cameras.clone());
        bed.spawn_within(&ops, move || {
            let mut schedulers = Vec::new();
            let mut holders: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
            while !stop.load(Ordering::Relaxed) {
                let at = now_ms();
                let views = std::thread::scope(|sc| {
                    let hs: Vec<_> = apis
                        .iter()
                        .filter(|(id, _)| !shared.is_down(id))
                        .map(|(id, api)| {
                            sc.spawn(move || {
                                let v =
                                    vigil_testkit::bed_node::get(api, "/api/cluster/nodes", TOKEN)
                                        .and_then(|b| {
                                            serde_json::from_str::<serde_json::Value>(&b).ok()
                                        })?;
                                let s = vigil_testkit::cluster::scheduler(&v).map(str::to_string);
                                Some((id.clone(), s))
                            })
                        })
                        .collect();
                    hs.into_iter()
                        .filter_map(|h| h.join().ok().flatten())
                        .collect::<Vec<_>>()
                });
                schedulers.push(SchedulerSample { at_ms: at, views });
                for c in &cameras {
                    if let Some(h) = lease_holder(&root, c, at) {
                        let list = holders.entry(c.clone()).or_default();
                        if list.last().is_none_or(|(_, last)| *last != h) {
                            list.push((at, h));
                        }
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            (schedulers, holders)
        })
    };

    // The plan, step by step.
    let mut events: Vec<Event> = Vec::new();
    let mut open: BTreeMap<usize, (usize, Fault)> = BTreeMap::new();
    let mut sessions = Vec::new();
    let mut undrain: Vec<(Instant, usize)> = Vec::new();
    let set_down = |id: &str, down: bool| {
        if let Ok(mut d) = shared.down.lock() {
            d.insert(id.to_string(), down);
        }
    };
    // Waits until `at`, undraining the nodes whose drain is over meanwhile.
    let wait_until = |at: Instant, nodes: &[BedNode], undrain: &mut Vec<(Instant, usize)>| {
        while Instant::now() < at {
            if let Some(k) = undrain.iter().position(|(t, _)| *t <= Instant::now()) {
                let (_, n) = undrain.remove(k);
                let path = format!("/api/cluster/nodes/{}/undrain", nodes[n].id);
                let _ = bed.within(&ops, || nodes[n].post(&path, "{}"));
            }
            std::thread::sleep(
                at.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
            );
        }
    };
    for step in &steps {
        wait_until(epoch + step.at, &nodes, &mut undrain);
        match &step.step {
            Step::FaultStart { id, fault } => {
                sessions.push(sample_sessions(&bed, &ops, &nodes, &shared));
                // The row starts as the fault is being made: what it costs while the rules
                // go in (a partition takes a few hundred ms on five hosts) is its own.
                let start_ms = now_ms();
                let not_made =
                    start_fault(&bed, &share, &mut nodes, &node_hosts, fault, &set_down)?;
                let hits = match fault {
                    Fault::DiskFull => Vec::new(),
                    f => f
                        .targets(ids.len())
                        .iter()
                        .map(|&i| ids[i].clone())
                        .collect(),
                };
                events.push(Event {
                    label: fault.to_string(),
                    start_ms,
                    end_ms: i64::MAX,
                    hits,
                    hits_cameras: Vec::new(),
                    stops_recording: matches!(fault, Fault::DiskFull),
                    not_made,
                });
                open.insert(*id, (events.len() - 1, fault.clone()));
                eprintln!("[{:>5.0} s] {fault}", step.at.as_secs_f64());
            }
            Step::FaultEnd { id } => {
                if let Some((k, fault)) = open.remove(id) {
                    end_fault(
                        &bed,
                        &ops,
                        &share,
                        &mut nodes,
                        &node_hosts,
                        &fault,
                        &set_down,
                    )?;
                    events[k].end_ms = now_ms();
                    eprintln!("[{:>5.0} s] undone: {fault}", step.at.as_secs_f64());
                }
            }
            Step::Operator(action) => {
                let start = now_ms();
                let (outcome, hits_cameras) =
                    operate(&bed, &ops, &nodes, &cameras, action, &mut undrain);
                eprintln!("[{:>5.0} s] {action}: {outcome}", step.at.as_secs_f64());
                events.push(Event {
                    label: format!("{action} ({outcome})"),
                    start_ms: start,
                    end_ms: start,
                    hits: match action {
                        Action::Drain { node, .. } => vec![ids[*node].clone()],
                        _ => Vec::new(),
                    },
                    hits_cameras,
                    stops_recording: false,
                    not_made: None,
                });
            }
        }
    }
    wait_until(shared.end, &nodes, &mut undrain);
    let logs = viewers
        .join()
        .map_err(|_| anyhow::anyhow!("the viewers' thread panicked"))?;
    // Every viewer has torn down: once the moved sessions' leases (500 ms) have passed, a
    // half of a move still listed anywhere is one left behind. (Sampled at the end itself,
    // the teardowns racing the sample read as half-moved sessions.)
    std::thread::sleep(Duration::from_secs(2));
    sessions.push(sample_sessions(&bed, &ops, &nodes, &shared));
    stop.store(true, Ordering::Relaxed);
    let (schedulers, holders) = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the sampler panicked"))?;
    let run_end_ms = now_ms();
    let segments: BTreeMap<String, Vec<(i64, i64)>> = cameras
        .iter()
        .map(|c| (c.clone(), vigil_testkit::media::segment_spans(&root, c)))
        .collect();
    let viewers_n = logs.len();
    let timeline = events
        .iter()
        .map(|e| (e.label.clone(), e.start_ms, e.end_ms))
        .collect();
    let mut observed = Observed {
        events,
        run_end_ms,
        segments: segments.clone(),
        holders,
        schedulers,
        sessions,
        ..Observed::default()
    };
    for l in logs {
        observed.spans.extend(l.spans);
        observed.refusals.extend(l.refusals);
    }
    let spans = observed.spans.len();
    let verdict = checker::check(&observed, &o.limits);
    let node_logs = std::iter::once(&farm)
        .chain(&nodes)
        .map(|n| (n.id.clone(), n.log()))
        .collect();
    drop(nodes);
    drop(share);
    Ok(Outcome {
        verdict,
        spans,
        viewers: viewers_n,
        node_logs,
        segments,
        timeline,
    })
}

/// The holder named by a camera's highest lease generation, if it has not expired.
fn lease_holder(root: &Path, camera: &str, now: i64) -> Option<String> {
    let dir = root.join("cameras").join(camera);
    let newest = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_prefix("lease.")?.parse::<u64>().ok()
        })
        .max()?;
    let text = std::fs::read_to_string(dir.join(format!("lease.{newest}"))).ok()?;
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::to_string)
    };
    let expires: i64 = field("expires_ms=")?.parse().ok()?;
    (expires > now).then(|| field("holder=")).flatten()
}

/// Makes `fault`; `Some(why)` when this machine cannot.
fn start_fault(
    bed: &Bed,
    share: &Share,
    nodes: &mut [BedNode],
    hosts: &[Host],
    fault: &Fault,
    set_down: &dyn Fn(&str, bool),
) -> anyhow::Result<Option<String>> {
    match fault {
        Fault::Kill { node } => {
            set_down(&nodes[*node].id, true);
            nodes[*node].kill();
        }
        Fault::Pause { node } => {
            set_down(&nodes[*node].id, true);
            signal(&nodes[*node], "STOP")?;
        }
        Fault::Partition { minority } => {
            let a: Vec<&Host> = minority.iter().map(|&i| &hosts[i]).collect();
            let b: Vec<&Host> = (0..hosts.len())
                .filter(|i| !minority.contains(i))
                .map(|i| &hosts[i])
                .collect();
            bed.partition(&a, &b)?;
        }
        Fault::Loss { node, percent } => bed.loss(&hosts[*node], *percent)?,
        Fault::DiskFull => share.fill()?,
        Fault::Delay { node, ms } => {
            let d = Duration::from_millis(u64::from(*ms));
            bed.delay(&hosts[*node], d, d / 4)?;
        }
    }
    Ok(None)
}

fn end_fault(
    bed: &Bed,
    ops: &Host,
    share: &Share,
    nodes: &mut [BedNode],
    hosts: &[Host],
    fault: &Fault,
    set_down: &dyn Fn(&str, bool),
) -> anyhow::Result<()> {
    match fault {
        Fault::Kill { node } => {
            nodes[*node].restart(bed, ops)?;
            set_down(&nodes[*node].id, false);
        }
        Fault::Pause { node } => {
            signal(&nodes[*node], "CONT")?;
            set_down(&nodes[*node].id, false);
        }
        Fault::Partition { .. } => bed.heal()?,
        Fault::Loss { node, .. } => bed.loss(&hosts[*node], 0.0)?,
        Fault::DiskFull => share.free(),
        Fault::Delay { node, .. } => bed.undelay(&hosts[*node])?,
    }
    Ok(())
}

fn signal(node: &BedNode, sig: &str) -> anyhow::Result<()> {
    let pid = node.pid().context("no pid")?;
    let status = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "kill -{sig} {pid}");
    Ok(())
}

/// Carries out an operator action through the API: what it answered, and the cameras it
/// acts on.
fn operate(
    bed: &Bed,
    ops: &Host,
    nodes: &[BedNode],
    cameras: &[String],
    action: &Action,
    undrain: &mut Vec<(Instant, usize)>,
) -> (String, Vec<String>) {
    let answer = |(status, body): (u16, String)| {
        let first = body
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect::<String>();
        if status == 200 {
            "200".to_string()
        } else {
            format!("{status} {first}")
        }
    };
    match action {
        Action::Migrate { to } => {
            // A UDP session sent from its own node, on a node other than the target: a TCP
            // viewer's media rides its RTSP connection, so moving it is refused by design.
            let target = &nodes[*to].id;
            for n in nodes.iter().filter(|n| n.id != *target) {
                let Some(list) = sessions_of(bed, ops, n) else {
                    continue;
                };
                let pick = list.iter().find(|s| {
                    s["node"].as_str() == Some(n.id.as_str())
                        && s["steered_by"].is_null()
                        && s["transport"]
                            .as_str()
                            .is_some_and(|t| t.contains("client_port="))
                });
                if let Some(id) = pick.and_then(|s| s["id"].as_str()) {
                    let body = format!(r#"{{"to":"{target}","mode":"own"}}"#);
                    let r = bed.within(ops, || {
                        n.post(&format!("/api/sessions/{id}/migrate"), &body)
                    });
                    return (answer(r), Vec::new());
                }
            }
            ("no session to move".into(), Vec::new())
        }
        Action::Drain { node, for_secs } => {
            let n = &nodes[*node];
            let r = bed.within(ops, || {
                n.post(&format!("/api/cluster/nodes/{}/drain", n.id), "{}")
            });
            undrain.push((Instant::now() + Duration::from_secs(*for_secs), *node));
            (answer(r), Vec::new())
        }
        Action::MoveCamera { camera, to } => {
            let c = &cameras[*camera % cameras.len()];
            let body = format!(r#"{{"to":"{}"}}"#, nodes[*to].id);
            let r = bed.within(ops, || {
                nodes[0].post(&format!("/api/cluster/cameras/{c}/move"), &body)
            });
            (answer(r), vec![c.clone()])
        }
    }
}

/// `n`'s `/api/sessions`, read from the operator's host; None when it does not answer.
fn sessions_of(bed: &Bed, ops: &Host, n: &BedNode) -> Option<Vec<serde_json::Value>> {
    let body = bed.within(ops, || n.get("/api/sessions"))?;
    match serde_json::from_str(&body).ok()? {
        serde_json::Value::Array(list) => Some(list),
        _ => None,
    }
}

/// Every answering node's sessions, for the half-moved check.
fn sample_sessions(bed: &Bed, ops: &Host, nodes: &[BedNode], shared: &Shared) -> SessionSample {
    let at_ms = now_ms();
    let mut rows = Vec::new();
    let mut answered = Vec::new();
    for n in nodes.iter().filter(|n| !shared.is_down(&n.id)) {
        let Some(list) = sessions_of(bed, ops, n) else {
            continue;
        };
        answered.push(n.id.clone());
        for s in &list {
            rows.push(SessionRow {
                node: n.id.clone(),
                path: s["path"].as_str().unwrap_or("").to_string(),
                sender: s["node"].as_str().unwrap_or(&n.id).to_string(),
                steered_by: s["steered_by"].as_str().map(str::to_string),
            });
        }
    }
    SessionSample {
        at_ms,
        rows,
        answered,
    }
}
