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
/// sends and enough to seek recordings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct UtcTime {
    pub unix_millis: i64,
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm), so we need
/// no date crate for two header formats.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Fixed-width run of ASCII digits as a number.
fn fixed(s: &str, range: std::ops::Range<usize>) -> Option<i64> {
    let p = s.get(range)?;
    p.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| p.parse().ok())
        .flatten()
}

/// Milliseconds from a fraction's digits; extra precision is truncated.
fn fraction_millis(frac: &str) -> Option<i64> {
    if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ms = 0;
    for (i, b) in frac.bytes().take(3).enumerate() {
        ms += i64::from(b - b'0') * [100, 10, 1][i];
    }
    Some(ms)
}

impl UtcTime {
    fn from_parts(date: (i64, i64, i64), time: (i64, i64, i64), millis: i64) -> Option<Self> {
        let (y, mo, d) = date;
        let (h, mi, s) = time;
        let valid = (1..=12).contains(&mo)
            && (1..=days_in_month(y, mo)).contains(&d)
            && h < 24
            && mi < 60
            && s < 60;
        valid.then(|| UtcTime {
            unix_millis: (days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s) * 1000
                + millis,
        })
    }

    fn parts(&self) -> ((i64, i64, i64), (i64, i64, i64), i64) {
        let secs = self.unix_millis.div_euclid(1000);
        let millis = self.unix_millis.rem_euclid(1000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        (
            civil_from_days(days),
            (sod / 3600, sod / 60 % 60, sod % 60),
            millis,
        )
    }

    /// The `clock=` format of RFC 2326 §3.7: `YYYYMMDDThhmmss[.frac]Z`.
    pub fn parse_clock(s: &str) -> Result<Self, HeaderError> {
        let bad =
            || HeaderError::malformed("Range", s, "bad clock time, want YYYYMMDDThhmmss[.f]Z");
        let body = s.strip_suffix(['Z', 'z']).ok_or_else(bad)?;
        let (main, frac) = match body.split_once('.') {
            Some((m, f)) => (m, fraction_millis(f).ok_or_else(bad)?),
            None => (body, 0),
        };
        if main.len() != 15 || !main.get(8..9).is_some_and(|t| t.eq_ignore_ascii_case("T")) {
            return Err(bad());
        }
        let n = |r| fixed(main, r).ok_or_else(bad);
        Self::from_parts(
            (n(0..4)?, n(4..6)?, n(6..8)?),
            (n(9..11)?, n(11..13)?, n(13..15)?),
            frac,
        )
        .ok_or_else(bad)
    }

    pub fn to_clock_string(&self) -> String {
        let ((y, mo, d), (h, mi, s), ms) = self.parts();
        let mut out = format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}");
        if ms != 0 {
            let frac = format!("{ms:03}");
            out.push('.');
            out.push_str(frac.trim_end_matches('0'));
        }
        out.push('Z');
        out
    }

    /// RFC 3339 timestamps, which is how the HTTP API and config name instants; accepts
    /// fractions of any length and `Z` or `±hh:mm` offsets.
    pub fn parse_rfc3339(s: &str) -> Result<Self, HeaderError> {
        let bad = || {
            HeaderError::malformed(
                "time",
                s,
                "bad RFC 3339 time, want YYYY-MM-DDThh:mm:ss[.f](Z|±hh:mm)",
            )
        };
        if s.len() < 20 || !s.is_ascii() {
            return Err(bad());
        }
        let seps = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
        let b = s.as_bytes();
        if seps.iter().any(|&(i, c)| b[i] != c) || !matches!(b[10], b'T' | b't' | b' ') {
            return Err(bad());
        }
        let n = |r| fixed(s, r).ok_or_else(bad);
        let date = (n(0..4)?, n(5..7)?, n(8..10)?);
        let time = (n(11..13)?, n(14..16)?, n(17..19)?);
        let rest = &s[19..];
        let (frac, zone) = match rest.strip_prefix('.') {
            Some(r) => {
                let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
                (fraction_millis(&r[..end]).ok_or_else(bad)?, &r[end..])
            }
            None => (0, rest),
        };
        let offset_min = match zone {
            "Z" | "z" => 0,
            _ => {
                let zb = zone.as_bytes();
                if zone.len() != 6 || zb[3] != b':' {
                    return Err(bad());
                }
                let sign = match zb[0] {
                    b'+' => 1,
                    b'-' => -1,
                    _ => return Err(bad()),
                };
                let (oh, om) = (
                    fixed(zone, 1..3).ok_or_else(bad)?,
                    fixed(zone, 4..6).ok_or_else(bad)?,
                );
                if oh > 23 || om > 59 {
                    return Err(bad());
                }
                sign * (oh * 60 + om)
            }
        };
        let t = Self::from_parts(date, time, frac).ok_or_else(bad)?;
        Ok(UtcTime {
            unix_millis: t.unix_millis - offset_min * 60_000,
        })
    }

    pub fn to_rfc3339(&self) -> String {
        let ((y, mo, d), (h, mi, s), ms) = self.parts();
        let mut out = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
        if ms != 0 {
            out.push_str(&format!(".{ms:03}"));
        }
        out.push('Z');
        out
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
