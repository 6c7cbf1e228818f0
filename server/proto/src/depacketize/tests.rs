use super::*;
use proptest::prelude::*;

const SSRC: u32 = 0x1234_5678;

fn hdr(seq: u16, ts: u32, marker: bool) -> RtpHeader {
    RtpHeader {
        marker,
        payload_type: 96,
        sequence: seq,
        timestamp: ts,
        ssrc: SSRC,
    }
}

/// Length-prefixed (AVC style) access unit from NALs.
fn avc(nals: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for nal in nals {
        out.extend_from_slice(&(nal.len() as u32).to_be_bytes());
        out.extend_from_slice(nal);
    }
    out
}

fn nal(header: &[u8], len: usize, seed: u32) -> Vec<u8> {
    let mut v = header.to_vec();
    v.extend((0..len as u32).map(|i| (i.wrapping_mul(31).wrapping_add(seed)) as u8));
    v
}

/// Packetises frames and feeds them to a depacketiser, like a playback sender feeding a
/// recorder; `lose` names sequence numbers (counting from 0) that never arrive.
struct Link {
    d: Depacketizer,
    codec: Codec,
    seq: u16,
    mtu: usize,
}

impl Link {
    fn new(codec: Codec, fmtp: Option<&str>, mtu: usize) -> Self {
        Self {
            d: Depacketizer::new(codec, 90_000, fmtp).unwrap(),
            codec,
            seq: 0,
            mtu,
        }
    }

    fn send(&mut self, ts: u32, frame: &[u8], lose: &[u16]) -> usize {
        let payloads = packetize_payloads(self.codec, frame, self.mtu).unwrap();
        for p in &payloads {
            assert!(p.data.len() <= self.mtu);
            let seq = self.seq;
            self.seq = self.seq.wrapping_add(1);
            if lose.contains(&seq) {
                continue;
            }
            let h = hdr(seq, ts.wrapping_add(p.timestamp_offset), p.marker);
            self.d.push(&h, &p.data).unwrap();
        }
        payloads.len()
    }

    fn frames(&mut self) -> Vec<Frame> {
        std::iter::from_fn(|| self.d.pull()).collect()
    }
}

const SPS: &[u8] = &[0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50];
const PPS: &[u8] = &[0x68, 0xeb, 0xe3, 0xcb, 0x22, 0xc0];

#[test]
fn h264_small_nals_round_trip() {
    let mut link = Link::new(Codec::H264, Some("packetization-mode=1"), 1400);
    let idr = nal(&[0x65], 300, 1);
    let p = nal(&[0x41], 100, 2);
    let key = avc(&[SPS, PPS, &idr]);
    let inter = avc(&[&p]);
    assert_eq!(link.send(1000, &key, &[]), 3);
    assert_eq!(link.send(4000, &inter, &[]), 1);
    let frames = link.frames();
    assert_eq!(
        frames,
        vec![
            Frame {
                timestamp: 1000,
                keyframe: true,
                discontinuity: false,
                data: key
            },
            Frame {
                timestamp: 4000,
                keyframe: false,
                discontinuity: false,
                data: inter
            },
        ]
    );
    assert_eq!((link.d.lost_packets(), link.d.dropped_frames()), (0, 0));
}

#[test]
fn h264_big_nals_fu_a_round_trip() {
    let mut link = Link::new(Codec::H264, None, 1200);
    let idr = nal(&[0x65], 20_000, 3);
    let key = avc(&[SPS, PPS, &idr, &nal(&[0x65], 5000, 4)]);
    let inter = avc(&[&nal(&[0x41], 3000, 5), &nal(&[0x41], 10, 6)]);
    assert!(link.send(0, &key, &[]) > 20);
    link.send(3000, &inter, &[]);
    let frames = link.frames();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].data, key);
    assert!(frames[0].keyframe);
    assert_eq!(frames[1].data, inter);
    assert!(!frames[1].keyframe);
}

#[test]
fn access_unit_ends_on_timestamp_change_without_marker() {
    let mut d = Depacketizer::new(Codec::H264, 90_000, None).unwrap();
    let a = nal(&[0x41], 20, 1);
    let b = nal(&[0x41], 30, 2);
    d.push(&hdr(1, 100, false), SPS).unwrap();
    d.push(&hdr(2, 100, false), &a).unwrap();
    assert_eq!(d.pull(), None);
    d.push(&hdr(3, 200, false), &b).unwrap();
    let f = d.pull().unwrap();
    assert_eq!((f.timestamp, f.data), (100, avc(&[SPS, &a])));
    assert_eq!(d.pull(), None);
    d.flush();
    assert_eq!(d.pull().unwrap().data, avc(&[&b]));
}

#[test]
fn h264_stap_a_hand_built() {
    let mut d = Depacketizer::new(Codec::H264, 90_000, None).unwrap();
    let mut stap = vec![0x78];
    for n in [SPS, PPS] {
        stap.extend_from_slice(&(n.len() as u16).to_be_bytes());
        stap.extend_from_slice(n);
    }
    let idr = nal(&[0x65], 50, 9);
    d.push(&hdr(10, 5, false), &stap).unwrap();
    d.push(&hdr(11, 5, true), &idr).unwrap();
    let f = d.pull().unwrap();
    assert_eq!(f.data, avc(&[SPS, PPS, &idr]));
    assert!(f.keyframe);
    // STAP-A carrying the IDR itself also marks the frame as a keyframe.
    let mut stap = vec![0x78, 0, 3, 0x65, 1, 2];
    stap.extend_from_slice(&[0, 2, 0x06, 0xff]);
    d.push(&hdr(12, 9, true), &stap).unwrap();
    let f = d.pull().unwrap();
    assert!(f.keyframe);
    assert_eq!(f.data, avc(&[&[0x65, 1, 2], &[0x06, 0xff]]));
}

#[test]
fn malformed_stap_a_drops_the_access_unit() {
    let mut d = Depacketizer::new(Codec::H264, 90_000, None).unwrap();
    d.push(&hdr(1, 5, false), SPS).unwrap();
    let err = d
        .push(&hdr(2, 5, true), &[0x78, 0, 9, 0x65, 1])
        .unwrap_err();
    assert!(matches!(
        err,
        DepacketizeError::Malformed { codec: "H264", .. }
    ));
    assert_eq!(d.pull(), None);
    assert_eq!(d.dropped_frames(), 1);
    for (i, bad) in [&[0x78][..], &[0x78, 0, 0], &[0x78, 0], &[0x7c], &[]]
        .into_iter()
        .enumerate()
    {
        let seq = 100 + i as u16;
        assert!(
            d.push(&hdr(seq, 6 + u32::from(seq), true), bad).is_err(),
            "{bad:?}"
        );
    }
    assert_eq!(
        d.push(&hdr(105, 7, true), &[0x79, 0]),
        Err(DepacketizeError::UnsupportedPacketType {
            codec: "H264",
            packet_type: 25
        })
    );
    // The depacketiser is still usable.
    d.push(&hdr(106, 8, true), &[0x65, 7]).unwrap();
    let f = d.pull().unwrap();
    assert!(f.keyframe && f.discontinuity);
}

#[test]
fn fu_a_loss_drops_frame_and_next_keyframe_recovers() {
    let mut link = Link::new(Codec::H264, None, 1000);
    let key1 = avc(&[SPS, PPS, &nal(&[0x65], 8000, 1)]);
    let inter = avc(&[&nal(&[0x41], 2500, 2)]);
    let key2 = avc(&[SPS, PPS, &nal(&[0x65], 8000, 3)]);
    // Packets 0 and 1 are SPS and PPS; 4 is a middle FU-A fragment of the IDR.
    link.send(0, &key1, &[4]);
    assert!(link.frames().is_empty());
    assert_eq!((link.d.lost_packets(), link.d.dropped_frames()), (1, 1));
    link.send(3000, &inter, &[]);
    link.send(6000, &key2, &[]);
    let frames = link.frames();
    assert_eq!(frames.len(), 2);
    // The inter frame is intact but follows a loss: flagged, not hidden.
    assert!(frames[0].discontinuity && !frames[0].keyframe);
    assert_eq!(frames[0].data, inter);
    assert_eq!(
        frames[1],
        Frame {
            timestamp: 6000,
            keyframe: true,
            discontinuity: false,
            data: key2
        }
    );
}

#[test]
fn lost_last_fragment_drops_frame_on_timestamp_change() {
    let mut link = Link::new(Codec::H264, None, 500);
    let big = avc(&[&nal(&[0x65], 2000, 1)]);
    let n = link.send(0, &big, &[]);
    link.frames();
    // Lose the marker-carrying last fragment of the second frame.
    let last = link.seq.wrapping_add(n as u16 - 1);
    link.send(3000, &big, &[last]);
    assert!(link.frames().is_empty());
    let small = avc(&[&[0x41, 1, 2]]);
    link.send(6000, &small, &[]);
    let frames = link.frames();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].data, small);
    assert!(frames[0].discontinuity);
    assert_eq!(link.d.dropped_frames(), 1);
}

#[test]
fn joining_mid_fragment_is_quiet() {
    let mut d = Depacketizer::new(Codec::H264, 90_000, None).unwrap();
    // FU-A middle and end of an IDR: the receiver started mid-NAL.
    d.push(&hdr(100, 1, false), &[0x7c, 0x05, 1, 2]).unwrap();
    d.push(&hdr(101, 1, true), &[0x7c, 0x45, 3]).unwrap();
    assert_eq!(d.pull(), None);
    d.push(&hdr(102, 2, true), &[0x41, 9]).unwrap();
    assert_eq!(d.pull().unwrap().data, avc(&[&[0x41, 9]]));
    // A continuation without start and without any loss is a sender bug worth reporting.
    assert!(d.push(&hdr(103, 3, true), &[0x7c, 0x05, 1]).is_err());
}

#[test]
fn duplicates_and_late_packets_are_ignored() {
    let mut d = Depacketizer::new(Codec::Pcma, 8000, None).unwrap();
    d.push(&hdr(10, 0, false), &[1]).unwrap();
    d.push(&hdr(10, 0, false), &[1]).unwrap();
    d.push(&hdr(12, 320, false), &[3]).unwrap();
    d.push(&hdr(11, 160, false), &[2]).unwrap();
    let frames: Vec<_> = std::iter::from_fn(|| d.pull()).collect();
    assert_eq!(frames.len(), 2);
    assert!(frames[1].discontinuity);
    assert_eq!(d.lost_packets(), 1);
    // A big jump backwards is a sender restart, not a late packet.
    d.push(&hdr(5000, 999, false), &[4]).unwrap();
    d.push(&hdr(1000, 1, false), &[5]).unwrap();
    assert_eq!(std::iter::from_fn(|| d.pull()).count(), 2);
}

#[test]
fn h265_round_trip_small_and_big() {
    let vps = [0x40, 0x01, 0x0c, 0x01];
    let sps = [0x42, 0x01, 0x01, 0x01];
    let pps = [0x44, 0x01, 0xc1];
    let idr = nal(&[0x26, 0x01], 12_000, 7);
    let cra = nal(&[0x2a, 0x01], 40, 8);
    let trail = nal(&[0x02, 0x01], 2500, 9);
    let mut link = Link::new(Codec::H265, None, 1400);
    let key = avc(&[&vps, &sps, &pps, &idr]);
    let frames_in = [key, avc(&[&trail]), avc(&[&cra])];
    for (i, f) in frames_in.iter().enumerate() {
        link.send(i as u32 * 3000, f, &[]);
    }
    let frames = link.frames();
    assert_eq!(frames.len(), 3);
    for (got, want) in frames.iter().zip(&frames_in) {
        assert_eq!(&got.data, want);
    }
    let keys: Vec<bool> = frames.iter().map(|f| f.keyframe).collect();
    assert_eq!(keys, [true, false, true]);
}

#[test]
fn h265_aggregation_packet_hand_built() {
    let mut d = Depacketizer::new(Codec::H265, 90_000, Some("sprop-max-don-diff=0")).unwrap();
    let vps = [0x40, 0x01, 0x0c];
    let idr = [0x26, 0x01, 0xaf, 0x00];
    let mut ap = vec![0x60, 0x01];
    for n in [&vps[..], &idr[..]] {
        ap.extend_from_slice(&(n.len() as u16).to_be_bytes());
        ap.extend_from_slice(n);
    }
    d.push(&hdr(1, 9, true), &ap).unwrap();
    let f = d.pull().unwrap();
    assert!(f.keyframe);
    assert_eq!(f.data, avc(&[&vps, &idr]));
    assert!(d
        .push(&hdr(2, 10, true), &[0x60, 0x01, 0, 1, 0x40])
        .is_err());
    assert!(d.push(&hdr(3, 11, true), &[0x62, 0x01]).is_err());
    assert!(d.push(&hdr(4, 12, true), &[0x26]).is_err());
    assert!(matches!(
        d.push(&hdr(5, 13, true), &[0x64, 0x01, 0]),
        Err(DepacketizeError::UnsupportedPacketType {
            packet_type: 50,
            ..
        })
    ));
}

const AAC_FMTP: &str =
    "profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3; config=1210";

#[test]
fn aac_round_trip_single_and_fragmented() {
    let mut link = Link::new(Codec::Aac, Some(AAC_FMTP), 200);
    let small: Vec<u8> = (0..150u8).collect();
    let big: Vec<u8> = (0..700u32).map(|i| i as u8 ^ 0x5a).collect();
    let payloads = packetize_payloads(Codec::Aac, &small, 200).unwrap();
    assert_eq!(payloads.len(), 1);
    assert_eq!(
        &payloads[0].data[..4],
        &[0x00, 0x10, 150 >> 5, (150 & 0x1f) << 3]
    );
    assert!(payloads[0].marker);
    link.send(0, &small, &[]);
    assert_eq!(link.send(1024, &big, &[]), 4);
    link.send(2048, &small, &[]);
    let frames = link.frames();
    let got: Vec<(u32, &[u8])> = frames.iter().map(|f| (f.timestamp, &f.data[..])).collect();
    assert_eq!(
        got,
        vec![(0, &small[..]), (1024, &big[..]), (2048, &small[..])]
    );
    assert!(frames.iter().all(|f| f.keyframe && !f.discontinuity));
    // Losing a fragment drops that AU only.
    link.send(3072, &big, &[link.seq + 1]);
    link.send(4096, &small, &[]);
    let frames = link.frames();
    assert_eq!(frames.len(), 1);
    assert!(frames[0].discontinuity);
    assert_eq!(link.d.dropped_frames(), 1);
}

#[test]
fn aac_multi_au_packet_hand_built() {
    let mut d = Depacketizer::new(Codec::Aac, 48_000, Some(AAC_FMTP)).unwrap();
    let au1 = [1u8, 2, 3, 4, 5];
    let au2 = [6u8, 7, 8];
    // 32 bits of AU headers: size 5 / index 0, size 3 / index-delta 0.
    let mut p = vec![0x00, 0x20];
    p.extend_from_slice(&[(5u16 << 3).to_be_bytes()[0], (5u16 << 3).to_be_bytes()[1]]);
    p.extend_from_slice(&(3u16 << 3).to_be_bytes());
    p.extend_from_slice(&au1);
    p.extend_from_slice(&au2);
    d.push(&hdr(1, 48_000, true), &p).unwrap();
    let frames: Vec<_> = std::iter::from_fn(|| d.pull()).collect();
    assert_eq!(
        frames,
        vec![
            Frame {
                timestamp: 48_000,
                keyframe: true,
                discontinuity: false,
                data: au1.to_vec()
            },
            Frame {
                timestamp: 49_024,
                keyframe: true,
                discontinuity: false,
                data: au2.to_vec()
            },
        ]
    );
    // Sizes that overrun the data are refused, nothing half-emitted.
    let mut bad = p.clone();
    bad.truncate(bad.len() - 1);
    assert!(d.push(&hdr(2, 50_048, true), &bad).is_err());
    assert!(d.push(&hdr(3, 52_096, true), &[0x00, 0x20, 0]).is_err());
    assert_eq!(d.pull(), None);
}

#[test]
fn aac_fmtp_variants() {
    // ffmpeg capitalisation, AAC-lbr layout (6/2/2 bits = one byte per header).
    let mut d = Depacketizer::new(
        Codec::Aac,
        16_000,
        Some("mode=AAC-lbr;sizeLength=6;indexLength=2;indexDeltaLength=2;constantDuration=960"),
    )
    .unwrap();
    // Two headers: size 2 / index 7, then size 1 / index-delta 1 (interleaved: one AU
    // between them travels in another packet).
    d.push(
        &hdr(1, 0, true),
        &[0x00, 0x10, (2 << 2) | 3, (1 << 2) | 1, 0xaa, 0xbb, 0xcc],
    )
    .unwrap();
    let f1 = d.pull().unwrap();
    let f2 = d.pull().unwrap();
    assert_eq!((f1.timestamp, &f1.data[..]), (0, &[0xaa, 0xbb][..]));
    assert_eq!((f2.timestamp, &f2.data[..]), (1920, &[0xcc][..]));
    assert_eq!(d.pull(), None);
    assert!(matches!(
        Depacketizer::new(Codec::Aac, 48_000, Some("sizelength=x")),
        Err(DepacketizeError::BadFmtp {
            name: "sizelength",
            ..
        })
    ));
    assert!(matches!(
        Depacketizer::new(Codec::Aac, 48_000, Some("sizelength=40")),
        Err(DepacketizeError::BadFmtp { .. })
    ));
    assert!(matches!(
        Depacketizer::new(Codec::Aac, 48_000, Some("mode=generic")),
        Err(DepacketizeError::UnsupportedMode { .. })
    ));
    // No fmtp at all: AAC-hbr.
    assert!(Depacketizer::new(Codec::Aac, 48_000, None).is_ok());
}

#[test]
fn g711_round_trip() {
    let mut link = Link::new(Codec::Pcmu, None, 160);
    let samples: Vec<u8> = (0..400u32).map(|i| i as u8).collect();
    let payloads = packetize_payloads(Codec::Pcmu, &samples, 160).unwrap();
    let offsets: Vec<u32> = payloads.iter().map(|p| p.timestamp_offset).collect();
    assert_eq!(offsets, [0, 160, 320]);
    assert!(payloads.iter().all(|p| !p.marker));
    link.send(8000, &samples, &[]);
    let frames = link.frames();
    let ts: Vec<u32> = frames.iter().map(|f| f.timestamp).collect();
    assert_eq!(ts, [8000, 8160, 8320]);
    let joined: Vec<u8> = frames.iter().flat_map(|f| f.data.clone()).collect();
    assert_eq!(joined, samples);
    assert!(frames.iter().all(|f| f.keyframe));
}

#[test]
fn construction_errors() {
    assert_eq!(
        Depacketizer::new(Codec::Other, 90_000, None).unwrap_err(),
        DepacketizeError::Unsupported { codec: "other" }
    );
    assert_eq!(
        Depacketizer::new(Codec::H264, 0, None).unwrap_err(),
        DepacketizeError::ZeroClockRate
    );
    assert!(matches!(
        Depacketizer::new(Codec::H264, 90_000, Some("packetization-mode=2")),
        Err(DepacketizeError::UnsupportedMode { codec: "H264", .. })
    ));
    assert!(matches!(
        Depacketizer::new(Codec::H265, 90_000, Some("sprop-max-don-diff=2")),
        Err(DepacketizeError::UnsupportedMode { codec: "H265", .. })
    ));
    let sdp = crate::sdp::parse(
        "v=0\r\nm=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/44100/2\r\na=fmtp:97 mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3\r\n",
    )
    .unwrap();
    let d = Depacketizer::from_media(&sdp.media[0]).unwrap();
    assert_eq!((d.codec(), d.clock_rate()), (Codec::Aac, 44_100));
}

#[test]
fn packetize_errors() {
    assert!(matches!(
        packetize(Codec::Other, &[1], 1400),
        Err(PacketizeError::Unsupported { .. })
    ));
    assert!(matches!(
        packetize(Codec::H264, &[0, 0, 0, 9, 0x65], 1400),
        Err(PacketizeError::MalformedFrame { .. })
    ));
    assert!(matches!(
        packetize(Codec::H265, &[0, 0, 0], 1400),
        Err(PacketizeError::MalformedFrame { .. })
    ));
    assert!(matches!(
        packetize(Codec::Aac, &[0; 9000], 1400),
        Err(PacketizeError::AuTooLarge { .. })
    ));
    assert!(matches!(
        packetize(Codec::H264, &avc(&[&[0x65, 1, 2, 3]]), 2),
        Err(PacketizeError::MtuTooSmall { .. })
    ));
    assert!(packetize(Codec::Pcma, &[], 160).unwrap().is_empty());
    // Zero-length NALs are skipped.
    assert_eq!(
        packetize(Codec::H264, &[0, 0, 0, 0, 0, 0, 0, 1, 0x41], 1400).unwrap(),
        vec![vec![0x41]]
    );
}

fn codec_strategy() -> impl Strategy<Value = Codec> {
    prop::sample::select(vec![
        Codec::H264,
        Codec::H265,
        Codec::Aac,
        Codec::Pcma,
        Codec::Pcmu,
    ])
}

proptest! {
    /// Random payloads with random headers never panic, and whatever comes out is well formed.
    #[test]
    fn garbage_never_panics(
        codec in codec_strategy(),
        packets in prop::collection::vec(
            (any::<u16>(), 0u32..4, any::<bool>(), prop::collection::vec(any::<u8>(), 0..64)),
            0..40,
        ),
        fmtp_pick in 0usize..3,
    ) {
        let fmtp = ["", AAC_FMTP, "mode=AAC-lbr;ctsdeltalength=3;dtsdeltalength=2;randomaccessindication=1;streamstateindication=2;auxiliarydatasizelength=4"][fmtp_pick];
        let mut d = Depacketizer::new(codec, 90_000, Some(fmtp)).unwrap();
        let mut seq = 0u16;
        for (jump, ts, marker, payload) in packets {
            // Mostly in order, with occasional loss and reordering.
            seq = seq.wrapping_add(if jump % 8 == 0 { jump } else { 1 });
            let _ = d.push(&hdr(seq, ts, marker), &payload);
        }
        d.flush();
        while let Some(f) = d.pull() {
            prop_assert!(!f.data.is_empty());
            if codec.is_video() {
                let mut rest = &f.data[..];
                while !rest.is_empty() {
                    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    prop_assert!(4 + len <= rest.len());
                    rest = &rest[4 + len..];
                }
                // What we record must be playable back.
                prop_assert!(packetize(codec, &f.data, 1400).is_ok());
            }
        }
    }

    /// Any AU packetised at any MTU comes back byte-identical.
    #[test]
    fn video_round_trip(
        h265 in any::<bool>(),
        sizes in prop::collection::vec(1usize..3000, 1..6),
        mtu in 4usize..1500,
    ) {
        let codec = if h265 { Codec::H265 } else { Codec::H264 };
        let nals: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| if h265 { nal(&[0x02, 0x01], n, i as u32) } else { nal(&[0x41], n, i as u32) })
            .collect();
        let refs: Vec<&[u8]> = nals.iter().map(|n| &n[..]).collect();
        let frame = avc(&refs);
        let mut link = Link::new(codec, None, mtu);
        link.send(77, &frame, &[]);
        let frames = link.frames();
        prop_assert_eq!(frames.len(), 1);
        prop_assert_eq!(&frames[0].data, &frame);
    }
}
