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

/// The parameters of a URL query, percent-decoded but not form-decoded: a `+` stays a
/// `+`, so an RFC 3339 offset typed as is (`start=…T09:00:00+01:00`) survives, in RTSP
/// playback, HLS and export URLs alike. A repeated key keeps its first value.
pub fn query_params(raw: Option<&str>) -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        out.entry(decode(k)).or_insert_with(|| decode(v));
    }
    out
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
    // Clients and proxies append their own parameters; they are ignored.
    let q = query_params(raw_query);
    let (start, end) = (q.get("start"), q.get("end"));
    let span = TimeSpan::parse(start.map(String::as_str), end.map(String::as_str))
        .map_err(|e| bad(e.to_string()))?;
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
    fn a_query_is_percent_decoded_not_form_decoded() {
        let q = query_params(Some(
            "start=09:00+01:00&end=%2B1&start=again&flag&x%20y=a%20b",
        ));
        assert_eq!(
            q["start"], "09:00+01:00",
            "a typed + stays a +; the first value wins"
        );
        assert_eq!(q["end"], "+1");
        assert_eq!(q["flag"], "");
        assert_eq!(q["x y"], "a b");
        assert!(query_params(None).is_empty() && query_params(Some("&&")).is_empty());
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
