//! A fragment of a fragmented MP4: `moof` (one `traf` per track with samples) and the `mdat`
//! header. The caller sends the sample bytes after it (each track's samples in order, tracks
//! in the order given), so the media itself is never copied into the fragment.

use super::boxes::BoxWriter;
use super::Sample;

/// One track's run of samples in a fragment.
#[derive(Clone, Copy, Debug)]
pub struct Traf<'a> {
    pub track_id: u32,
    /// Decode time of the first sample, in the track's timescale, from the file's start. A
    /// gap between recordings is a jump of this time: the timeline keeps wall time.
    pub base_decode_time: u64,
    pub samples: &'a [Sample],
}

/// `sample_flags` (ISO/IEC 14496-12 §8.8.3.1): a sync sample depends on nothing; any other
/// depends on others and is not a sync sample.
pub(crate) fn sample_flags(sync: bool) -> u32 {
    if sync {
        0x0200_0000
    } else {
        0x0101_0000
    }
}

/// `moof` + `mdat` header of fragment number `sequence` (from 1).
pub fn fragment_header(sequence: u32, trafs: &[Traf]) -> Vec<u8> {
    let mut w = BoxWriter::new();
    let moof = w.begin(b"moof");
    let mfhd = w.begin_full(b"mfhd", 0, 0);
    w.u32(sequence);
    w.end(mfhd);
    let mut offsets = Vec::with_capacity(trafs.len());
    for t in trafs.iter().filter(|t| !t.samples.is_empty()) {
        let traf = w.begin(b"traf");
        let tfhd = w.begin_full(b"tfhd", 0, 0x02_0000); // default-base-is-moof
        w.u32(t.track_id);
        w.end(tfhd);
        let tfdt = w.begin_full(b"tfdt", 1, 0);
        w.u64(t.base_decode_time);
        w.end(tfdt);
        // data offset, and per sample: duration, size, flags, composition offset (signed).
        let trun = w.begin_full(b"trun", 1, 0x00_0f01);
        w.u32(t.samples.len() as u32);
        offsets.push(w.len());
        w.u32(0);
        for s in t.samples {
            w.u32(s.duration);
            w.u32(s.size);
            w.u32(sample_flags(s.sync));
            w.i32(s.cts);
        }
        w.end(trun);
        w.end(traf);
    }
    w.end(moof);
    let moof_len = w.len() as u64;
    let payload: u64 = trafs
        .iter()
        .flat_map(|t| t.samples.iter())
        .map(|s| u64::from(s.size))
        .sum();
    let large = payload + 8 > u64::from(u32::MAX);
    let mdat_header = if large { 16 } else { 8 };
    let mut data = moof_len + mdat_header;
    for (at, t) in offsets
        .into_iter()
        .zip(trafs.iter().filter(|t| !t.samples.is_empty()))
    {
        w.patch_u32(at, data as u32);
        data += t.samples.iter().map(|s| u64::from(s.size)).sum::<u64>();
    }
    w.mdat_header(payload);
    w.into_vec()
}
