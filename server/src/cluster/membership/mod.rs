//! Gossip membership: this node's keys in its gossip state, and the loop that re-reads the
//! members, re-elects and rebuilds the placement view from them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitchat::ChitchatId;
use tracing::{error, info};

use super::bindings::{self, CameraBindings};
use super::election;
use super::report::Report;
use super::report_keys::{self, Assembly, REPORT_KEY};
use super::shell::{Cluster, Member};
use crate::node::Node;

pub(super) const KEY_TERM: &str = "term";
/// The scheduler's pull-camera bindings ([`CameraBindings`], JSON).
pub(super) const KEY_BINDINGS: &str = "bindings";

/// Every member's last whole report with the version of its `report` key: a report is
/// parsed once per version, not on every refresh, and a report whose chunks are still on
/// their way leaves the previous one in place.
#[derive(Default)]
pub(super) struct ReportCache(Mutex<HashMap<String, (u64, Arc<Report>)>>);

impl ReportCache {
    fn get(&self, id: &str) -> Option<(u64, Arc<Report>)> {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.get(id).cloned()
    }

    fn put(&self, id: &str, version: u64, r: Arc<Report>) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(id.to_string(), (version, r));
    }

    /// Forgets nodes no longer in the membership.
    fn retain(&self, ids: &std::collections::HashSet<String>) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|k, _| ids.contains(k));
    }
}

impl Cluster {
    /// Sets this node's report in its gossip state: chunks first, then the `report` key
    /// naming their versions (`report_keys`).
    pub async fn publish(&self, r: &Report) {
        let split = report_keys::split(r.clone());
        let chitchat = self.handle.chitchat();
        let mut cc = chitchat.lock().await;
        publish_split(cc.self_node_state(), split);
    }

    /// Reads the membership view, re-elects, and rebuilds the placement view.
    pub(super) async fn refresh(&self) {
        let members = {
            let chitchat = self.handle.chitchat();
            let cc = chitchat.lock().await;
            let self_id = cc.self_chitchat_id().clone();
            // The newest generation of every node id (a restarted node is a new generation).
            let mut newest: BTreeMap<&str, &ChitchatId> = BTreeMap::new();
            for id in cc.node_states().keys() {
                let e = newest.entry(&*id.node_id).or_insert(id);
                if id.generation_id > e.generation_id {
                    *e = id;
                }
            }
            // Liveness of every gossip identity, not only the newest of each node id: two
            // live identities with one node id at two addresses are a misconfiguration
            // (`shared_ids`), not a restart.
            let live: HashSet<ChitchatId> = if self.phi_liveness {
                cc.live_nodes().cloned().collect()
            } else {
                let mut l = self.liveness.lock().unwrap_or_else(|p| p.into_inner());
                let now = self.epoch.elapsed().as_millis() as u64;
                l.observe(
                    now,
                    cc.node_states()
                        .iter()
                        .map(|(id, st)| (id.clone(), u64::from(st.heartbeat()))),
                );
                cc.node_states()
                    .keys()
                    .filter(|id| **id == self_id || l.is_alive(id))
                    .cloned()
                    .collect()
            };
            let conflicts = shared_ids(
                live.iter()
                    .map(|id| (id.node_id.as_str(), id.gossip_advertise_addr)),
            );
            // The bindings of the highest term any node published (ties: lowest scheduler id).
            let seen_bindings = newest
                .values()
                .filter_map(|id| cc.node_state(id)?.get(KEY_BINDINGS))
                .filter_map(|v| serde_json::from_str::<CameraBindings>(v).ok())
                .max_by(|a, b| a.rank().cmp(&b.rank()));
            let mut to_parse = Vec::new();
            let members = newest
                .values()
                .map(|id| {
                    let st = cc.node_state(id);
                    let node_id = id.node_id.to_string();
                    let cached = self.reports.get(&node_id);
                    if let Some(s) = st {
                        let known = cached.as_ref().map(|(v, _)| *v);
                        if let Some((version, Assembly::Ready { head, chunks })) = gather(s, known)
                        {
                            to_parse.push((node_id.clone(), version, head, chunks));
                        }
                    }
                    Member {
                        id: node_id,
                        gossip: id.gossip_advertise_addr,
                        alive: live.contains(*id),
                        term: st
                            .and_then(|s| s.get(KEY_TERM))
                            .and_then(|t| t.parse().ok())
                            .unwrap_or(0),
                        report_version: cached.as_ref().map_or(0, |(v, _)| *v),
                        report: cached.map(|(_, r)| r),
                    }
                })
                .collect::<Vec<_>>();
            (members, seen_bindings, to_parse, conflicts)
        };
        // Parsing runs outside the gossip lock, and only for reports that changed.
        let (mut members, seen_bindings, to_parse, conflicts) = members;
        self.note_id_conflicts(conflicts);
        for (id, version, head, chunks) in to_parse {
            let Some(r) = report_keys::assemble(&head, &chunks) else {
                continue;
            };
            let r = Arc::new(r);
            self.reports.put(&id, version, r.clone());
            if let Some(m) = members.iter_mut().find(|m| m.id == id) {
                m.report_version = version;
                m.report = Some(r);
            }
        }
        self.reports
            .retain(&members.iter().map(|m| m.id.clone()).collect());
        let (elected, watch, excluded) =
            election::elect(&members, self.grace_ms, &self.self_id, |id| {
                self.watches.is_lost(id)
            });
        for m in members.iter_mut().filter(|m| excluded.contains(&m.id)) {
            m.alive = false;
        }
        self.watches.follow(
            &watch
                .iter()
                .filter_map(|id| {
                    let m = members.iter().find(|m| m.id == *id)?;
                    let addr = m.report.as_ref()?.rpc.as_ref()?.parse().ok()?;
                    Some((id.clone(), addr))
                })
                .collect::<Vec<_>>(),
        );
        let new_term = {
            let mut st = self.state();
            let before = st.scheduler.clone();
            let new_term = election::update_term(&mut st, elected, &members);
            election::count_change(before.as_deref(), st.scheduler.as_deref(), st.had_peers);
            st.had_peers |= members
                .iter()
                .filter(|m| m.alive && m.report.is_some())
                .count()
                > 1;
            log_liveness(&st.members, &members, &excluded);
            st.set_members(members, self.policy_cfg.sched.weights);
            let new_term = bindings::adopt(&mut st, seen_bindings, &self.self_id).or(new_term);
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

/// Logs every member that died or came back since the last refresh, and why it died: the
/// failover timeline of docs/BENCHMARKS.md is read from these lines.
fn log_liveness(before: &[Member], now: &[Member], excluded: &[String]) {
    for m in now {
        let Some(was) = before.iter().find(|b| b.id == m.id) else {
            continue;
        };
        match (was.alive, m.alive) {
            (true, false) => {
                let cause = if excluded.contains(&m.id) {
                    "scheduler watch lost"
                } else {
                    "heartbeat stale"
                };
                info!(node = %m.id, cause, "member dead");
            }
            (false, true) => info!(node = %m.id, "member alive"),
            _ => {}
        }
    }
}

/// A node id that more than one live node gossips under, with their gossip addresses.
///
/// The cluster keys everything by node id (election, placement view, bindings, reports), so
/// two nodes sharing one are seen as one node whose state flips between them: elections
/// flap and placements go to whichever answered last. Chitchat keeps them apart (its
/// identity includes the address), which is what lets us see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdConflict {
    pub id: String,
    pub gossip: Vec<SocketAddr>,
}

/// The node ids among `live` (id, gossip address) claimed from more than one address,
/// sorted. A restart at the same address is a new generation of the same identity, not a
/// conflict.
pub(super) fn shared_ids<'a>(
    live: impl IntoIterator<Item = (&'a str, SocketAddr)>,
) -> Vec<IdConflict> {
    let mut by_id: BTreeMap<&str, BTreeSet<SocketAddr>> = BTreeMap::new();
    for (id, addr) in live {
        by_id.entry(id).or_default().insert(addr);
    }
    by_id
        .into_iter()
        .filter(|(_, addrs)| addrs.len() > 1)
        .map(|(id, addrs)| IdConflict {
            id: id.to_string(),
            gossip: addrs.into_iter().collect(),
        })
        .collect()
}

impl Cluster {
    /// Keeps the current id conflicts for the API and logs each change: an error when one
    /// appears (an operator must rename a node), a note when it is gone.
    fn note_id_conflicts(&self, now: Vec<IdConflict>) {
        let mut st = self.state();
        if st.id_conflicts == now {
            return;
        }
        for c in now.iter().filter(|c| !st.id_conflicts.contains(c)) {
            error!(
                node = %c.id,
                gossip = ?c.gossip,
                "several live nodes use this node id; the cluster sees them as one node \
                 (elections flap, placements mix them up): give each its own [node] id"
            );
        }
        for c in st.id_conflicts.iter().filter(|c| !now.contains(c)) {
            info!(node = %c.id, "node id no longer shared");
        }
        st.id_conflicts = now;
    }

    /// Node ids that more than one live node uses (see [`IdConflict`]).
    pub fn id_conflicts(&self) -> Vec<IdConflict> {
        self.state().id_conflicts.clone()
    }
}

/// Sets a split report in a node state: chunks, obsolete chunks deleted, then the head.
pub(super) fn publish_split(st: &mut chitchat::NodeState, split: report_keys::Split) {
    for (k, v) in &split.chunks {
        st.set(k, v);
    }
    let obsolete = split.obsolete(st.key_values().map(|(k, _)| k));
    for k in obsolete {
        st.delete(&k);
    }
    let head = split.head(|k| st.get_versioned(k).map_or(0, |v| v.version));
    st.set(REPORT_KEY, head);
}

/// The version of a node's report head and what assembling it takes, unless the head is
/// absent or still the `known` version.
pub(super) fn gather(st: &chitchat::NodeState, known: Option<u64>) -> Option<(u64, Assembly)> {
    let h = st.get_versioned(REPORT_KEY).filter(|v| !v.is_deleted())?;
    if known == Some(h.version) {
        return None;
    }
    let chunk = |k: &str| {
        st.get_versioned(k)
            .filter(|v| !v.is_deleted())
            .map(|v| (v.version, v.value.as_str()))
    };
    Some((h.version, report_keys::gather(&h.value, chunk)))
}

/// Membership and election are re-read every 100 ms (cheap: reports are parsed only when
/// their version changes).
pub(super) async fn refresh_loop(node: Arc<Node>, cluster: Arc<Cluster>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => break,
            _ = tick.tick() => {
                cluster.refresh().await;
                cluster.run_rem(node.config.cluster.migration.rem);
                cluster.run_planner();
                cluster.run_gateway();
                // The node's pulls follow the bindings (once `ingest` has registered).
                if let Some(host) = cluster.camera_host.get() {
                    host.follow_bindings();
                }
            }
        }
    }
    cluster.watches.stop_all();
    if let Some(r) = &cluster.rpc {
        r.endpoint.close(0u32.into(), b"shutdown");
    }
    let _ = cluster.handle.initiate_shutdown();
}

#[cfg(test)]
mod tests;
