//! The playback URL: `rtsp://HOST:PORT/playback/<camera>?start=<RFC 3339>[&end=<RFC 3339>]`.

use vigil_proto::rtsp::{StatusCode, TimeSpan};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaybackRequest {
    pub camera: String,
    pub start_ms: i64,
    pub end_ms: Option<i64>,
}

/// Why a playback URL cannot be served, with the status to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub status: StatusCode,
    pub message: String,
}

fn bad(message: impl Into<String>) -> RequestError {
    RequestError {
        status: StatusCode::BAD_REQUEST,
        message: message.into(),
    }
}

/// Parse the path (without leading '/') and raw query of a playback URL. Returns Ok(None)
/// when the path is not a playback path at all. The raw query is decoded here rather than
/// with form decoding, which would turn the '+' of a `+01:00` offset into a space.
pub fn parse(path: &str, raw_query: Option<&str>) -> Result<Option<PlaybackRequest>, RequestError> {
    let Some(rest) = path.strip_prefix("playback/") else {
        return Ok(None);
    };
    // A SETUP URL carries a track suffix: playback/<camera>/trackID=N.
    let camera = rest.split('/').next().unwrap_or("");
    vigil_conf::check_camera_id(camera).map_err(bad)?;
    let mut start = None;
    let mut end = None;
    for pair in raw_query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy();
        match k {
            "start" => start = Some(v),
            "end" => end = Some(v),
            // Clients and proxies append their own parameters; ignore them.
            _ => {}
        }
    }
    let span = TimeSpan::parse(start.as_deref(), end.as_deref()).map_err(|e| bad(e.to_string()))?;
    Ok(Some(PlaybackRequest {
        camera: camera.to_string(),
        start_ms: span.start_ms,
        end_ms: span.end_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_start_and_end() {
        let r = parse(
            "playback/cam42",
            Some("start=2026-11-29T08:00:00Z&end=2026-11-29T08:00:10.5Z"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.camera, "cam42");
        assert_eq!(r.end_ms.unwrap() - r.start_ms, 10_500);
    }

    #[test]
    fn offsets_survive_the_query() {
        let a = parse("playback/c", Some("start=2026-11-29T09:00:00+01:00"))
            .unwrap()
            .unwrap();
        let b = parse("playback/c", Some("start=2026-11-29T08:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(a.start_ms, b.start_ms);
        let c = parse("playback/c", Some("start=2026-11-29T09:00:00%2B01:00"))
            .unwrap()
            .unwrap();
        assert_eq!(c.start_ms, b.start_ms);
    }

    #[test]
    fn track_suffix_is_not_part_of_the_camera() {
        let r = parse("playback/c1/trackID=0", Some("start=2026-11-29T08:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(r.camera, "c1");
    }

    #[test]
    fn bad_requests_are_400() {
        for (path, q) in [
            ("playback/c", None),
            ("playback/c", Some("start=yesterday")),
            ("playback/c", Some("start=2026-13-40T08:00:00Z")),
            ("playback/../etc", Some("start=2026-11-29T08:00:00Z")),
            ("playback/", Some("start=2026-11-29T08:00:00Z")),
            (
                "playback/c",
                Some("start=2026-11-29T08:00:10Z&end=2026-11-29T08:00:00Z"),
            ),
        ] {
            let e = parse(path, q).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{path} {q:?}");
        }
        assert_eq!(parse("live/x", None).unwrap(), None);
    }
}
