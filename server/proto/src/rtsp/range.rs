//! Range (RFC 2326 §3.5, §3.6, §12.29), Scale (§12.34) and Speed (§12.35).

use std::fmt;

use super::error::HeaderError;

/// Normal play time: an offset into the presentation, or the live edge.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NptTime {
    Now,
    Seconds(f64),
}

/// Unsigned decimal `digits[.digits]`; stricter than `f64::from_str`, which would accept
/// `inf`, `NaN`, exponents and signs that no RTSP grammar allows.
fn decimal(s: &str) -> Option<f64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty() || !digits(int) || !digits(frac) {
        return None;
    }
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

impl NptTime {
    /// Whole milliseconds of a `Seconds` time (rounded); None for `now` and for times so
    /// large (past ~100,000 years) that adding them to an instant could overflow.
    pub fn millis(&self) -> Option<i64> {
        const MAX_MS: f64 = 3.2e15;
        match self {
            NptTime::Now => None,
            NptTime::Seconds(s) => {
                let ms = (s * 1000.0).round();
                (ms.is_finite() && (0.0..=MAX_MS).contains(&ms)).then_some(ms as i64)
            }
        }
    }

    /// Accepts `now`, `123.45` and `h:mm:ss[.frac]`.
    fn parse(s: &str, whole: &str) -> Result<Self, HeaderError> {
        let bad = |reason| HeaderError::malformed("Range", whole, reason);
        if s.eq_ignore_ascii_case("now") {
            return Ok(NptTime::Now);
        }
        let mut parts = s.split(':');
        let secs = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(sec), None, None, None) => decimal(sec).ok_or_else(|| bad("bad npt seconds"))?,
            (Some(h), Some(m), Some(sec), None) => {
                let int = |p: &str| {
                    (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| p.parse::<f64>().ok())
                        .flatten()
                };
                let h = int(h).ok_or_else(|| bad("bad npt hours"))?;
                let m = int(m)
                    .filter(|m| *m < 60.0)
                    .ok_or_else(|| bad("bad npt minutes"))?;
                let sec = decimal(sec)
                    .filter(|s| *s < 60.0)
                    .ok_or_else(|| bad("bad npt seconds"))?;
                h * 3600.0 + m * 60.0 + sec
            }
            _ => return Err(bad("bad npt time")),
        };
        if !secs.is_finite() {
            return Err(bad("npt time out of range"));
        }
        Ok(NptTime::Seconds(secs))
    }
}

impl fmt::Display for NptTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NptTime::Now => f.write_str("now"),
            NptTime::Seconds(s) => write!(f, "{s:.3}"),
        }
    }
}

/// An absolute wall-clock instant, at millisecond resolution (finer than any RTSP client
/// sends and enough to seek recordings). Parsing and formatting go through `jiff` (Temporal
/// ISO 8601 grammar: a superset of RFC 3339 and of the basic format of `clock=`), so
/// fractions, offsets and leap days are right by construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct UtcTime {
    pub unix_millis: i64,
}

impl UtcTime {
    fn parse(s: &str) -> Option<Self> {
        let t: jiff::Timestamp = s.parse().ok()?;
        Some(UtcTime {
            unix_millis: t.as_millisecond(),
        })
    }

    /// The instant as a `jiff` timestamp, clamped to the years it can name (±9999): only a
    /// time that no parser here produced can be outside.
    fn timestamp(&self) -> jiff::Timestamp {
        let min = jiff::Timestamp::MIN.as_millisecond();
        let max = jiff::Timestamp::MAX.as_millisecond();
        jiff::Timestamp::from_millisecond(self.unix_millis.clamp(min, max))
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }

    /// The `clock=` format of RFC 2326 §3.7: `YYYYMMDDThhmmss[.frac]Z`.
    pub fn parse_clock(s: &str) -> Result<Self, HeaderError> {
        // RFC 2326 clock times are UTC: the `Z` is required.
        Self::parse(s)
            .filter(|_| s.ends_with(['Z', 'z']))
            .ok_or_else(|| {
                HeaderError::malformed("Range", s, "bad clock time, want YYYYMMDDThhmmss[.f]Z")
            })
    }

    pub fn to_clock_string(&self) -> String {
        self.timestamp().strftime("%Y%m%dT%H%M%S%.fZ").to_string()
    }

    /// RFC 3339 timestamps, which is how the HTTP API and playback URLs name instants;
    /// accepts fractions and `Z` or `±hh:mm` offsets (and the rest of ISO 8601's forms that
    /// carry an offset).
    pub fn parse_rfc3339(s: &str) -> Result<Self, HeaderError> {
        Self::parse(s).ok_or_else(|| {
            HeaderError::malformed(
                "time",
                s,
                "bad RFC 3339 time, want YYYY-MM-DDThh:mm:ss[.f](Z|±hh:mm)",
            )
        })
    }

    pub fn to_rfc3339(&self) -> String {
        self.timestamp().to_string()
    }
}

/// An instant in ms since the Unix epoch as RFC 3339 (`2026-12-02T03:04:05.678Z`): the form
/// in which the HTTP API, the CLI and playback URLs show instants.
pub fn rfc3339(unix_millis: i64) -> String {
    UtcTime { unix_millis }.to_rfc3339()
}

/// The stretch of a recording a URL names with `start=` and optional `end=` (RTSP playback,
/// HLS of a recording, MP4 export): one reading, so the three cannot disagree on what
/// they accept or say about it. What a missing `end` means is the caller's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeSpan {
    pub start_ms: i64,
    pub end_ms: Option<i64>,
}

/// Why a `start`/`end` pair names no stretch; the text is meant for whoever sent the URL.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TimeSpanError {
    #[error("{0}= is required (an RFC 3339 time like 2026-11-29T08:00:00Z)")]
    Missing(&'static str),
    /// `value` is the peer's text, truncated.
    #[error("{key}={value:?} is not an RFC 3339 time like 2026-11-29T08:00:00Z")]
    NotRfc3339 { key: &'static str, value: String },
    #[error("end must be after start")]
    EndNotAfterStart,
}

impl TimeSpan {
    /// `start` (required) and `end` (optional) as RFC 3339 instants
    /// ([`UtcTime::parse_rfc3339`]: fractions, `Z` or `±hh:mm`), `end` after `start`.
    pub fn parse(start: Option<&str>, end: Option<&str>) -> Result<TimeSpan, TimeSpanError> {
        let time = |key: &'static str, v: &str| {
            UtcTime::parse_rfc3339(v)
                .map(|t| t.unix_millis)
                .map_err(|_| TimeSpanError::NotRfc3339 {
                    key,
                    value: super::error::truncate(v),
                })
        };
        let start_ms = time("start", start.ok_or(TimeSpanError::Missing("start"))?)?;
        let end_ms = end.map(|e| time("end", e)).transpose()?;
        if end_ms.is_some_and(|e| e <= start_ms) {
            return Err(TimeSpanError::EndNotAfterStart);
        }
        Ok(TimeSpan { start_ms, end_ms })
    }
}

/// A Range header value. SMPTE ranges are rejected: no client we serve sends them and
/// nothing in vigil is frame-addressed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Range {
    /// `npt=-20` (no start) is read as starting at 0, which is what it means for playback.
    Npt {
        start: NptTime,
        end: Option<NptTime>,
    },
    Clock {
        start: UtcTime,
        end: Option<UtcTime>,
    },
}

impl Range {
    pub fn parse(value: &str) -> Result<Range, HeaderError> {
        let bad = |reason| HeaderError::malformed("Range", value, reason);
        // The optional ";time=" parameter says when to start, which we never honour.
        let spec = value.split(';').next().unwrap_or("").trim();
        let (unit, times) = spec.split_once('=').ok_or_else(|| bad("missing '='"))?;
        let (start, end) = times
            .trim()
            .split_once('-')
            .ok_or_else(|| bad("missing '-'"))?;
        let (start, end) = (start.trim(), end.trim());
        match unit.trim().to_ascii_lowercase().as_str() {
            "npt" => {
                let start = if start.is_empty() {
                    if end.is_empty() {
                        return Err(bad("npt range with neither start nor end"));
                    }
                    NptTime::Seconds(0.0)
                } else {
                    NptTime::parse(start, value)?
                };
                let end = match end {
                    "" => None,
                    e => Some(NptTime::parse(e, value)?),
                };
                Ok(Range::Npt { start, end })
            }
            "clock" => {
                let start = UtcTime::parse_clock(start)?;
                let end = match end {
                    "" => None,
                    e => Some(UtcTime::parse_clock(e)?),
                };
                Ok(Range::Clock { start, end })
            }
            u if u.starts_with("smpte") => Err(HeaderError::unsupported(
                "Range",
                value,
                "SMPTE ranges are not supported",
            )),
            _ => Err(bad("unknown range unit")),
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Range::Npt { start, end } => {
                write!(f, "npt={start}-")?;
                if let Some(e) = end {
                    write!(f, "{e}")?;
                }
            }
            Range::Clock { start, end } => {
                write!(f, "clock={}-", start.to_clock_string())?;
                if let Some(e) = end {
                    f.write_str(&e.to_clock_string())?;
                }
            }
        }
        Ok(())
    }
}

fn signed_decimal(header: &'static str, value: &str) -> Result<f64, HeaderError> {
    let v = value.trim();
    let unsigned = v.strip_prefix(['-', '+']).unwrap_or(v);
    decimal(unsigned)
        .map(|x| if v.starts_with('-') { -x } else { x })
        .ok_or_else(|| HeaderError::malformed(header, value, "not a finite decimal number"))
}

/// Scale: a finite decimal, negative for reverse play. Also accepts Speed values; use
/// [`parse_speed`] when the sign matters.
pub fn parse_scale(value: &str) -> Result<f64, HeaderError> {
    signed_decimal("Scale", value)
}

/// Speed: like Scale, but RFC 2326 §12.35 requires it to be positive.
pub fn parse_speed(value: &str) -> Result<f64, HeaderError> {
    let s = signed_decimal("Speed", value)?;
    if s <= 0.0 {
        return Err(HeaderError::malformed(
            "Speed",
            value,
            "speed must be positive",
        ));
    }
    Ok(s)
}
