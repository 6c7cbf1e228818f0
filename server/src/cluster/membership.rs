//! Gossip membership: this node's keys in its gossip state, and the loop that re-reads the
//! members, re-elects and rebuilds the placement view from them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chitchat::ChitchatId;

use super::bindings::{self, CameraBindings};
use super::election;
use super::report::Report;
use super::shell::{Cluster, Member};
use crate::node::Node;

pub(super) const KEY_REPORT: &str = "report";
pub(super) const KEY_TERM: &str = "term";
/// The scheduler's pull-camera bindings ([`CameraBindings`], JSON).
pub(super) const KEY_BINDINGS: &str = "bindings";

impl Cluster {
    /// Sets this node's report in its gossip state.
    pub async fn publish(&self, r: &Report) {
        let json = serde_json::to_string(r).unwrap_or_default();
        let chitchat = self.handle.chitchat();
        let mut cc = chitchat.lock().await;
        cc.self_node_state().set(KEY_REPORT, json);
    }

    /// Reads the membership view, re-elects, and rebuilds the placement view.
    pub(super) async fn refresh(&self) {
        let (members, seen_bindings) = {
            let chitchat = self.handle.chitchat();
            let cc = chitchat.lock().await;
            let live: std::collections::HashSet<&ChitchatId> = cc.live_nodes().collect();
            // The newest generation of every node id (a restarted node is a new generation).
            let mut newest: BTreeMap<&str, &ChitchatId> = BTreeMap::new();
            for id in cc.node_states().keys() {
                let e = newest.entry(&*id.node_id).or_insert(id);
                if id.generation_id > e.generation_id {
                    *e = id;
                }
            }
            // The bindings of the highest term any node published (ties: lowest scheduler id).
            let seen_bindings = newest
                .values()
                .filter_map(|id| cc.node_state(id)?.get(KEY_BINDINGS))
                .filter_map(|v| serde_json::from_str::<CameraBindings>(v).ok())
                .max_by(|a, b| {
                    a.term
                        .cmp(&b.term)
                        .then_with(|| b.scheduler.cmp(&a.scheduler))
                });
            let members = newest
                .values()
                .map(|id| {
                    let st = cc.node_state(id);
                    let report_v = st.and_then(|s| s.get_versioned(KEY_REPORT));
                    Member {
                        id: id.node_id.to_string(),
                        gossip: id.gossip_advertise_addr,
                        alive: live.contains(id),
                        term: st
                            .and_then(|s| s.get(KEY_TERM))
                            .and_then(|t| t.parse().ok())
                            .unwrap_or(0),
                        report_version: report_v.map_or(0, |v| v.version),
                        report: report_v.and_then(|v| serde_json::from_str(&v.value).ok()),
                    }
                })
                .collect::<Vec<_>>();
            (members, seen_bindings)
        };
        let elected = election::elect(&members, self.grace_ms);
        let new_term = {
            let mut st = self.state();
            let new_term = election::update_term(&mut st, elected, &members);
            st.set_members(members);
            bindings::adopt(&mut st, seen_bindings);
            let publish = self.bind_cameras(&mut st);
            (new_term, publish)
        };
        let (new_term, publish) = new_term;
        if new_term.is_some() || publish.is_some() {
            let chitchat = self.handle.chitchat();
            let mut cc = chitchat.lock().await;
            if let Some(t) = new_term {
                cc.self_node_state().set(KEY_TERM, t.to_string());
            }
            if let Some(b) = publish {
                cc.self_node_state()
                    .set(KEY_BINDINGS, serde_json::to_string(&b).unwrap_or_default());
            }
        }
    }
}

/// Membership and election are re-read every 100 ms (cheap: a few nodes' key/values).
pub(super) async fn refresh_loop(node: Arc<Node>, cluster: Arc<Cluster>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => break,
            _ = tick.tick() => {
                cluster.refresh().await;
                cluster.run_rem(node.config.cluster.migration.rem);
                bindings::follow_bindings(&node, &cluster);
            }
        }
    }
    if let Some(r) = &cluster.rpc {
        r.endpoint.close(0u32.into(), b"shutdown");
    }
    let _ = cluster.handle.initiate_shutdown();
}
