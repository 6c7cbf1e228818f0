//! The placement view kept from one decision to the next (issue 13): a node that places a
//! DESCRIBE used to clone every member's report and rebuild the whole view and its indexes
//! each time (50 nodes × 100 000 sessions: every stream and cached range of the cluster per
//! request). Here the view is rebuilt only for the members whose entry changed since the
//! last decision, told by the entry's generation: every change of a [`ViewEntry`] gives it a
//! new one. A decision is applied to the view and to the chosen node's entry in place
//! ([`ViewCache::apply`]), so the entry keeps the decision for a later rebuild or the planner
//! without a copy of the node's report (≈ 2 000 streams at that size: 236 µs per DESCRIBE).

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::LoadWeights;
use crate::place::{apply, Decision};
use crate::view::{ClusterView, NodeId, NodeView};
use crate::ClusterError;

/// Generations of every entry in the process, so two entries never share one: an entry that
/// replaces another in the same slot (a new report) is always told apart. A process-wide
/// counter rather than one per owner, so that no owner can hand out a generation twice.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// A member's placement-view entry as its owner keeps it (its report plus the decisions
/// applied since). Read through `Deref`; changed only through [`ViewEntry::node_mut`], which
/// gives it a new generation, so a [`ViewCache`] cannot miss a change.
#[derive(Debug, Clone)]
pub struct ViewEntry {
    node: NodeView,
    generation: u64,
}

impl ViewEntry {
    pub fn new(node: NodeView) -> Self {
        Self {
            node,
            generation: next_generation(),
        }
    }

    /// The node to change; the entry counts as changed (the next sync re-indexes it).
    pub fn node_mut(&mut self) -> &mut NodeView {
        self.generation = next_generation();
        &mut self.node
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl Deref for ViewEntry {
    type Target = NodeView;

    fn deref(&self) -> &NodeView {
        &self.node
    }
}

#[derive(Debug, Default)]
pub struct ViewCache {
    view: Option<ClusterView>,
    /// The (id, generation) of the entries the view was built from, in view order.
    src: Vec<(NodeId, u64)>,
}

impl ViewCache {
    /// The view of `nodes` (in the order given): built in full when the members or the
    /// weights changed, else updated for the entries whose generation is not the one seen
    /// last.
    pub fn sync(&mut self, nodes: &[&ViewEntry], weights: LoadWeights) -> &mut ClusterView {
        let same_members = self.view.as_ref().is_some_and(|v| *v.weights() == weights)
            && self.src.len() == nodes.len()
            && self.src.iter().zip(nodes).all(|((id, _), n)| *id == n.id);
        match &mut self.view {
            Some(v) if same_members => {
                for (i, n) in nodes.iter().enumerate() {
                    if self.src[i].1 != n.generation {
                        v.replace_node(i, n.node.clone());
                        self.src[i].1 = n.generation;
                    }
                }
            }
            _ => {
                self.view = Some(ClusterView::new(
                    nodes.iter().map(|n| n.node.clone()).collect(),
                    weights,
                ));
                self.src = nodes.iter().map(|n| (n.id.clone(), n.generation)).collect();
            }
        }
        self.view.as_mut().expect("set above")
    }

    /// Applies a placement decision (§A.4 step 5) to the synced view and, in place, to the
    /// chosen node's `entry`: the same stream and estimate in both, so the view stays what a
    /// fresh build of the entries gives without re-indexing or copying the node. An entry
    /// that was not the one synced (changed since) still gets the decision, and the next
    /// sync re-indexes it as usual.
    pub fn apply(
        &mut self,
        entry: &mut ViewEntry,
        decision: &Decision,
    ) -> Result<(), ClusterError> {
        let Decision::Assign {
            node,
            estimated_load,
            stream,
            ..
        } = decision
        else {
            return Ok(());
        };
        let unknown = || ClusterError::UnknownNode(node.clone());
        if entry.id != *node {
            return Err(unknown());
        }
        let view = self.view.as_mut().ok_or_else(unknown)?;
        let i = view.index_of(node).ok_or_else(unknown)?;
        let in_sync = self.src[i].1 == entry.generation;
        apply(view, decision)?;
        let n = entry.node_mut();
        n.push_stream(stream.clone());
        n.estimated_load = Some(*estimated_load);
        if in_sync {
            self.src[i].1 = entry.generation;
        }
        Ok(())
    }

    /// Whether the view was last synced with exactly these entries (none changed since):
    /// the check that [`ViewCache::apply`] left nothing to re-index.
    #[doc(hidden)]
    pub fn is_current(&self, nodes: &[&ViewEntry]) -> bool {
        self.src.len() == nodes.len()
            && self
                .src
                .iter()
                .zip(nodes)
                .all(|((id, g), n)| *id == n.id && *g == n.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{Stream, StreamSource};

    fn stream(c: &str, p: i64) -> Stream {
        Stream {
            camera: c.into(),
            position_ms: p,
            vbr_bps: 1e6,
            source: StreamSource::Storage,
            session: None,
        }
    }

    fn node(id: &str, cams: &[(&str, i64)]) -> ViewEntry {
        let mut n = NodeView::new(id, 1e9);
        for &(c, p) in cams {
            n.push_stream(stream(c, p));
            n.cached.entry(c.into()).or_default().push((p, p + 1000));
        }
        ViewEntry::new(n)
    }

    fn fresh(entries: &[&ViewEntry], w: LoadWeights) -> ClusterView {
        ClusterView::new(entries.iter().map(|e| NodeView::clone(e)).collect(), w)
    }

    #[test]
    fn only_changed_entries_are_rebuilt_and_the_result_is_a_fresh_build() {
        let w = LoadWeights::default();
        let mut a = node("a", &[("c1", 10), ("c2", 20)]);
        let b = node("b", &[("c1", 30)]);
        let mut cache = ViewCache::default();
        cache.sync(&[&a, &b], w);
        // a's report changes: c2 gone, c3 new, c1 moved.
        a = node("a", &[("c1", 11), ("c3", 5)]);
        assert!(!cache.is_current(&[&a, &b]));
        let v = cache.sync(&[&a, &b], w);
        assert!(v.index_matches_rebuild());
        assert_eq!(v.playing("c1"), &[(0, vec![11]), (1, vec![30])]);
        assert!(v.playing("c2").is_empty());
        assert_eq!(v.caching("c3").collect::<Vec<_>>(), [0]);
        assert_eq!(*v, fresh(&[&a, &b], w));
        // A change through node_mut is seen as well.
        let mut b2 = b.clone();
        b2.node_mut().cpu = 0.5;
        let v = cache.sync(&[&a, &b2], w);
        assert_eq!(v.node(1).cpu, 0.5);
        // A member joins: a full build, in the order given.
        let c = node("c", &[("c2", 1)]);
        let v = cache.sync(&[&a, &c, &b2], w);
        assert_eq!(v.index_of("c"), Some(1));
        assert_eq!(v.playing("c1"), &[(0, vec![11]), (2, vec![30])]);
        assert!(v.index_matches_rebuild());
    }

    #[test]
    fn a_decision_applied_in_place_leaves_nothing_to_rebuild() {
        let w = LoadWeights::default();
        let a = node("a", &[("c1", 10)]);
        let mut b = node("b", &[("c1", 30), ("c2", 7)]);
        let mut cache = ViewCache::default();
        cache.sync(&[&a, &b], w);
        let decision = Decision::Assign {
            node: "b".into(),
            estimated_load: 42.0,
            reason: String::new(),
            stream: stream("c1", 31),
        };
        cache.apply(&mut b, &decision).unwrap();
        // The entry holds the decision, and the view is current with it: no re-index.
        assert_eq!(b.streams.len(), 3);
        assert_eq!(b.sessions, 3);
        assert_eq!(b.estimated_load, Some(42.0));
        assert!(cache.is_current(&[&a, &b]));
        let v = cache.sync(&[&a, &b], w);
        assert_eq!(v.positions(1, "c1"), &[30, 31]);
        assert_eq!(v.load(1), 42.0);
        assert_eq!(*v, fresh(&[&a, &b], w));
        assert!(v.index_matches_rebuild());

        // A decision naming another node than the entry is refused, the view untouched.
        let before = cache.sync(&[&a, &b], w).clone();
        let mut a2 = a.clone();
        assert_eq!(
            cache.apply(&mut a2, &decision),
            Err(ClusterError::UnknownNode("b".into()))
        );
        assert_eq!(*cache.sync(&[&a, &b], w), before);

        // An entry changed since the sync still gets the decision; the next sync re-indexes
        // it, and the view is again a fresh build.
        b.node_mut().cpu = 0.9;
        cache.apply(&mut b, &decision).unwrap();
        assert!(!cache.is_current(&[&a, &b]));
        let v = cache.sync(&[&a, &b], w);
        assert_eq!(v.positions(1, "c1"), &[30, 31, 31]);
        assert_eq!(*v, fresh(&[&a, &b], w));
        assert!(v.index_matches_rebuild());
    }
}
