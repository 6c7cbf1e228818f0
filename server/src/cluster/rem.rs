//! §A.5 REM in the running scheduler: on every new load report of a node, the elected
//! scheduler runs `rem_step` (the pure policy of `vigil-cluster`) over its view until it
//! proposes nothing more, applies each proposal to the view at once (§A.5 step 6), and
//! carries the moves out through the node holding each session (`MoveOut` over QUIC, or the
//! migration service here). Every step that could act is recorded with its inputs: the σ,
//! the high node's load, the probability, the stream and why, the target or why none.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use vigil_cluster::{apply_migration, quadratic_mean, rem_probability, rem_step, ClusterView};

use super::now_ms;
use super::shell::Cluster;
use crate::handoff::{MigrationCall, MigrationReply};

const KEPT: usize = 50;

/// One REM step as `/api/cluster/scheduler` shows it.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RemRecord {
    pub at_ms: i64,
    /// The reporting (high) node.
    pub node: String,
    pub load: f64,
    pub sigma: f64,
    /// §A.5 eq. 7 probability at that load.
    pub p: f64,
    pub session: Option<String>,
    pub camera: Option<String>,
    pub position_ms: Option<i64>,
    pub to: Option<String>,
    pub reason: String,
    /// pending, moved (with the handoff gap), failed: why, or "no move".
    pub result: String,
    /// Decision → the move committed (or failed), ms.
    #[serde(default)]
    pub took_ms: Option<f64>,
}

#[derive(Default)]
pub(super) struct RemState {
    /// The report version REM last ran on, per node.
    seen: std::collections::BTreeMap<String, u64>,
    /// Sessions being moved: never a second move of the same one at once.
    pub(super) in_flight: HashSet<String>,
    pub(super) log: VecDeque<RemRecord>,
}

fn push(log: &mut VecDeque<RemRecord>, r: RemRecord) {
    if log.len() >= KEPT {
        log.pop_front();
    }
    log.push_back(r);
}

impl Cluster {
    pub fn rem_log(&self) -> Vec<RemRecord> {
        self.state().rem.log.iter().rev().cloned().collect()
    }

    /// Runs REM for every node with a new report (scheduler only) and starts the moves.
    pub(super) fn run_rem(self: &Arc<Self>, enabled: bool) {
        let moves = {
            let mut st = self.state();
            if !enabled || st.scheduler.as_deref() != Some(self.self_id.as_str()) {
                return;
            }
            let changed: Vec<String> = st
                .members
                .iter()
                .filter(|m| m.alive && m.report.is_some())
                .filter(|m| st.rem.seen.get(&m.id) != Some(&m.report_version))
                .map(|m| m.id.clone())
                .collect();
            let versions: Vec<(String, u64)> = st
                .members
                .iter()
                .map(|m| (m.id.clone(), m.report_version))
                .collect();
            st.rem.seen.extend(versions);
            let mut moves = Vec::new();
            for node in changed {
                moves.extend(self.plan(&mut st, &node));
            }
            moves
        };
        for (session, from, to, at_ms) in moves {
            let cluster = self.clone();
            tokio::spawn(async move {
                let result = cluster.carry_out(&session, &from, &to).await;
                let mut st = cluster.state();
                st.rem.in_flight.remove(&session);
                if let Some(r) = st
                    .rem
                    .log
                    .iter_mut()
                    .find(|r| r.at_ms == at_ms && r.session.as_deref() == Some(&session))
                {
                    r.result = result;
                    r.took_ms = Some((now_ms() - at_ms) as f64);
                }
            });
        }
    }

    /// REM steps for `node` over the view; applies and records them. The moves to start:
    /// (session, from, to, record time).
    fn plan(&self, st: &mut super::shell::State, node: &str) -> Vec<(String, String, String, i64)> {
        let cfg = &self.policy_cfg.sched;
        let in_flight = st.rem.in_flight.clone();
        let nodes = st
            .views
            .values()
            .map(|(_, v)| {
                let mut v = vigil_cluster::NodeView::clone(v);
                // Streams already moving are not proposed again.
                v.streams
                    .retain(|s| s.session.as_ref().is_none_or(|id| !in_flight.contains(id)));
                v
            })
            .collect();
        let mut view = ClusterView::new(nodes, cfg.weights);
        let Some(h) = view.index_of(node) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for _ in 0..vigil_cluster::rem::MAX_STEPS {
            let loads: Vec<f64> = (0..view.len())
                .filter(|&i| view.node(i).alive)
                .map(|i| view.load(i))
                .collect();
            let sigma = quadratic_mean(&loads);
            let load = view.load(h);
            let p = rem_probability(load, cfg);
            if load <= sigma || p <= 0.0 {
                break;
            }
            let at_ms = now_ms();
            let super::shell::State { rng, rem, .. } = &mut *st;
            let Some(m) = rem_step(&view, node, cfg, rng) else {
                push(
                    &mut rem.log,
                    RemRecord {
                        at_ms,
                        node: node.to_string(),
                        load,
                        sigma,
                        p,
                        session: None,
                        camera: None,
                        position_ms: None,
                        to: None,
                        reason: "no move: the draw was above p, or no low node can take the \
                                 stream without overload"
                            .into(),
                        result: "no move".into(),
                        took_ms: None,
                    },
                );
                break;
            };
            let session = m.stream.session.clone();
            let mut record = RemRecord {
                at_ms,
                node: node.to_string(),
                load,
                sigma,
                p,
                session: session.clone(),
                camera: Some(m.stream.camera.clone()),
                position_ms: Some(m.stream.position_ms),
                to: Some(m.to.clone()),
                reason: m.reason.clone(),
                result: "pending".into(),
                took_ms: None,
            };
            let Some(session) = session else {
                record.result = "failed: the report names no session for the stream".into();
                push(&mut rem.log, record);
                break;
            };
            if apply_migration(&mut view, &m).is_err() {
                break;
            }
            rem.in_flight.insert(session.clone());
            push(&mut rem.log, record);
            out.push((session, m.from.clone(), m.to.clone(), at_ms));
        }
        // §A.5 step 6: both nodes' estimates stand until their next reports.
        for id in out.iter().flat_map(|(_, f, t, _)| [f, t]) {
            if let (Some(i), Some(e)) = (view.index_of(id), st.views.get_mut(id)) {
                e.1 = vigil_cluster::ViewEntry::new(view.node(i).clone());
            }
        }
        out
    }

    /// One move (REM or the planner) through the node holding the session; the result as
    /// recorded.
    pub(super) async fn carry_out(&self, session: &str, from: &str, to: &str) -> String {
        let call = MigrationCall::MoveOut {
            session: session.to_string(),
            to: to.to_string(),
            mode: None,
        };
        let reply = if from == self.self_id {
            match self.migration.get() {
                Some(m) => Ok(m.handle(call).await),
                None => Err("migration is not ready".to_string()),
            }
        } else {
            self.call_migration(from, call, Duration::from_secs(12))
                .await
                .map_err(|e| format!("{e:#}"))
        };
        // (The node that moved it counts the outcome in `vigil_migrations_total`.)
        match reply {
            Ok(MigrationReply::Moved(m)) => {
                format!(
                    "moved (gap {})",
                    m.gap_ms.map_or("-".into(), |g| format!("{g:.1} ms"))
                )
            }
            Ok(MigrationReply::Failed(e)) | Err(e) => {
                tracing::warn!(session, from, to, error = %e, "REM move failed: the session stays");
                format!("failed: {e}")
            }
            Ok(other) => format!("failed: {other:?}"),
        }
    }
}
