//! The stream path an RTSP request URL names.
//!
//! The node serves the path this returns, and a placement marker (`vigil-server`'s
//! `cluster::marker`) is signed and checked for the same string: if the two were read by
//! different rules, a marker issued for one stream could be honoured on a URL the node
//! serves as another. Keeping one function is what makes "the marker's path is the served
//! path" true by construction.

/// The stream path of an `rtsp://` or `rtsps://` URL: its path as the WHATWG URL parser
/// leaves it (`.`/`..` segments resolved, percent-escapes kept as sent), without leading
/// or trailing `/`. `None` for anything else (another scheme, not a URL).
///
/// Nothing else is normalised: `live//cam` and `live/%63am` are other paths than
/// `live/cam` (the node has no stream by those names), so they are other spellings for a
/// marker too.
pub fn stream_path(uri: &str) -> Option<String> {
    let url = ::url::Url::parse(uri).ok()?;
    if url.scheme() != "rtsp" && url.scheme() != "rtsps" {
        return None;
    }
    Some(url.path().trim_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::stream_path;

    #[test]
    fn the_path_without_its_outer_slashes() {
        let p = |u: &str| stream_path(u);
        assert_eq!(p("rtsp://h:8554/live/cam").as_deref(), Some("live/cam"));
        assert_eq!(p("rtsps://h/live/cam/").as_deref(), Some("live/cam"));
        assert_eq!(p("RTSP://h/live/cam").as_deref(), Some("live/cam"));
        assert_eq!(
            p("rtsp://h/playback/cam/trackID=0?start=2026-01-01T00:00:00Z").as_deref(),
            Some("playback/cam/trackID=0")
        );
        assert_eq!(p("rtsp://h").as_deref(), Some(""));
        assert_eq!(p("rtsp://h/").as_deref(), Some(""));
    }

    #[test]
    fn dot_segments_are_resolved_everything_else_is_kept() {
        let p = |u: &str| stream_path(u);
        assert_eq!(p("rtsp://h/live/./cam").as_deref(), Some("live/cam"));
        assert_eq!(p("rtsp://h/x/../live/cam").as_deref(), Some("live/cam"));
        assert_eq!(p("rtsp://h/../../live/cam").as_deref(), Some("live/cam"));
        assert_eq!(p("rtsp://h/live//cam").as_deref(), Some("live//cam"));
        assert_eq!(p("rtsp://h/live/%63am").as_deref(), Some("live/%63am"));
        assert_eq!(p("rtsp://h/Live/cam").as_deref(), Some("Live/cam"));
        assert_eq!(p("rtsp://h/live/ca m").as_deref(), Some("live/ca%20m"));
    }

    #[test]
    fn other_schemes_and_non_urls_are_none() {
        for u in [
            "http://h/live/cam",
            "file:///live/cam",
            "live/cam",
            "",
            "rtsp://[::1",
        ] {
            assert_eq!(stream_path(u), None, "{u}");
        }
    }
}
