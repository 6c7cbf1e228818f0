//! A playback steered by commands instead of RTSP requests: a WebRTC viewer's recording,
//! controlled through its WHEP resource (seek, pause, resume, Scale).
//!
//! The rules are an RTSP PLAY's where one exists — the same Scale range (`window::RATES`),
//! keyframes only above `[playback] keyframes_only_above_scale`, the URL's `end=` — so a
//! browser and an NVR see one behaviour; what differs is decided here, with no I/O, and the
//! shell (`vigil-server`'s `webrtc::recording`) only stops and starts the sender:
//!
//! - a seek plays (as a PLAY with a Range does), also from a pause or after the end;
//! - a Scale change while paused is remembered for the resume;
//! - nothing is refused for being redundant (pause while paused, resume while playing):
//!   a control surface repeats clicks.
//!
//! [`Retime`] is the other half: RTP timestamps for a receiver that has no Scale. An RTSP
//! client that accepted `Scale: 2` runs its own clock at that rate, so RTSP playback keeps
//! media-time spacing; a browser's jitter buffer plays frames at the spacing of their RTP
//! timestamps against its own clock, so for it the timestamps must follow the wall clock:
//! divided by the Scale, and after a pause or a seek continued from where the line was
//! plus the time that passed.

use crate::window::{self, RATES};
use crate::SenderWindow;
use std::time::Instant;

/// What the viewer asks of its playback.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Control {
    /// Play from the keyframe at or before this time (UTC ms).
    Seek(i64),
    Pause,
    Resume,
    Scale(f64),
}

/// Why a control is refused (the HTTP answer is 400, or 409 for [`SteerError::Ended`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SteerError {
    #[error("scale {0}: supported {min} to {max}; reverse play is not supported", min = RATES.start(), max = RATES.end())]
    BadScale(f64),
    #[error("seek to {at_ms}: at or after the end of this playback ({end_ms}, the URL's end=)")]
    PastEnd { at_ms: i64, end_ms: i64 },
    #[error("the recording (or its range) ended: seek to play again")]
    Ended,
}

/// What the shell does to carry a control out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Nothing to do with the sender (the control is only remembered, or changes nothing).
    Nothing,
    /// Stop the sender, keeping where it was.
    Stop,
    /// Stop the sender if it runs, and start one where it was, with the new window.
    Restart,
    /// Stop the sender if it runs, and start one at the seek's position.
    StartAt,
}

/// Where the steered playback is, as its resource answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SteerState {
    pub scale: f64,
    pub paused: bool,
    /// The sender ran to the recording's (or the URL's) end.
    pub ended: bool,
}

impl Default for SteerState {
    fn default() -> Self {
        SteerState {
            scale: 1.0,
            paused: false,
            ended: false,
        }
    }
}

/// The state of a steered playback.
#[derive(Debug, Clone)]
pub struct Steer {
    url_end_ms: Option<i64>,
    keyframes_only_above: f64,
    state: SteerState,
}

impl Steer {
    pub fn new(url_end_ms: Option<i64>, keyframes_only_above: f64) -> Steer {
        Steer {
            url_end_ms,
            keyframes_only_above,
            state: SteerState::default(),
        }
    }

    pub fn state(&self) -> SteerState {
        self.state
    }

    /// What `control` needs done, or why it is refused. Nothing changes.
    pub fn decide(&self, control: Control) -> Result<Act, SteerError> {
        let s = &self.state;
        match control {
            Control::Seek(at_ms) => match self.url_end_ms {
                Some(end_ms) if at_ms >= end_ms => Err(SteerError::PastEnd { at_ms, end_ms }),
                _ => Ok(Act::StartAt),
            },
            Control::Pause if s.paused || s.ended => Ok(Act::Nothing),
            Control::Pause => Ok(Act::Stop),
            Control::Resume if s.ended => Err(SteerError::Ended),
            Control::Resume if s.paused => Ok(Act::Restart),
            Control::Resume => Ok(Act::Nothing),
            Control::Scale(v) if !RATES.contains(&v) => Err(SteerError::BadScale(v)),
            Control::Scale(v) if s.paused || s.ended || v == s.scale => Ok(Act::Nothing),
            Control::Scale(_) => Ok(Act::Restart),
        }
    }

    /// `control` was carried out (after [`Steer::decide`] accepted it).
    pub fn commit(&mut self, control: Control) {
        let s = &mut self.state;
        match control {
            Control::Seek(_) => {
                s.paused = false;
                s.ended = false;
            }
            Control::Pause => s.paused = !s.ended,
            Control::Resume => s.paused = false,
            Control::Scale(v) => s.scale = v,
        }
    }

    /// The sender ran to the end: a resume has nothing left, a seek plays again.
    pub fn ended(&mut self) {
        self.state.ended = true;
        self.state.paused = false;
    }

    /// What a sender started now is given.
    pub fn sender_window(&self) -> SenderWindow {
        SenderWindow {
            scale: self.state.scale,
            keyframes_only: self.state.scale > self.keyframes_only_above,
            end_ms: self.url_end_ms,
            range_end_only: window::range_end_only(self.url_end_ms, None),
        }
    }

    /// Audio is carried at Scale 1 only: a browser plays the samples it is sent at their
    /// rate, so audio sent faster or slower than real time would be cut or stretched.
    pub fn carries_audio(&self) -> bool {
        self.state.scale == 1.0
    }
}

/// Past this many ticks from its anchor the timestamp line is anchored again (the signed
/// difference must not wrap; 2^30 ticks is 3.3 hours at 90 kHz).
const REANCHOR_TICKS: i64 = 1 << 30;

/// One track's outgoing RTP timestamp line for a receiver that plays at wall-clock speed
/// (see the module doc).
#[derive(Debug, Clone)]
pub struct Retime {
    clock_rate: u32,
    scale: f64,
    /// (sender's timestamp, ours) the line is drawn from; None: drawn at the next packet.
    anchor: Option<(u32, u32)>,
    /// The last timestamp written and when.
    last: Option<(u32, Instant)>,
}

impl Retime {
    pub fn new(clock_rate: u32) -> Retime {
        Retime {
            clock_rate: clock_rate.max(1),
            scale: 1.0,
            anchor: None,
            last: None,
        }
    }

    /// The sender starts again (a seek, a resume, a new Scale): the next packet starts a
    /// new line, continuing the old one by the time that passed.
    pub fn restart(&mut self, scale: f64) {
        self.scale = scale;
        self.anchor = None;
    }

    /// Our timestamp for the sender's `ts`, written at `now`.
    pub fn map(&mut self, ts: u32, now: Instant) -> u32 {
        let (from, to) = match self.anchor {
            Some(a) => a,
            None => {
                let to = match self.last {
                    None => ts,
                    Some((out, at)) => {
                        let secs = now.saturating_duration_since(at).as_secs_f64();
                        out.wrapping_add((secs * f64::from(self.clock_rate)).round() as u32)
                    }
                };
                self.anchor = Some((ts, to));
                (ts, to)
            }
        };
        let delta = i64::from(ts.wrapping_sub(from) as i32);
        let out = to.wrapping_add((delta as f64 / self.scale).round() as i64 as u32);
        if delta.abs() >= REANCHOR_TICKS {
            self.anchor = Some((ts, out));
        }
        self.last = Some((out, now));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn steer() -> Steer {
        Steer::new(Some(100_000), 2.0)
    }

    #[test]
    fn a_playing_playback_pauses_resumes_and_changes_scale() {
        let mut s = steer();
        assert_eq!(
            s.decide(Control::Resume),
            Ok(Act::Nothing),
            "already playing"
        );
        assert_eq!(s.decide(Control::Pause), Ok(Act::Stop));
        s.commit(Control::Pause);
        assert!(s.state().paused);
        assert_eq!(s.decide(Control::Pause), Ok(Act::Nothing), "already paused");
        assert_eq!(s.decide(Control::Resume), Ok(Act::Restart));
        s.commit(Control::Resume);
        assert_eq!(s.decide(Control::Scale(2.0)), Ok(Act::Restart));
        s.commit(Control::Scale(2.0));
        assert_eq!(s.decide(Control::Scale(2.0)), Ok(Act::Nothing), "unchanged");
        let w = s.sender_window();
        assert_eq!(
            (w.scale, w.keyframes_only),
            (2.0, false),
            "2 is not above 2"
        );
        s.commit(Control::Scale(4.0));
        assert!(s.sender_window().keyframes_only);
        assert!(!s.carries_audio());
    }

    #[test]
    fn a_scale_while_paused_waits_for_the_resume() {
        let mut s = steer();
        s.commit(Control::Pause);
        assert_eq!(s.decide(Control::Scale(0.5)), Ok(Act::Nothing));
        s.commit(Control::Scale(0.5));
        assert!(s.state().paused, "still paused");
        assert_eq!(s.decide(Control::Resume), Ok(Act::Restart));
        assert_eq!(s.sender_window().scale, 0.5);
    }

    #[test]
    fn scales_outside_rtsps_range_and_reverse_are_refused() {
        let s = steer();
        for v in [0.1, 32.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(s.decide(Control::Scale(v)), Err(SteerError::BadScale(_))),
                "{v}"
            );
        }
        assert!(SteerError::BadScale(-1.0)
            .to_string()
            .contains("0.25 to 16"));
    }

    #[test]
    fn a_seek_plays_from_anywhere_but_not_past_the_urls_end() {
        let mut s = steer();
        s.commit(Control::Pause);
        assert_eq!(s.decide(Control::Seek(50_000)), Ok(Act::StartAt));
        s.commit(Control::Seek(50_000));
        assert!(!s.state().paused, "a seek plays");
        assert_eq!(
            s.decide(Control::Seek(100_000)),
            Err(SteerError::PastEnd {
                at_ms: 100_000,
                end_ms: 100_000
            })
        );
        assert_eq!(
            Steer::new(None, 2.0).decide(Control::Seek(i64::MAX)),
            Ok(Act::StartAt)
        );
    }

    #[test]
    fn after_the_end_only_a_seek_plays_again() {
        let mut s = steer();
        s.ended();
        assert_eq!(s.decide(Control::Resume), Err(SteerError::Ended));
        assert_eq!(s.decide(Control::Pause), Ok(Act::Nothing));
        s.commit(Control::Pause);
        assert!(!s.state().paused, "nothing to pause");
        assert_eq!(s.decide(Control::Scale(2.0)), Ok(Act::Nothing));
        assert_eq!(s.decide(Control::Seek(0)), Ok(Act::StartAt));
        s.commit(Control::Seek(0));
        assert!(!s.state().ended);
    }

    #[test]
    fn the_window_keeps_the_urls_end_as_the_presentations_end() {
        let w = steer().sender_window();
        assert_eq!(w.end_ms, Some(100_000));
        assert!(!w.range_end_only, "reaching it ends the presentation");
        assert_eq!(Steer::new(None, 2.0).sender_window().end_ms, None);
    }

    #[test]
    fn at_scale_one_the_line_is_the_senders_shifted() {
        let t0 = Instant::now();
        let mut r = Retime::new(90_000);
        assert_eq!(r.map(1_000, t0), 1_000);
        assert_eq!(r.map(4_600, t0 + Duration::from_millis(40)), 4_600);
        let mut r = Retime::new(90_000);
        assert_eq!(r.map(u32::MAX - 100, t0), u32::MAX - 100);
        assert_eq!(r.map(50, t0), 50, "across the wrap");
    }

    #[test]
    fn a_faster_scale_divides_the_spacing() {
        let t0 = Instant::now();
        let mut r = Retime::new(90_000);
        r.restart(2.0);
        assert_eq!(r.map(10_000, t0), 10_000);
        assert_eq!(r.map(13_600, t0 + Duration::from_millis(20)), 11_800);
        r.restart(0.5);
        // A new line from the last (11 800 at t0 + 20 ms), 20 ms later: +1 800.
        assert_eq!(r.map(900_000, t0 + Duration::from_millis(40)), 13_600);
        assert_eq!(r.map(903_600, t0 + Duration::from_millis(120)), 20_800);
    }

    #[test]
    fn a_pause_continues_the_line_by_the_time_that_passed() {
        let t0 = Instant::now();
        let mut r = Retime::new(8_000);
        assert_eq!(r.map(500, t0), 500);
        r.restart(1.0);
        // 10 s paused, the sender resumes at its next frame (+160).
        assert_eq!(r.map(660, t0 + Duration::from_secs(10)), 80_500);
        assert_eq!(r.map(820, t0 + Duration::from_secs(10)), 80_660);
    }

    #[test]
    fn b_frames_step_back_and_long_runs_reanchor_without_a_jump() {
        let t0 = Instant::now();
        let mut r = Retime::new(90_000);
        r.restart(2.0);
        assert_eq!(r.map(0, t0), 0);
        assert_eq!(r.map(7_200, t0), 3_600);
        assert_eq!(r.map(3_600, t0), 1_800, "an earlier presentation time");
        let far = 1u32 << 31;
        let out = r.map(far - 2, t0);
        assert_eq!(out, (far - 2) / 2);
        let next = r.map(far - 2 + 3_600, t0);
        assert_eq!(
            next.wrapping_sub(out),
            1_800,
            "the new anchor continues the line"
        );
    }
}
