//! A viewer's view of the hub without sockets: keyframe starts, identities, splices, handoff
//! marks, the shared read.

use super::*;
use crate::live::stream::{StreamInfo, TrackInfo};
use vigil_proto::codec::Codec;
use vigil_proto::rtp::{parse, RtpHeader};
use vigil_proto::sdp::SessionDescription;

pub(crate) fn stream() -> Arc<Stream> {
    let s = Arc::new(Stream::new(
        "live/t",
        crate::live::stream::RingLimits {
            bytes: 1 << 20,
            gop_max_bytes: 1 << 20,
            hold_max_bytes: 0,
        },
    ));
    let info = StreamInfo {
        sdp: SessionDescription::default(),
        tracks: vec![TrackInfo {
            codec: Codec::H264,
            clock_rate: 90_000,
        }],
    };
    s.attach_producer(info);
    s
}

fn push(s: &Stream, epoch: u64, seq: u16, ts: u32, key: bool) {
    push_payload(s, epoch, seq, ts, key, vec![0x41, 1, 2, 3]);
}

pub(crate) fn push_payload(s: &Stream, epoch: u64, seq: u16, ts: u32, key: bool, pl: Vec<u8>) {
    s.push(Packet {
        track: 0,
        header: RtpHeader {
            marker: true,
            payload_type: 96,
            sequence: seq,
            timestamp: ts,
            ssrc: 0xdead,
        },
        payload: Bytes::from(pl),
        keyframe: key,
        epoch,
        received: Instant::now(),
    });
}

pub(crate) const SETUP: TrackSetup = TrackSetup {
    ssrc: 0x1234,
    first_seq: 100,
    first_ts: 5000,
};

#[test]
fn a_goodbye_names_every_set_up_track_and_reports_what_each_sent() {
    let s = stream();
    let e = s.current_epoch();
    let r = Reader::new(s.clone(), &[Some(SETUP)]);
    let wall = std::time::Duration::from_secs(1_000_000);
    // Nothing sent yet: no sender report, but a BYE still names the track's SSRC.
    assert!(r.sender_reports(Instant::now(), wall).is_empty());
    let bye = r.goodbye_reports(Instant::now(), wall);
    assert_eq!(bye.len(), 1);
    assert_eq!(bye[0].0, 0);
    assert_eq!(
        (bye[0].1.ssrc, bye[0].1.packet_count, bye[0].1.octet_count),
        (SETUP.ssrc, 0, 0)
    );
    assert_eq!(bye[0].1.ntp, ntp_timestamp(wall));
    let mut r = r;
    push(&s, e, 1, 0, true);
    let mut out = vec![];
    r.poll_batch(&mut out, 64);
    assert_eq!(out.len(), 1);
    let sent = r.sender_reports(Instant::now(), wall);
    let bye = r.goodbye_reports(Instant::now(), wall);
    assert_eq!(bye, sent, "a track that sent: its sender report");
    assert_eq!(
        (bye[0].1.ssrc, bye[0].1.packet_count, bye[0].1.octet_count),
        (SETUP.ssrc, 1, 4)
    );
}

#[test]
fn video_starts_at_keyframe_with_own_identity() {
    let s = stream();
    let e = s.current_epoch();
    push(&s, e, 1, 0, false);
    let mut r = Reader::new(s.clone(), &[Some(SETUP)]);
    push(&s, e, 2, 3000, false);
    push(&s, e, 3, 6000, true);
    push(&s, e, 4, 9000, false);
    let mut out = vec![];
    r.poll_batch(&mut out, 64);
    assert_eq!(out.len(), 2, "packets before the keyframe are withheld");
    let (h, _) = parse(&[&out[0].header[..], &out[0].payload[..]].concat()).unwrap();
    assert_eq!((h.ssrc, h.sequence, h.timestamp), (0x1234, 100, 5000));
    let (h, _) = parse(&[&out[1].header[..], &out[1].payload[..]].concat()).unwrap();
    assert_eq!((h.sequence, h.timestamp), (101, 8000));
    assert_eq!(s.readers.load(Ordering::Relaxed), 1);
    drop(r);
    assert_eq!(s.readers.load(Ordering::Relaxed), 0);
}

#[test]
fn readers_at_one_cursor_share_one_read_of_the_hub_each_with_its_own_identity() {
    let s = stream();
    let e = s.current_epoch();
    let other = TrackSetup {
        ssrc: 0x5678,
        first_seq: 7,
        first_ts: 90,
    };
    let mut a = Reader::new(s.clone(), &[Some(SETUP)]);
    let mut b = Reader::new(s.clone(), &[Some(other)]);
    push(&s, e, 1, 0, true);
    push(&s, e, 2, 3000, false);
    let wire = |o: &[OutPacket]| -> Vec<(u32, u16, u32)> {
        o.iter()
            .map(|p| parse(&[&p.header[..], &p.payload[..]].concat()).unwrap().0)
            .map(|h| (h.ssrc, h.sequence, h.timestamp))
            .collect()
    };
    let mut read = SharedRead::default();
    let (mut oa, mut ob) = (vec![], vec![]);
    assert_eq!(a.poll_shared(&mut read, &mut oa, 64), 2);
    // Published after A's read: B, at the same cursor, takes what that read holds.
    push(&s, e, 3, 6000, false);
    assert_eq!(b.poll_shared(&mut read, &mut ob, 64), 2);
    assert_eq!(wire(&oa), [(0x1234, 100, 5000), (0x1234, 101, 8000)]);
    assert_eq!(wire(&ob), [(0x5678, 7, 90), (0x5678, 8, 3090)]);
    // A is past that read now: it reads afresh, and B, at A's old cursor again, shares it.
    let (mut oa, mut ob) = (vec![], vec![]);
    assert_eq!(a.poll_shared(&mut read, &mut oa, 64), 1);
    assert_eq!(b.poll_shared(&mut read, &mut ob, 64), 1);
    assert_eq!(wire(&oa), [(0x1234, 102, 11000)]);
    assert_eq!(wire(&ob), [(0x5678, 9, 6090)]);
    // Nothing new: a cleared read finds nothing for either.
    read.clear();
    assert_eq!(a.poll_shared(&mut read, &mut oa, 64), 0);
    assert_eq!(b.poll_shared(&mut read, &mut ob, 64), 0);
    assert_eq!((oa.len(), ob.len()), (1, 1));
    // The handoff names the same packets for both: what each sent.
    let mark = |r: &Reader| r.handoff(None).tracks[0].as_ref().unwrap().mark.clone();
    assert_eq!(mark(&a), mark(&b));
    assert_eq!(mark(&a).map(|m| m.packets.len()), Some(3));
}

#[test]
fn a_keyframe_request_withholds_video_until_the_next_keyframe() {
    let s = stream();
    let e = s.current_epoch();
    let mut r = Reader::new(s.clone(), &[Some(SETUP)]);
    push(&s, e, 1, 0, true);
    push(&s, e, 2, 3000, false);
    let mut out = vec![];
    r.poll_batch(&mut out, 64);
    assert_eq!(out.len(), 2);
    r.wait_for_keyframe();
    push(&s, e, 3, 6000, false);
    push(&s, e, 4, 9000, true);
    out.clear();
    r.poll_batch(&mut out, 64);
    assert_eq!(
        out.len(),
        1,
        "the delta frame after the request is withheld"
    );
    let (h, _) = parse(&[&out[0].header[..], &out[0].payload[..]].concat()).unwrap();
    assert_eq!(h.sequence, 103, "the withheld packet is a gap, as a loss");
    assert_eq!(h.timestamp, 5000 + 9000);
}

#[test]
fn a_handoff_names_the_last_packets_sent_across_batches() {
    let s = stream();
    let e = s.current_epoch();
    let mut r = Reader::new(s.clone(), &[Some(SETUP)]);
    let named = |r: &Reader| -> Vec<u64> {
        let h = r.handoff(None);
        let t = h.tracks[0].as_ref().expect("track 0");
        t.mark
            .as_ref()
            .map_or_else(Vec::new, |m| m.packets.iter().map(|&(_, d)| d).collect())
    };
    let payload = |i: u8| vec![0x41, i, i, i];
    let digests =
        |ids: &[u8]| -> Vec<u64> { ids.iter().map(|&i| super::digest(&payload(i))).collect() };
    let mut out = vec![];
    // Batches of two, then of one: the mark fills up to MARK_RUN across them.
    for (i, ts) in [(1u8, 0u32), (2, 3000)] {
        push_payload(&s, e, i.into(), ts, i == 1, payload(i));
    }
    r.poll_batch(&mut out, 64);
    assert_eq!(named(&r), digests(&[1, 2]));
    push_payload(&s, e, 3, 6000, false, payload(3));
    r.poll_batch(&mut out, 64);
    assert_eq!(named(&r), digests(&[1, 2, 3]));
    // A batch of six: only its last four are named.
    for i in 4..10u8 {
        push_payload(&s, e, i.into(), u32::from(i) * 3000, false, payload(i));
    }
    r.poll_batch(&mut out, 64);
    assert_eq!(named(&r), digests(&[6, 7, 8, 9]));
    // Then one more: the oldest named gives way.
    push_payload(&s, e, 10, 30_000, false, payload(10));
    r.poll_batch(&mut out, 64);
    assert_eq!(named(&r), digests(&[7, 8, 9, 10]));
}

#[test]
fn new_producer_is_spliced_continuously() {
    let s = stream();
    let e1 = s.current_epoch();
    let mut r = Reader::new(s.clone(), &[Some(SETUP)]);
    push(&s, e1, 10, 0, true);
    push(&s, e1, 11, 3000, false);
    let e2 = s.attach_producer(StreamInfo {
        sdp: SessionDescription::default(),
        tracks: vec![TrackInfo {
            codec: Codec::H264,
            clock_rate: 90_000,
        }],
    });
    push(&s, e2, 60000, 777, false);
    push(&s, e2, 60001, 3777, true);
    let mut out = vec![];
    r.poll_batch(&mut out, 64);
    let hs: Vec<RtpHeader> = out
        .iter()
        .map(|o| parse(&[&o.header[..], &o.payload[..]].concat()).unwrap().0)
        .collect();
    assert_eq!(hs.len(), 3);
    assert!(hs.iter().all(|h| h.ssrc == 0x1234));
    assert_eq!(hs[2].sequence, hs[1].sequence.wrapping_add(1));
    assert!(hs[2].timestamp > hs[1].timestamp);
}

#[test]
fn splice_after_b_frames_starts_a_frame_after_the_latest() {
    let s = stream();
    let e1 = s.current_epoch();
    let mut r = Reader::new(s.clone(), &[Some(SETUP)]);
    // Decode order I0 P3 B1 B2: the last packet is not the latest frame.
    push(&s, e1, 10, 0, true);
    push(&s, e1, 11, 9000, false);
    push(&s, e1, 12, 3000, false);
    push(&s, e1, 13, 6000, false);
    let e2 = s.attach_producer(StreamInfo {
        sdp: SessionDescription::default(),
        tracks: vec![TrackInfo {
            codec: Codec::H264,
            clock_rate: 90_000,
        }],
    });
    // The takeover is instantaneous: no wall time passes.
    push(&s, e2, 1, 42, true);
    let mut out = vec![];
    r.poll_batch(&mut out, 64);
    let ts: Vec<u32> = out
        .iter()
        .map(|o| {
            parse(&[&o.header[..], &o.payload[..]].concat())
                .unwrap()
                .0
                .timestamp
        })
        .collect();
    assert_eq!(ts.len(), 5);
    // One frame (3000 ticks) after the P-frame, the latest presentation time.
    assert_eq!(ts[4], ts[1].wrapping_add(3000));
}
