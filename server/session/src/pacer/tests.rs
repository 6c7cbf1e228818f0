//! Pacing with time passed in: every figure below is computed by hand.

use super::*;
use vigil_proto::codec::Codec;
use vigil_proto::rtp::{RtpHeader, RtpIdentity};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn frames_are_due_at_their_decode_time_over_the_scale() {
    let t = Instant::now();
    let mut p = Pacer::new(1.0, None);
    assert_eq!(
        p.due(10_000, t),
        t,
        "the first frame starts the line, due now"
    );
    // A later `now` changes nothing once the line is set.
    assert_eq!(p.due(10_040, t + ms(500)), t + ms(40));
    assert_eq!(p.due(11_000, t), t + ms(1_000));
    let mut fast = Pacer::new(2.0, None);
    fast.due(0, t);
    assert_eq!(fast.due(40, t), t + ms(20), "Scale 2: half the spacing");
    let mut slow = Pacer::new(0.5, None);
    slow.due(0, t);
    assert_eq!(slow.due(40, t), t + ms(80), "Scale 0.5: twice the spacing");
}

#[test]
fn a_frame_decoded_before_the_line_is_due_at_its_start() {
    let t = Instant::now();
    let mut p = Pacer::new(1.0, None);
    p.due(1_000, t);
    assert_eq!(
        p.due(960, t + ms(5)),
        t,
        "B-frame reordering: never before the line"
    );
}

#[test]
fn a_bad_scale_paces_at_1() {
    let t = Instant::now();
    for s in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let mut p = Pacer::new(s, None);
        p.due(0, t);
        assert_eq!(p.due(40, t), t + ms(40), "scale {s}");
    }
}

#[test]
fn hold_ups_longer_than_a_frame_move_the_line_on() {
    let t = Instant::now();
    let mut p = Pacer::new(1.0, None);
    assert!(!p.held(ms(500)), "no line yet: nothing to move");
    p.due(0, t);
    p.frame_interval(40);
    assert!(
        !p.held(ms(40)),
        "one frame interval is absorbed by the sleeps"
    );
    assert_eq!(p.due(80, t), t + ms(80));
    assert!(p.held(ms(300)), "a storage read of 300 ms");
    assert_eq!(
        p.due(80, t),
        t + ms(380),
        "the next frame keeps its spacing"
    );
    assert_eq!(p.due(120, t), t + ms(420));
    // At Scale 4 a frame interval is 10 ms of wall time.
    let mut f = Pacer::new(4.0, None);
    f.due(0, t);
    f.frame_interval(40);
    assert!(f.held(ms(11)));
    assert_eq!(f.due(40, t), t + ms(21));
}

#[test]
fn a_gap_starts_a_new_line_at_the_next_frame() {
    let t = Instant::now();
    let mut p = Pacer::new(1.0, None);
    p.due(10_000, t);
    p.new_line();
    assert_eq!(p.anchor(), None);
    // The next recording begins 10 s later in media time, due at once.
    let later = t + ms(45);
    assert_eq!(p.due(20_000, later), later);
    assert_eq!(p.due(20_040, later), later + ms(40));
    assert_eq!(p.anchor(), Some((later, 20_000)));
}

#[test]
fn a_handed_off_line_continues_where_it_was() {
    let t = Instant::now();
    let mut p = Pacer::new(1.0, Some((t, 5_000)));
    assert_eq!(p.due(5_400, t + ms(1)), t + ms(400));
    assert_eq!(p.anchor(), Some((t, 5_000)));
}

fn facts(order_ms: i64, video: bool, keyframe: bool, enabled: bool) -> FrameFacts {
    FrameFacts {
        order_ms,
        video,
        keyframe,
        enabled,
    }
}

#[test]
fn the_range_ends_before_the_frame_that_reaches_it() {
    let f = |o| facts(o, true, false, true);
    assert_eq!(Step::of(f(999), Some(1_000), false), Step::Send);
    assert_eq!(Step::of(f(1_000), Some(1_000), false), Step::End);
    assert_eq!(Step::of(f(5_000), None, false), Step::Send);
    // The end is checked first: a disabled track's frame past it ends the run too.
    assert_eq!(
        Step::of(facts(1_000, false, false, false), Some(1_000), false),
        Step::End
    );
}

#[test]
fn keyframes_only_sends_video_keyframes_and_skips_tracks_not_set_up() {
    assert_eq!(Step::of(facts(0, true, true, true), None, true), Step::Send);
    assert_eq!(
        Step::of(facts(0, true, false, true), None, true),
        Step::Skip
    );
    assert_eq!(
        Step::of(facts(0, false, false, true), None, true),
        Step::Skip,
        "audio in keyframes-only play"
    );
    assert_eq!(
        Step::of(facts(0, false, false, true), None, false),
        Step::Send
    );
    assert_eq!(
        Step::of(facts(0, true, true, false), None, false),
        Step::Skip
    );
}

fn track(clock_rate: u32) -> TrackOut {
    TrackOut {
        codec: Codec::from_encoding_name("H264"),
        payload_type: 96,
        clock_rate,
        identity: RtpIdentity::new(1, 100, 1_000),
        seq: 0,
        enabled: true,
    }
}

/// Sends one packet of input timestamp `ts` on `t` and returns its output timestamp.
fn send(t: &mut TrackOut, ts: u32) -> u32 {
    let h = RtpHeader {
        marker: true,
        payload_type: 96,
        sequence: t.seq,
        timestamp: ts,
        ssrc: 0,
    };
    t.seq = t.seq.wrapping_add(1);
    t.identity.rewrite(&h, 100).timestamp
}

#[test]
fn a_gap_is_cut_out_of_the_rtp_timestamps_per_track() {
    // Segment [0, 10 000): video's last frame at 9 960, audio's at 9 980. The next
    // recording starts at 60 000 with video at 60 000 and audio at 60 010.
    let before = [(0, 9_920), (1, 9_980), (0, 9_960)];
    let gap = Gap::after(before, 10_000, 60_000, 2);
    let mut tracks = vec![track(90_000), track(8_000)];
    let last_v = send(&mut tracks[0], 5_000);
    let last_a = send(&mut tracks[1], 7_000);
    gap.rebase(&mut tracks, &[Some(60_000), Some(60_010)], 40);
    // Video: 60 000 − 9 960 − 50 000 = 40 ms = 3 600 ticks at 90 kHz.
    assert_eq!(send(&mut tracks[0], 123), last_v + 3_600);
    // Audio: 60 010 − 9 980 − 50 000 = 30 ms = 240 ticks at 8 kHz.
    assert_eq!(send(&mut tracks[1], 9), last_a + 240);
}

#[test]
fn a_track_missing_on_one_side_of_a_gap_advances_one_frame() {
    let gap = Gap::after([(0, 9_960)], 10_000, 20_000, 2);
    let mut tracks = vec![track(90_000), track(90_000)];
    let v = send(&mut tracks[0], 0);
    let a = send(&mut tracks[1], 0);
    gap.rebase(&mut tracks, &[None, Some(20_000)], 40);
    assert_eq!(
        send(&mut tracks[0], 77),
        v + 3_600,
        "no frame after: one interval"
    );
    assert_eq!(
        send(&mut tracks[1], 77),
        a + 3_600,
        "no frame before: one interval"
    );
    // Frames closer than the cut (overlapping recordings) still advance one tick.
    let gap = Gap::after([(0, 9_999)], 10_000, 10_500, 1);
    let mut one = vec![track(90_000)];
    let x = send(&mut one[0], 0);
    gap.rebase(&mut one, &[Some(10_000)], 40);
    assert_eq!(send(&mut one[0], 5), x + 1);
}

#[test]
fn the_rate_is_measured_over_two_seconds_and_not_before_100_ms() {
    let t = Instant::now();
    let mut m = RateMeter::new();
    m.add(1_000, t);
    assert_eq!(m.bps(), None, "one frame over no time");
    m.add(1_000, t + ms(99));
    assert_eq!(m.bps(), None);
    m.add(500, t + ms(100));
    // 2 500 bytes over 0.1 s = 200 000 bit/s.
    assert_eq!(m.bps(), Some(200_000));
    // 2.1 s later the first three have left the window.
    m.add(1_000, t + ms(2_200));
    m.add(1_000, t + ms(2_700));
    assert_eq!(m.bps(), Some(32_000), "2 000 bytes over 0.5 s");
}
