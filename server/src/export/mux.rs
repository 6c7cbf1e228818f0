//! The export's bytes: a fragmented MP4 sent fragment by fragment as segments are read, or
//! a plain MP4 whose `moov` is computed by a first pass over the range (sample sizes and
//! times only) so that `mdat` streams after it in a second pass. Either way the node holds
//! the segments being read (`[export] read_ahead` + 1) and, for the plain file, its sample
//! tables — never the file.

use super::plan::ExportError;
use super::timeline::{Cut, Placed, Timeline};
use super::tracks::Tracks;
use crate::library::{CachedSegment, Library, LibraryError};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use std::sync::Arc;
use tokio::sync::mpsc;
use vigil_proto::mp4::{self, Edit, Sample, TrackTable, Traf};
use vigil_storage::SegmentMeta;

/// A piece of the response body; an error aborts the response (the client sees a truncated
/// transfer, never a file that looks whole).
pub type Chunk = Result<Bytes, std::io::Error>;

/// What an export reads and where it starts.
#[derive(Clone)]
pub struct Source {
    pub library: Library,
    pub segments: Vec<SegmentMeta>,
    pub read_ahead: usize,
    pub tracks: Arc<Tracks>,
    /// The starting keyframe: its index in the first segment and its wall-clock time.
    pub from: usize,
    pub t0_ms: i64,
    pub end_ms: i64,
}

/// The segments of a [`Source`] read in order (`read_ahead` loads in flight) and cut on
/// one timeline.
struct Cuts {
    segments: BoxStream<'static, Result<Arc<CachedSegment>, LibraryError>>,
    timeline: Timeline,
    tracks: Arc<Tracks>,
    from: Option<usize>,
    done: bool,
}

impl Cuts {
    fn new(src: &Source) -> Cuts {
        let lib = src.library.clone();
        let segments = futures::stream::iter(src.segments.clone())
            .map(move |m| {
                let lib = lib.clone();
                async move { lib.segment_once(&m).await }
            })
            .buffered(src.read_ahead.max(1))
            .boxed();
        Cuts {
            segments,
            timeline: Timeline::new(
                src.t0_ms,
                src.end_ms,
                src.tracks.map.clone(),
                &src.tracks.timescales(),
            ),
            tracks: src.tracks.clone(),
            from: Some(src.from),
            done: false,
        }
    }

    /// The next segment and what it contributes; None after the range's end, the last
    /// segment, or one recorded with other tracks (the export ends there).
    async fn next(&mut self) -> Option<Result<(Arc<CachedSegment>, Cut), LibraryError>> {
        if self.done {
            return None;
        }
        let seg = match self.segments.next().await? {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        if !self.tracks.fits(&seg.0) {
            tracing::warn!(
                camera = %seg.0.meta.camera,
                at = seg.0.meta.start_ms,
                "export ends where the camera's tracks changed"
            );
            return None;
        }
        let cut = self.timeline.cut(&seg.0, self.from.take().unwrap_or(0));
        self.done = cut.done;
        Some(Ok((seg, cut)))
    }
}

impl Cuts {
    /// [`Cuts::next`], a read error ending the response (sent as the body's error).
    async fn next_or_abort(
        &mut self,
        tx: &mpsc::Sender<Chunk>,
    ) -> Option<(Arc<CachedSegment>, Cut)> {
        match self.next().await? {
            Ok(v) => Some(v),
            Err(e) => {
                let _ = tx.send(Err(io_err(e))).await;
                None
            }
        }
    }
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Sends the media of `cut` (track after track, as the fragment or chunk layout says).
async fn send_media(tx: &mpsc::Sender<Chunk>, seg: &CachedSegment, cut: &Cut) -> bool {
    for p in cut.tracks.iter().flatten() {
        if tx
            .send(Ok(seg.0.frames[p.frame].data.clone()))
            .await
            .is_err()
        {
            return false;
        }
    }
    true
}

/// A fragmented MP4: the init segment, then one `moof`+`mdat` per recorded segment.
pub async fn fragmented(src: Source, tx: mpsc::Sender<Chunk>) {
    if tx
        .send(Ok(mp4::init_segment(&src.tracks.specs).into()))
        .await
        .is_err()
    {
        return;
    }
    let mut cuts = Cuts::new(&src);
    let mut seq = 0u32;
    while let Some((seg, cut)) = cuts.next_or_abort(&tx).await {
        let Some(head) = fragment_of(&mut seq, &cut) else {
            continue;
        };
        if tx.send(Ok(head.into())).await.is_err() || !send_media(&tx, &seg, &cut).await {
            return;
        }
    }
}

/// The `moof` + `mdat` header of a cut (None when it has no samples). Also used by HLS.
pub fn fragment_of(seq: &mut u32, cut: &Cut) -> Option<Vec<u8>> {
    let samples: Vec<Vec<Sample>> = cut
        .tracks
        .iter()
        .map(|t| t.iter().map(|p| p.sample).collect())
        .collect();
    let trafs: Vec<Traf> = cut
        .tracks
        .iter()
        .zip(&samples)
        .enumerate()
        .filter(|(_, (p, _))| !p.is_empty())
        .map(|(t, (p, s))| Traf {
            track_id: t as u32 + 1,
            base_decode_time: p[0].dts.max(0) as u64,
            samples: s,
        })
        .collect();
    if trafs.is_empty() {
        return None;
    }
    *seq += 1;
    Some(mp4::fragment_header(*seq, &trafs))
}

/// A whole fragment (`moof`, `mdat` and the media) in one buffer: an HLS segment, written
/// once and shared by every viewer.
pub fn fragment_bytes(seq: &mut u32, seg: &vigil_storage::Segment, cut: &Cut) -> Option<Bytes> {
    let head = fragment_of(seq, cut)?;
    let media: usize = cut
        .tracks
        .iter()
        .flatten()
        .map(|p| p.sample.size as usize)
        .sum();
    let mut out = Vec::with_capacity(head.len() + media);
    out.extend_from_slice(&head);
    for p in cut.tracks.iter().flatten() {
        out.extend_from_slice(&seg.frames[p.frame].data);
    }
    Some(out.into())
}

/// One track's sample table as the first pass builds it.
///
/// A gap between recordings is kept at its wall-clock length by the duration of the last
/// sample before it: the picture holds until the next recording. An empty edit in the
/// middle of an edit list is how ISO BMFF could say "nothing here", but ffmpeg (7.x) mis-reads
/// it (frames repeated, "DTS out of order"), so only a track's start uses one (audio that
/// begins a little after the starting keyframe).
struct TableBuilder {
    table: TrackTable,
    first_dts: Option<i64>,
    last_dts: Option<i64>,
}

impl TableBuilder {
    fn push(&mut self, p: &Placed) {
        if let (Some(ld), Some(last)) = (self.last_dts, self.table.samples.last_mut()) {
            // Exact length now that the next sample is known, a gap included.
            last.duration = u32::try_from(p.dts - ld).unwrap_or(last.duration).max(1);
        }
        self.first_dts.get_or_insert(p.dts);
        self.table.samples.push(p.sample);
        self.last_dts = Some(p.dts);
    }

    fn finish(mut self, timescale: u32) -> TrackTable {
        let first_ms = self.first_dts.unwrap_or(0).max(0) * 1000 / i64::from(timescale.max(1));
        if first_ms > 0 {
            let media: u64 = self
                .table
                .samples
                .iter()
                .map(|s| u64::from(s.duration))
                .sum();
            self.table.edits = vec![
                Edit {
                    duration_ms: first_ms as u64,
                    media_time: None,
                },
                Edit {
                    duration_ms: media * 1000 / u64::from(timescale.max(1)),
                    media_time: Some(0),
                },
            ];
        }
        self.table
    }
}

/// The plain MP4's header (`ftyp`, `moov`, `mdat` header) and `mdat` length, from a first
/// pass over the range.
pub struct Layout {
    pub header: Vec<u8>,
    pub mdat_len: u64,
    /// Per track, the sizes the second pass must find again.
    sizes: Vec<Vec<u32>>,
}

impl Layout {
    pub fn content_length(&self) -> u64 {
        self.header.len() as u64 + self.mdat_len
    }
}

pub async fn layout(src: &Source) -> Result<Layout, ExportError> {
    let mut builders: Vec<TableBuilder> = src
        .tracks
        .specs
        .iter()
        .map(|_| TableBuilder {
            table: TrackTable::default(),
            first_dts: None,
            last_dts: None,
        })
        .collect();
    let mut mdat = 0u64;
    let mut cuts = Cuts::new(src);
    while let Some(next) = cuts.next().await {
        let (_, cut) = next.map_err(|e| ExportError::Unexportable(e.to_string()))?;
        for (b, placed) in builders.iter_mut().zip(&cut.tracks) {
            if placed.is_empty() {
                continue;
            }
            b.table.chunks.push((mdat, placed.len() as u32));
            for p in placed {
                b.push(p);
                mdat += u64::from(p.sample.size);
            }
        }
    }
    let sizes = builders
        .iter()
        .map(|b| b.table.samples.iter().map(|s| s.size).collect())
        .collect();
    let tables: Vec<TrackTable> = builders
        .into_iter()
        .zip(&src.tracks.specs)
        .map(|(b, s)| b.finish(s.timescale))
        .collect();
    Ok(Layout {
        header: mp4::faststart_header(&src.tracks.specs, &tables, mdat),
        mdat_len: mdat,
        sizes,
    })
}

/// The plain MP4: the header of [`layout`], then `mdat` read again in the same order (each
/// sample's size checked against the first pass).
pub async fn faststart(src: Source, layout: Layout, tx: mpsc::Sender<Chunk>) {
    if tx.send(Ok(layout.header.into())).await.is_err() {
        return;
    }
    let mut next_sample = vec![0usize; layout.sizes.len()];
    let mut cuts = Cuts::new(&src);
    while let Some((seg, cut)) = cuts.next_or_abort(&tx).await {
        for (t, placed) in cut.tracks.iter().enumerate() {
            for p in placed {
                let expected = layout.sizes[t].get(next_sample[t]).copied();
                next_sample[t] += 1;
                if expected != Some(p.sample.size) {
                    let _ = tx
                        .send(Err(io_err("the recording changed during the export")))
                        .await;
                    return;
                }
            }
        }
        if !send_media(&tx, &seg, &cut).await {
            return;
        }
    }
    if next_sample
        .iter()
        .zip(&layout.sizes)
        .any(|(n, s)| *n != s.len())
    {
        let _ = tx
            .send(Err(io_err("the recording changed during the export")))
            .await;
    }
}
