//! Scheduler election: which member schedules, and the term that orders its decisions (a new
//! scheduler takes a new term so its bindings win over the previous one's).

use tracing::info;
use vigil_cluster::Candidate;

use super::now_ms;
use super::shell::{Member, State};

/// The scheduler the members elect, and the candidates this member watches and passes
/// over for a lost watch (`vigil_cluster::elect_watched`): only members that published a
/// report are candidates (the report carries their priority and start time).
pub(super) fn elect(
    members: &[Member],
    grace_ms: i64,
    self_id: &str,
    lost: impl Fn(&str) -> bool,
) -> (Option<String>, Vec<String>, Vec<String>) {
    let candidates: Vec<Candidate> = members
        .iter()
        .filter_map(|m| {
            let r = m.report.as_ref()?;
            Some(Candidate {
                id: m.id.clone(),
                priority: r.priority,
                started_ms: r.started_ms,
                alive: m.alive,
            })
        })
        .collect();
    let w = vigil_cluster::elect_watched(&candidates, now_ms(), grace_ms, self_id, lost);
    (w.elected.map(|c| c.id.clone()), w.watch, w.excluded)
}

/// Counts a known scheduler replaced (failover, partition, heal) in
/// `vigil_cluster_scheduler_changes_total`, once the node `had_peers`: a joining node elects
/// itself until it hears the others, which is no failover to alert on.
pub(super) fn count_change(before: Option<&str>, after: Option<&str>, had_peers: bool) {
    if is_counted_change(before, after, had_peers) {
        metrics::counter!("vigil_cluster_scheduler_changes_total").increment(1);
    }
}

fn is_counted_change(before: Option<&str>, after: Option<&str>, had_peers: bool) -> bool {
    had_peers && before.is_some() && before != after
}

/// Follows the elected scheduler into `st`. Returns the term to publish when it changed.
pub(super) fn update_term(
    st: &mut State,
    elected: Option<String>,
    members: &[Member],
) -> Option<u64> {
    let mut new_term = None;
    if elected != st.scheduler {
        let term = vigil_cluster::next_term(st.term, members.iter().map(|m| m.term));
        info!(scheduler = ?elected, term, "scheduler changed");
        st.scheduler = elected;
        st.term = term;
        new_term = Some(term);
    } else if let Some(max) = members.iter().map(|m| m.term).max() {
        // Adopt a higher term seen elsewhere so the terms converge.
        if max > st.term {
            st.term = max;
            new_term = Some(max);
        }
    }
    new_term
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_known_scheduler_replaced_after_peers_were_seen_is_a_counted_change() {
        assert!(is_counted_change(Some("a"), Some("b"), true));
        assert!(is_counted_change(Some("a"), None, true));
        // The first election, no change, and a joining node's own election while alone.
        assert!(!is_counted_change(None, Some("a"), true));
        assert!(!is_counted_change(Some("a"), Some("a"), true));
        assert!(!is_counted_change(Some("b"), Some("a"), false));
    }
}
