//! Placement reservations: what a decision adds to a node's view (§A.4 step 5) is held for
//! a short time only (`[cluster] reservation_ms`, 2 s), not until the node's next report.
//!
//! Without the expiry, every DESCRIBE — even one whose client never sets up a session —
//! raised the chosen node's estimated load until its next report, so a burst of DESCRIBEs
//! from one address could make a cluster look overloaded to real viewers. A session that
//! reaches PLAY is in its node's report (published at once on a session change), which
//! replaces the view entry anyway; a reservation never seen there lapses.

use std::time::Instant;

use vigil_cluster::{apply, ClusterView, Decision, Stream};

use super::shell::State;

/// One decision's addition to a node's view.
pub(super) struct Reservation {
    pub node: String,
    /// The report version of the node's view entry the reservation was added to.
    pub version: u64,
    pub expires: Instant,
    /// Load added (estimate after the decision − load before).
    pub delta: f64,
    pub stream: Stream,
}

/// Reservations kept at most; past it the oldest are dropped (a flood of DESCRIBEs must not
/// grow memory; the per-address DESCRIBE limit keeps real numbers far below).
const RESERVATIONS_MAX: usize = 100_000;

impl super::Cluster {
    /// Reservations running against node `id`.
    pub fn reserved(&self, id: &str) -> usize {
        let mut st = self.state();
        st.expire_reservations(Instant::now(), self.policy_cfg.sched.weights);
        st.reservations.iter().filter(|r| r.node == id).count()
    }
}

impl State {
    pub(super) fn reserve(&mut self, r: Reservation) {
        if self.reservations.len() >= RESERVATIONS_MAX {
            self.reservations.remove(0);
        }
        self.reservations.push(r);
    }

    /// Drop expired reservations and rebuild the view entries they had raised from the
    /// nodes' reports plus the reservations still running.
    pub(super) fn expire_reservations(
        &mut self,
        now: Instant,
        weights: vigil_cluster::LoadWeights,
    ) {
        if !self.reservations.iter().any(|r| r.expires <= now) {
            return;
        }
        let mut touched: Vec<String> = self
            .reservations
            .iter()
            .filter(|r| r.expires <= now)
            .map(|r| r.node.clone())
            .collect();
        touched.sort();
        touched.dedup();
        self.reservations.retain(|r| r.expires > now);
        for id in touched {
            let Some(m) = self.members.iter().find(|m| m.id == id) else {
                continue;
            };
            let Some(report) = &m.report else { continue };
            let version = m.report_version;
            let mut one = ClusterView::new(vec![report.node_view(&id, m.alive)], weights);
            let mut load = one.load(0);
            for r in self
                .reservations
                .iter()
                .filter(|r| r.node == id && r.version == version)
            {
                load += r.delta;
                let _ = apply(
                    &mut one,
                    &Decision::Assign {
                        node: id.clone(),
                        estimated_load: load,
                        reason: String::new(),
                        stream: r.stream.clone(),
                    },
                );
            }
            self.views.insert(
                id,
                (version, vigil_cluster::ViewEntry::new(one.node(0).clone())),
            );
        }
    }
}
