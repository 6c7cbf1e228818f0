//! The ring's bounds, keyframe tracking and readers, without sockets.

use super::*;

fn pkt(seq: u16, keyframe: bool, marker: bool) -> Packet {
    Packet {
        track: 0,
        header: RtpHeader {
            marker,
            payload_type: 96,
            sequence: seq,
            timestamp: seq as u32 * 3000,
            ssrc: 1,
        },
        payload: Bytes::from_static(b"x"),
        keyframe,
        epoch: 1,
        received: Instant::now(),
    }
}

/// Limits that hold `n` one-byte packets, with the GOP cap at `gop` packets.
fn limits(n: usize, gop: usize) -> RingLimits {
    let one = cost(&pkt(0, false, false));
    RingLimits {
        bytes: n * one,
        gop_max_bytes: gop * one,
        hold_max_bytes: 0,
    }
}

/// Limits of `n` one-byte packets for the ring and the GOP, `hold` for a hold's backlog.
fn hold_limits(n: usize, hold: usize) -> RingLimits {
    let one = cost(&pkt(0, false, false));
    RingLimits {
        hold_max_bytes: hold * one,
        ..limits(n, n)
    }
}

fn sized(seq: u16, keyframe: bool, len: usize) -> Packet {
    Packet {
        payload: Bytes::from(vec![0u8; len]),
        ..pkt(seq, keyframe, true)
    }
}

/// A 100 KB ring after 2000 packets of `len` bytes, a keyframe every 20; checks the bound
/// after every push.
fn filled(len: usize) -> Stream {
    let s = Stream::new(
        "live/a",
        RingLimits {
            bytes: 100_000,
            gop_max_bytes: 1_000_000,
            hold_max_bytes: 0,
        },
    );
    for i in 0..2000u16 {
        s.push(sized(i, i % 20 == 0, len));
        assert!(s.ring_bytes() <= 100_000, "packet {i}: {}", s.ring_bytes());
    }
    s
}

#[test]
fn packet_rate_and_keyframes_by_arrival_time() {
    let s = Stream::new("live/x", limits(100, 100));
    s.attach_producer(StreamInfo {
        sdp: SessionDescription::default(),
        tracks: vec![],
    });
    assert_eq!(s.packet_rate(0), None);
    let t0 = Instant::now();
    for k in 0..11u16 {
        let mut p = pkt(k, k == 0, false);
        p.epoch = s.current_epoch();
        p.received = t0 + std::time::Duration::from_millis(20 * u64::from(k));
        s.push(p);
    }
    // 10 intervals of 20 ms: 50 packets a second.
    let rate = s.packet_rate(0).unwrap();
    assert!((rate - 50.0).abs() < 1e-6, "{rate}");
    assert_eq!(s.packet_rate(1), None);
    // Only the first packet (position 0) is a keyframe.
    assert_eq!(s.first_keyframe_since(t0), Some(0));
    assert_eq!(
        s.first_keyframe_since(t0 + std::time::Duration::from_millis(1)),
        None
    );
}

#[test]
fn ring_is_bounded_by_bytes_whatever_the_packet_count() {
    // 1200-byte packets (24 KB GOPs), then tiny ones: many more of those fit.
    let s = filled(1200);
    let t = filled(10);
    let big = s.head() - s.ring().base;
    let small = t.head() - t.ring().base;
    assert!(small > 4 * big, "{small} vs {big} packets");
}

#[test]
fn gop_in_progress_is_kept_beyond_the_budget_and_late_joiner_starts_on_it() {
    // Budget of ~10 KB, GOPs of 50 × 1 KB: the newest GOP alone is 5× the budget.
    let s = Stream::new(
        "live/a",
        RingLimits {
            bytes: 10_000,
            gop_max_bytes: 1 << 20,
            hold_max_bytes: 0,
        },
    );
    for i in 0..175u16 {
        s.push(sized(i, i % 50 == 0, 1000));
    }
    // The GOP that began at 150 is whole; everything before it is gone.
    assert_eq!(s.start_position(), 150);
    assert_eq!(s.ring().base, 150);
    assert!(s.ring_bytes() > 10_000);
    let mut cur = s.start_position();
    let mut out = vec![];
    assert_eq!(s.read(&mut cur, &mut out, 100), Read::Packets(25));
    assert!(out[0].keyframe, "a late joiner starts on the keyframe");
    // The next keyframe lets the previous GOP go.
    s.push(sized(175, true, 1000));
    assert_eq!(s.start_position(), 175);
    assert!(s.ring_bytes() <= 10_000);
}

#[test]
fn gop_past_its_cap_gives_up_its_keyframe() {
    let s = Stream::new("live/a", limits(16, 32));
    s.push(pkt(0, true, true));
    for i in 1..32 {
        s.push(pkt(i, false, true));
    }
    assert_eq!(s.start_position(), 0, "kept up to the cap");
    s.push(pkt(32, false, true));
    assert_eq!(
        s.start_position(),
        s.head(),
        "keyframe given up past the cap"
    );
    assert!(s.ring().packets.len() <= 16);
}

#[test]
fn new_reader_starts_at_latest_keyframe() {
    let s = Stream::new("live/a", limits(64, 64));
    for i in 0..10 {
        s.push(pkt(i, i == 0 || i == 6, true));
    }
    assert_eq!(s.start_position(), 6);
    let mut cur = s.start_position();
    let mut out = vec![];
    assert_eq!(s.read(&mut cur, &mut out, 100), Read::Packets(4));
    assert!(out[0].keyframe);
    assert_eq!(out[0].header.sequence, 6);
}

#[test]
fn lagging_reader_skips_to_keyframe_and_others_are_unaffected() {
    let s = Stream::new("live/a", limits(16, 16));
    let mut slow = s.start_position();
    let mut fast = s.start_position();
    let mut out = vec![];
    for i in 0..40u16 {
        s.push(pkt(i, i % 10 == 0, true));
        out.clear();
        assert_eq!(s.read(&mut fast, &mut out, 100), Read::Packets(1));
    }
    // The ring holds 24..40; the newest keyframe is 30.
    assert_eq!(
        s.read(&mut slow, &mut out, 100),
        Read::Lagged { skipped: 30 }
    );
    out.clear();
    assert_eq!(s.read(&mut slow, &mut out, 100), Read::Packets(10));
    assert_eq!(out[0].header.sequence, 30);
}

#[test]
fn payloads_are_found_by_position_while_the_ring_holds_them() {
    let s = Stream::new("live/a", limits(16, 16));
    for i in 0..40u16 {
        s.push(Packet {
            payload: Bytes::from(vec![i as u8]),
            ..pkt(i, i % 10 == 0, true)
        });
    }
    // The ring holds 24..40: of a run across its start, only what it still holds.
    let found = s.payloads_at(&[22, 23, 24, 25]);
    assert_eq!(
        found,
        [Bytes::from_static(&[24]), Bytes::from_static(&[25])]
    );
    assert_eq!(s.payloads_at(&[39]), [Bytes::from_static(&[39])]);
    assert!(s.payloads_at(&[10, 40]).is_empty());
}

#[test]
fn keyframe_position_is_forgotten_once_overwritten() {
    let s = Stream::new("live/a", limits(16, 16));
    s.push(pkt(0, true, true));
    for i in 1..20 {
        s.push(pkt(i, false, true));
    }
    assert_eq!(s.start_position(), s.head());
}

#[tokio::test]
async fn waiting_reader_is_woken_at_frame_end() {
    let s = Arc::new(Stream::new("live/a", limits(64, 64)));
    let s2 = s.clone();
    let waiter = tokio::spawn(async move { s2.wait_beyond(0).await });
    tokio::task::yield_now().await;
    s.push(pkt(0, true, false));
    s.push(pkt(1, false, true));
    tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
}

/// A hold keeps what its consumer has not read past the byte budget, up to its own cap,
/// while a plain reader at the same position is lapped at the budget; beyond the cap the
/// holder is lapped too, and a dropped hold gives its packets up at once.
#[test]
fn a_hold_keeps_what_its_consumer_has_not_read_up_to_its_cap() {
    let one = cost(&pkt(0, false, false));
    let s = Stream::new("live/h", hold_limits(10, 30));
    let hold = s.hold(0);
    let (mut held, mut plain) = (0u64, 0u64);
    let mut out = Vec::new();
    // 25 packets, no keyframe (nothing else protects them): over the budget, under the cap.
    for i in 0..25u16 {
        s.push(pkt(i, false, true));
    }
    assert_eq!(
        s.ring_bytes(),
        25 * one,
        "the hold kept what it has not read"
    );
    assert_eq!(hold.read(&mut held, &mut out, 256), Read::Packets(25));
    assert_eq!(
        out.iter().map(|p| p.header.sequence).collect::<Vec<_>>(),
        (0..25).collect::<Vec<_>>(),
        "the holder read every packet in order"
    );
    // Read: the ring is back at its budget at the next push; a reader without a hold that
    // was as far behind was lapped.
    s.push(pkt(25, false, true));
    assert_eq!(s.ring_bytes(), 10 * one);
    assert!(matches!(
        s.read(&mut plain, &mut out, 256),
        Read::Lagged { .. }
    ));
    // Past the cap the holder is lapped like any reader, and the ring stays at the cap.
    for i in 26..70u16 {
        s.push(pkt(i, false, true));
        assert!(s.ring_bytes() <= 30 * one);
    }
    out.clear();
    // Lapped at 25 with no keyframe in the ring: on to the head (70).
    assert_eq!(
        hold.read(&mut held, &mut out, 256),
        Read::Lagged { skipped: 70 - 25 }
    );
    assert_eq!(held, s.head());
    // Behind again, then gone: what only the hold kept is let go at once.
    for i in 70..90u16 {
        s.push(pkt(i, false, true));
    }
    assert_eq!(s.ring_bytes(), 20 * one);
    drop(hold);
    assert_eq!(s.ring_bytes(), 10 * one);
}

/// Two holds: the ring keeps what the further behind has not read.
#[test]
fn the_furthest_hold_behind_is_the_one_kept_for() {
    let one = cost(&pkt(0, false, false));
    let s = Stream::new("live/h2", hold_limits(4, 100));
    let (a, b) = (s.hold(0), s.hold(0));
    let (mut ca, mut cb) = (0u64, 0u64);
    let mut out = Vec::new();
    for i in 0..20u16 {
        s.push(pkt(i, false, true));
    }
    assert_eq!(a.read(&mut ca, &mut out, 256), Read::Packets(20));
    s.push(pkt(20, false, true));
    assert_eq!(s.ring_bytes(), 21 * one, "b has read nothing yet");
    assert_eq!(b.read(&mut cb, &mut out, 5), Read::Packets(5));
    s.push(pkt(21, false, true));
    assert_eq!(s.ring_bytes(), 17 * one, "b's next packet is 5");
}
