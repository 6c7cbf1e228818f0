//! Scheduler election (issue 4 §3): every node derives the same scheduler from its membership
//! view, with no messages of its own. Pure: the candidates and the clock in, the winner out.

use serde::{Deserialize, Serialize};

use crate::view::NodeId;

/// A member as the membership view shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    pub id: NodeId,
    pub priority: u32,
    /// Wall-clock start of the node (ms since the epoch), as the node itself gossips it, so
    /// every observer computes the same age.
    pub started_ms: i64,
    /// Alive according to this observer's failure detector.
    pub alive: bool,
}

/// The lowest `(priority, id)` among live nodes up for at least `grace_ms`; if none is that
/// old yet (a cluster starting up), the lowest among all live nodes. `None` without a live node.
pub fn elect(candidates: &[Candidate], now_ms: i64, grace_ms: i64) -> Option<&Candidate> {
    let key = |c: &&Candidate| (c.priority, c.id.clone());
    let live = || candidates.iter().filter(|c| c.alive);
    live()
        .filter(|c| now_ms - c.started_ms >= grace_ms)
        .min_by_key(key)
        .or_else(|| live().min_by_key(key))
}

/// The term after a change of scheduler: above every term seen in the view, so a term never
/// goes back even when the view changes under a partition that heals.
pub fn next_term(own: u64, seen: impl IntoIterator<Item = u64>) -> u64 {
    seen.into_iter().fold(own, u64::max) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, priority: u32, started_ms: i64, alive: bool) -> Candidate {
        Candidate {
            id: id.into(),
            priority,
            started_ms,
            alive,
        }
    }

    #[test]
    fn lowest_priority_then_id_among_old_enough_live_nodes() {
        let v = [
            c("b", 10, 0, true),
            c("a", 10, 0, true),
            c("c", 5, 0, false),    // dead
            c("d", 1, 9_500, true), // too young at now = 10 000 with grace 2 000
        ];
        assert_eq!(elect(&v, 10_000, 2_000).unwrap().id, "a");
        // Once d has been up for the grace period it wins on priority.
        assert_eq!(elect(&v, 11_500, 2_000).unwrap().id, "d");
    }

    #[test]
    fn young_cluster_and_empty_view() {
        let v = [c("b", 1, 9_000, true), c("a", 1, 9_999, true)];
        assert_eq!(elect(&v, 10_000, 2_000).unwrap().id, "a");
        assert!(elect(&[c("x", 1, 0, false)], 10_000, 0).is_none());
    }

    #[test]
    fn terms_only_grow() {
        assert_eq!(next_term(3, [1, 7, 2]), 8);
        assert_eq!(next_term(3, []), 4);
    }
}
