//! What the HTTP side writes into the audit trail (`crate::audit`), decided from the
//! request the gate judged and the status it got: an export with its range, the first HLS
//! playlist of a viewer, a PTZ command, every write of the operate and admin roles. Live and
//! playback sessions (RTSP, WebRTC) are written by the node's session registry, sign-ins by
//! `signin`. Pure but for [`HlsSeen`]'s map, which is bounded.

use super::access::{Need, Principal};
use crate::audit::Event;
use crate::auth::Right;
use axum::http::Method;
use std::collections::HashMap;
use std::sync::Mutex;

/// A request the gate let through, as the trail needs it.
pub struct Served<'a> {
    pub who: &'a Principal,
    pub need: &'a Need,
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub status: u16,
    pub client: String,
    pub at_ms: i64,
}

/// `name=value` of a query string, percent-decoded.
fn param(query: Option<&str>, name: &str) -> Option<String> {
    url::form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// An RFC 3339 time of a query as Unix ms.
fn time_param(query: Option<&str>, name: &str) -> Option<i64> {
    vigil_proto::rtsp::UtcTime::parse_rfc3339(&param(query, name)?)
        .ok()
        .map(|t| t.unix_millis)
}

/// The event `s` makes, if any. `first_view`: whether an HLS playlist request starts a
/// viewer (its first playlist in a while, `HlsSeen`).
pub fn event_of(s: &Served<'_>, first_view: impl FnOnce(&str) -> bool) -> Option<Event> {
    let base = |kind: &str| Event {
        at_ms: s.at_ms,
        kind: kind.to_string(),
        user: s.who.name().to_string(),
        client: s.client.clone(),
        ..Event::default()
    };
    let mut detail = serde_json::Map::new();
    detail.insert("status".into(), s.status.into());
    let read = s.method == Method::GET || s.method == Method::HEAD;
    match s.need {
        Need::Camera(Right::Export, camera) => Some(Event {
            camera: Some(camera.clone()),
            protocol: Some("http".into()),
            from_ms: time_param(s.query, "start"),
            to_ms: time_param(s.query, "end"),
            detail,
            ..base("export")
        }),
        Need::Camera(right @ (Right::Read | Right::Playback), camera)
            if read && s.path.starts_with("/hls/") && s.path.ends_with("/index.m3u8") =>
        {
            let kind = if *right == Right::Read {
                "live.start"
            } else {
                "playback.start"
            };
            let key = format!(
                "{kind}|{}|{}|{camera}|{}",
                s.who.name(),
                s.client,
                param(s.query, "start").unwrap_or_default()
            );
            (s.status < 400 && first_view(&key)).then(|| Event {
                camera: Some(camera.clone()),
                protocol: Some("hls".into()),
                from_ms: time_param(s.query, "start"),
                to_ms: time_param(s.query, "end"),
                ..base(kind)
            })
        }
        Need::Camera(Right::Ptz, camera) => Some(Event {
            camera: Some(camera.clone()),
            protocol: Some("http".into()),
            detail,
            ..base("ptz")
        }),
        Need::Operate | Need::Admin if !read && s.method != Method::OPTIONS => {
            detail.insert("method".into(), s.method.as_str().into());
            detail.insert("path".into(), s.path.into());
            let kind = if *s.need == Need::Operate {
                "operate"
            } else {
                "change"
            };
            Some(Event {
                detail,
                ..base(kind)
            })
        }
        _ => None,
    }
}

/// HLS viewers seen lately: a player asks for its playlist every second or two, and one
/// viewing is one record. A key comes back as new after `window_ms` without a request.
pub struct HlsSeen {
    seen: Mutex<HashMap<String, i64>>,
    window_ms: i64,
    max: usize,
}

impl HlsSeen {
    pub fn new(window_ms: i64, max: usize) -> Self {
        Self {
            seen: Mutex::new(HashMap::new()),
            window_ms,
            max,
        }
    }

    /// Whether `key` starts a viewing at `now_ms` (and notes it). A full map forgets the
    /// stale keys first, then everything (the trail then has a record more, never less).
    pub fn first(&self, key: &str, now_ms: i64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = seen
            .get(key)
            .is_none_or(|&last| now_ms - last >= self.window_ms);
        if seen.len() >= self.max && !seen.contains_key(key) {
            let window = self.window_ms;
            seen.retain(|_, last| now_ms - *last < window);
            if seen.len() >= self.max {
                seen.clear();
            }
        }
        seen.insert(key.to_string(), now_ms);
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn guard() -> Principal {
        Principal::User {
            name: "guard".into(),
            rights: Arc::new(vigil_conf::Rights::default()),
        }
    }

    fn served<'a>(
        who: &'a Principal,
        need: &'a Need,
        method: &'a Method,
        path: &'a str,
        query: Option<&'a str>,
    ) -> Served<'a> {
        Served {
            who,
            need,
            method,
            path,
            query,
            status: 200,
            client: "198.18.0.2:5000".into(),
            at_ms: 1_000,
        }
    }

    #[test]
    fn an_export_names_its_range_and_who() {
        let g = guard();
        let need = Need::Camera(Right::Export, "gate-1".into());
        let q = Some("start=2026-12-06T14:00:00Z&end=2026-12-06T14:05:00Z");
        let e = event_of(
            &served(&g, &need, &Method::GET, "/api/export/gate-1", q),
            |_| true,
        )
        .expect("an event");
        assert_eq!(e.kind, "export");
        assert_eq!(e.user, "guard");
        assert_eq!(e.camera.as_deref(), Some("gate-1"));
        assert_eq!(e.from_ms, Some(1_796_565_600_000));
        assert_eq!(e.to_ms, Some(1_796_565_900_000));
        assert_eq!(e.client, "198.18.0.2:5000");
    }

    #[test]
    fn an_hls_viewer_is_one_record_not_one_per_playlist() {
        let g = guard();
        let need = Need::Camera(Right::Read, "gate-1".into());
        let seen = HlsSeen::new(60_000, 100);
        let ask = |path: &str, at: i64| {
            let mut s = served(&g, &need, &Method::GET, path, None);
            s.at_ms = at;
            event_of(&s, |k| seen.first(k, at)).map(|e| e.kind)
        };
        assert_eq!(
            ask("/hls/live/gate-1/index.m3u8", 0).as_deref(),
            Some("live.start")
        );
        assert_eq!(ask("/hls/live/gate-1/index.m3u8", 2_000), None);
        assert_eq!(ask("/hls/live/gate-1/seg-3.m4s", 3_000), None);
        // Back after a minute without asking: a new viewing.
        assert_eq!(
            ask("/hls/live/gate-1/index.m3u8", 70_000).as_deref(),
            Some("live.start")
        );
    }

    #[test]
    fn writes_of_the_roles_are_changes_and_reads_are_not() {
        let admin = Principal::Admin;
        let put = Method::PUT;
        let e = event_of(
            &served(&admin, &Need::Admin, &put, "/api/cameras/gate-1", None),
            |_| true,
        )
        .expect("a change");
        assert_eq!(e.kind, "change");
        assert_eq!(e.user, "admin-token");
        assert_eq!(e.detail["path"], "/api/cameras/gate-1");
        let post = Method::POST;
        let e = event_of(
            &served(
                &admin,
                &Need::Operate,
                &post,
                "/api/cluster/nodes/n/drain",
                None,
            ),
            |_| true,
        )
        .expect("an operation");
        assert_eq!(e.kind, "operate");
        for (need, path) in [
            (Need::Admin, "/api/users"),
            (Need::Listing, "/api/sessions"),
            (Need::Open, "/api/health"),
        ] {
            assert!(
                event_of(&served(&admin, &need, &Method::GET, path, None), |_| true).is_none(),
                "{path}"
            );
        }
    }

    #[test]
    fn the_seen_map_stays_bounded() {
        let seen = HlsSeen::new(60_000, 3);
        for i in 0..10 {
            assert!(seen.first(&format!("k{i}"), i));
        }
        assert!(seen.seen.lock().expect("lock").len() <= 3);
    }
}
