//! The placement view kept from one decision to the next (issue 13): a node that places a
//! DESCRIBE used to clone every member's report and rebuild the whole view and its indexes
//! each time (50 nodes × 100 000 sessions: every stream and cached range of the cluster per
//! request). Here the view is rebuilt only for the members whose entry changed since the
//! last decision, told by pointer: the owner replaces an entry's `Arc` whenever it changes
//! it, so an unchanged `Arc` is an unchanged report.

use std::sync::Arc;

use crate::config::LoadWeights;
use crate::view::{ClusterView, NodeView};

#[derive(Debug, Default)]
pub struct ViewCache {
    view: Option<ClusterView>,
    /// The entries the view was built from, in view order.
    src: Vec<Arc<NodeView>>,
}

impl ViewCache {
    /// The view of `nodes` (in the order given): built in full when the members or the
    /// weights changed, else updated for the entries whose `Arc` is not the one seen last.
    pub fn sync(&mut self, nodes: &[&Arc<NodeView>], weights: LoadWeights) -> &mut ClusterView {
        let same_members = self.view.as_ref().is_some_and(|v| *v.weights() == weights)
            && self.src.len() == nodes.len()
            && self.src.iter().zip(nodes).all(|(a, b)| a.id == b.id);
        match &mut self.view {
            Some(v) if same_members => {
                for (i, n) in nodes.iter().enumerate() {
                    if !Arc::ptr_eq(&self.src[i], n) {
                        v.replace_node(i, NodeView::clone(n));
                        self.src[i] = Arc::clone(n);
                    }
                }
            }
            _ => {
                self.view = Some(ClusterView::new(
                    nodes.iter().map(|n| NodeView::clone(n)).collect(),
                    weights,
                ));
                self.src = nodes.iter().map(|n| Arc::clone(n)).collect();
            }
        }
        self.view.as_mut().expect("set above")
    }

    /// The owner changed node `i` of the synced view itself (a decision applied) and stored
    /// the result as `entry`: the view already holds it.
    pub fn adopt(&mut self, i: usize, entry: Arc<NodeView>) {
        if let Some(s) = self.src.get_mut(i) {
            *s = entry;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{Stream, StreamSource};

    fn node(id: &str, cams: &[(&str, i64)]) -> Arc<NodeView> {
        let mut n = NodeView::new(id, 1e9);
        for &(c, p) in cams {
            n.streams.push(Stream {
                camera: c.into(),
                position_ms: p,
                vbr_bps: 1e6,
                source: StreamSource::Storage,
                session: None,
            });
            n.cached.entry(c.into()).or_default().push((p, p + 1000));
            n.sessions += 1;
        }
        Arc::new(n)
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
        let v = cache.sync(&[&a, &b], w);
        assert!(v.index_matches_rebuild());
        assert_eq!(v.playing("c1"), &[(0, vec![11]), (1, vec![30])]);
        assert!(v.playing("c2").is_empty());
        assert_eq!(v.caching("c3").collect::<Vec<_>>(), [0]);
        assert_eq!(*v, ClusterView::new(vec![(*a).clone(), (*b).clone()], w));
        // A member joins: a full build, in the order given.
        let c = node("c", &[("c2", 1)]);
        let v = cache.sync(&[&a, &c, &b], w);
        assert_eq!(v.index_of("c"), Some(1));
        assert_eq!(v.playing("c1"), &[(0, vec![11]), (2, vec![30])]);
        assert!(v.index_matches_rebuild());
    }
}
