//! What the simulated nodes report and what the scheduler does with it: the streams and
//! §A.1 inputs of a node's report (the server's `cluster::report`), their delivery to the
//! scheduler's view (`report_delay_ms`, keeping the placements made since a report was
//! built, as `cluster::reservations` does), and REM on each report (§A.5).

use vigil_cluster::{
    apply, apply_migration, cached_summary, quadratic_mean, rem_probability, rem_step, ClusterView,
    Decision, Indicators, NodeView, Stream, StreamSource, CACHE_GAP_MS,
};

use super::{Arm, Ev, VodSim, SCHEDULER};
use crate::engine::{Micros, MS};

impl VodSim<'_> {
    /// Node i's streams as its report lists them (the server's `cluster::report::streams`):
    /// a playback counts as cache-served when another stream of the same camera plays at
    /// most T_max ahead of it on this node (it reads what that one loaded), else as read
    /// from storage (§A.1 counts it twice). Also refreshes the node's N and C inputs.
    pub(super) fn refresh(&mut self, i: usize) -> Vec<Stream> {
        let vbr = self.sc.workload.bitrate_mbps * 1e6;
        let mut out: Vec<Stream> = self.nodes[i]
            .sessions
            .iter()
            .map(|&sid| {
                let s = &self.sessions[sid as usize];
                Stream {
                    camera: self.cameras[s.cam as usize].clone(),
                    position_ms: self.position(sid),
                    vbr_bps: vbr * s.scale,
                    source: StreamSource::Storage,
                    session: Some(sid.to_string()),
                }
            })
            .collect();
        out.sort_by(|a, b| {
            a.camera
                .cmp(&b.camera)
                .then(b.position_ms.cmp(&a.position_ms))
        });
        let t_max = self.cfg.sched.t_max_ms;
        for k in 1..out.len() {
            if out[k].camera == out[k - 1].camera
                && out[k - 1].position_ms - out[k].position_ms <= t_max
            {
                out[k].source = StreamSource::Cache;
            }
        }
        let net: f64 = out
            .iter()
            .map(|s| s.vbr_bps * vigil_cluster::load::stream_factor(s.source))
            .sum();
        self.nodes[i].net_bps = net;
        self.nodes[i].moved_bps = net;
        out
    }

    /// What node i would report now (the server's `cluster::report::build`).
    pub(super) fn node_view(&mut self, i: usize) -> NodeView {
        let streams = self.refresh(i);
        let node = &self.nodes[i];
        let nc = &self.sc.nodes;
        let mut v = NodeView::new(node.id.clone(), self.bord(i));
        v.cpu = self.cpu(i);
        v.mem = self.mem(i);
        v.streams = streams;
        v.cached = cached_summary(node.cache.resident(CACHE_GAP_MS));
        v.sessions = node.sessions.len() as u32;
        v.max_sessions = if nc.max_sessions == 0 {
            u32::MAX
        } else {
            nc.max_sessions
        };
        let bord = self.bord(i);
        v.indicators = Indicators {
            cpu: v.cpu,
            mem: v.mem,
            net: (node.net_bps / bord).min(1.0),
            links: f64::from(v.sessions) / f64::from(v.max_sessions.max(1)),
        };
        v
    }

    /// Bord of node i (§A.1; heterogeneous with `nodes.capacity`).
    pub(super) fn bord(&self, i: usize) -> f64 {
        self.sc.nodes.bord_mbps * 1e6 * self.sc.nodes.capacity_of(i)
    }

    /// C of §A.1: CPU grows with the bytes the node moves (less on a bigger node).
    /// On a shared host every node's C is the machine's (the mean of the nodes' own).
    pub(super) fn cpu(&self, i: usize) -> f64 {
        self.host_mean(i, Self::own_cpu)
    }

    pub(super) fn own_cpu(&self, i: usize) -> f64 {
        let c = self.sc.nodes.cpu_per_gbps * self.nodes[i].moved_bps / 1e9;
        (c / self.sc.nodes.capacity_of(i)).min(1.0)
    }

    /// M of §A.1 (the machine's on a shared host, as C).
    pub(super) fn mem(&self, i: usize) -> f64 {
        self.host_mean(i, Self::own_mem)
    }

    /// The process and OS, plus the playback cache.
    pub(super) fn own_mem(&self, i: usize) -> f64 {
        let nc = &self.sc.nodes;
        let mib = 1024.0 * 1024.0;
        ((nc.ram_base_mb * mib + self.nodes[i].cache.bytes() as f64) / (nc.ram_mb * mib)).min(1.0)
    }

    /// Node i's own `f`, or on a shared host the mean over all nodes (what one machine's
    /// /proc shows every node).
    pub(super) fn host_mean(&self, i: usize, f: fn(&Self, usize) -> f64) -> f64 {
        if !self.sc.nodes.shared_host {
            return f(self, i);
        }
        let n = self.nodes.len().max(1);
        (0..n).map(|k| f(self, k)).sum::<f64>() / n as f64
    }

    /// The nodes that changed build their reports; each reaches the scheduler
    /// `report_delay_ms` later (the scheduler's own at once).
    pub(super) fn gossip(&mut self) {
        let delay = self.sc.nodes.report_delay_ms as i64 * MS;
        let mut now = Vec::new();
        for i in 0..self.nodes.len() {
            if !self.nodes[i].dirty {
                continue;
            }
            self.nodes[i].dirty = false;
            let report = (i, self.q.now(), self.node_view(i));
            if delay == 0 || i == SCHEDULER {
                now.push(report);
            } else {
                let n = self.next_report;
                self.next_report = n.wrapping_add(1);
                self.in_transit.insert(n, report);
                self.q.after(delay, Ev::Deliver { report: n });
            }
        }
        if !now.is_empty() {
            self.deliver(now);
        }
    }

    /// Reports reach the scheduler: each replaces its node's view entry, with what was
    /// placed there since the report was built applied again (the server keeps those
    /// reservations), and REM runs on each (§A.5).
    pub(super) fn deliver(&mut self, reports: Vec<(usize, Micros, NodeView)>) {
        let mut views = self.view.nodes().to_vec();
        let changed: Vec<(usize, Micros)> = reports.iter().map(|(i, b, _)| (*i, *b)).collect();
        for (i, _, v) in reports {
            views[i] = v;
        }
        self.view = ClusterView::new(views, self.cfg.sched.weights);
        for &(i, built) in &changed {
            let again: Vec<(f64, Decision)> = self
                .placed
                .iter()
                .filter(|(n, at, _, _)| *n == i && *at >= built)
                .map(|(_, _, delta, d)| (*delta, d.clone()))
                .collect();
            for (delta, mut d) in again {
                if let Decision::Assign { estimated_load, .. } = &mut d {
                    *estimated_load = self.view.load(i) + delta;
                }
                let _ = apply(&mut self.view, &d);
            }
        }
        if matches!(self.arm, Arm::Place { rem: true, .. }) {
            for (i, _) in changed {
                self.rem(i);
            }
        }
    }

    /// The server's `cluster::rem` loop for one report: `rem_step` until it proposes nothing,
    /// each move applied to the view (§A.5 step 6) and carried out.
    pub(super) fn rem(&mut self, h: usize) {
        let sched = self.cfg.sched;
        let id = self.nodes[h].id.clone();
        for _ in 0..vigil_cluster::rem::MAX_STEPS {
            let loads: Vec<f64> = (0..self.view.len()).map(|i| self.view.load(i)).collect();
            let load = self.view.load(h);
            if load <= quadratic_mean(&loads) || rem_probability(load, &sched) <= 0.0 {
                break;
            }
            let Some(m) = rem_step(&self.view, &id, &sched, &mut self.policy_rng) else {
                break;
            };
            let Some(sid) = m
                .stream
                .session
                .as_deref()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                break;
            };
            if apply_migration(&mut self.view, &m).is_err() {
                break;
            }
            let Some(to) = self.view.index_of(&m.to) else {
                break;
            };
            self.migrate(sid, to);
        }
    }

    /// Moves a playing session: its segments now come through the target's cache (the
    /// target loads the current segment during Prepare, as the real handoff does).
    pub(super) fn migrate(&mut self, sid: u32, to: usize) {
        if !self.sessions[sid as usize].alive {
            return;
        }
        self.detach(sid);
        let (media, seg) = {
            let s = &self.sessions[sid as usize];
            (s.media, s.seg)
        };
        let (hit, _) = self.fetch(to as u32, media, seg, false);
        self.sessions[sid as usize].hit = hit;
        self.attach(sid, to);
        self.refresh(to);
        let row = self.sessions[sid as usize].row;
        self.rows[row].migrations += 1;
        if let Some(s) = self.measuring() {
            self.m.steps[s].migrations += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report that was on its way while the scheduler placed on its node keeps that
    /// placement (built before it, the report cannot show it); one placed before the build
    /// is in the report or never came, and goes.
    #[test]
    pub(super) fn a_delayed_report_keeps_only_the_placements_made_after_it_was_built() {
        let mut sc = crate::scenario::builtin("seed-vod-lab").expect("built in");
        sc.nodes.report_delay_ms = 300;
        let arm = Arm::Place {
            policy: vigil_cluster::Policy::LeastLoad,
            rem: false,
        };
        let mut sim = VodSim::new(&sc, arm);
        let report = sim.node_view(1);
        let idle = sim.view.load(1);
        let assign = |sim: &VodSim<'_>, t: i64| Decision::Assign {
            node: sim.nodes[1].id.clone(),
            estimated_load: sim.view.load(1) + 5.0,
            reason: String::new(),
            stream: Stream {
                camera: format!("cam-{t:06}"),
                position_ms: t,
                vbr_bps: 1e6,
                source: StreamSource::Storage,
                session: None,
            },
        };
        for at in [5 * MS, 20 * MS] {
            let d = assign(&sim, at);
            let _ = apply(&mut sim.view, &d);
            sim.placed.push((1, at, 5.0, d));
        }
        assert!((sim.view.load(1) - idle - 10.0).abs() < 1e-9);
        // Built at 10 ms: the placement at 20 ms stays, the one at 5 ms goes.
        sim.deliver(vec![(1, 10 * MS, report)]);
        assert!(
            (sim.view.load(1) - idle - 5.0).abs() < 1e-9,
            "{} against idle {idle}",
            sim.view.load(1)
        );
    }

    /// After a run the nodes' caches hold different amounts, so their own M differ; on a
    /// shared host every node reports the machine's C and M (the mean of their own).
    #[test]
    pub(super) fn on_a_shared_host_every_node_reports_the_machines_cpu_and_memory() {
        let mut sc = crate::scenario::builtin("seed-vod-lab").expect("built in");
        sc.nodes.count = 3;
        let r = sc.ramp.as_mut().expect("ramp");
        r.steps = vec![30];
        r.step_secs = 20.0;
        r.settle_secs = 5.0;
        let arm = Arm::Place {
            policy: vigil_cluster::Policy::Similarity,
            rem: false,
        };
        for shared in [false, true] {
            sc.nodes.shared_host = shared;
            let mut sim = VodSim::new(&sc, arm);
            sim.run();
            let views: Vec<NodeView> = (0..3).map(|i| sim.node_view(i)).collect();
            let own_mem: Vec<f64> = (0..3).map(|i| sim.own_mem(i)).collect();
            assert!(
                own_mem.iter().any(|&m| (m - own_mem[0]).abs() > 1e-9),
                "the caches differ: {own_mem:?}"
            );
            let mean = own_mem.iter().sum::<f64>() / 3.0;
            for (i, v) in views.iter().enumerate() {
                if shared {
                    assert!(
                        (v.mem - mean).abs() < 1e-12,
                        "node {i}: {} vs {mean}",
                        v.mem
                    );
                    assert!((v.cpu - views[0].cpu).abs() < 1e-12, "node {i}");
                } else {
                    assert!((v.mem - own_mem[i]).abs() < 1e-12, "node {i}");
                }
            }
        }
    }
}
