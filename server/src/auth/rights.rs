//! What a request needs (a right on a camera) and whether a set of patterns grants it. Pure.

use vigil_conf::Rights;
use vigil_proto::rtsp::Method;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Right {
    /// Watch a live camera.
    Read,
    /// Play its recordings.
    Playback,
    /// Publish it.
    Publish,
    /// Steer it (PTZ, through the admin API).
    Ptz,
    /// Export its recordings as files (HTTP only).
    Export,
}

impl Right {
    pub fn name(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::Playback => "playback",
            Right::Publish => "publish",
            Right::Ptz => "ptz",
            Right::Export => "export",
        }
    }
}

/// The right and camera a request needs, from its method and URL path (`live/cam[/track]`,
/// `playback/cam[/track]`). None: the request needs no right of its own — OPTIONS, or a
/// method that acts only on this connection's session (set up by an authorised SETUP).
/// `announced`: the path this connection ANNOUNCEd, whose SETUPs are publishing.
pub fn required(method: &Method, path: &str, announced: Option<&str>) -> Option<(Right, String)> {
    let (kind, rest) = path.split_once('/').unwrap_or((path, ""));
    let camera = rest.split('/').next().unwrap_or("").to_string();
    let right = match (method, kind) {
        (Method::Describe | Method::Setup, "playback") => Right::Playback,
        (Method::Setup, "live")
            if announced.is_some_and(|a| path == a || path.starts_with(&format!("{a}/"))) =>
        {
            Right::Publish
        }
        (Method::Describe | Method::Setup, _) => Right::Read,
        (Method::Announce, _) => Right::Publish,
        _ => return None,
    };
    // A path outside live/ and playback/ is named whole: only a `*` pattern matches it.
    let camera = if kind == "live" || kind == "playback" {
        camera
    } else {
        path.to_string()
    };
    Some((right, camera))
}

/// Whether `rights` grant `right` on `camera`.
pub fn grants(rights: &Rights, right: Right, camera: &str) -> bool {
    let patterns = match right {
        Right::Read => &rights.read,
        Right::Playback => &rights.playback,
        Right::Publish => &rights.publish,
        Right::Ptz => &rights.ptz,
        Right::Export => &rights.export,
    };
    patterns.iter().any(|p| glob(p, camera))
}

/// `*` matches any run of characters; everything else matches itself. Hand-written: ten
/// lines against a glob crate's path semantics (`/`, `**`, classes) that camera ids lack.
fn glob(pattern: &str, text: &str) -> bool {
    let Some((head, tail)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(rest) = text.strip_prefix(head) else {
        return false;
    };
    (0..=rest.len())
        .filter(|&i| rest.is_char_boundary(i))
        .any(|i| glob(tail, &rest[i..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("*", "gate-1"));
        assert!(glob("gate-*", "gate-1"));
        assert!(!glob("gate-*", "lobby"));
        assert!(glob("*-1", "gate-1"));
        assert!(glob("g*e*1", "gate-1"));
        assert!(!glob("gate", "gate-1"));
        assert!(glob("gate-1", "gate-1"));
    }

    #[test]
    fn requests_need_rights() {
        let r = |m: Method, p: &str, a: Option<&str>| required(&m, p, a);
        assert_eq!(
            r(Method::Describe, "live/gate-1", None),
            Some((Right::Read, "gate-1".into()))
        );
        assert_eq!(
            r(Method::Setup, "live/gate-1/trackID=0", None),
            Some((Right::Read, "gate-1".into()))
        );
        assert_eq!(
            r(Method::Describe, "playback/gate-1", None),
            Some((Right::Playback, "gate-1".into()))
        );
        assert_eq!(
            r(Method::Setup, "playback/gate-1/trackID=1", None),
            Some((Right::Playback, "gate-1".into()))
        );
        assert_eq!(
            r(Method::Announce, "live/gate-1", None),
            Some((Right::Publish, "gate-1".into()))
        );
        assert_eq!(
            r(Method::Setup, "live/gate-1/streamid=0", Some("live/gate-1")),
            Some((Right::Publish, "gate-1".into()))
        );
        // Announcing gate-1 does not make a SETUP of gate-10 a publish.
        assert_eq!(
            r(
                Method::Setup,
                "live/gate-10/streamid=0",
                Some("live/gate-1")
            ),
            Some((Right::Read, "gate-10".into()))
        );
        assert_eq!(
            r(Method::Describe, "other", None),
            Some((Right::Read, "other".into()))
        );
        for m in [
            Method::Options,
            Method::Play,
            Method::Teardown,
            Method::GetParameter,
        ] {
            assert_eq!(r(m, "live/gate-1", None), None);
        }
    }

    #[test]
    fn rights_grant_by_pattern() {
        let rights = Rights {
            read: vec!["*".into()],
            playback: vec!["gate-*".into()],
            publish: vec![],
            ..Rights::default()
        };
        assert!(grants(&rights, Right::Read, "lobby"));
        assert!(grants(&rights, Right::Playback, "gate-2"));
        assert!(!grants(&rights, Right::Playback, "lobby"));
        assert!(!grants(&rights, Right::Publish, "gate-2"));
    }
}
