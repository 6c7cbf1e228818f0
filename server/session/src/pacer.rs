//! When each frame of a playback is due, with `now` passed in: the pacing line, hold-ups,
//! the gap cut between recordings, Scale and the range end. The shell's sender task
//! (`playback::task`) sleeps until what [`Pacer::due`] says and reports what held it up.
//!
//! Pacing follows the frames' decode times from an anchor: the frame of decode time `t0`
//! was due at `at`, so a frame of decode time `t` is due at `at + (t − t0) / scale`. When
//! the sender is held up for longer than one frame interval (a storage read, a full socket,
//! the live edge), the anchor moves on by the hold-up ([`Pacer::held`]): the client sees a
//! pause, never a burst of catch-up frames. A gap between recordings starts a new line
//! ([`Pacer::new_line`]) and [`Gap`] rebases the RTP timestamps so the client neither waits
//! out the gap nor sees a jump its jitter buffer would hold frames for.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::TrackOut;

/// The pacing line of one sender run.
#[derive(Debug, Clone)]
pub struct Pacer {
    scale: f64,
    /// The frame of decode time `.1` (ms) was due at `.0`; None until the first frame (or
    /// after a gap) starts a line.
    line: Option<(Instant, i64)>,
    /// One frame interval of wall time: a longer hold-up moves the line on.
    stall: Duration,
}

/// The default frame interval (25 fps) until a segment tells the real one.
const DEFAULT_FRAME_MS: i64 = 40;

impl Pacer {
    /// A run at `scale`, continuing `anchor` (a migrated or handed-off line) if given.
    pub fn new(scale: f64, anchor: Option<(Instant, i64)>) -> Pacer {
        let scale = if scale.is_finite() && scale > 0.0 {
            scale
        } else {
            1.0
        };
        Pacer {
            scale,
            line: anchor,
            stall: stall_of(DEFAULT_FRAME_MS, scale),
        }
    }

    /// The frame interval of the segment being sent (ms of media time).
    pub fn frame_interval(&mut self, ms: i64) {
        self.stall = stall_of(ms, self.scale);
    }

    /// When the frame of decode time `decode_ms` is due; the first frame of a line is due
    /// `now` and starts it. A frame decoded before the line's start is due at its start.
    pub fn due(&mut self, decode_ms: i64, now: Instant) -> Instant {
        let (at, t0) = *self.line.get_or_insert((now, decode_ms));
        let ahead_ms = decode_ms.saturating_sub(t0).max(0);
        at + Duration::from_secs_f64(ahead_ms as f64 / 1000.0 / self.scale)
    }

    /// The sender was held up for `held` (a storage read, a full queue, the live edge):
    /// longer than one frame interval moves the line on by as long, so the frames after it
    /// keep their spacing instead of catching up. Returns whether it moved.
    pub fn held(&mut self, held: Duration) -> bool {
        match &mut self.line {
            Some((at, _)) if held > self.stall => {
                *at += held;
                true
            }
            _ => false,
        }
    }

    /// A gap between recordings: the next frame starts a new line when it is sent.
    pub fn new_line(&mut self) {
        self.line = None;
    }

    /// The line as a handoff carries it: (the instant, the decode time due then).
    pub fn anchor(&self) -> Option<(Instant, i64)> {
        self.line
    }
}

fn stall_of(frame_ms: i64, scale: f64) -> Duration {
    Duration::from_secs_f64(frame_ms.max(1) as f64 / 1000.0 / scale)
}

/// What the sender does with the next frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The end of the range: nothing more is sent in this run.
    End,
    /// Not sent (a track not set up, or not a keyframe in keyframes-only play).
    Skip,
    Send,
}

/// A frame as the sender sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameFacts {
    /// Its rank in its track's presentation order (`Segment::decode_times`' `order`): the
    /// range `[start, end)` holds the frames whose order is in it.
    pub order_ms: i64,
    pub video: bool,
    pub keyframe: bool,
    /// The client set its track up.
    pub enabled: bool,
}

impl Step {
    /// The range ends before the first frame whose presentation rank reaches `end_ms`: the
    /// frames sent are those of the range, none of their references missing.
    pub fn of(f: FrameFacts, end_ms: Option<i64>, keyframes_only: bool) -> Step {
        if end_ms.is_some_and(|end| f.order_ms >= end) {
            Step::End
        } else if !f.enabled || (keyframes_only && !(f.video && f.keyframe)) {
            Step::Skip
        } else {
            Step::Send
        }
    }
}

/// A gap between two recordings, cut out of the RTP timestamps: every track's line goes on
/// as if the second recording had begun where the first ended, so tracks stay aligned with
/// each other (a receiver's lip sync sees no jump) and continuous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// Wall time removed: from the end of the earlier segment to the start of the next.
    cut_ms: i64,
    /// Per track, the latest frame time of the earlier segment.
    last_ms: Vec<Option<i64>>,
}

impl Gap {
    /// The gap after a segment ending at `end_ms` whose frames are `(track, time_ms)`,
    /// before one starting at `next_start_ms`.
    pub fn after(
        frames: impl IntoIterator<Item = (usize, i64)>,
        end_ms: i64,
        next_start_ms: i64,
        tracks: usize,
    ) -> Gap {
        let mut last_ms = vec![None; tracks];
        for (track, t) in frames {
            if let Some(l) = last_ms.get_mut(track) {
                *l = Some(l.map_or(t, |l: i64| l.max(t)));
            }
        }
        Gap {
            cut_ms: next_start_ms - end_ms,
            last_ms,
        }
    }

    /// Rebase each track so its first frame of the next segment (`first_ms[track]`) follows
    /// its latest one by the media time between them, less the cut (at least one tick); a
    /// track absent on either side advances by one frame interval.
    pub fn rebase(self, tracks: &mut [TrackOut], first_ms: &[Option<i64>], frame_interval_ms: i64) {
        for (i, t) in tracks.iter_mut().enumerate() {
            let first = first_ms.get(i).copied().flatten();
            let advance_ms = match (first, self.last_ms.get(i).copied().flatten()) {
                (Some(f), Some(last)) => f - last - self.cut_ms,
                _ => frame_interval_ms,
            };
            let ticks = i64::from(t.clock_rate) * advance_ms / 1000;
            t.identity
                .rebase(u32::try_from(ticks.max(1)).unwrap_or(u32::MAX));
        }
    }
}

/// Bitrate over the last ~2 s: what the session costs the node now (it grows with Scale),
/// for the load model.
#[derive(Debug, Default)]
pub struct RateMeter {
    window: VecDeque<(Instant, usize)>,
    sum: usize,
}

const RATE_WINDOW: Duration = Duration::from_secs(2);

impl RateMeter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, bytes: usize, now: Instant) {
        self.window.push_back((now, bytes));
        self.sum += bytes;
        while let Some(&(t, b)) = self.window.front() {
            if now.saturating_duration_since(t) <= RATE_WINDOW {
                break;
            }
            self.window.pop_front();
            self.sum -= b;
        }
    }

    /// None until the window spans 0.1 s (one frame's bytes over no time is no rate).
    pub fn bps(&self) -> Option<u64> {
        let span = match (self.window.front(), self.window.back()) {
            (Some(a), Some(b)) => b.0.saturating_duration_since(a.0).as_secs_f64(),
            _ => 0.0,
        };
        (span >= 0.1).then(|| (self.sum as f64 * 8.0 / span) as u64)
    }
}

#[cfg(test)]
mod tests;
