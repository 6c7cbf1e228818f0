//! Camera, recording, member and scheduler events derived by sampling the node's state and
//! comparing it with the previous sample, rather than by calls in the code that changes it.
//!
//! Why: the places a camera goes live or silent, or a recorder starts or fails, are the
//! media path and its error paths; an emit in each would be one more thing for them to get
//! right, and a missed one a silent gap. A sample every `[webhooks] sample_ms` (1 s) reads
//! what the API already shows, and `diff` is a pure function of two samples. The cost: a
//! state that flips and flips back between two samples is not reported.

use crate::node::events::Event;
use std::collections::{BTreeMap, BTreeSet};

/// A camera's recording as sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    Recording,
    Error(String),
}

/// What one sample saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Cameras whose stream is live on this node (held here, not relayed).
    pub online: BTreeSet<String>,
    /// Cameras recording or in error (others are idle).
    pub recording: BTreeMap<String, Rec>,
    /// Cluster members and whether each is alive (empty without a cluster).
    pub members: BTreeMap<String, bool>,
    /// The scheduler and its term (None: no cluster, or none elected).
    pub scheduler: Option<(String, u64)>,
    /// This node is the scheduler: it alone reports members and the scheduler, so a
    /// receiver hears each of those once, not once per node.
    pub is_scheduler: bool,
}

/// The events between two samples, in a fixed order (cameras, recordings, members, the
/// scheduler), each list sorted by name.
pub fn diff(prev: &Snapshot, now: &Snapshot) -> Vec<Event> {
    let mut out = Vec::new();
    for c in now.online.difference(&prev.online) {
        out.push(Event::CameraOnline { camera: c.clone() });
    }
    for c in prev.online.difference(&now.online) {
        out.push(Event::CameraOffline { camera: c.clone() });
    }
    let cams: BTreeSet<&String> = prev.recording.keys().chain(now.recording.keys()).collect();
    for c in cams {
        let (p, n) = (prev.recording.get(c), now.recording.get(c));
        let camera = || c.clone();
        match (p, n) {
            (Some(Rec::Recording), Some(Rec::Recording)) => {}
            (_, Some(Rec::Recording)) => out.push(Event::RecordingStarted { camera: camera() }),
            (Some(Rec::Recording), _) => out.push(Event::RecordingStopped { camera: camera() }),
            _ => {}
        }
        if let Some(Rec::Error(e)) = n {
            if p != n {
                out.push(Event::RecordingError {
                    camera: camera(),
                    error: e.clone(),
                });
            }
        }
    }
    if now.is_scheduler {
        for (m, &alive) in &now.members {
            let was = prev.members.get(m).copied().unwrap_or(false);
            if alive && !was {
                out.push(Event::NodeUp { member: m.clone() });
            } else if !alive && was {
                out.push(Event::NodeDown { member: m.clone() });
            }
        }
        for (m, _) in prev
            .members
            .iter()
            .filter(|(m, &a)| a && !now.members.contains_key(*m))
        {
            out.push(Event::NodeDown { member: m.clone() });
        }
        if now.scheduler != prev.scheduler {
            if let Some((s, term)) = &now.scheduler {
                out.push(Event::SchedulerChanged {
                    scheduler: Some(s.clone()),
                    term: *term,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn cameras_going_live_and_silent() {
        let a = Snapshot {
            online: set(&["a", "b"]),
            ..Default::default()
        };
        let b = Snapshot {
            online: set(&["b", "c"]),
            ..Default::default()
        };
        assert_eq!(
            diff(&a, &b),
            [
                Event::CameraOnline { camera: "c".into() },
                Event::CameraOffline { camera: "a".into() }
            ]
        );
        assert_eq!(diff(&b, &b), []);
    }

    #[test]
    fn recordings_start_stop_and_fail_once() {
        let rec = |v: &[(&str, Rec)]| Snapshot {
            recording: v.iter().map(|(c, r)| (c.to_string(), r.clone())).collect(),
            ..Default::default()
        };
        let idle = rec(&[]);
        let on = rec(&[("g", Rec::Recording)]);
        let err = rec(&[("g", Rec::Error("disk full".into()))]);
        assert_eq!(
            diff(&idle, &on),
            [Event::RecordingStarted { camera: "g".into() }]
        );
        assert_eq!(
            diff(&on, &idle),
            [Event::RecordingStopped { camera: "g".into() }]
        );
        assert_eq!(
            diff(&on, &err),
            [
                Event::RecordingStopped { camera: "g".into() },
                Event::RecordingError {
                    camera: "g".into(),
                    error: "disk full".into()
                }
            ]
        );
        assert_eq!(diff(&err, &err), [], "an error is reported once");
        assert_eq!(
            diff(&err, &on),
            [Event::RecordingStarted { camera: "g".into() }]
        );
    }

    #[test]
    fn members_and_the_scheduler_are_reported_by_the_scheduler_only() {
        let view = |members: &[(&str, bool)], sched: &str, term, is_scheduler| Snapshot {
            members: members.iter().map(|(m, a)| (m.to_string(), *a)).collect(),
            scheduler: Some((sched.to_string(), term)),
            is_scheduler,
            ..Default::default()
        };
        let before = view(&[("n1", true), ("n2", true), ("n3", true)], "n1", 1, false);
        let after = view(&[("n1", false), ("n2", true), ("n4", true)], "n2", 2, true);
        assert_eq!(
            diff(&before, &after),
            [
                Event::NodeDown {
                    member: "n1".into()
                },
                Event::NodeUp {
                    member: "n4".into()
                },
                Event::NodeDown {
                    member: "n3".into()
                },
                Event::SchedulerChanged {
                    scheduler: Some("n2".into()),
                    term: 2
                },
            ]
        );
        // The same change seen by a member that is not the scheduler: nothing.
        let mut other = after.clone();
        other.is_scheduler = false;
        assert_eq!(diff(&before, &other), []);
    }
}
