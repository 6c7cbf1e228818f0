//! §D.2 in the running scheduler: every `[cluster.planner] period_ms` the elected scheduler
//! predicts the next period's requests from the sessions that arrived in its view over the
//! last Δt, builds the planner's instance from the view (`vigil_cluster::planner::from_view`)
//! and plans (eq. 1, else eq. 2) on a blocking thread. The plan's session moves go out
//! through the same `MoveOut` path as REM's, never two moves of one session at once (REM's
//! in-flight set). The last plan, and the last one that moved something, are kept with their
//! prediction, objective, solve time and each move's result for `/api/cluster/plan`.
//!
//! Camera moves (issue 11 §2) are not planned here: a live camera's viewers cannot move
//! and its requests can only land on its holder, so a plan whose `unmet` stays above zero
//! with live demand is the case a camera move or a live edge would relieve. `carry_out_move`
//! is where such a move would be dispatched once the plan names one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use vigil_cluster::planner::{self, from_view, ArrivalLog, Method, Move, Prediction};
use vigil_cluster::{ClusterView, NodeView, PlannerConfig};

use super::now_ms;
use super::shell::{Cluster, State};

/// One session move of a plan, as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlannedMove {
    pub content: String,
    pub from: String,
    pub to: String,
    pub session: Option<String>,
    /// pending, moved (with the handoff gap), failed: why.
    pub result: String,
    #[serde(default)]
    pub took_ms: Option<f64>,
}

/// A plan as `/api/cluster/plan` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanRecord {
    pub at_ms: i64,
    pub scheduler: String,
    pub window_ms: u64,
    pub horizon_ms: u64,
    pub prediction: Prediction,
    pub method: Method,
    /// Z of eq. 2: sessions the plan moves.
    pub objective: u32,
    /// Predicted requests that did not fit as sessions stood (eq. 1).
    pub unmet_before: u32,
    /// Predicted requests that still do not fit after the plan.
    pub unmet: u32,
    pub greedy_moved: Option<u32>,
    pub solve_ms: f64,
    pub note: Option<String>,
    pub moves: Vec<PlannedMove>,
}

/// What `/api/cluster/plan` answers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PlanView {
    pub enabled: bool,
    pub scheduler: Option<String>,
    pub last: Option<PlanRecord>,
    /// The last plan that moved sessions (kept when later plans find nothing to do).
    pub last_moves: Option<PlanRecord>,
}

#[derive(Default)]
pub(super) struct PlannerState {
    log: ArrivalLog,
    last_run: Option<Instant>,
    running: bool,
    last: Option<PlanRecord>,
    last_moves: Option<PlanRecord>,
}

impl Cluster {
    pub fn plan_view(&self) -> PlanView {
        let st = self.state();
        PlanView {
            enabled: self.policy_cfg.planner.enabled,
            scheduler: st.scheduler.clone(),
            last: st.planner.last.clone(),
            last_moves: st.planner.last_moves.clone(),
        }
    }

    /// Called on every membership refresh: records arrivals and, once per period, plans.
    pub(super) fn run_planner(self: &Arc<Self>) {
        let cfg = self.policy_cfg.planner;
        let now = now_ms();
        let job = {
            let mut st = self.state();
            if !cfg.enabled || st.scheduler.as_deref() != Some(self.self_id.as_str()) {
                // A later term starts from what runs then.
                st.planner.log = ArrivalLog::default();
                st.planner.last_run = None;
                return;
            }
            let sessions: Vec<(String, String)> = st
                .views
                .values()
                .flat_map(|(_, v)| &v.streams)
                .filter_map(|s| {
                    Some((
                        s.session.clone()?,
                        from_view::content_of(&s.camera, s.source),
                    ))
                })
                .collect();
            st.planner.log.observe(
                now,
                cfg.window_ms,
                sessions.iter().map(|(a, b)| (a.as_str(), b.as_str())),
            );
            let due = st
                .planner
                .last_run
                .is_none_or(|t| t.elapsed().as_millis() as u64 >= cfg.period_ms);
            if st.planner.running || !due {
                return;
            }
            st.planner.last_run = Some(Instant::now());
            st.planner.running = true;
            self.planner_job(&st, &cfg, now)
        };
        let cluster = self.clone();
        let live_edges = self.policy_cfg.edge.enabled;
        tokio::spawn(async move {
            let (view, holders, counts) = job;
            // Prediction and planning off the runtime and outside the state lock: a panic
            // here ends this plan, not the membership loop.
            let planned = tokio::task::spawn_blocking(move || {
                let prediction = planner::predict(
                    &counts,
                    cfg.window_ms,
                    cfg.horizon(),
                    cfg.quantile,
                    cfg.zipf_max_s,
                );
                let inst =
                    from_view::instance(&view, &holders, &prediction.requests, &cfg, live_edges);
                let started = Instant::now();
                let plan = planner::plan(&inst, &cfg, Duration::from_millis(cfg.time_limit_ms));
                let solve_us = started.elapsed().as_micros() as u64;
                (view, plan, prediction, solve_us)
            })
            .await;
            let moves = {
                let mut st = cluster.state();
                st.planner.running = false;
                let Ok((view, plan, prediction, solve_us)) = planned else {
                    tracing::warn!("the migration planner failed; it plans again next period");
                    return;
                };
                cluster.record_plan(&mut st, &view, (plan, solve_us), prediction, &cfg, now)
            };
            for (k, session, from, to) in moves {
                let cluster = cluster.clone();
                tokio::spawn(async move {
                    let result = cluster.carry_out(&session, &from, &to).await;
                    let took = (now_ms() - now) as f64;
                    let mut st = cluster.state();
                    st.rem.in_flight.remove(&session);
                    let p = &mut st.planner;
                    for r in [p.last.as_mut(), p.last_moves.as_mut()]
                        .into_iter()
                        .flatten()
                    {
                        if r.at_ms == now {
                            if let Some(m) = r.moves.get_mut(k) {
                                m.result = result.clone();
                                m.took_ms = Some(took);
                            }
                        }
                    }
                });
            }
        });
    }

    /// What the plan is made from: the view, the live cameras' holders and the window's
    /// arrivals per content.
    fn planner_job(
        &self,
        st: &State,
        cfg: &PlannerConfig,
        now: i64,
    ) -> (
        ClusterView,
        BTreeMap<String, Vec<String>>,
        BTreeMap<String, u32>,
    ) {
        let view = ClusterView::new(
            st.views.values().map(|(_, v)| NodeView::clone(v)).collect(),
            self.policy_cfg.sched.weights,
        );
        // Live cameras' holders: the nodes holding them live, and the node a pull camera
        // is bound to (an on-demand camera's viewers land there before it is live).
        let mut holders: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in st.members.iter().filter(|m| m.alive) {
            for cam in m.report.iter().flat_map(|r| &r.live) {
                holders.entry(cam.clone()).or_default().push(m.id.clone());
            }
        }
        for (cam, node) in &st.bindings.cameras {
            holders.entry(cam.clone()).or_default().push(node.clone());
        }
        (view, holders, st.planner.log.counts(now, cfg.window_ms))
    }

    /// Keeps the plan, picks the sessions of its moves and marks them in flight. The moves
    /// to start: (index in the record, session, from, to).
    fn record_plan(
        &self,
        st: &mut State,
        view: &ClusterView,
        (plan, solve_us): (planner::Plan, u64),
        prediction: Prediction,
        cfg: &PlannerConfig,
        now: i64,
    ) -> Vec<(usize, String, String, String)> {
        let mut busy: BTreeSet<String> = st.rem.in_flight.iter().cloned().collect();
        let mut moves = Vec::new();
        let mut start = Vec::new();
        for m in &plan.moves {
            for session in carry_out_move(view, m, &busy) {
                let k = moves.len();
                let result = if k < cfg.max_moves as usize {
                    busy.insert(session.clone());
                    st.rem.in_flight.insert(session.clone());
                    start.push((k, session.clone(), m.from.clone(), m.to.clone()));
                    "pending".to_string()
                } else {
                    "not carried out: past max_moves".to_string()
                };
                moves.push(PlannedMove {
                    content: m.content.clone(),
                    from: m.from.clone(),
                    to: m.to.clone(),
                    session: Some(session),
                    result,
                    took_ms: None,
                });
            }
        }
        if plan.method != Method::Feasible {
            tracing::info!(
                method = ?plan.method,
                moved = plan.moved,
                unmet_before = plan.unmet_before,
                unmet = plan.unmet,
                solve_us,
                "migration plan"
            );
        }
        let record = PlanRecord {
            at_ms: now,
            scheduler: self.self_id.clone(),
            window_ms: cfg.window_ms,
            horizon_ms: cfg.horizon(),
            prediction,
            method: plan.method,
            objective: plan.moved,
            unmet_before: plan.unmet_before,
            unmet: plan.unmet,
            greedy_moved: plan.greedy_moved,
            solve_ms: solve_us as f64 / 1000.0,
            note: plan.note,
            moves,
        };
        if !record.moves.is_empty() {
            st.planner.last_moves = Some(record.clone());
        }
        st.planner.last = Some(record);
        start
    }
}

/// The sessions one planned move takes. Only playbacks move (a live content is never
/// movable in the instance); a camera move (§2) would be dispatched from here.
fn carry_out_move(view: &ClusterView, m: &Move, busy: &BTreeSet<String>) -> Vec<String> {
    if m.content.starts_with("playback/") {
        from_view::pick_sessions(view, m, busy)
    } else {
        Vec::new()
    }
}
