//! Two versions of the cameras → what a node does about it, pure. A node applies the
//! actions of one camera without touching any other camera's sessions.

use std::collections::BTreeMap;
use vigil_conf::{CameraConfig, Source};

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Serve it: added, or enabled again.
    Start(CameraConfig),
    /// Stop serving it: removed (`removed`) or disabled. Its viewers end (RTCP BYE / close),
    /// its source and recorder stop; its recordings stay until retention takes them.
    Stop { id: String, removed: bool },
    /// The same kind of source at another URL, or other pull settings: the pull reconnects
    /// and the viewers splice onto the new one at its first keyframe (as on an upstream
    /// reconnect).
    Repoint(CameraConfig),
    /// The kind of source changed (push, demo, pull): stopped, then started.
    Replace(CameraConfig),
    /// Recording turned on or off.
    Record(CameraConfig),
    /// Labels, group, retention, segment length: nothing for the media to do.
    Describe(CameraConfig),
}

impl Action {
    pub fn camera(&self) -> &str {
        match self {
            Action::Stop { id, .. } => id,
            Action::Start(c)
            | Action::Repoint(c)
            | Action::Replace(c)
            | Action::Record(c)
            | Action::Describe(c) => &c.id,
        }
    }
}

fn kind(s: &Source) -> u8 {
    match s {
        Source::Push => 0,
        Source::Demo => 1,
        Source::Pull { .. } => 2,
    }
}

/// The actions that take a node serving `old` to `new` (both resolved, ids as keys), in id
/// order; cameras equal in both give none.
pub fn diff(
    old: &BTreeMap<String, CameraConfig>,
    new: &BTreeMap<String, CameraConfig>,
) -> Vec<Action> {
    let served =
        |m: &BTreeMap<String, CameraConfig>, id: &str| m.get(id).is_some_and(|c| c.enabled);
    let mut ids: Vec<&String> = old.keys().chain(new.keys()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut out = Vec::new();
    for id in ids {
        let (was, is) = (served(old, id), served(new, id));
        match (was, is, old.get(id), new.get(id)) {
            (false, true, _, Some(n)) => out.push(Action::Start(n.clone())),
            (true, false, _, n) => out.push(Action::Stop {
                id: id.clone(),
                removed: n.is_none(),
            }),
            (true, true, Some(o), Some(n)) if o != n => {
                if kind(&o.source) != kind(&n.source) {
                    out.push(Action::Replace(n.clone()));
                    continue;
                }
                let repoint = o.source != n.source
                    || o.pull_transport != n.pull_transport
                    || o.on_demand != n.on_demand;
                if repoint {
                    out.push(Action::Repoint(n.clone()));
                }
                if o.record != n.record {
                    out.push(Action::Record(n.clone()));
                }
                if !repoint && o.record == n.record {
                    out.push(Action::Describe(n.clone()));
                }
            }
            (false, false, Some(o), Some(n)) if o != n => out.push(Action::Describe(n.clone())),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(cams: &[CameraConfig]) -> BTreeMap<String, CameraConfig> {
        cams.iter().map(|c| (c.id.clone(), c.clone())).collect()
    }

    fn pull(id: &str, url: &str) -> CameraConfig {
        CameraConfig::new(id, Source::Pull { url: url.into() })
    }

    #[test]
    fn each_change_of_a_camera_is_the_least_its_viewers_notice() {
        let a = pull("a", "rtsp://h/a");
        let b = CameraConfig::new("b", Source::Push);
        let c = pull("c", "rtsp://h/c");
        let d = pull("d", "rtsp://h/d");
        let e = CameraConfig::new("e", Source::Push);
        let old = map(&[a.clone(), b.clone(), c.clone(), d.clone(), e.clone()]);
        let a2 = pull("a", "rtsp://h2/a");
        let b2 = CameraConfig {
            enabled: false,
            ..b.clone()
        };
        let d2 = CameraConfig {
            record: false,
            labels: [("k".into(), "v".into())].into(),
            ..d.clone()
        };
        let e2 = pull("e", "rtsp://h/e");
        let f = CameraConfig::new("f", Source::Demo);
        let new = map(&[a2.clone(), b2, d2.clone(), e2.clone(), f.clone()]);
        assert_eq!(
            diff(&old, &new),
            vec![
                Action::Repoint(a2),
                Action::Stop {
                    id: "b".into(),
                    removed: false
                },
                Action::Stop {
                    id: "c".into(),
                    removed: true
                },
                Action::Record(d2),
                Action::Replace(e2),
                Action::Start(f),
            ]
        );
        assert!(diff(&old, &old).is_empty());
        // Enabled again: started; a disabled camera's edits only describe it.
        let off = map(&[CameraConfig {
            enabled: false,
            ..b.clone()
        }]);
        assert_eq!(
            diff(&off, &map(std::slice::from_ref(&b))),
            vec![Action::Start(b.clone())]
        );
        let off2 = map(&[CameraConfig {
            enabled: false,
            group: Some("g".into()),
            ..b
        }]);
        assert!(matches!(diff(&off, &off2)[..], [Action::Describe(_)]));
    }
}
