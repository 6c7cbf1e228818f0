//! `ftyp` and `moov`: empty sample tables plus `mvex` for a fragmented MP4's init segment,
//! or full sample tables for a plain MP4 whose `moov` precedes `mdat` (faststart).

use super::boxes::BoxWriter;
use super::fragment::sample_flags;
use super::{Sample, TrackSpec, MOVIE_TIMESCALE};

/// One entry of a track's edit list, in the movie timescale (ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edit {
    pub duration_ms: u64,
    /// Media time (track timescale) the edit starts at; None: an empty edit (a gap in the
    /// recording: nothing is presented for its duration).
    pub media_time: Option<i64>,
}

/// A plain MP4 track's samples, where they lie in `mdat`, and its edit list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrackTable {
    pub samples: Vec<Sample>,
    /// Chunks: offset of the first sample from the start of the `mdat` payload, and the
    /// number of samples (consecutive in the file).
    pub chunks: Vec<(u64, u32)>,
    /// Empty: the media plays from time 0 without edits.
    pub edits: Vec<Edit>,
}

impl TrackTable {
    fn media_duration(&self) -> u64 {
        self.samples.iter().map(|s| u64::from(s.duration)).sum()
    }

    /// Presentation length in ms: the edits', or the media's.
    fn presented_ms(&self, timescale: u32) -> u64 {
        if self.edits.is_empty() {
            self.media_duration() * u64::from(MOVIE_TIMESCALE) / u64::from(timescale.max(1))
        } else {
            self.edits.iter().map(|e| e.duration_ms).sum()
        }
    }
}

fn ftyp(w: &mut BoxWriter) {
    let at = w.begin(b"ftyp");
    w.bytes(b"isom");
    w.u32(0x200);
    for brand in [b"isom", b"iso6", b"mp41"] {
        w.bytes(brand);
    }
    w.end(at);
}

/// `ftyp` + `moov` of a fragmented MP4 (samples follow in `moof`/`mdat` fragments).
pub fn init_segment(tracks: &[TrackSpec]) -> Vec<u8> {
    let mut w = BoxWriter::new();
    ftyp(&mut w);
    moov(&mut w, tracks, None);
    w.into_vec()
}

/// `ftyp` + `moov` + the `mdat` header of a plain MP4 whose `mdat` payload, `mdat_len`
/// bytes laid out as `tables` say, follows.
pub fn faststart_header(tracks: &[TrackSpec], tables: &[TrackTable], mdat_len: u64) -> Vec<u8> {
    let large = mdat_len + 8 > u64::from(u32::MAX);
    let mdat_header = if large { 16 } else { 8 };
    // The moov's size does not depend on the offsets' values, only on their width.
    let mut probe = BoxWriter::new();
    ftyp(&mut probe);
    let co64 = {
        let mut m = BoxWriter::new();
        moov(&mut m, tracks, Some((tables, 0, true)));
        probe.len() as u64 + m.len() as u64 + mdat_header + mdat_len > u64::from(u32::MAX)
    };
    moov(&mut probe, tracks, Some((tables, 0, co64)));
    let base = probe.len() as u64 + mdat_header;
    let mut w = BoxWriter::new();
    ftyp(&mut w);
    moov(&mut w, tracks, Some((tables, base, co64)));
    w.mdat_header(mdat_len);
    w.into_vec()
}

type Tables<'a> = Option<(&'a [TrackTable], u64, bool)>;

fn moov(w: &mut BoxWriter, tracks: &[TrackSpec], tables: Tables) {
    let at = w.begin(b"moov");
    let duration = |i: usize| {
        tables.map_or(0, |(t, _, _)| {
            t.get(i).map_or(0, |t| t.presented_ms(tracks[i].timescale))
        })
    };
    let movie_ms = (0..tracks.len()).map(duration).max().unwrap_or(0);
    let mvhd = w.begin_full(b"mvhd", 1, 0);
    w.u64(0);
    w.u64(0);
    w.u32(MOVIE_TIMESCALE);
    w.u64(movie_ms);
    w.u32(0x0001_0000); // rate 1.0
    w.u16(0x0100); // volume 1.0
    w.zeros(10);
    w.matrix();
    w.zeros(24);
    w.u32(tracks.iter().map(|t| t.id).max().unwrap_or(0) + 1);
    w.end(mvhd);
    for (i, t) in tracks.iter().enumerate() {
        let table = tables.and_then(|(ts, base, co64)| ts.get(i).map(|t| (t, base, co64)));
        trak(w, t, duration(i), table);
    }
    if tables.is_none() {
        let mvex = w.begin(b"mvex");
        for t in tracks {
            let trex = w.begin_full(b"trex", 0, 0);
            w.u32(t.id);
            w.u32(1); // sample description index
            w.u32(0);
            w.u32(0);
            w.u32(0);
            w.end(trex);
        }
        w.end(mvex);
    }
    w.end(at);
}

fn trak(
    w: &mut BoxWriter,
    t: &TrackSpec,
    duration_ms: u64,
    table: Option<(&TrackTable, u64, bool)>,
) {
    let trak = w.begin(b"trak");
    let tkhd = w.begin_full(b"tkhd", 1, 3); // enabled, in movie
    w.u64(0);
    w.u64(0);
    w.u32(t.id);
    w.u32(0);
    w.u64(duration_ms);
    w.zeros(8);
    w.u16(0); // layer
    w.u16(0); // alternate group
    w.u16(if t.entry.is_video() { 0 } else { 0x0100 });
    w.u16(0);
    w.matrix();
    let (width, height) = t.entry.dimensions();
    w.u32(u32::from(width) << 16);
    w.u32(u32::from(height) << 16);
    w.end(tkhd);
    if let Some((table, _, _)) = table.filter(|(tb, _, _)| !tb.edits.is_empty()) {
        let edts = w.begin(b"edts");
        let elst = w.begin_full(b"elst", 1, 0);
        w.u32(table.edits.len() as u32);
        for e in &table.edits {
            w.u64(e.duration_ms);
            w.i64(e.media_time.unwrap_or(-1));
            w.u32(0x0001_0000); // rate 1.0
        }
        w.end(elst);
        w.end(edts);
    }
    let mdia = w.begin(b"mdia");
    let mdhd = w.begin_full(b"mdhd", 1, 0);
    w.u64(0);
    w.u64(0);
    w.u32(t.timescale);
    w.u64(table.map_or(0, |(tb, _, _)| tb.media_duration()));
    w.u16(0x55c4); // language "und"
    w.u16(0);
    w.end(mdhd);
    let hdlr = w.begin_full(b"hdlr", 0, 0);
    w.u32(0);
    w.bytes(if t.entry.is_video() { b"vide" } else { b"soun" });
    w.zeros(12);
    w.bytes(if t.entry.is_video() {
        b"VideoHandler\0"
    } else {
        b"SoundHandler\0"
    });
    w.end(hdlr);
    let minf = w.begin(b"minf");
    if t.entry.is_video() {
        let vmhd = w.begin_full(b"vmhd", 0, 1);
        w.zeros(8);
        w.end(vmhd);
    } else {
        let smhd = w.begin_full(b"smhd", 0, 0);
        w.zeros(4);
        w.end(smhd);
    }
    let dinf = w.begin(b"dinf");
    let dref = w.begin_full(b"dref", 0, 0);
    w.u32(1);
    let url = w.begin_full(b"url ", 0, 1); // media in this file
    w.end(url);
    w.end(dref);
    w.end(dinf);
    let stbl = w.begin(b"stbl");
    let stsd = w.begin_full(b"stsd", 0, 0);
    w.u32(1);
    t.entry.write(w);
    w.end(stsd);
    match table {
        None => {
            for b in [b"stts", b"stsc", b"stsz", b"stco"] {
                let at = w.begin_full(b, 0, 0);
                if b == b"stsz" {
                    w.u32(0);
                }
                w.u32(0);
                w.end(at);
            }
        }
        Some((tb, base, co64)) => sample_tables(w, tb, base, co64),
    }
    w.end(stbl);
    w.end(minf);
    w.end(mdia);
    w.end(trak);
}

/// Run-length entries of a sequence: (count, value).
fn runs<T: PartialEq + Copy>(values: impl Iterator<Item = T>) -> Vec<(u32, T)> {
    let mut out: Vec<(u32, T)> = Vec::new();
    for v in values {
        match out.last_mut() {
            Some((n, last)) if *last == v => *n += 1,
            _ => out.push((1, v)),
        }
    }
    out
}

fn sample_tables(w: &mut BoxWriter, tb: &TrackTable, base: u64, co64: bool) {
    let samples: &[Sample] = &tb.samples;
    let stts = w.begin_full(b"stts", 0, 0);
    let r = runs(samples.iter().map(|s| s.duration));
    w.u32(r.len() as u32);
    for (n, d) in r {
        w.u32(n);
        w.u32(d);
    }
    w.end(stts);
    if samples.iter().any(|s| s.cts != 0) {
        let ctts = w.begin_full(b"ctts", 1, 0);
        let r = runs(samples.iter().map(|s| s.cts));
        w.u32(r.len() as u32);
        for (n, c) in r {
            w.u32(n);
            w.i32(c);
        }
        w.end(ctts);
    }
    if samples.iter().any(|s| !s.sync) {
        let stss = w.begin_full(b"stss", 0, 0);
        let sync: Vec<u32> = (1u32..)
            .zip(samples)
            .filter(|(_, s)| sample_flags(s.sync) == sample_flags(true))
            .map(|(i, _)| i)
            .collect();
        w.u32(sync.len() as u32);
        for i in sync {
            w.u32(i);
        }
        w.end(stss);
    }
    let stsc = w.begin_full(b"stsc", 0, 0);
    let per_chunk = runs(tb.chunks.iter().map(|c| c.1));
    w.u32(per_chunk.len() as u32);
    let mut first = 1u32;
    for (n, count) in per_chunk {
        w.u32(first);
        w.u32(count);
        w.u32(1);
        first += n;
    }
    w.end(stsc);
    let stsz = w.begin_full(b"stsz", 0, 0);
    w.u32(0);
    w.u32(samples.len() as u32);
    for s in samples {
        w.u32(s.size);
    }
    w.end(stsz);
    if co64 {
        let at = w.begin_full(b"co64", 0, 0);
        w.u32(tb.chunks.len() as u32);
        for c in &tb.chunks {
            w.u64(base + c.0);
        }
        w.end(at);
    } else {
        let at = w.begin_full(b"stco", 0, 0);
        w.u32(tb.chunks.len() as u32);
        for c in &tb.chunks {
            w.u32((base + c.0) as u32);
        }
        w.end(at);
    }
}
