//! Test-only synthetic load in the node's report (issue 13's 50-node run): a node with
//! 5000 playback sessions, 500 live cameras and 1000 cached segments must get its whole state
//! to every other member, and 5000 real RTSP sessions beside 49 other node processes are more
//! than the test machine's two cores can run. So when the node was started with
//! `VIGIL_FAULT_SYNTHETIC_REPORT=<file>`, and while that file exists, its content
//! (`streams=N live=N cached=N`, any of them) pads every report this node gossips with N
//! made-up playback streams (their positions advancing in real time, as playback does), N
//! live camera names and N resident cache ranges (4 per camera, apart so they do not merge).
//! They exist only in the report: nothing serves them, and their streams name no session, so
//! REM and the planner never try to move them. Any figure measured with it says so.
//!
//! Like the `VIGIL_FAULT_*` hooks of the transport and the migration host, only whoever
//! starts the process can arm it; nothing on the network can.

use std::path::PathBuf;

use vigil_cluster::{Stream, StreamSource};

use super::report::{Report, DEFAULT_VBR_BPS};

/// The environment variable naming the padding file.
pub const SYNTHETIC_REPORT_ENV: &str = "VIGIL_FAULT_SYNTHETIC_REPORT";

/// Ranges per synthetic cached camera (the report keeps up to 16 per camera).
const RANGES_PER_CAMERA: usize = 4;
/// Synthetic playback streams spread over this many cameras.
const STREAM_CAMERAS: usize = 997;

/// What the padding file asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Padding {
    pub streams: usize,
    pub live: usize,
    pub cached: usize,
}

/// A malformed padding file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("synthetic report padding: {0:?} is not `streams=N`, `live=N` or `cached=N`")]
pub struct BadPadding(String);

impl Padding {
    /// Parses `streams=N live=N cached=N` (space, comma or newline separated, any subset).
    pub fn parse(text: &str) -> Result<Padding, BadPadding> {
        let mut p = Padding::default();
        for item in text
            .split([' ', ',', '\n', '\t', '\r'])
            .filter(|s| !s.is_empty())
        {
            let bad = || BadPadding(item.to_string());
            let (key, n) = item.split_once('=').ok_or_else(bad)?;
            let n: usize = n.parse().map_err(|_| bad())?;
            match key {
                "streams" => p.streams = n,
                "live" => p.live = n,
                "cached" => p.cached = n,
                _ => return Err(bad()),
            }
        }
        Ok(p)
    }

    /// Adds the synthetic entries to `r`, built at `now_ms`; `since_ms`: when the padding
    /// was armed (positions advance from there).
    pub fn apply(&self, r: &mut Report, since_ms: i64, now_ms: i64) {
        let base = since_ms - 3_600_000;
        let elapsed = now_ms - since_ms;
        r.streams.extend((0..self.streams).map(|i| Stream {
            camera: format!("synthetic-{}", i % STREAM_CAMERAS),
            position_ms: base + (i as i64) * 1000 + elapsed,
            vbr_bps: DEFAULT_VBR_BPS,
            source: StreamSource::Storage,
            session: None,
        }));
        let sessions = u32::try_from(self.streams).unwrap_or(u32::MAX);
        r.sessions = r.sessions.saturating_add(sessions);
        r.live
            .extend((0..self.live).map(|i| format!("synthetic-live-{i}")));
        let cameras = self.cached.div_ceil(RANGES_PER_CAMERA);
        for c in 0..cameras {
            let n = RANGES_PER_CAMERA.min(self.cached - c * RANGES_PER_CAMERA);
            let ranges = (0..n as i64)
                .map(|k| (base + k * 10_000, base + k * 10_000 + 4_000))
                .collect();
            r.cached.insert(format!("synthetic-{c}"), ranges);
        }
    }
}

/// The armed hook: the file, and the padding it held when last read.
pub struct Synthetic {
    file: Option<PathBuf>,
    on: Option<(Padding, i64)>,
}

impl Synthetic {
    pub fn from_env() -> Synthetic {
        let file = std::env::var_os(SYNTHETIC_REPORT_ENV).map(PathBuf::from);
        if let Some(f) = &file {
            tracing::warn!(
                file = %f.display(),
                "synthetic report padding armed: while that file exists, this node's gossiped \
                 report carries made-up streams, live cameras and cached ranges"
            );
        }
        Synthetic { file, on: None }
    }

    /// Reads the file again (the report task calls this on each tick): the padding in force
    /// now and since when.
    pub fn poll(&mut self, now_ms: i64) -> Option<(Padding, i64)> {
        let file = self.file.as_ref()?;
        let now = match std::fs::read_to_string(file) {
            Ok(text) => match Padding::parse(&text) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!("{e}");
                    None
                }
            },
            Err(_) => None,
        };
        self.on = match (now, self.on) {
            (Some(p), Some((q, since))) if p == q => Some((q, since)),
            (Some(p), _) => {
                tracing::warn!(?p, "synthetic report padding on");
                Some((p, now_ms))
            }
            (None, Some(_)) => {
                tracing::warn!("synthetic report padding off");
                None
            }
            (None, None) => None,
        };
        self.on
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::report_keys::tests::big_report;

    #[test]
    fn the_padding_file_parses_and_rejects_what_it_does_not_know() {
        assert_eq!(
            Padding::parse("streams=5000 live=500\ncached=1000\n"),
            Ok(Padding {
                streams: 5000,
                live: 500,
                cached: 1000
            })
        );
        assert_eq!(Padding::parse(""), Ok(Padding::default()));
        assert!(Padding::parse("streams=lots").is_err());
        assert!(Padding::parse("sessions=5").is_err());
        assert!(Padding::parse("live").is_err());
    }

    #[test]
    fn padding_adds_exactly_what_it_names_and_positions_advance() {
        let mut r = big_report(3, 2, 1);
        let p = Padding {
            streams: 10,
            live: 7,
            cached: 9,
        };
        p.apply(&mut r, 1_000_000, 1_000_000);
        assert_eq!(r.streams.len(), 13);
        assert_eq!(r.sessions, 13);
        assert_eq!(r.live.len(), 8);
        let ranges: usize = r.cached.values().map(Vec::len).sum();
        assert_eq!(ranges, 2 * 4 + 9);
        assert!(r.streams[3..].iter().all(|s| s.session.is_none()));
        let mut later = big_report(3, 2, 1);
        p.apply(&mut later, 1_000_000, 1_004_000);
        assert_eq!(
            later.streams[3].position_ms,
            r.streams[3].position_ms + 4000
        );
    }
}
