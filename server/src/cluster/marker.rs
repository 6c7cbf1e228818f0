//! The placement marker on redirect URLs: a redirected request carries it so the target
//! serves it without placing it again.

/// Query parameter added to a redirect: the target serves the request without placing it
/// again, so a request is redirected at most once (no loops).
pub const PLACED_MARKER: &str = "vigil_placed";

/// Adds the placement marker to a URL's query.
pub fn with_marker(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            u.query_pairs_mut().append_pair(PLACED_MARKER, "1");
            u.to_string()
        }
        Err(_) => url.to_string(),
    }
}

/// Whether a request URL carries the placement marker.
pub fn has_marker(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| u.query_pairs().any(|(k, _)| k == PLACED_MARKER))
}

/// The URL without the placement marker (for Content-Base).
pub fn strip_marker(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        return url.to_string();
    };
    let Some(q) = u.query() else {
        return url.to_string();
    };
    let kept: Vec<&str> = q
        .split('&')
        .filter(|p| p.split('=').next() != Some(PLACED_MARKER))
        .collect();
    if kept.is_empty() {
        u.set_query(None);
    } else {
        u.set_query(Some(&kept.join("&")));
    }
    u.to_string()
}

/// The redirect target: the chosen node's base with the request's path and query, and the
/// marker. The raw query is kept as is (an RFC 3339 `+01:00` must not be re-encoded).
pub fn redirect_url(base: &str, request_uri: &str) -> String {
    let (path, query) = match url::Url::parse(request_uri) {
        Ok(u) => (u.path().to_string(), u.query().map(str::to_string)),
        Err(_) => ("/".to_string(), None),
    };
    let q = match query {
        Some(q) if !q.is_empty() => format!("?{q}&{PLACED_MARKER}=1"),
        _ => format!("?{PLACED_MARKER}=1"),
    };
    format!("{}{path}{q}", base.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_keeps_path_and_query_and_marks() {
        let u = redirect_url(
            "rtsp://127.0.0.2:8554",
            "rtsp://127.0.0.1:9000/playback/cam?start=2026-01-01T00:00:00+01:00&end=x",
        );
        assert_eq!(
            u,
            "rtsp://127.0.0.2:8554/playback/cam?start=2026-01-01T00:00:00+01:00&end=x&vigil_placed=1"
        );
        assert!(has_marker(&u));
        let live = redirect_url("rtsp://h:1/", "rtsp://a:2/live/demo");
        assert_eq!(live, "rtsp://h:1/live/demo?vigil_placed=1");
        assert_eq!(strip_marker(&live), "rtsp://h:1/live/demo");
        assert_eq!(
            strip_marker("rtsp://h:1/p?a=1&vigil_placed=1"),
            "rtsp://h:1/p?a=1"
        );
        assert!(!has_marker("rtsp://h:1/live/demo?x=1"));
        assert!(with_marker("rtsp://h:1/x").ends_with("?vigil_placed=1"));
    }
}
