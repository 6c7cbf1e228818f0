//! `vigil lab` of a gateway scenario (§B) on real processes: a camera farm (one more
//! `vigil serve`, not in the cluster, publishing the demo clip) and the scenario's nodes,
//! which all list the same always-on pull cameras of the farm; the elected scheduler binds
//! them (§B.4 roulette) and every node pulls those bound to it. Per arm, on a fresh cluster:
//!
//! - `manual`: bindings fixed for the run (`camera_moves = false`, `ps_max = 0`);
//! - `balanced`: the scenario's `[cluster.gateway]`: sleep (§B.1), overload forecast and
//!   camera moves by roulette (§B.2–§B.5), all by the scheduler's own code.
//!
//! Both arms start from one manual binding: every gateway bound to as many cameras as its
//! tours leave even (the scheduler's roulette binding kept where it fits, the rest moved by
//! the operator's move). Tours are dealt to gateways as `tours_per_node` says and start in
//! the simulator's order and times (`vigil_sim::gateway`), so both arms and the simulation
//! run one workload. The report is the simulator's §B report
//! (mode "lab") plus the nodes' own counters.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use vigil_sim::gateway::{gateway_report, tour_order, tour_starts, GatewayArm, GatewaySpec};
use vigil_sim::report::{Report, Table};
use vigil_sim::scenario::{Arm, Scenario};

use super::binding::{deal_cameras, wait_all_live};
use super::nodes::{self, node_id, Cluster, LabNode, NodeConfig, Site};
use super::tours::{self, TourPlan, TourShared};
use vigil_testkit::ports::try_free_port;
use vigil_testkit::serve::NodeConfig as ServeConfig;

/// Where the farm listens: outside the nodes' 127.0.0.1…N.
const FARM_IP: &str = "127.0.0.200";

pub fn run(sc: Scenario, out: PathBuf, command: String, threads: usize) -> anyhow::Result<()> {
    let Some(g) = sc.gateway.clone() else {
        bail!("scenario {}: a gateway scenario needs [gateway]", sc.name);
    };
    let tmp = tempfile::Builder::new()
        .prefix("vigil-lab-")
        .tempdir()
        .context("creating the lab's temp dir")?;
    let site = Site::new(tmp.path(), sc.nodes.count)?;
    let mut farm = Farm::start(&site)?;
    let runtime = crate::bench::runtime(threads)?;
    let sc = Arc::new(sc);
    let mut arms = Vec::new();
    let mut counters = Vec::new();
    for (k, arm) in sc.arms().into_iter().enumerate() {
        let mut cluster = start_cluster(&site, &sc, &g, arm, &farm.url, k)?;
        let held = wait_all_live(&cluster, sc.workload.cameras)?;
        let dealt = deal_cameras(&cluster, &g, &held)?;
        let res = runtime.block_on(run_arm(sc.clone(), &g, arm, &cluster, dealt));
        cluster.stop();
        let (a, c) = res?;
        arms.push(a);
        counters.push(c);
    }
    farm.stop();
    drop(runtime);
    let report = lab_report(&sc, &g, arms, counters, &command);
    let written = report
        .write(&out)
        .with_context(|| format!("writing the report to {}", out.display()))?;
    if let Some(t) = report.tables.first() {
        eprint!("{}", t.markdown());
    }
    println!("{}", written.dir.join("report.md").display());
    Ok(())
}

/// The camera farm: a `vigil serve` with the demo camera, which every pull camera of the
/// scenario pulls (one RTSP session each, as from as many real cameras).
struct Farm {
    node: LabNode,
    url: String,
}

impl Farm {
    fn start(site: &Site) -> anyhow::Result<Farm> {
        let mut node = LabNode::start(
            &site.dir.join("farm"),
            ServeConfig {
                id: "lab-farm".into(),
                ip: FARM_IP.into(),
                rtsp_port: try_free_port(FARM_IP)?,
                api_port: try_free_port(FARM_IP)?,
                udp: (60000, 60999),
                token: nodes::TOKEN.into(),
                tables: format!(
                    "{}\n[storage]\nenabled = false\n\n[[camera]]\nid = \"demo\"\nsource = \"demo\"\non_demand = false\n",
                    nodes::LIMITS
                ),
                ..Default::default()
            },
            None,
        )?;
        let api = node.api.clone();
        node.process.wait_for(
            "the camera farm's demo camera live",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || {
                nodes::get_json(&api, "/api/cameras")
                    .filter(|v| v[0]["state"].as_str() == Some("live"))
            },
        )?;
        let url = format!("rtsp://{}/live/demo", node.rtsp);
        Ok(Farm { node, url })
    }

    fn stop(&mut self) {
        self.node.kill();
    }
}

pub fn camera_name(c: usize) -> String {
    super::clients::camera_name(c)
}

/// §B.2's memory bandwidth as the lab configures it: scaled so that one stream of the
/// scenario's bitrate weighs X_l (`x_mbytes_per_stream`) against the configured f_m·M_bs,
/// as the simulation counts it; the bitrate itself when X_l is unset.
fn mem_transfer_rate(sc: &Scenario, g: &GatewaySpec) -> f64 {
    let f_m = sc.cluster.gateway.mem_transfer_rate;
    match g.x_mbytes_per_stream {
        Some(x) if x > 0.0 => f_m * (sc.workload.bitrate_mbps * 1e6 / 8.0) / (x * 1e6),
        _ => f_m,
    }
}

/// The arm's `[cluster.gateway]`: the scenario's, fixed bindings for `manual`.
fn gateway_config(sc: &Scenario, g: &GatewaySpec, arm: Arm) -> vigil_cluster::GatewayConfig {
    let mut cfg = sc.cluster.gateway;
    cfg.mem_transfer_rate = mem_transfer_rate(sc, g);
    if arm != Arm::Balanced {
        cfg.camera_moves = false;
        cfg.ps_max = 0.0;
    }
    cfg
}

fn start_cluster(
    site: &Site,
    sc: &Scenario,
    g: &GatewaySpec,
    arm: Arm,
    farm: &str,
    run: usize,
) -> anyhow::Result<Cluster> {
    let gateway = {
        let mut c = toml::Table::new();
        c.insert(
            "gateway".into(),
            toml::Value::try_from(gateway_config(sc, g, arm)).context("gateway constants")?,
        );
        let mut t = toml::Table::new();
        t.insert("cluster".into(), c.into());
        toml::to_string(&t).context("gateway constants")?
    };
    let cameras: String = (0..sc.workload.cameras)
        .map(|c| {
            format!(
                "[[camera]]\nid = \"{}\"\nsource = \"{farm}\"\non_demand = false\nrecord = false\n\n",
                camera_name(c)
            )
        })
        .collect();
    let cluster = Cluster::spawn(site, sc.nodes.count, run, |i| NodeConfig {
        // The scheduler waits for the others' first reports, so that its first binding
        // spreads the cameras (the lab deals the rest by hand).
        cluster_keys: format!(
            "election_grace_ms = 3000\nbandwidth_bps = {}\n",
            sc.nodes.bord_mbps * 1e6 * sc.nodes.capacity_of(i)
        ),
        // Live only: nothing is recorded (the cameras say `record = false`) or read back,
        // and every live viewer goes to the camera's holder (no edges), as on the paper's
        // gateways.
        tables: format!(
            "[storage]\nroot = \"{}\"\n\n[cluster.edge]\nenabled = false\n\n{gateway}\n{cameras}",
            site.root.display()
        ),
        ..NodeConfig::default()
    })?;
    Ok(cluster)
}

/// The scheduler's §B.3–§B.5 moves in its decision log (`/api/cluster/scheduler`), into
/// `into` by (decision time, camera): (from, to, whether it completed).
fn overload_moves(
    v: &serde_json::Value,
    ids: &[String],
    into: &mut BTreeMap<(i64, String), (usize, usize, bool)>,
) {
    let node = |x: &serde_json::Value| ids.iter().position(|i| Some(i.as_str()) == x.as_str());
    for m in v["camera_moves"].as_array().into_iter().flatten() {
        if m["trigger"] != "overload" {
            continue;
        }
        let (Some(at), Some(cam), Some(f), Some(t)) = (
            m["at_ms"].as_i64(),
            m["camera"].as_str(),
            node(&m["from"]),
            node(&m["to"]),
        ) else {
            continue;
        };
        into.insert((at, cam.to_string()), (f, t, m["result"] == "moved"));
    }
}

/// What the nodes themselves counted over one arm.
#[derive(Debug, Clone, Default)]
struct ArmCounters {
    /// Per node: `vigil_rtsp_connections_total`.
    connections: Vec<u64>,
    /// The scheduler's camera moves that completed (its decision log, read every second).
    moved: u64,
    /// Per node at the end: cameras bound, asleep.
    cameras: Vec<(u32, u32)>,
}

async fn run_arm(
    sc: Arc<Scenario>,
    g: &GatewaySpec,
    arm: Arm,
    cluster: &Cluster,
    (by_node, dealt): (Vec<Vec<String>>, usize),
) -> anyhow::Result<(GatewayArm, ArmCounters)> {
    let Some(ramp) = sc.ramp.clone() else {
        bail!("scenario {}: a gateway scenario needs [ramp]", sc.name);
    };
    let order = tour_order(g);
    let starts = tour_starts(&ramp, order.len());
    let cpt = g.cameras_per_tour as usize;
    let start = Instant::now() + Duration::from_millis(500);
    let total = ramp.step_secs * ramp.steps.len() as f64;
    let end = start + Duration::from_secs_f64(total);
    let tours = order
        .iter()
        .zip(&starts)
        .map(|(&(k, i), &at)| {
            (
                k,
                by_node[k][i * cpt..(i + 1) * cpt].to_vec(),
                start + Duration::from_micros(at.max(0) as u64),
            )
        })
        .collect();
    let plan = Arc::new(TourPlan {
        sc: sc.clone(),
        arm: arm.to_string(),
        nodes: cluster.nodes.iter().map(|n| n.rtsp).collect(),
        tours,
        start,
        end,
        switch: Duration::from_secs_f64(g.switch_secs),
    });
    let shared = Arc::new(TourShared::default());
    let ids = cluster.ids();
    let apis = cluster.apis();
    let cfg = gateway_config(&sc, g, arm);
    let bar = super::probe::progress(total);
    let wall = Instant::now();
    let sampler = {
        let (plan, shared, bar) = (plan.clone(), shared.clone(), bar.clone());
        let (api, ids) = (apis[0].clone(), ids.clone());
        let w_cpu = sc.cluster.sched.weights.cpu;
        async move {
            let mut trace = Vec::new();
            let mut asleep: BTreeMap<String, bool> = BTreeMap::new();
            let mut slept = 0u64;
            let mut last = Vec::new();
            let mut logged = BTreeMap::new();
            let mut tick = plan.start;
            while tick < plan.end {
                tick += Duration::from_secs(1);
                tokio::time::sleep_until(tick.into()).await;
                let at = tick.saturating_duration_since(plan.start).as_secs_f64();
                bar.set_position(at as u64);
                bar.set_message(format!(
                    "{} · {} live starts, {} failed",
                    plan.arm,
                    shared.started.load(std::sync::atomic::Ordering::Relaxed),
                    shared.failed.load(std::sync::atomic::Ordering::Relaxed)
                ));
                let Some((s, states)) = tours::sample_nodes(&api, &ids, &cfg, w_cpu).await else {
                    continue;
                };
                for (cam, now) in states {
                    let was = asleep.insert(cam, now).unwrap_or(false);
                    slept += u64::from(now && !was);
                }
                trace.push((at, s.iter().map(|n| n.gl).collect::<Vec<f64>>()));
                last = s;
                if let Some(v) = super::probe::get_json(api.clone(), "/api/cluster/scheduler").await
                {
                    overload_moves(&v, &ids, &mut logged);
                }
            }
            (trace, slept, last, logged)
        }
    };
    let ((), (trace, slept, last, mut logged)) =
        tokio::join!(tours::run(plan.clone(), shared.clone()), sampler);
    bar.finish();
    let wall_s = wall.elapsed().as_secs_f64();
    // The nodes' own counts, once every tour has stopped.
    let (connections, moves) = {
        let connections: Vec<u64> = apis
            .iter()
            .map(|a| {
                crate::bench::get_as(a, "/metrics", Some(super::nodes::TOKEN))
                    .map(|t| super::probe::metric(&t, "vigil_rtsp_connections_total", ""))
                    .unwrap_or(0)
            })
            .collect();
        // The decision log keeps the last 50 records, "no move" ones included: the sampler
        // read it every second; this is the last read.
        if let Some(v) = nodes::get_json(&apis[0], "/api/cluster/scheduler") {
            overload_moves(&v, &ids, &mut logged);
        }
        let moves: Vec<(usize, usize)> = logged
            .values()
            .filter(|m| m.2)
            .map(|&(f, t, _)| (f, t))
            .collect();
        (connections, moves)
    };
    let mut rows = shared.rows.lock().map(|r| r.clone()).unwrap_or_default();
    rows.sort_by(|a, b| a.requested_s.total_cmp(&b.requested_s));
    let mut per_step = vec![Vec::new(); ramp.steps.len()];
    for r in &rows {
        if let (Some(ms), Some(s)) = (
            r.response_ms,
            ramp.measured_step(vigil_sim::engine::secs(r.requested_s)),
        ) {
            per_step[s].push(ms);
        }
    }
    let errors = shared
        .errors
        .lock()
        .map(|e| {
            e.iter()
                .map(|(k, v)| format!("{v}× {k}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    let failed = shared.failed.load(std::sync::atomic::Ordering::Relaxed);
    let counters = ArmCounters {
        connections,
        moved: moves.len() as u64,
        cameras: last.iter().map(|s| (s.cameras, s.asleep)).collect(),
    };
    let note = format!(
        "{} live starts, {failed} failed{}; {dealt} cameras moved by hand before the run to deal the tours; wall {wall_s:.0} s",
        rows.len(),
        if errors.is_empty() {
            String::new()
        } else {
            format!(" ({errors})")
        }
    );
    Ok((
        GatewayArm {
            arm: arm.to_string(),
            starts: per_step,
            moves,
            slept,
            trace,
            rows,
            note,
        },
        counters,
    ))
}

/// The nodes' own counters next to what the tours recorded: every live start is one RTSP
/// connection to its entry node, plus one to the holder after a 302.
fn counters_table(arms: &[GatewayArm], counters: &[ArmCounters]) -> Table {
    let mut t = Table {
        title: "Nodes' own counters over each whole run (tours' view alongside)".into(),
        columns: [
            "binding",
            "node",
            "RTSP connections: node / tours",
            "live starts served (tours)",
            "cameras bound at the end",
            "asleep at the end",
            "camera moves (scheduler)",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (a, c) in arms.iter().zip(counters) {
        for (k, conn) in c.connections.iter().enumerate() {
            let id = node_id(k);
            let served = a.rows.iter().filter(|r| r.node == id).count();
            let (bound, asleep) = c.cameras.get(k).copied().unwrap_or_default();
            t.rows.push(vec![
                a.arm.clone(),
                id,
                format!("{conn} / –"),
                served.to_string(),
                bound.to_string(),
                asleep.to_string(),
                "–".into(),
            ]);
        }
        let redirects = a.rows.iter().filter(|r| r.redirected).count();
        let ok = a.rows.iter().filter(|r| r.response_ms.is_some()).count();
        t.rows.push(vec![
            a.arm.clone(),
            "all".into(),
            format!(
                "{} / {}",
                c.connections.iter().sum::<u64>(),
                a.rows.len() + redirects
            ),
            ok.to_string(),
            c.cameras.iter().map(|x| x.0).sum::<u32>().to_string(),
            c.cameras.iter().map(|x| x.1).sum::<u32>().to_string(),
            c.moved.to_string(),
        ]);
    }
    t
}

fn lab_report(
    sc: &Scenario,
    g: &GatewaySpec,
    arms: Vec<GatewayArm>,
    counters: Vec<ArmCounters>,
    command: &str,
) -> Report {
    let own = counters_table(&arms, &counters);
    let mut r = gateway_report(sc, arms, "seconds since the arm's start", command);
    r.mode = "lab".into();
    r.tables.push(own);
    r.notes.extend([
        (
            "Lab".into(),
            format!(
                "real processes: {n} `vigil serve` nodes (the `vigil` beside `vigil-lab`) on 127.0.0.1…{n} (cluster certificates, the elected scheduler binding the pull cameras by §B.4 roulette) and a camera farm (one more `vigil serve` on {FARM_IP} publishing the demo clip: real H.264, a keyframe a second, {:.2} Mb/s); every node lists the same {} always-on pull cameras of the farm (one RTSP session each) and pulls those bound to it; recording off, no live edges (a viewer always goes to the camera's holder), restarted for every arm. manual: bindings fixed for the run (`camera_moves = false`, `ps_max = 0`); balanced: the scenario's `[cluster.gateway]` (sleep, forecast, camera moves by the scheduler's own code). Tours: `tours_per_node` × `cameras_per_tour` of the cameras bound to each gateway (the lab first deals the cameras so that every gateway is bound to as many as the tours leave even, by the operator's move where the scheduler's roulette binding differs), started in the simulator's order and times; every switch is a live start through the tour's seeded entry node, measured from connect to the first RTP packet of a keyframe (DESCRIBE, the 302 to the holder, SETUP, PLAY over UDP; an asleep camera is woken by that DESCRIBE). GL per node once a second as the scheduler would compute it (§B.2): C from the node's §A.1 CPU part, its viewers' streams over f_m·M_bs/8 with f_m = {:.3e} (scaled so a stream of the scenario's bitrate weighs X_l = {} MB/s), the awake share. All nodes share one machine, so every node's C is the machine's: only the streams and the awake share tell the nodes apart.",
                vigil_testkit::media::demo_bitrate_bps() / 1e6,
                sc.workload.cameras,
                mem_transfer_rate(sc, g),
                g.x_mbytes_per_stream.map_or("the bitrate".into(), |x| x.to_string()),
                n = sc.nodes.count,
            ),
        ),
        (
            "Storage emulation (lab)".into(),
            "none applies: this scenario is live only (nothing recorded or read back), so `[storage.emulate]` is off on its nodes.".into(),
        ),
        ("Machine".into(), super::calibrate::machine()),
        (
            "Calibration".into(),
            "Not compared: `vigil sim` of this scenario models each gateway's CPU per camera and viewer, which nodes sharing one machine cannot show (their CPU is the machine's).".into(),
        ),
    ]);
    r
}
