//! The lab's report: `vigil-sim`'s vod report filled from measurements (mode "lab"), with
//! the calibration against the simulation of the same scenario and seed: per step, each
//! policy's mean response time and λ relative to the first (baseline) policy, simulated and
//! measured side by side, and whether the simulated ratio is within 10 % of the measured.

use vigil_sim::report::{Plot, Report, Series, Table};
use vigil_sim::scenario::Scenario;
use vigil_sim::vod::{vod_report, ArmResult, StepFigures};

/// The calibration target of issue 8 §2: simulated ratios within 10 % of measured ones.
const TOLERANCE: f64 = 0.10;

struct Figures {
    arm: String,
    steps: Vec<StepFigures>,
}

fn figures(res: &[ArmResult]) -> Vec<Figures> {
    res.iter()
        .map(|r| Figures {
            arm: r.arm.to_string(),
            steps: r.steps.clone(),
        })
        .collect()
}

fn ratio(x: f64, base: f64) -> f64 {
    if base.abs() < 1e-12 {
        f64::NAN
    } else {
        x / base
    }
}

/// "yes"/"no" (and the relative gap) for a simulated ratio against the measured one.
fn within(sim: f64, lab: f64) -> String {
    if !sim.is_finite() || !lab.is_finite() || lab.abs() < 1e-12 {
        return "–".into();
    }
    let gap = sim / lab - 1.0;
    format!(
        "{} ({:+.0} %)",
        if gap.abs() <= TOLERANCE { "yes" } else { "no" },
        gap * 100.0
    )
}

fn f2(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "–".into()
    }
}

fn calibration(sim: &[Figures], lab: &[Figures]) -> (Table, Plot) {
    let mut t = Table {
        title: "Calibration: simulation against this lab run (ratios to the first policy)".into(),
        columns: [
            "clients",
            "policy",
            "mean ms sim / lab",
            "mean ratio sim / lab",
            "within 10 %",
            "p95 ratio sim / lab",
            "λ sim / lab",
            "λ ratio sim / lab",
            "within 10 %",
            "storage reads ratio sim / lab",
            "within 10 %",
            "first-segment hits sim / lab",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    let (Some(sb), Some(lb)) = (sim.first(), lab.first()) else {
        return (t, Plot::default());
    };
    for (i, level) in lb.steps.iter().map(|s| s.level).enumerate() {
        for (s, l) in sim.iter().zip(lab) {
            let (Some(ss), Some(ls), Some(sbs), Some(lbs)) = (
                s.steps.get(i),
                l.steps.get(i),
                sb.steps.get(i),
                lb.steps.get(i),
            ) else {
                continue;
            };
            let rm = (
                ratio(ss.mean_ms, sbs.mean_ms),
                ratio(ls.mean_ms, lbs.mean_ms),
            );
            let rp = (ratio(ss.p95_ms, sbs.p95_ms), ratio(ls.p95_ms, lbs.p95_ms));
            let rv = (
                ratio(ss.variance, sbs.variance),
                ratio(ls.variance, lbs.variance),
            );
            let rr = (
                ratio(ss.reads as f64, sbs.reads as f64),
                ratio(ls.reads as f64, lbs.reads as f64),
            );
            t.rows.push(vec![
                level.to_string(),
                l.arm.clone(),
                format!("{} / {}", f2(ss.mean_ms), f2(ls.mean_ms)),
                format!("{} / {}", f2(rm.0), f2(rm.1)),
                within(rm.0, rm.1),
                format!("{} / {}", f2(rp.0), f2(rp.1)),
                format!("{} / {}", f2(ss.variance), f2(ls.variance)),
                format!("{} / {}", f2(rv.0), f2(rv.1)),
                within(rv.0, rv.1),
                format!("{} / {}", f2(rr.0), f2(rr.1)),
                within(rr.0, rr.1),
                format!("{} / {}", f2(ss.first_hit_ratio), f2(ls.first_hit_ratio)),
            ]);
        }
    }
    // Ratios, not milliseconds: what the calibration compares, and one line per policy
    // and run (the baseline's ratio is 1 by definition and left out).
    let series = |f: &[Figures], what: &str| -> Vec<Series> {
        let Some(base) = f.first() else {
            return Vec::new();
        };
        f.iter()
            .skip(1)
            .map(|a| Series {
                name: format!("{} ({what})", a.arm),
                points: a
                    .steps
                    .iter()
                    .zip(&base.steps)
                    .map(|(s, b)| (f64::from(s.level), ratio(s.mean_ms, b.mean_ms)))
                    .collect(),
            })
            .collect()
    };
    let mut all = series(lab, "lab");
    all.extend(series(sim, "sim"));
    let plot = Plot {
        file: "calibration_response".into(),
        title: format!(
            "Mean response time relative to {}: lab and simulation",
            lb.arm
        ),
        x_label: "concurrent playback clients".into(),
        y_label: "ratio to the baseline".into(),
        series: all,
    };
    (t, plot)
}

/// The nodes' own counters over each whole arm next to what the clients recorded. Every
/// client connection is counted by the node it reached (the entry's, and the 302's target),
/// so over all nodes the connections are the requests plus the redirects.
fn counters(lab: &[ArmResult], runs: &[super::ArmRun]) -> Table {
    let mut t = Table {
        title: "Nodes' own counters over each whole run (clients' view alongside)".into(),
        columns: [
            "policy",
            "node",
            "RTSP connections: node / clients",
            "sessions served (clients)",
            "storage reads",
            "cache hits",
            "cache misses",
            "migrations: node / clients",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (res, run) in lab.iter().zip(runs) {
        let arm = res.arm.to_string();
        for c in &run.counters {
            let served = res.rows.iter().filter(|r| r.node == c.id).count();
            t.rows.push(vec![
                arm.clone(),
                c.id.clone(),
                format!("{} / –", c.connections),
                served.to_string(),
                c.cache.loads.to_string(),
                c.cache.hits.to_string(),
                c.cache.misses.to_string(),
                format!("{} / –", c.moved),
            ]);
        }
        let sum =
            |f: fn(&super::probe::NodeCounters) -> u64| -> u64 { run.counters.iter().map(f).sum() };
        let redirects = res.rows.iter().filter(|r| r.redirected).count();
        let seen: u32 = res.rows.iter().map(|r| r.migrations).sum();
        t.rows.push(vec![
            arm,
            "all".into(),
            format!(
                "{} / {}",
                sum(|c| c.connections),
                res.rows.len() + redirects
            ),
            res.rows
                .iter()
                .filter(|r| !r.node.is_empty())
                .count()
                .to_string(),
            sum(|c| c.cache.loads).to_string(),
            sum(|c| c.cache.hits).to_string(),
            sum(|c| c.cache.misses).to_string(),
            format!("{} / {seen}", sum(|c| c.moved)),
        ]);
    }
    t
}

/// The report folder of a lab run.
pub fn lab_report(
    sc: &Scenario,
    lab: Vec<ArmResult>,
    simulated: Vec<ArmResult>,
    runs: Vec<super::ArmRun>,
    command: &str,
) -> Report {
    let sim_f = figures(&simulated);
    let lab_f = figures(&lab);
    let own = counters(&lab, &runs);
    let (cal, cal_plot) = calibration(&sim_f, &lab_f);
    let mut r = vod_report(sc, lab, command);
    r.mode = "lab".into();
    r.tables.retain(|t| t.title != "Simulator speed");
    r.tables.push(own);
    r.tables.push(cal);
    r.plots.push(cal_plot);
    let machine = machine();
    r.notes
        .retain(|(h, _)| h != "Model" && h != "Calibration" && h != "Storage emulation");
    for p in &mut r.plots {
        if p.file == "node_load" {
            p.x_label = "seconds since the arm's start".into();
        }
    }
    r.notes.extend([
        (
            "Lab".into(),
            format!(
                "real processes: {} `vigil serve` nodes (the `vigil` beside `vigil-lab`) on 127.0.0.1…{n} (one shared storage root in a temp dir, cluster certificates, placement over QUIC, REM's moves by the migration RPC), restarted for every policy (cold caches); {} cameras × {} recordings of {} s of the demo clip (real H.264, a keyframe a second, {:.2} Mb/s) written once and hard-linked per camera; the clients are vigil's own RTSP viewer over UDP in this process, one task per client, drawing their requests from the simulator's seeded streams. Response time = connect to the entry node → first RTP packet of a keyframe (DESCRIBE, the scheduler's 302, SETUP, PLAY). λ: the scheduler's view of each node's §A.1 Load (`/api/cluster/nodes`) once a second; hit ratio and storage reads: the nodes' `/api/cache` counters over each measured window; migrations: changes of a session's media source seen by its client. First-segment hits: the nodes' playback opens whose first segment was in their cache (`/api/cache` `opens_cached` / `opens`) over the same windows. All nodes share one machine, so each node's C and M (§A.1, from /proc) are the machine's: only N tells the nodes apart.",
                sc.nodes.count,
                sc.workload.cameras,
                sc.workload.recordings_per_camera,
                sc.workload.recording_secs,
                vigil_testkit::media::demo_bitrate_bps() / 1e6,
                n = sc.nodes.count,
            ),
        ),
        (
            "Storage emulation (lab)".into(),
            super::nodes::emulation_note(sc),
        ),
        ("Machine".into(), machine),
        (
            "Runs".into(),
            runs.iter().map(|r| r.note.as_str()).collect::<Vec<_>>().join(". "),
        ),
        (
            "Calibration".into(),
            "The simulation (`vigil sim`, same scenario and seed) is run by this command too; the calibration table puts each policy's ratio to the first policy side by side, simulated / measured, and says whether the simulated ratio is within 10 % of the measured one. Nothing in the simulator was fitted to this run (the scenario file says where its constants come from).".into(),
        ),
    ]);
    r
}

/// The machine the run had: CPUs and memory, and the load average at the end.
pub(crate) fn machine() -> String {
    describe(&vigil_server::procfs::Machine::read())
}

/// The report's "Machine" line.
fn describe(m: &vigil_server::procfs::Machine) -> String {
    let model = m.model.as_deref().unwrap_or("unknown CPU");
    let mem = m.mem_kib.map_or(String::new(), |kib| {
        format!(", {:.0} GiB RAM", kib as f64 / 1024.0 / 1024.0)
    });
    let load = m.load.as_deref().unwrap_or_default();
    format!(
        "{} CPUs ({model}){mem}; load average at the end {load} (the machine is shared).",
        m.cpus
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_server::procfs::Machine;

    #[test]
    fn machine_line() {
        let m = Machine {
            cpus: 2,
            model: Some("AMD EPYC 7B13 64-Core Processor".into()),
            mem_kib: Some(24_000_000),
            load: Some("0.52 0.61 0.70".into()),
        };
        assert_eq!(
            describe(&m),
            "2 CPUs (AMD EPYC 7B13 64-Core Processor), 23 GiB RAM; load average at the end \
             0.52 0.61 0.70 (the machine is shared)."
        );
        let bare = Machine {
            cpus: 1,
            model: None,
            mem_kib: None,
            load: None,
        };
        assert_eq!(
            describe(&bare),
            "1 CPUs (unknown CPU); load average at the end  (the machine is shared)."
        );
    }
}
