//! The writers' output parsed back with a minimal box reader written for these tests.

use super::config::{aac_config_from_fmtp, parse_hevc_sps, ParameterSets};
use super::*;
use crate::codec::{annexb_nals, h264_nal_type};

/// Children of a box body (or of a whole file): (type, body).
fn children(mut buf: &[u8]) -> Vec<([u8; 4], &[u8])> {
    let mut out = Vec::new();
    while buf.len() >= 8 {
        let mut size = u32::from_be_bytes(buf[0..4].try_into().unwrap()) as usize;
        let kind: [u8; 4] = buf[4..8].try_into().unwrap();
        let mut header = 8;
        if size == 1 {
            size = u64::from_be_bytes(buf[8..16].try_into().unwrap()) as usize;
            header = 16;
        }
        let body = &buf[header..size.min(buf.len())];
        out.push((kind, body));
        if size > buf.len() {
            break;
        }
        buf = &buf[size..];
    }
    out
}

/// The body of the box at `path` (full boxes' version/flags included in the body).
fn find<'a>(buf: &'a [u8], path: &[&[u8; 4]]) -> &'a [u8] {
    let mut cur = buf;
    for (depth, kind) in path.iter().enumerate() {
        let skip = match depth.checked_sub(1).map(|d| path[d]) {
            Some(b"stsd") => 8,
            Some(b"avc1") | Some(b"hvc1") => 78,
            Some(b"mp4a") => 28,
            _ => 0,
        };
        cur = children(&cur[skip..])
            .into_iter()
            .find(|(k, _)| &k == kind)
            .unwrap_or_else(|| panic!("no {} in {:?}", String::from_utf8_lossy(*kind), path))
            .1;
    }
    cur
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

fn demo_avc() -> SampleEntry {
    let clip = include_bytes!("../../../assets/demo.h264");
    let nals = annexb_nals(clip);
    let sps = nals.iter().find(|n| h264_nal_type(n) == Some(7)).unwrap();
    let pps = nals.iter().find(|n| h264_nal_type(n) == Some(8)).unwrap();
    SampleEntry::avc(sps, vec![pps.to_vec()]).unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// x265's parameter sets of a 320×240 stream.
const HEVC_VPS: &str = "40010c01ffff01600000030090000003000003003c959409";
const HEVC_SPS: &str =
    "42010101600000030090000003000003003ca00a080f16595952930bc05a020000030002000003003210";
const HEVC_PPS: &str = "4401c073c189";

fn tracks() -> Vec<TrackSpec> {
    vec![
        TrackSpec {
            id: 1,
            timescale: 90_000,
            entry: demo_avc(),
        },
        TrackSpec {
            id: 2,
            timescale: 44_100,
            entry: SampleEntry::aac(&[0x12, 0x10], 2, 44_100).unwrap(),
        },
    ]
}

#[test]
fn sample_entries_carry_the_parameter_sets_and_dimensions() {
    let e = demo_avc();
    assert_eq!(e.dimensions(), (640, 360));
    assert!(e.codecs_string().starts_with("avc1."));
    let init = init_segment(&tracks());
    let avcc = find(
        &init,
        &[
            b"moov", b"trak", b"mdia", b"minf", b"stbl", b"stsd", b"avc1", b"avcC",
        ],
    );
    let SampleEntry::Avc { sps, pps, .. } = &e else {
        unreachable!()
    };
    assert_eq!(avcc[0], 1);
    assert_eq!(avcc[4] & 3, 3, "4-byte lengths");
    assert_eq!(
        usize::from(u16::from_be_bytes([avcc[6], avcc[7]])),
        sps.len()
    );
    assert_eq!(&avcc[8..8 + sps.len()], &sps[..]);
    assert_eq!(avcc[8 + sps.len()], 1, "one PPS");
    assert_eq!(&avcc[11 + sps.len()..], &pps[0][..]);
    // Both tracks and their trex are there; the tables are empty.
    let moov = find(&init, &[b"moov"]);
    let kinds: Vec<[u8; 4]> = children(moov).into_iter().map(|c| c.0).collect();
    assert_eq!(kinds, [*b"mvhd", *b"trak", *b"trak", *b"mvex"]);
    let mvex = find(&init, &[b"moov", b"mvex"]);
    assert_eq!(children(mvex).len(), 2);
    let esds = {
        let traks: Vec<_> = children(moov)
            .into_iter()
            .filter(|c| &c.0 == b"trak")
            .collect();
        let audio = traks[1].1;
        find(
            audio,
            &[b"mdia", b"minf", b"stbl", b"stsd", b"mp4a", b"esds"],
        )
        .to_vec()
    };
    // …DecoderSpecificInfo tag 5, length 2, the config.
    let dsi = esds.windows(4).position(|w| w == [5, 2, 0x12, 0x10]);
    assert!(dsi.is_some(), "AudioSpecificConfig in esds: {esds:02x?}");
}

#[test]
fn hevc_sps_is_read() {
    let sps = hex(HEVC_SPS);
    let h = parse_hevc_sps(&sps).unwrap();
    assert_eq!((h.width, h.height), (320, 240));
    assert_eq!(h.chroma_format_idc, 1);
    assert_eq!(h.ptl[0] & 0x1f, 1, "Main profile");
    let e = SampleEntry::hevc(&hex(HEVC_VPS), &sps, vec![hex(HEVC_PPS)]).unwrap();
    assert_eq!(e.dimensions(), (320, 240));
    assert!(
        e.codecs_string().starts_with("hvc1.1."),
        "{}",
        e.codecs_string()
    );
    let init = init_segment(&[TrackSpec {
        id: 1,
        timescale: 90_000,
        entry: e,
    }]);
    let hvcc = find(
        &init,
        &[
            b"moov", b"trak", b"mdia", b"minf", b"stbl", b"stsd", b"hvc1", b"hvcC",
        ],
    );
    assert_eq!(hvcc[22], 3, "VPS, SPS and PPS arrays");
    assert_eq!(hvcc[23], 0x80 | 32);
    assert!(parse_hevc_sps(&[0x42, 0x01]).is_err());
}

#[test]
fn parameter_sets_come_from_the_access_unit_or_the_fmtp() {
    let mut au = Vec::new();
    for nal in [&[0x67u8, 1, 2, 3][..], &[0x68, 9], &[0x65, 0, 0]] {
        au.extend_from_slice(&(nal.len() as u32).to_be_bytes());
        au.extend_from_slice(nal);
    }
    let ps = ParameterSets::from_access_unit(false, &au);
    assert_eq!(ps.sps.as_deref(), Some(&[0x67u8, 1, 2, 3][..]));
    assert_eq!(ps.pps, vec![vec![0x68, 9]]);
    // Truncated length: what came before it is kept, nothing panics.
    let ps = ParameterSets::from_access_unit(false, &au[..10]);
    assert!(ps.pps.is_empty() && ps.sps.is_some());
    let ps = ParameterSets::default().or_fmtp(
        false,
        "packetization-mode=1;sprop-parameter-sets=Z0IAHg==,aM4G4g==",
    );
    assert_eq!(ps.sps, Some(vec![0x67, 0x42, 0x00, 0x1e]));
    assert_eq!(ps.pps.len(), 1);
    assert_eq!(
        aac_config_from_fmtp("streamtype=5; mode=AAC-hbr; config=1210; sizelength=13"),
        Some(vec![0x12, 0x10])
    );
    assert_eq!(aac_config_from_fmtp("config=121"), None);
    assert_eq!(aac_config_from_fmtp("mode=AAC-hbr"), None);
}

fn samples(n: usize, size: u32) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample {
            duration: 3600,
            size: size + i as u32,
            cts: if i % 3 == 1 {
                7200
            } else {
                -3600 * (i % 3 == 2) as i32
            },
            sync: i == 0,
        })
        .collect()
}

#[test]
fn a_fragment_points_at_its_media() {
    let video = samples(5, 100);
    let audio = vec![
        Sample {
            duration: 1024,
            size: 20,
            cts: 0,
            sync: true,
        };
        3
    ];
    let head = fragment_header(
        7,
        &[
            Traf {
                track_id: 1,
                base_decode_time: 900_000,
                samples: &video,
            },
            Traf {
                track_id: 2,
                base_decode_time: 441_000,
                samples: &audio,
            },
        ],
    );
    let boxes = children(&head);
    assert_eq!(boxes[0].0, *b"moof");
    let moof_len = boxes[0].1.len() + 8;
    let mdat_size = be32(&head, moof_len) as usize;
    let payload = (100..105).sum::<usize>() + 60;
    assert_eq!(mdat_size, payload + 8);
    assert_eq!(
        head.len(),
        moof_len + 8,
        "the header ends where the media starts"
    );
    let moof = boxes[0].1;
    assert_eq!(be32(find(moof, &[b"mfhd"]), 4), 7);
    let trafs: Vec<_> = children(moof)
        .into_iter()
        .filter(|c| &c.0 == b"traf")
        .collect();
    assert_eq!(trafs.len(), 2);
    let tfdt = find(trafs[0].1, &[b"tfdt"]);
    assert_eq!(tfdt[0], 1);
    assert_eq!(be64(tfdt, 4), 900_000);
    let trun = find(trafs[0].1, &[b"trun"]);
    assert_eq!(trun[0], 1, "version 1: signed composition offsets");
    assert_eq!(be32(trun, 4), 5);
    assert_eq!(
        be32(trun, 8) as usize,
        moof_len + 8,
        "video data starts the mdat payload"
    );
    // Second sample: duration, size, flags (not sync), cts.
    let s1 = 12 + 16;
    assert_eq!(be32(trun, s1), 3600);
    assert_eq!(be32(trun, s1 + 4), 101);
    assert_eq!(be32(trun, s1 + 8), 0x0101_0000);
    assert_eq!(be32(trun, s1 + 12) as i32, 7200);
    assert_eq!(be32(trun, 12 + 2 * 16 + 12) as i32, -3600);
    assert_eq!(be32(trun, 12 + 8), 0x0200_0000, "first is sync");
    let trun_a = find(trafs[1].1, &[b"trun"]);
    assert_eq!(
        be32(trun_a, 8) as usize,
        moof_len + 8 + (100..105).sum::<usize>(),
        "audio follows the video"
    );
}

#[test]
fn a_faststart_moov_points_past_itself_and_carries_its_edits() {
    let video = samples(6, 1000);
    let audio = vec![
        Sample {
            duration: 1024,
            size: 10,
            cts: 0,
            sync: true,
        };
        4
    ];
    // mdat: video 0-2, audio 0-1, video 3-5, audio 2-3.
    let v1: u64 = video[..3].iter().map(|s| u64::from(s.size)).sum();
    let v2: u64 = video[3..].iter().map(|s| u64::from(s.size)).sum();
    let tables = vec![
        TrackTable {
            samples: video.clone(),
            chunks: vec![(0, 3), (v1 + 20, 3)],
            edits: vec![
                Edit {
                    duration_ms: 120,
                    media_time: Some(0),
                },
                Edit {
                    duration_ms: 5000,
                    media_time: None,
                },
                Edit {
                    duration_ms: 120,
                    media_time: Some(10_800),
                },
            ],
        },
        TrackTable {
            samples: audio,
            chunks: vec![(v1, 2), (v1 + 20 + v2, 2)],
            edits: vec![],
        },
    ];
    let mdat_len = v1 + v2 + 40;
    let head = faststart_header(&tracks(), &tables, mdat_len);
    let top: Vec<[u8; 4]> = children(&head).into_iter().map(|c| c.0).collect();
    assert_eq!(top, [*b"ftyp", *b"moov", *b"mdat"]);
    assert_eq!(be32(&head, head.len() - 8) as u64, mdat_len + 8);
    let moov = find(&head, &[b"moov"]);
    let traks: Vec<_> = children(moov)
        .into_iter()
        .filter(|c| &c.0 == b"trak")
        .collect();
    let stbl = find(traks[0].1, &[b"mdia", b"minf", b"stbl"]);
    let stco = find(stbl, &[b"stco"]);
    assert_eq!(be32(stco, 4), 2);
    assert_eq!(
        be32(stco, 8) as usize,
        head.len(),
        "first chunk right after the header"
    );
    assert_eq!(be32(stco, 12) as u64, head.len() as u64 + v1 + 20);
    let stsz = find(stbl, &[b"stsz"]);
    assert_eq!(be32(stsz, 8), 6);
    assert_eq!(be32(stsz, 12 + 4 * 5), 1005);
    let stts = find(stbl, &[b"stts"]);
    assert_eq!((be32(stts, 4), be32(stts, 8), be32(stts, 12)), (1, 6, 3600));
    let stss = find(stbl, &[b"stss"]);
    assert_eq!((be32(stss, 4), be32(stss, 8)), (1, 1));
    let ctts = find(stbl, &[b"ctts"]);
    assert_eq!(ctts[0], 1);
    let stsc = find(stbl, &[b"stsc"]);
    assert_eq!((be32(stsc, 4), be32(stsc, 8), be32(stsc, 12)), (1, 1, 3));
    let elst = find(traks[0].1, &[b"edts", b"elst"]);
    assert_eq!(be32(elst, 4), 3);
    assert_eq!(be64(elst, 8 + 20), 5000);
    assert_eq!(
        be64(elst, 8 + 20 + 8) as i64,
        -1,
        "the gap is an empty edit"
    );
    assert_eq!(be64(elst, 8 + 40 + 8), 10_800);
    let tkhd = find(traks[0].1, &[b"tkhd"]);
    assert_eq!(
        be64(tkhd, 4 + 8 + 8 + 8),
        5240,
        "presentation includes the gap"
    );
    let mvhd = find(moov, &[b"mvhd"]);
    assert_eq!(be64(mvhd, 4 + 16 + 4), 5240);
    // The audio track has no edits and its chunks interleave with the video's.
    assert!(children(traks[1].1).iter().all(|c| &c.0 != b"edts"));
    let stco_a = find(traks[1].1, &[b"mdia", b"minf", b"stbl", b"stco"]);
    assert_eq!(be32(stco_a, 8) as u64, head.len() as u64 + v1);
}

#[test]
fn large_files_use_64_bit_offsets_and_sizes() {
    let tables = vec![
        TrackTable {
            samples: vec![Sample {
                duration: 3600,
                size: 4,
                cts: 0,
                sync: true,
            }],
            chunks: vec![(5_000_000_000, 1)],
            edits: vec![],
        },
        TrackTable::default(),
    ];
    let head = faststart_header(&tracks(), &tables, 5_000_000_004);
    let moov = find(&head, &[b"moov"]);
    let co64 = find(moov, &[b"trak", b"mdia", b"minf", b"stbl", b"co64"]);
    assert_eq!(be64(co64, 8), head.len() as u64 + 5_000_000_000);
    assert_eq!(be32(&head, head.len() - 16), 1, "mdat with a 64-bit size");
    assert_eq!(be64(&head, head.len() - 8), 5_000_000_004 + 16);
}
