//! Pull-camera bindings (§B): the scheduler binds each pull camera to one live node and
//! publishes the bindings; every node follows the bindings of the highest term it sees.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use tracing::info;

use super::now_ms;
use super::shell::{record, Cluster, DecisionRecord, State};

/// Which node pulls each pull camera (§B, issue 4 §6): made by the scheduler, published in
/// its gossip state with its term; every node follows the bindings of the highest term.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct CameraBindings {
    pub term: u64,
    pub scheduler: String,
    /// camera → node.
    pub cameras: BTreeMap<String, String>,
    /// Camera moves under way (§B.5): camera → destination, until it is re-bound there.
    #[serde(default)]
    pub moving: BTreeMap<String, String>,
}

impl CameraBindings {
    /// Which set wins: the higher term, at equal terms the lower scheduler id. The one
    /// order for choosing among the sets seen and against the set followed.
    pub(super) fn rank(&self) -> (u64, std::cmp::Reverse<&str>) {
        (self.term, std::cmp::Reverse(self.scheduler.as_str()))
    }
}

/// Takes `seen` (the highest-ranked set published) when it ranks at least as high as the
/// bindings followed.
///
/// The scheduler that takes another node's bindings moves to a term above theirs (returned,
/// to publish): its own decisions from then on outrank them. At start-up several nodes
/// briefly believe themselves scheduler and publish bindings at their own terms; the
/// elected one adopts the highest, and a camera move it then decided at its lower term was
/// undone by that stale set at every node (the camera went back to where the move took it
/// from, and the destination let its pull go).
///
/// A set from a node this one does not elect (the other side of a healed partition, met
/// before its scheduler gave way) is [`merge`]d: a camera keeps the binding followed when
/// that node records it. Without that the side whose scheduler had counted more terms
/// won at every node, and the cameras the other side recorded through the cut were
/// handed over at the heal (a recording gap and an outage of its viewers, for no fault
/// of theirs: the chaos run's partition rows).
pub(super) fn adopt(st: &mut State, seen: Option<CameraBindings>, self_id: &str) -> Option<u64> {
    let b = seen?;
    let scheduling = st.scheduler.as_deref() == Some(self_id);
    let (take, term) = adoption(&st.bindings, &b, self_id, scheduling, st.term);
    if take {
        st.bindings = if st.scheduler.as_deref() == Some(b.scheduler.as_str()) {
            b
        } else {
            merge(&st.bindings, b, &recording(&st.members))
        };
    }
    if let Some(t) = term {
        st.term = t;
    }
    term
}

/// (camera, node) for every camera an alive, not draining node reports recording.
fn recording(members: &[super::shell::Member]) -> BTreeSet<(String, String)> {
    members
        .iter()
        .filter(|m| m.alive)
        .filter_map(|m| Some((m, m.report.as_ref()?)))
        .filter(|(_, r)| !r.draining)
        .flat_map(|(m, r)| r.recording.iter().map(|c| (c.clone(), m.id.clone())))
        .collect()
}

/// `seen`, except that a camera `followed` binds to the node recording it stays there.
/// Only ever keeps a binding this node already follows, so a camera move (whose
/// destination does not record until the source let go) or a failover is taken as it
/// came.
fn merge(
    followed: &CameraBindings,
    mut seen: CameraBindings,
    recording: &BTreeSet<(String, String)>,
) -> CameraBindings {
    for (camera, node) in &followed.cameras {
        if seen.cameras.get(camera) != Some(node)
            && recording.contains(&(camera.clone(), node.clone()))
        {
            seen.cameras.insert(camera.clone(), node.clone());
        }
    }
    seen
}

/// [`adopt`]'s rule, pure: whether `seen` replaces `followed`, and the scheduler's new term
/// when it must outrank them.
fn adoption(
    followed: &CameraBindings,
    seen: &CameraBindings,
    self_id: &str,
    scheduling: bool,
    term: u64,
) -> (bool, Option<u64>) {
    let take = seen.rank() >= followed.rank();
    let outrank = take && scheduling && seen.scheduler != self_id && term <= seen.term;
    (take, outrank.then_some(seen.term + 1))
}

impl Cluster {
    /// The scheduler's part of §B: keeps every pull camera bound to a live node, re-binding
    /// at once the cameras of a node that died (§B.2 load, §B.4 roulette). Returns the
    /// bindings to publish when they changed (or the term did).
    pub(super) fn bind_cameras(&self, st: &mut State) -> Option<CameraBindings> {
        let pull_cameras = self.pull_cameras();
        if st.scheduler.as_deref() != Some(self.self_id.as_str()) || pull_cameras.is_empty() {
            return None;
        }
        let live: Vec<vigil_cluster::gateway::GatewayNode> = st
            .members
            .iter()
            .filter(|m| m.alive)
            .filter_map(|m| {
                let r = m.report.as_ref()?;
                // A draining node keeps no camera: its cameras are re-bound like a dead
                // node's.
                if r.draining {
                    return None;
                }
                Some(vigil_cluster::gateway::GatewayNode {
                    node: m.id.clone(),
                    r_cpu: r.cpu,
                    stream_bytes_per_s: r.streams.iter().map(|s| s.vbr_bps / 8.0).collect(),
                })
            })
            .collect();
        let State { rng, bindings, .. } = &mut *st;
        let (map, changes) = vigil_cluster::gateway::bind_cameras(
            &pull_cameras,
            &bindings.cameras,
            &live,
            &self.policy_cfg.gateway,
            rng,
        );
        let next = CameraBindings {
            term: st.term,
            scheduler: self.self_id.clone(),
            cameras: map,
            moving: st.bindings.moving.clone(),
        };
        if next == st.bindings {
            return None;
        }
        for c in changes {
            info!(camera = %c.camera, node = %c.node, previous = ?c.previous, "camera bound");
            record(
                st,
                DecisionRecord {
                    at_ms: now_ms(),
                    kind: "bind",
                    camera: c.camera,
                    time_ms: now_ms(),
                    node: Some(c.node),
                    redirected: false,
                    reason: c.reason,
                    via: "scheduler",
                    decided_by: self.self_id.clone(),
                    asked_by: None,
                    vbr_bps: None,
                },
            );
        }
        st.bindings = next.clone();
        Some(next)
    }

    /// Whether the scheduler bound this pull camera to this node.
    pub fn holds(&self, camera: &str) -> bool {
        self.state().bindings.cameras.get(camera) == Some(&self.self_id)
    }

    /// The bindings this node follows.
    pub fn bindings(&self) -> CameraBindings {
        self.state().bindings.clone()
    }

    /// Another alive node the pull camera is bound to, and its RTSP base: where a live
    /// DESCRIBE goes even before that node has the camera live (on-demand).
    pub fn bound_holder(&self, camera: &str) -> Option<(String, String)> {
        let st = self.state();
        let id = st.bindings.cameras.get(camera)?;
        if *id == self.self_id {
            return None;
        }
        let m = st.members.iter().find(|m| &m.id == id && m.alive)?;
        Some((id.clone(), m.report.as_ref()?.rtsp.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(term: u64, scheduler: &str, camera_on: &str) -> CameraBindings {
        CameraBindings {
            term,
            scheduler: scheduler.into(),
            cameras: [("gate".to_string(), camera_on.to_string())].into(),
            moving: BTreeMap::new(),
        }
    }

    /// The start-up race the camera-move test met: "n0" is elected at term 1, "n2" had
    /// bound gate to itself at term 2. n0 takes n2's set and moves to term 3, so the move it
    /// decides next (published at 3) outranks n2's stale set everywhere.
    #[test]
    fn the_scheduler_outranks_the_bindings_it_takes_from_another_node() {
        let followed = set(1, "n0", "n0");
        let stale = set(2, "n2", "n2");
        assert_eq!(adoption(&followed, &stale, "n0", true, 1), (true, Some(3)));
        // A node that does not schedule only follows.
        assert_eq!(adoption(&followed, &stale, "n1", false, 3), (true, None));
        // The scheduler's own set, or one below its term, changes no term.
        assert_eq!(
            adoption(&followed, &set(2, "n0", "n1"), "n0", true, 2),
            (true, None)
        );
        assert_eq!(adoption(&followed, &stale, "n0", true, 5), (true, None));
        // An older set is not taken; at equal terms the lower scheduler id wins.
        assert_eq!(adoption(&stale, &followed, "n0", true, 1), (false, None));
        assert_eq!(
            adoption(&set(2, "n1", "n1"), &stale, "n1", false, 2),
            (false, None)
        );
    }

    fn cams(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(c, n)| (c.to_string(), n.to_string()))
            .collect()
    }

    /// The heal of the chaos run (seed 1): n4 recorded cam1 and cam2 through a cut of
    /// {n2, n3}, whose scheduler had re-bound them to n2 and n3 at a higher term; cam3 was
    /// bound to n5 but recorded by nobody yet. Meeting n2's set, a node keeps cam1 and cam2
    /// on n4 and takes the rest as n2's set says.
    #[test]
    fn a_heal_keeps_each_camera_with_the_node_that_recorded_it_through_the_cut() {
        let followed = CameraBindings {
            term: 9,
            scheduler: "n1".into(),
            cameras: cams(&[("cam1", "n4"), ("cam2", "n4"), ("cam3", "n5")]),
            moving: BTreeMap::new(),
        };
        let minority = CameraBindings {
            term: 12,
            scheduler: "n2".into(),
            cameras: cams(&[("cam1", "n2"), ("cam2", "n3"), ("cam3", "n2")]),
            moving: BTreeMap::new(),
        };
        let recording: BTreeSet<(String, String)> = [("cam1", "n4"), ("cam2", "n4")]
            .iter()
            .map(|(c, n)| (c.to_string(), n.to_string()))
            .collect();
        let merged = merge(&followed, minority.clone(), &recording);
        assert_eq!(
            merged.cameras,
            cams(&[("cam1", "n4"), ("cam2", "n4"), ("cam3", "n2")])
        );
        // The rank stays the seen set's: the scheduler then outranks it as before.
        assert_eq!((merged.term, merged.scheduler.as_str()), (12, "n2"));
        // A camera moving away from its recorder (the destination does not record before
        // the source let go) is taken as it came when the followed set already moved it.
        let moved = CameraBindings {
            cameras: cams(&[("cam1", "n5"), ("cam2", "n4"), ("cam3", "n5")]),
            ..followed.clone()
        };
        let seen = CameraBindings {
            term: 10,
            cameras: cams(&[("cam1", "n2"), ("cam2", "n4"), ("cam3", "n5")]),
            ..minority
        };
        assert_eq!(
            merge(&moved, seen.clone(), &recording).cameras,
            seen.cameras
        );
    }
}
