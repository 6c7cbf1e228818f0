//! The export's timeline (pure): which frames of each segment go into the file, and each
//! sample's decode time, duration and composition offset in its track's clock.
//!
//! Time 0 is the keyframe the export starts on. Within one recording a track's times follow
//! its media timestamps exactly (the RTP clock); where they stop agreeing with wall time by
//! more than a second (a new recording after a gap, a restarted camera) the track starts a
//! new run at the frame's wall-clock offset, rounded to the track's frame grid (whole
//! sample durations after the last sample: at most half a frame, 20 ms at 25 fps, off wall
//! time). The rounding matters: an off-grid jump makes ffmpeg guess a frame rate of 250 from
//! the timestamps' common divisor and fall back to the average rate, which the gap lowers, so
//! it writes frames on colliding timestamps. A gap therefore stays a gap: nothing is
//! stretched, the next sample simply starts later (a `tfdt` jump in a fragmented file; in a
//! plain one the last frame before the gap lasts until the next recording, see
//! `mux::TableBuilder`).
//!
//! Frames are stored in decode order with presentation timestamps. A track's k-th sample in
//! a segment decodes at the k-th smallest presentation time of the segment; the composition
//! offset (presentation − decode) is signed, so the starting keyframe presents at time 0
//! without an edit list. The range ends, as playback's does, before the first frame whose
//! presentation rank reaches the end: the file holds a prefix of decode order, so no frame
//! lacks a reference.

use vigil_proto::mp4::Sample;
use vigil_storage::Segment;

/// One sample of an exported track: its decode time and the stored frame it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub dts: i64,
    pub sample: Sample,
    pub frame: usize,
}

/// What one segment contributes: per exported track, its samples in decode order.
#[derive(Debug, Default)]
pub struct Cut {
    pub tracks: Vec<Vec<Placed>>,
    /// The range's end was reached in this segment.
    pub done: bool,
}

#[derive(Clone, Copy, Debug)]
struct Run {
    /// Track time of the media timestamp `origin`.
    base: i64,
    origin: u64,
}

#[derive(Clone, Debug)]
struct TrackClock {
    timescale: i64,
    run: Option<Run>,
    last_dts: Option<i64>,
    /// Typical sample duration, for the last sample of a segment (its successor is not
    /// read yet) and after a gap.
    nominal: u32,
}

/// The state carried from one segment to the next.
#[derive(Debug)]
pub struct Timeline {
    /// Wall-clock time (UTC ms) of track time 0: the starting keyframe.
    t0_ms: i64,
    end_ms: i64,
    /// Stored track index → exported track index.
    map: Vec<Option<usize>>,
    clocks: Vec<TrackClock>,
}

impl Timeline {
    /// `map[stored track] = exported track`; `timescales` per exported track.
    pub fn new(t0_ms: i64, end_ms: i64, map: Vec<Option<usize>>, timescales: &[u32]) -> Timeline {
        Timeline {
            t0_ms,
            end_ms,
            map,
            clocks: timescales
                .iter()
                .map(|&ts| TrackClock {
                    timescale: i64::from(ts.max(1)),
                    run: None,
                    last_dts: None,
                    nominal: (ts / 25).max(1),
                })
                .collect(),
        }
    }

    /// The samples of `seg` from frame `from` on (the starting keyframe in the first
    /// segment, 0 after it).
    pub fn cut(&mut self, seg: &Segment, from: usize) -> Cut {
        let order = seg.decode_times();
        let mut picked: Vec<Vec<usize>> = vec![Vec::new(); self.clocks.len()];
        let mut done = false;
        for (i, f) in seg.frames.iter().enumerate().skip(from) {
            if order[i].order >= self.end_ms {
                done = true;
                break;
            }
            let Some(&Some(t)) = self.map.get(usize::from(f.track)) else {
                continue;
            };
            if f.time_ms < self.t0_ms {
                continue; // audio from before the starting keyframe
            }
            picked[t].push(i);
        }
        let tracks = picked
            .into_iter()
            .enumerate()
            .map(|(t, idx)| self.place(seg, t, &idx))
            .collect();
        Cut { tracks, done }
    }

    fn place(&mut self, seg: &Segment, t: usize, idx: &[usize]) -> Vec<Placed> {
        let t0 = self.t0_ms;
        let c = &mut self.clocks[t];
        let ts = c.timescale;
        // Presentation times, each frame mapped through its track's current run. A gap (the
        // media line disagrees with wall time, or it jumps ahead) starts a new run on the
        // earlier run's grid.
        let gap = (4 * i64::from(c.nominal)).max(ts);
        let mut latest = c.last_dts;
        let mut pts: Vec<i64> = Vec::with_capacity(idx.len());
        for &i in idx {
            let f = &seg.frames[i];
            let wall = (f.time_ms - t0).saturating_mul(ts) / 1000;
            let media = c
                .run
                .map(|r| r.base + (f.media_ts.wrapping_sub(r.origin) as i64));
            let p = match media {
                Some(m) if (m - wall).abs() <= ts && latest.is_none_or(|l| m - l <= gap) => m,
                _ => {
                    let target = media.filter(|m| (m - wall).abs() <= ts).unwrap_or(wall);
                    let base = match (c.run, latest) {
                        (Some(_), Some(last)) => on_grid(last, target, c.nominal),
                        _ => target,
                    };
                    c.run = Some(Run {
                        base,
                        origin: f.media_ts,
                    });
                    base
                }
            };
            latest = Some(latest.map_or(p, |l| l.max(p)));
            pts.push(p);
        }
        let mut sorted = pts.clone();
        sorted.sort_unstable();
        let mut dts = Vec::with_capacity(sorted.len());
        for s in sorted {
            let floor = c.last_dts.map_or(0, |l| l + 1).max(0);
            let d = s.max(floor);
            c.last_dts = Some(d);
            dts.push(d);
        }
        if dts.len() >= 2 {
            let span = dts[dts.len() - 1] - dts[0];
            c.nominal = u32::try_from(span / (dts.len() as i64 - 1))
                .unwrap_or(c.nominal)
                .max(1);
        }
        let nominal = c.nominal;
        (0..idx.len())
            .map(|k| {
                let f = &seg.frames[idx[k]];
                // Before a gap (or at the segment's end) the sample keeps its nominal
                // length and the next one starts later.
                let duration = match dts.get(k + 1) {
                    Some(&n) if continues(dts[k], nominal, n, ts as u32) => (n - dts[k]) as u32,
                    _ => nominal,
                };
                Placed {
                    dts: dts[k],
                    sample: Sample {
                        duration,
                        size: f.data.len() as u32,
                        cts: i32::try_from(pts[k] - dts[k]).unwrap_or(0),
                        sync: f.keyframe || !is_video(seg, f.track),
                    },
                    frame: idx[k],
                }
            })
            .collect()
    }
}

/// The time a whole number of `nominal` samples (at least one) after `last` nearest `wall`.
fn on_grid(last: i64, wall: i64, nominal: u32) -> i64 {
    let n = i64::from(nominal.max(1));
    let k = ((wall - last) as f64 / n as f64).round().max(1.0) as i64;
    last + k * n
}

fn is_video(seg: &Segment, track: u8) -> bool {
    seg.header
        .tracks
        .get(usize::from(track))
        .is_some_and(|t| vigil_storage::format::is_video_codec(&t.codec))
}

/// Whether `next_dts` follows a sample without a gap: a step of more than four samples (and
/// more than a second) is a gap.
pub fn continues(prev_dts: i64, prev_duration: u32, next_dts: i64, timescale: u32) -> bool {
    let step = next_dts - prev_dts;
    step > 0 && step <= (4 * i64::from(prev_duration)).max(i64::from(timescale))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use vigil_storage::{testing, Frame};

    fn seg(frames: Vec<Frame>) -> Segment {
        testing::segment(testing::header(&[("H264", 90_000), ("AAC", 8_000)]), frames)
    }

    /// Video at 25 fps: presentation `pts_frames` × 40 ms from wall time `t0`.
    fn v(t0: i64, media0: u64, pts_frames: i64, key: bool) -> Frame {
        Frame {
            track: 0,
            keyframe: key,
            time_ms: t0 + pts_frames * 40,
            media_ts: media0 + (pts_frames * 3600) as u64,
            data: Bytes::from_static(b"12345"),
        }
    }

    fn a(t0: i64, media0: u64, n: i64) -> Frame {
        Frame {
            track: 1,
            keyframe: false,
            time_ms: t0 + n * 128,
            media_ts: media0 + (n * 1024) as u64,
            data: Bytes::from_static(b"aa"),
        }
    }

    #[test]
    fn b_frames_decode_in_rank_order_with_signed_offsets() {
        // I0 P3 B1 B2 P6 B4 B5 in decode order, audio before the keyframe dropped.
        let t0 = 1_000_000;
        let s = seg(vec![
            a(t0 - 200, 0, 0),
            v(t0, 9000, 0, true),
            a(t0, 1600, 0),
            v(t0, 9000, 3, false),
            v(t0, 9000, 1, false),
            v(t0, 9000, 2, false),
            v(t0, 9000, 6, false),
            v(t0, 9000, 4, false),
            v(t0, 9000, 5, false),
        ]);
        let mut tl = Timeline::new(t0, t0 + 10_000, vec![Some(0), Some(1)], &[90_000, 8_000]);
        let cut = tl.cut(&s, 1);
        assert!(!cut.done);
        let video = &cut.tracks[0];
        let dts: Vec<i64> = video.iter().map(|p| p.dts).collect();
        assert_eq!(dts, [0, 3600, 7200, 10800, 14400, 18000, 21600]);
        let cts: Vec<i32> = video.iter().map(|p| p.sample.cts).collect();
        assert_eq!(cts, [0, 7200, -3600, -3600, 7200, -3600, -3600]);
        assert!(video.iter().all(|p| p.sample.duration == 3600));
        assert!(video[0].sample.sync && !video[1].sample.sync);
        let audio = &cut.tracks[1];
        assert_eq!(audio.len(), 1, "audio before the keyframe is not exported");
        assert_eq!(audio[0].dts, 0);
        assert_eq!(audio[0].frame, 2);
    }

    #[test]
    fn the_range_ends_before_the_first_frame_ranked_at_the_end() {
        let t0 = 0;
        let s = seg(vec![
            v(t0, 0, 0, true),
            v(t0, 0, 3, false),
            v(t0, 0, 1, false),
            v(t0, 0, 2, false),
            v(t0, 0, 6, false),
            v(t0, 0, 4, false),
        ]);
        // End at 120 ms: in decode order I0 P3 B1 B2 are ranked 0 40 80 120, so I0, P3 and
        // B1 are in (P3 because B1 needs it) and B2 ends the range.
        let mut tl = Timeline::new(t0, 120, vec![Some(0), None], &[90_000, 8_000]);
        let cut = tl.cut(&s, 0);
        assert!(cut.done);
        assert_eq!(cut.tracks[0].len(), 3);
        assert!(cut.tracks[1].is_empty(), "unmapped track");
    }

    #[test]
    fn a_gap_keeps_wall_time_and_nominal_durations() {
        let t0 = 50_000;
        let first = seg((0..5).map(|i| v(t0, 0, i, i == 0)).collect());
        // Next recording 10 s later with a new media timestamp line.
        let second = seg((0..5).map(|i| v(t0 + 10_200, 777, i, i == 0)).collect());
        let mut tl = Timeline::new(t0, t0 + 60_000, vec![Some(0), None], &[90_000, 8_000]);
        let c1 = tl.cut(&first, 0);
        let c2 = tl.cut(&second, 0);
        let last = c1.tracks[0].last().unwrap();
        assert_eq!((last.dts, last.sample.duration), (4 * 3600, 3600));
        assert_eq!(
            c2.tracks[0][0].dts,
            10_200 * 90,
            "the gap is kept in wall time (10.2 s is on the 40 ms grid)"
        );
        assert!(!continues(
            last.dts,
            last.sample.duration,
            c2.tracks[0][0].dts,
            90_000
        ));
        assert!(continues(0, 3600, 3600, 90_000));
        // A segment that touches the previous one continues its media timestamps exactly.
        let third = seg((5..8).map(|i| v(t0 + 10_200, 777, i, i == 5)).collect());
        let c3 = tl.cut(&third, 0);
        assert_eq!(c3.tracks[0][0].dts, 10_200 * 90 + 5 * 3600);
    }

    #[test]
    fn a_gap_off_the_frame_grid_is_rounded_to_it() {
        // 4.004 s after the first recording's start (as a camera restart gives), with a new
        // media line: the next run starts on the 40 ms grid, 4 ms from wall time.
        let t0 = 50_000;
        let first = seg((0..5).map(|i| v(t0, 0, i, i == 0)).collect());
        let second = seg((0..5).map(|i| v(t0 + 4_004, 777, i, i == 0)).collect());
        let mut tl = Timeline::new(t0, t0 + 60_000, vec![Some(0), None], &[90_000, 8_000]);
        tl.cut(&first, 0);
        let c2 = tl.cut(&second, 0);
        let d = c2.tracks[0][0].dts;
        assert_eq!(d % 3600, 0, "{d} is on the 3600-tick grid");
        assert!(
            (d - 4_004 * 90).abs() <= 1800,
            "{d} within half a frame of wall time"
        );
        assert!(c2.tracks[0].windows(2).all(|w| w[1].dts - w[0].dts == 3600));
        // The same when the media line follows wall time across the gap (a source whose RTP
        // clock is the wall clock): the media jump is off the grid too.
        let mut tl = Timeline::new(t0, t0 + 60_000, vec![Some(0), None], &[90_000, 8_000]);
        tl.cut(&first, 0);
        let third = seg((0..5)
            .map(|i| v(t0 + 4_004, 4_004 * 90, i, i == 0))
            .collect());
        let c3 = tl.cut(&third, 0);
        let d = c3.tracks[0][0].dts;
        assert_eq!(d % 3600, 0, "{d} is on the 3600-tick grid");
        assert!((d - 4_004 * 90).abs() <= 1800, "{d}");
    }
}
