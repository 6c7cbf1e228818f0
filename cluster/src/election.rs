//! Scheduler election (issue 4 §3): every node derives the same scheduler from its membership
//! view, with no messages of its own. Pure: the candidates and the clock in, the winner out.
//!
//! The scheduler watch (issue 29 §2): the gossip tells a member's death only once its
//! heartbeat counter has stood still for `failure_timeout_ms` *as this observer saw it*, and
//! at 50 members the counter reaches an observer several rounds late, so the slowest
//! survivor learnt of the scheduler's death 2.5–2.9 s after it. Only the scheduler's death
//! stops placements, so every member also holds a direct connection to the scheduler it
//! would elect, kept alive every few tens of milliseconds and lost after
//! `scheduler_timeout_ms` of silence: [`elect_watched`] passes over a candidate whose watch
//! is lost, and every member does so on its own clock, without waiting for the gossip.

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

/// What [`elect_watched`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched<'a> {
    pub elected: Option<&'a Candidate>,
    /// The candidates this observer must watch, in rank order: every one passed over for a
    /// lost watch (its connection is retried, so it comes back when it answers again) and
    /// the elected one, unless that is the observer itself.
    pub watch: Vec<NodeId>,
    /// Candidates alive by the gossip but passed over for a lost watch: dead to this observer.
    pub excluded: Vec<NodeId>,
}

/// [`elect`], passing over every candidate `lost` says the observer's watch of it lost. The
/// observer (`self_id`) never watches itself. A candidate never watched yet is not lost: its
/// death is the gossip's to tell (a member that just joined has no connection yet).
pub fn elect_watched<'a>(
    candidates: &'a [Candidate],
    now_ms: i64,
    grace_ms: i64,
    self_id: &str,
    lost: impl Fn(&str) -> bool,
) -> Watched<'a> {
    let mut view: Vec<Candidate> = candidates.to_vec();
    let mut watch = Vec::new();
    let mut excluded = Vec::new();
    while let Some(i) =
        elect(&view, now_ms, grace_ms).and_then(|c| candidates.iter().position(|o| o.id == c.id))
    {
        let id = &candidates[i].id;
        if id == self_id {
            break;
        }
        watch.push(id.clone());
        if !lost(id) {
            break;
        }
        excluded.push(id.clone());
        view[i].alive = false;
    }
    let elected =
        elect(&view, now_ms, grace_ms).and_then(|c| candidates.iter().find(|o| o.id == c.id));
    Watched {
        elected,
        watch,
        excluded,
    }
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
    fn a_lost_watch_passes_over_its_candidate_and_watches_the_next() {
        let v = [
            c("a", 1, 0, true),
            c("b", 2, 0, true),
            c("c", 3, 0, true),
            c("d", 4, 0, false), // dead by the gossip: never watched
        ];
        // Nothing lost: `a` elected and watched by everyone else.
        let w = elect_watched(&v, 10_000, 2_000, "c", |_| false);
        assert_eq!(w.elected.unwrap().id, "a");
        assert_eq!(w.watch, ["a"]);
        assert!(w.excluded.is_empty());
        // `a`'s watch lost: `b` elected, both watched (a's connection is retried).
        let w = elect_watched(&v, 10_000, 2_000, "c", |id| id == "a");
        assert_eq!(w.elected.unwrap().id, "b");
        assert_eq!(w.watch, ["a", "b"]);
        assert_eq!(w.excluded, ["a"]);
        // `a` and `b` lost: the observer `c` elects itself and watches only those two.
        let w = elect_watched(&v, 10_000, 2_000, "c", |id| id != "c");
        assert_eq!(w.elected.unwrap().id, "c");
        assert_eq!(w.watch, ["a", "b"]);
        assert_eq!(w.excluded, ["a", "b"]);
        // The scheduler itself watches nobody.
        let w = elect_watched(&v, 10_000, 2_000, "a", |_| true);
        assert_eq!(w.elected.unwrap().id, "a");
        assert!(w.watch.is_empty() && w.excluded.is_empty());
        // Everyone lost but the dead `d`: nobody to elect.
        let w = elect_watched(&v, 10_000, 2_000, "x", |_| true);
        assert!(w.elected.is_none());
        assert_eq!(w.excluded, ["a", "b", "c"]);
    }

    #[test]
    fn the_watch_follows_the_grace_rule() {
        // `a` too young: `b` elected and watched; `a` is not watched until it is old enough.
        let v = [c("a", 1, 9_500, true), c("b", 2, 0, true)];
        let w = elect_watched(&v, 10_000, 2_000, "z", |_| false);
        assert_eq!(w.elected.unwrap().id, "b");
        assert_eq!(w.watch, ["b"]);
        // `b` lost: only `a` is left, young or not.
        let w = elect_watched(&v, 10_000, 2_000, "z", |id| id == "b");
        assert_eq!(w.elected.unwrap().id, "a");
        assert_eq!(w.watch, ["b", "a"]);
    }

    #[test]
    fn terms_only_grow() {
        assert_eq!(next_term(3, [1, 7, 2]), 8);
        assert_eq!(next_term(3, []), 4);
    }
}
