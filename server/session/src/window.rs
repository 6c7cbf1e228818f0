//! What part of a recording a PLAY asks for, in absolute UTC ms, and which end wins: pure
//! functions of the request headers and the presentation's origin. Where a start lands in
//! the recordings (which needs the index) is the shell's `playback::window`.

use std::ops::RangeInclusive;
use vigil_proto::rtsp::{parse_scale, NptTime, Range, Request, StatusCode};

use crate::Refusal;

/// Scale and Speed a playback accepts. Below 0.25 a 25 fps camera shows fewer than 7 frames
/// a second (a still, not slow motion); above 16 even keyframes-only play of a 1 s GOP
/// exceeds 16 frames a second of decoding for the client and 16× the bitrate of the
/// keyframes for the node. Reverse play is refused (ARCHITECTURE.md, Playback).
pub const RATES: RangeInclusive<f64> = 0.25..=16.0;

/// The end a PLAY serves to: the earliest of the URL's `end=`, the Range's end and the last
/// recorded instant (RFC 2326 §12.29: the server plays to the end of the range).
pub fn end_of(url_end: Option<i64>, range_end: Option<i64>, last_recorded: i64) -> i64 {
    [url_end, range_end]
        .into_iter()
        .flatten()
        .fold(last_recorded, i64::min)
}

/// Whether reaching the end a PLAY is given ends the presentation (the URL's end, or no
/// Range end at all: BYE and the session ends) or only the range (BYE, and the session stays
/// for a PLAY that continues from there).
pub fn range_end_only(url_end: Option<i64>, range_end: Option<i64>) -> bool {
    range_end.is_some_and(|r| url_end.is_none_or(|u| r < u))
}

/// npt of an absolute time `ms` in a presentation whose npt 0 is `origin_ms`: seconds
/// from the origin, never negative (a frame before the origin is at its start).
pub fn npt_of(ms: i64, origin_ms: i64) -> NptTime {
    NptTime::Seconds(ms.saturating_sub(origin_ms).max(0) as f64 / 1000.0)
}

/// What a PLAY's Range asks for, in absolute UTC ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Requested {
    /// Where to seek; None: continue where the session stopped (no Range, or `npt=now-`).
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// The Range was `clock=`: answer in clock times too.
    pub clock: bool,
}

/// A PLAY's Range in absolute times, npt counted from the presentation's `origin_ms`. Every
/// time is checked: one that overflows or ends before it starts is an error (457).
pub fn requested(range: Option<&Range>, origin_ms: i64) -> Result<Requested, String> {
    let npt = |t: &NptTime| -> Result<Option<i64>, String> {
        match t {
            NptTime::Now => Ok(None),
            NptTime::Seconds(_) => t
                .millis()
                .and_then(|ms| origin_ms.checked_add(ms))
                .map(Some)
                .ok_or_else(|| format!("npt {t} is out of range")),
        }
    };
    let r = match range {
        None => Requested::default(),
        Some(Range::Npt { start, end }) => Requested {
            start: npt(start)?,
            end: end.as_ref().map(npt).transpose()?.flatten(),
            clock: false,
        },
        Some(Range::Clock { start, end }) => Requested {
            start: Some(start.unix_millis),
            end: end.map(|e| e.unix_millis),
            clock: true,
        },
    };
    if let (Some(s), Some(e)) = (r.start, r.end) {
        if e <= s {
            return Err("the range ends before it starts".into());
        }
    }
    Ok(r)
}

/// A PLAY's Scale or Speed (RFC 2326 §12.34, §12.35), echoed in the answer as given.
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    pub value: f64,
    /// `Scale` or `Speed`: the header the answer echoes.
    pub header: &'static str,
    pub echo: String,
}

/// Scale or Speed of a PLAY: None when neither is given, or a 456 naming the supported range
/// (reverse play named as such). With both, the later (Speed) wins, as before the core.
pub fn rate_of(req: &Request) -> Result<Option<Rate>, Refusal> {
    let mut rate = None;
    for name in ["Scale", "Speed"] {
        let Some(v) = req.headers.get(name) else {
            continue;
        };
        let supported = format!("supported {name}: {} to {}", RATES.start(), RATES.end());
        match parse_scale(v) {
            Ok(s) if RATES.contains(&s) => {
                rate = Some(Rate {
                    value: s,
                    header: name,
                    echo: v.trim().to_string(),
                })
            }
            Ok(s) if s < 0.0 => {
                return Err(Refusal::new(
                    StatusCode::HEADER_FIELD_NOT_VALID,
                    format!("{name}: {v}: reverse play is not supported; {supported}"),
                ))
            }
            _ => {
                return Err(Refusal::new(
                    StatusCode::HEADER_FIELD_NOT_VALID,
                    format!("{name}: {v}: {supported}"),
                ))
            }
        }
    }
    Ok(rate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_proto::rtsp::Method;

    #[test]
    fn the_earliest_end_wins() {
        assert_eq!(end_of(None, None, 100), 100);
        assert_eq!(end_of(Some(50), None, 100), 50);
        assert_eq!(end_of(Some(50), Some(40), 100), 40);
        assert_eq!(end_of(Some(50), Some(60), 100), 50);
        assert_eq!(end_of(None, Some(160), 100), 100);
        assert!(range_end_only(None, Some(40)));
        assert!(range_end_only(Some(50), Some(40)));
        assert!(!range_end_only(Some(50), Some(50)));
        assert!(!range_end_only(Some(50), None));
        assert!(!range_end_only(None, None));
    }

    #[test]
    fn ranges_are_absolute_and_checked() {
        let req = |v: &str| requested(Some(&Range::parse(v).unwrap()), 1_000_000);
        assert_eq!(
            req("npt=2.5-6"),
            Ok(Requested {
                start: Some(1_002_500),
                end: Some(1_006_000),
                clock: false
            })
        );
        assert_eq!(req("npt=now-").map(|r| (r.start, r.end)), Ok((None, None)));
        assert_eq!(
            req("clock=19700101T000100Z-19700101T000200Z"),
            Ok(Requested {
                start: Some(60_000),
                end: Some(120_000),
                clock: true
            })
        );
        assert!(req("npt=6-2").is_err());
        assert!(req("npt=99999999999999999999-").is_err());
        assert!(req("npt=0-99999999999999999999").is_err());
        assert_eq!(requested(None, 5), Ok(Requested::default()));
    }

    fn play(headers: &[(&str, &str)]) -> Request {
        let mut r = Request::new(Method::Play, "rtsp://h/playback/c?start=0");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r
    }

    #[test]
    fn rates_inside_the_range_are_echoed_and_others_get_456() {
        assert_eq!(rate_of(&play(&[])), Ok(None));
        let r = rate_of(&play(&[("Scale", " 2.0 ")])).unwrap().unwrap();
        assert_eq!((r.value, r.header, r.echo.as_str()), (2.0, "Scale", "2.0"));
        let r = rate_of(&play(&[("Speed", "0.25")])).unwrap().unwrap();
        assert_eq!((r.value, r.header), (0.25, "Speed"));
        for bad in ["0.2", "16.5", "0", "x", "-1"] {
            let e = rate_of(&play(&[("Scale", bad)])).unwrap_err();
            assert_eq!(e.status, StatusCode::HEADER_FIELD_NOT_VALID, "{bad}");
            assert!(e.reason.contains("0.25 to 16"), "{bad}: {}", e.reason);
        }
        let e = rate_of(&play(&[("Scale", "-2")])).unwrap_err();
        assert!(e.reason.contains("reverse play"), "{}", e.reason);
        // A bad Speed beside a good Scale is still refused.
        assert!(rate_of(&play(&[("Scale", "2"), ("Speed", "99")])).is_err());
    }
}
