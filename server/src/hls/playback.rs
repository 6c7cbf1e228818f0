//! HLS of a recording: the playlist lists the recorded segments from the one holding
//! `start` (its keyframe at or before `start` is time 0) to the range's end, each an fMP4
//! fragment cut on demand from the segment read through the playback cache (with
//! read-ahead), as an RTSP playback reads it. A gap is an `EXT-X-DISCONTINUITY`; the
//! fragments' decode times keep wall time. Without `end=` the playlist is an EVENT one up
//! to the last recorded segment (a player reloads it while the camera records).

use super::{answer, playlist, MP4, PLAYLIST};
use crate::export::mux::fragment_bytes;
use crate::export::plan::{self, ExportError};
use crate::export::timeline::Timeline;
use crate::export::Opening;
use crate::node::Node;
use axum::response::Response;
use std::collections::HashMap;
use std::sync::Arc;
use vigil_proto::rtsp::rfc3339;

pub async fn serve(
    node: &Arc<Node>,
    camera: &str,
    file: &str,
    query: &HashMap<String, String>,
) -> Result<Response, ExportError> {
    let library = crate::export::library_of(node, camera)?;
    let max_ms = (node.config.export.max_range_secs * 1000.0) as i64;
    let (start, end_given) = plan::span(
        query.get("start").map(String::as_str),
        query.get("end").map(String::as_str),
        max_ms,
    )?;
    let end = end_given.unwrap_or(start.saturating_add(max_ms));
    let index = crate::export::index_of(node, &library, camera).await?;
    let segments = plan::segments(camera, &index, start, end, crate::library::GAP_MS)?;
    let Opening {
        first,
        from,
        t0_ms: t0,
        tracks,
    } = crate::export::open(&library, &segments[0], start, true).await?;
    // Every URI carries the query: it names the presentation (its time 0 and end).
    let q = format!(
        "?start={}{}",
        rfc3339(start),
        end_given.map_or(String::new(), |e| format!("&end={}", rfc3339(e)))
    );
    match file {
        "index.m3u8" => {
            let mut prev_end = None;
            let entries: Vec<playlist::Entry> = segments
                .iter()
                .map(|s| {
                    let from_ms = if s.start_ms == segments[0].start_ms {
                        t0
                    } else {
                        s.start_ms
                    };
                    let e = playlist::Entry {
                        uri: format!("seg-{}.m4s{q}", s.start_ms),
                        duration: (s.end_ms.min(end) - from_ms).max(1) as f64 / 1000.0,
                        discontinuity: prev_end.is_some_and(|p| p != s.start_ms),
                        start_ms: Some(from_ms),
                    };
                    prev_end = Some(s.end_ms);
                    e
                })
                .collect();
            let kind = if end_given.is_some() {
                playlist::Kind::Vod
            } else {
                playlist::Kind::Event
            };
            let text = playlist::render(kind, &format!("init.mp4{q}"), 0, &entries);
            Ok(answer(PLAYLIST, text.into()))
        }
        "init.mp4" => Ok(answer(
            MP4,
            vigil_proto::mp4::init_segment(&tracks.specs).into(),
        )),
        f => {
            let at = f
                .strip_prefix("seg-")
                .and_then(|s| s.strip_suffix(".m4s"))
                .and_then(|s| s.parse::<i64>().ok())
                .and_then(|ms| segments.iter().position(|s| s.start_ms == ms))
                .ok_or_else(|| ExportError::NotRecorded {
                    camera: camera.to_string(),
                    start,
                    end,
                    ranges: index.ranges(crate::library::GAP_MS),
                })?;
            let meta = &segments[at];
            let seg = if at == 0 {
                first
            } else {
                library
                    .segment(meta)
                    .await
                    .map_err(|e| ExportError::Unexportable(e.to_string()))?
            };
            library.read_ahead(&index, meta, Some(end));
            let mut timeline = Timeline::new(t0, end, tracks.map.clone(), &tracks.timescales());
            let cut = timeline.cut(&seg.0, if at == 0 { from } else { 0 });
            let mut seq = at as u32;
            let data = fragment_bytes(&mut seq, &seg.0, &cut).unwrap_or_default();
            Ok(answer(MP4, data))
        }
    }
}
