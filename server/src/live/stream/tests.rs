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
