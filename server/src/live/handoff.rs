//! A live viewer's stream continued by another node (issue 7 §1, live viewers): what the
//! node sending it now hands over, and how the next node finds its place.
//!
//! Two nodes' hubs carry the same camera with different RTP numbering (an edge relays the
//! holder's stream through a viewer identity of its own, a re-bound pull has its own
//! upstream session), but the same payload bytes in the same order (the relay forwards RTP
//! payloads untouched). So the old sender names the last packets it sent per track by their
//! payloads ([`Mark`]: a digest of each of the last few), and the new sender looks that run
//! up in its own ring: found, it continues with the very next packet, its numbering aligned
//! so that sequence numbers and timestamps go on exactly (no gap, no duplicate, no jump);
//! not found (the ring has moved past it, or never had it), it starts at the next keyframe
//! with the timestamp advanced by the wall time that passed, as a splice does. Sans-IO.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use vigil_proto::rtp::RtpIdentity;

/// Packets per track named in a [`Mark`]: one payload can repeat (an audio codec's silence
/// frame), a run of four in a row does not in practice.
pub const MARK_RUN: usize = 4;

/// The last packets a sender sent on one track, oldest first: payload length and digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub packets: Vec<(u32, u64)>,
}

/// One track of a live viewer, as the node that stops sending it leaves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveTrack {
    pub identity: RtpIdentity,
    pub clock_rate: u32,
    pub video: bool,
    /// The last packets sent (None: nothing sent yet).
    pub mark: Option<Mark>,
    /// Smallest forward step between input timestamps seen (about a frame).
    pub min_step: Option<u32>,
    /// The sender reports' NTP↔RTP line: (output timestamp, wall µs since the epoch). The
    /// next sender keeps it, so a player syncing tracks on the reports sees no step (a new
    /// line anchored mid-GOP would be off by the B-frame reordering).
    #[serde(default)]
    pub sr_line: Option<(u32, i64)>,
}

/// A live viewer's whole state: per SDP track, None for tracks not set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveHandoff {
    pub tracks: Vec<Option<LiveTrack>>,
    /// When the last packet left the old sender (µs since the Unix epoch), for the
    /// timestamp advance of a keyframe join.
    pub last_sent_us: Option<i64>,
}

/// Where a [`LiveHandoff`] comes from, which decides how much of it can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The old sender stopped and handed it over: nothing was sent after it.
    Handoff,
    /// The old sender's last heartbeat report: it may have sent more before it fell
    /// silent, but nothing that reached this hub after `unsent_after` (its lease had run
    /// out by then).
    Heartbeat { unsent_after: std::time::Instant },
}

/// The largest sequence skip of a take-back: below RFC 3550's MAX_DROPOUT (3000), so a
/// receiver counts the skipped numbers as loss rather than resynchronising.
pub const MAX_SEQ_SKIP: u16 = 2900;

/// How the new sender joined a track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// Right after the last packet sent: numbering continues exactly.
    Exact,
    /// At the next keyframe, the timestamp advanced by `advance` ticks of wall time and
    /// `skipped` sequence numbers left unused (a take-back: what the lost sender may have
    /// sent since its last report).
    Keyframe { advance: u32, skipped: u16 },
    /// A take-back: right after the last packet the lost sender reported; what it sent
    /// after its report comes again, the same numbers and bytes (dropped as duplicates).
    AfterReport,
    /// Nothing had been sent on this track: it starts at a keyframe like a new viewer.
    Fresh,
}

/// A payload's digest (stable across processes and builds, unlike `std`'s hasher).
pub fn digest(payload: &[u8]) -> u64 {
    let d = Sha256::digest(payload);
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// Whether `payload` is the packet `want` names (length first: most candidates stop there).
pub fn is(want: (u32, u64), payload: &[u8]) -> bool {
    payload.len() as u32 == want.0 && digest(payload) == want.1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::reader::tests::{push_payload, stream, SETUP};
    use crate::live::reader::{OutPacket, Reader};
    use vigil_proto::rtp::{parse, RtpHeader};

    fn headers(out: &[OutPacket]) -> Vec<(RtpHeader, Vec<u8>)> {
        out.iter()
            .map(|o| {
                let raw = [&o.header[..], &o.payload[..]].concat();
                let (h, r) = parse(&raw).unwrap();
                (h, raw[r].to_vec())
            })
            .collect()
    }

    /// What the reader sends now: each packet's header and payload, and the payloads' ids.
    fn read(r: &mut Reader) -> (Vec<(RtpHeader, Vec<u8>)>, Vec<u8>) {
        let mut out = vec![];
        r.poll_batch(&mut out, 64);
        let got = headers(&out);
        let ids = got.iter().map(|(_, p)| p[1]).collect();
        (got, ids)
    }

    /// `hd` is the `k`-th packet after `last` in one RTP numbering: same SSRC, sequence
    /// `k` further, timestamp `k` frames (3600 ticks) further.
    fn assert_follows(hd: &RtpHeader, last: &RtpHeader, k: u16) {
        assert_eq!(hd.ssrc, last.ssrc);
        assert_eq!(hd.sequence, last.sequence.wrapping_add(k));
        assert_eq!(
            hd.timestamp,
            last.timestamp.wrapping_add(3600 * u32::from(k))
        );
    }

    /// Node A's viewer sent `sent` (payload ids, the first a keyframe): its handoff.
    fn sent_on_a(sent: &[u8]) -> (LiveHandoff, Vec<(RtpHeader, Vec<u8>)>) {
        let a = stream();
        let e = a.current_epoch();
        let mut r = Reader::new(a.clone(), &[Some(SETUP)]);
        for (i, &id) in sent.iter().enumerate() {
            push_payload(
                &a,
                e,
                10 + i as u16,
                3600 * i as u32,
                i == 0,
                vec![0x41, id],
            );
        }
        let mut out = vec![];
        r.poll_batch(&mut out, 64);
        (r.handoff(Some(1_000_000)), headers(&out))
    }

    /// Node B's hub: the same payloads numbered by another RTP session (a relay).
    fn hub_b(ids: &[(u8, bool)]) -> std::sync::Arc<crate::live::stream::Stream> {
        let b = stream();
        let e = b.current_epoch();
        for (i, &(id, key)) in ids.iter().enumerate() {
            let i = i as u32;
            push_payload(
                &b,
                e,
                5000 + i as u16,
                90_000 + 3600 * i,
                key,
                vec![0x41, id],
            );
        }
        b
    }

    #[test]
    fn b_continues_right_after_as_last_packet() {
        let (h, a_out) = sent_on_a(&[0, 1, 2, 3, 4, 5]);
        let last = a_out.last().unwrap().0;
        assert_eq!(
            h.tracks[0]
                .as_ref()
                .unwrap()
                .mark
                .as_ref()
                .unwrap()
                .packets
                .len(),
            MARK_RUN
        );
        // B's hub is ahead of A's: it already holds packets 6 and 7, which A never sent.
        let b = hub_b(&[
            (0, true),
            (1, false),
            (2, false),
            (3, false),
            (4, false),
            (5, false),
            (6, false),
            (7, false),
        ]);
        let (mut r, joined) = Reader::continuing(b.clone(), &h, 1_040_000, Origin::Handoff);
        assert_eq!(joined, vec![Some(Joined::Exact)]);
        push_payload(
            &b,
            b.current_epoch(),
            5008,
            90_000 + 8 * 3600,
            false,
            vec![0x41, 8],
        );
        let (got, ids) = read(&mut r);
        assert_eq!(ids, [6, 7, 8], "the next packets, none twice");
        for (k, (hd, _)) in got.iter().enumerate() {
            assert_follows(hd, &last, k as u16 + 1);
        }
    }

    #[test]
    fn a_repeated_payload_does_not_fool_the_match() {
        // A sent 0 1 2 9; B's hub has 9 again later (a repeated silence frame) after 3.
        let (h, a_out) = sent_on_a(&[0, 1, 2, 9]);
        let last = a_out.last().unwrap().0;
        let b = hub_b(&[
            (0, true),
            (1, false),
            (2, false),
            (9, false),
            (3, false),
            (9, false),
            (4, false),
        ]);
        let (mut r, joined) = Reader::continuing(b, &h, 1_040_000, Origin::Handoff);
        assert_eq!(joined, vec![Some(Joined::Exact)]);
        let (got, ids) = read(&mut r);
        assert_eq!(ids, [3, 9, 4]);
        assert_eq!(got[0].0.sequence, last.sequence.wrapping_add(1));
    }

    #[test]
    fn without_the_last_packet_b_starts_at_the_next_keyframe() {
        let (h, a_out) = sent_on_a(&[0, 1, 2, 3]);
        let last = a_out.last().unwrap().0;
        // B's hub never had A's packets (another upstream); it holds an older keyframe.
        let b = hub_b(&[(20, true), (21, false)]);
        // 100 ms after A's last packet.
        let (mut r, joined) = Reader::continuing(b.clone(), &h, 1_100_000, Origin::Handoff);
        assert_eq!(
            joined,
            vec![Some(Joined::Keyframe {
                advance: 9000,
                skipped: 0
            })]
        );
        let e = b.current_epoch();
        push_payload(&b, e, 5002, 97_200, false, vec![0x41, 22]);
        push_payload(&b, e, 5003, 100_800, true, vec![0x41, 23]);
        push_payload(&b, e, 5004, 104_400, false, vec![0x41, 24]);
        let (got, ids) = read(&mut r);
        assert_eq!(ids, [23, 24], "from the next keyframe, not the cached one");
        assert_eq!(got[0].0.sequence, last.sequence.wrapping_add(1));
        assert_eq!(got[0].0.timestamp, last.timestamp.wrapping_add(9000));
        assert_eq!(got[1].0.timestamp, last.timestamp.wrapping_add(9000 + 3600));
    }

    #[test]
    fn a_take_back_continues_after_the_reported_packet_repeating_only_exact_copies() {
        // B reported after sending 0..=3, then sent 4 and 5 (unknown here) and died.
        let (h, a_out) = sent_on_a(&[0, 1, 2, 3]);
        let reported = a_out.last().unwrap().0;
        let hub = hub_b(&[
            (0, true),
            (1, false),
            (2, false),
            (3, false),
            (4, false),
            (5, false),
        ]);
        let unsent_after = std::time::Instant::now();
        push_payload(
            &hub,
            hub.current_epoch(),
            5006,
            90_000 + 6 * 3600,
            false,
            vec![0x41, 6],
        );
        let (mut r, joined) = Reader::continuing(
            hub.clone(),
            &h,
            1_900_000,
            Origin::Heartbeat { unsent_after },
        );
        assert_eq!(joined, vec![Some(Joined::AfterReport)]);
        let (got, ids) = read(&mut r);
        // 4 and 5 again, numbered as B numbered them: exact duplicates; then 6, not a
        // keyframe, is fine: the viewer's decoder never lost its place.
        assert_eq!(ids, [4, 5, 6]);
        for (hd, p) in &got {
            assert_follows(hd, &reported, u16::from(p[1]) - 3);
        }
    }

    #[test]
    fn a_take_back_without_the_reported_packet_starts_at_a_keyframe_b_cannot_have_sent() {
        let (h, a_out) = sent_on_a(&[0, 1, 2, 3]);
        let reported = a_out.last().unwrap().0;
        // Another upstream: the reported packets were never in this hub.
        let hub = hub_b(&[(20, true), (21, false)]);
        let unsent_after = std::time::Instant::now();
        // Arrived after the lost sender's lease ran out: it cannot have sent these.
        let e = hub.current_epoch();
        push_payload(&hub, e, 5002, 97_200, false, vec![0x41, 22]);
        push_payload(&hub, e, 5003, 100_800, true, vec![0x41, 23]);
        push_payload(&hub, e, 5004, 104_400, false, vec![0x41, 24]);
        let (mut r, joined) = Reader::continuing(
            hub.clone(),
            &h,
            1_100_000,
            Origin::Heartbeat { unsent_after },
        );
        let Some(Joined::Keyframe { skipped, .. }) = joined[0] else {
            panic!("{joined:?}");
        };
        let (got, ids) = read(&mut r);
        assert_eq!(ids, [23, 24], "at once, from the keyframe after the cut");
        assert_eq!(
            got[0].0.sequence,
            reported.sequence.wrapping_add(1 + skipped)
        );
        assert!(skipped > 0);
    }

    #[test]
    fn a_take_back_without_the_reported_packet_skips_what_may_have_been_sent() {
        let (h, a_out) = sent_on_a(&[0, 1, 2, 3]);
        let reported = a_out.last().unwrap().0;
        // Another upstream: the reported packets were never in this hub, and its rate is
        // not measurable (all arrived at once), so the skip is the largest safe one.
        let hub = hub_b(&[(20, true), (21, false)]);
        let unsent_after = std::time::Instant::now();
        let (mut r, joined) = Reader::continuing(
            hub.clone(),
            &h,
            1_100_000,
            Origin::Heartbeat { unsent_after },
        );
        assert_eq!(
            joined,
            vec![Some(Joined::Keyframe {
                advance: 9000,
                skipped: MAX_SEQ_SKIP
            })]
        );
        let e = hub.current_epoch();
        push_payload(&hub, e, 5002, 97_200, true, vec![0x41, 22]);
        let (got, _) = read(&mut r);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].0.sequence,
            reported.sequence.wrapping_add(1 + MAX_SEQ_SKIP)
        );
        assert_eq!(got[0].0.timestamp, reported.timestamp.wrapping_add(9000));
    }

    #[test]
    fn digests_are_stable_and_matching_checks_length_and_bytes() {
        // SHA-256("abc") starts ba7816bf 8f01cfea.
        assert_eq!(digest(b"abc"), 0xba78_16bf_8f01_cfea);
        assert!(is((3, digest(b"abc")), b"abc"));
        assert!(!is((4, digest(b"abc")), b"abc"));
        assert!(!is((3, digest(b"abc")), b"abd"));
    }
}
