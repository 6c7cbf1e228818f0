//! MP4 (ISO/IEC 14496-12 and -15) writing for evidence export and HLS: the init segment and
//! fragments of a fragmented MP4, and the `moov` of a plain (faststart) MP4 built from sample
//! tables computed before any media byte is sent. Bytes out, no I/O.
//!
//! Written by hand rather than with a muxing crate: `mp4` (mp4-rust) writes `moov` at the
//! end through `Write + Seek` and has no fragment writer; the younger muxers (`mp4e`,
//! `muxide`) own the timing (a duration per frame they are handed) and write whole files.
//! vigil needs three things none offers together: fragments emitted one at a time as
//! segments are read (bounded memory for an hour's export), signed composition offsets
//! taken from the recorded presentation times (B-frames), and a faststart `moov` with edit
//! lists for gaps computed from a first pass over the recording, so `mdat` can stream after
//! it. The boxes involved are a few dozen fixed layouts, unit-tested by parsing them back.

mod boxes;
pub mod config;
pub mod fragment;
pub mod movie;

#[cfg(test)]
mod tests;

pub use boxes::BoxWriter;
pub use config::{ConfigError, SampleEntry};
pub use fragment::{fragment_header, Traf};
pub use movie::{faststart_header, init_segment, Edit, TrackTable};

/// One track of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct TrackSpec {
    /// 1-based track id.
    pub id: u32,
    /// Ticks per second of the track's sample times (the RTP clock rate).
    pub timescale: u32,
    pub entry: SampleEntry,
}

/// One sample as the sample tables (or a fragment's `trun`) describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sample {
    /// Decode time to the next sample, in the track's timescale.
    pub duration: u32,
    pub size: u32,
    /// Presentation minus decode time (signed: version 1 `trun`/`ctts`, so a keyframe that
    /// starts a range presents at its decode time and needs no edit).
    pub cts: i32,
    pub sync: bool,
}

/// Movie timescale of `mvhd`, `tkhd` and edit lists: milliseconds, vigil's wall-clock unit.
pub const MOVIE_TIMESCALE: u32 = 1000;
