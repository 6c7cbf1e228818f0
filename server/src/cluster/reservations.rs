//! Placement reservations: what a decision adds to a node's view (§A.4 step 5) is held for
//! a short time only (`[cluster] reservation_ms`, 2 s), not until the node's next report.
//!
//! Without the expiry, every DESCRIBE — even one whose client never sets up a session —
//! raised the chosen node's estimated load until its next report, so a burst of DESCRIBEs
//! from one address could make a cluster look overloaded to real viewers. A session is in
//! its node's report from its SETUP on (published at once on a session change); a
//! reservation never seen there lapses.
//!
//! A new report of the node replaces the reservations made *before* it was built (it
//! shows their sessions, or they never came), and keeps those made after: gossip delivers a
//! report a round or two after the node built it, and a report that cannot contain a
//! session must not erase the estimate for it. (Dropping them on every new version made
//! the node look lighter than it was for that time, and least-load sent it the next
//! requests too.) The build time is the node's wall clock against the scheduler's: nodes
//! are expected to keep NTP time, and a skew only shifts which reports count, within the
//! reservation's lapse.

use std::time::Instant;

use vigil_cluster::{apply, ClusterView, Decision, LoadWeights, Stream, ViewEntry};

use super::report::Report;
use super::shell::State;

/// One decision's addition to a node's view.
pub(super) struct Reservation {
    pub node: String,
    /// The report version of the node's view entry the reservation applies to.
    pub version: u64,
    pub expires: Instant,
    /// When the scheduler decided (wall clock, ms): reports built before cannot show it.
    pub decided_ms: i64,
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

/// Node `node` has a new report (`version`, built at `built_ms`): its reservations decided
/// at or after the build move to the new version (their clients had not even been answered
/// when it was built), the others are dropped. Other nodes' stay.
pub(super) fn carry_over(
    reservations: &mut Vec<Reservation>,
    node: &str,
    version: u64,
    built_ms: i64,
) {
    reservations.retain_mut(|r| {
        if r.node != node {
            return true;
        }
        if r.decided_ms < built_ms {
            return false;
        }
        r.version = version;
        true
    });
}

/// Node `id`'s view entry: its report (version `version`) plus the reservations running
/// against that version.
pub(super) fn entry(
    report: &Report,
    id: &str,
    alive: bool,
    version: u64,
    reservations: &[Reservation],
    weights: LoadWeights,
) -> ViewEntry {
    let mut one = ClusterView::new(vec![report.node_view(id, alive)], weights);
    let mut load = one.load(0);
    for r in reservations
        .iter()
        .filter(|r| r.node == id && r.version == version)
    {
        load += r.delta;
        let _ = apply(
            &mut one,
            &Decision::Assign {
                node: id.to_string(),
                estimated_load: load,
                reason: String::new(),
                stream: r.stream.clone(),
            },
        );
    }
    ViewEntry::new(one.node(0).clone())
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
    pub(super) fn expire_reservations(&mut self, now: Instant, weights: LoadWeights) {
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
            let e = entry(report, &id, m.alive, version, &self.reservations, weights);
            self.views.insert(id, (version, e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use vigil_cluster::StreamSource;

    fn res(node: &str, version: u64, decided_ms: i64) -> Reservation {
        Reservation {
            node: node.into(),
            version,
            expires: Instant::now() + Duration::from_secs(2),
            decided_ms,
            delta: 1.4,
            stream: Stream {
                camera: "cam".into(),
                position_ms: 1_000,
                vbr_bps: 1e6,
                source: StreamSource::Storage,
                session: None,
            },
        }
    }

    /// A report built at 1000 ms: the decision at 990 is in it (or never came) and goes;
    /// the one at 1010 cannot be, so it stays, now on the new version; node b's are not
    /// touched.
    #[test]
    fn a_report_replaces_only_the_reservations_made_before_it_was_built() {
        let mut rs = vec![res("a", 7, 990), res("a", 7, 1010), res("b", 3, 900)];
        carry_over(&mut rs, "a", 8, 1000);
        let kept: Vec<(&str, u64, i64)> = rs
            .iter()
            .map(|r| (r.node.as_str(), r.version, r.decided_ms))
            .collect();
        assert_eq!(kept, vec![("a", 8, 1010), ("b", 3, 900)]);
    }

    /// A decision in the millisecond the report was built cannot be in it (its client has
    /// not been answered yet): it stays.
    #[test]
    fn a_decision_at_the_build_instant_is_kept() {
        let mut rs = vec![res("a", 1, 1000), res("a", 1, 999)];
        carry_over(&mut rs, "a", 2, 1000);
        assert_eq!(rs.len(), 1);
        assert_eq!((rs[0].version, rs[0].decided_ms), (2, 1000));
    }
}
