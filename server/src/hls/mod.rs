//! HLS with fMP4 segments on the node's HTTP server, for browsers (hls.js, native players)
//! and ffmpeg: `/hls/live/<camera>/index.m3u8` from the same hub as RTSP viewers (`live`),
//! `/hls/playback/<camera>/index.m3u8?start=…[&end=…]` from the same segment cache as RTSP
//! playback (`playback`). The fMP4 boxes and the timeline are the export's
//! (`export::timeline`, `vigil_proto::mp4`). The routes sit behind the admin token layer
//! like every HTTP route: open on a loopback listener, the token beyond it.

pub mod live;
pub mod playback;
pub mod playlist;

use crate::node::Node;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The cameras being watched over live HLS (one per node, held by the HTTP server's state:
/// the node below does not know HLS).
#[derive(Default)]
pub struct Registry {
    live: Mutex<HashMap<String, Arc<live::Live>>>,
}

pub(crate) fn answer(content_type: &'static str, body: Bytes) -> Response {
    let mut r = Response::new(axum::body::Body::from(body));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

pub(crate) fn refuse(status: StatusCode, why: impl std::fmt::Display) -> Response {
    (status, format!("{why}\n")).into_response()
}

pub const PLAYLIST: &str = "application/vnd.apple.mpegurl";
pub const MP4: &str = "video/mp4";

/// The camera's live HLS, started if needed; None when it is not live here.
fn live_of(node: &Arc<Node>, hls: &Arc<Registry>, camera: &str) -> Option<Arc<live::Live>> {
    let path = node.path(&format!("live/{camera}"))?;
    if !path.stream.is_live() {
        return None;
    }
    let mut map = hls.live.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(l) = map.get(camera).filter(|l| !l.stop.is_cancelled()) {
        l.touch();
        return Some(l.clone());
    }
    let l = Arc::new(live::Live::default());
    map.insert(camera.to_string(), l.clone());
    let (node2, hls2, camera2, l2) = (node.clone(), hls.clone(), camera.to_string(), l.clone());
    tokio::spawn(async move {
        live::run(
            l2.clone(),
            path.stream.clone(),
            node2.shutdown.clone(),
            node2.config.hls.clone(),
        )
        .await;
        let mut map = hls2.live.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&camera2).is_some_and(|x| Arc::ptr_eq(x, &l2)) {
            map.remove(&camera2);
        }
    });
    Some(l)
}

/// `GET /hls/live/<camera>/<file>`: `index.m3u8`, `init.mp4`, `seg-<n>.m4s`.
/// `hls`: the node's registry of cameras watched.
pub async fn live_route(
    node: Arc<Node>,
    hls: Arc<Registry>,
    camera: String,
    file: String,
) -> Response {
    let Some(live) = live_of(&node, &hls, &camera) else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("camera {camera} is not live here"),
        );
    };
    match file.as_str() {
        "index.m3u8" => {
            // A first request waits for the first segments (one keyframe interval each).
            let wait = Duration::from_secs_f64(node.config.hls.segment_secs * 3.0 + 5.0);
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let changed = live.changed.notified();
                {
                    let s = live.lock();
                    if let Some(e) = &s.error {
                        return refuse(StatusCode::INTERNAL_SERVER_ERROR, e);
                    }
                    if s.segments.len() >= 2 || (s.ended && !s.segments.is_empty()) {
                        let first = s.segments.front().map_or(0, |x| x.seq);
                        let entries: Vec<playlist::Entry> = s
                            .segments
                            .iter()
                            .map(|x| playlist::Entry {
                                uri: format!("seg-{}.m4s", x.seq),
                                duration: x.duration,
                                discontinuity: false,
                                start_ms: Some(x.start_ms),
                            })
                            .collect();
                        let text =
                            playlist::render(playlist::Kind::Live, "init.mp4", first, &entries);
                        return answer(PLAYLIST, text.into());
                    }
                    if s.ended {
                        return refuse(StatusCode::NOT_FOUND, "the live stream ended");
                    }
                }
                if tokio::time::timeout_at(deadline, changed).await.is_err() {
                    return refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "no keyframe from the camera yet",
                    );
                }
            }
        }
        "init.mp4" => match live.lock().init.clone() {
            Some(b) => answer(MP4, b),
            None => refuse(StatusCode::NOT_FOUND, "no segment yet"),
        },
        f => {
            let seq = f
                .strip_prefix("seg-")
                .and_then(|s| s.strip_suffix(".m4s"))
                .and_then(|s| s.parse::<u64>().ok());
            let data = seq.and_then(|n| {
                live.lock()
                    .segments
                    .iter()
                    .find(|x| x.seq == n)
                    .map(|x| x.data.clone())
            });
            match data {
                Some(b) => answer(MP4, b),
                None => refuse(StatusCode::NOT_FOUND, format!("no {f} (gone or not yet)")),
            }
        }
    }
}

/// `GET /hls/playback/<camera>/<file>?start=…[&end=…]`.
pub async fn playback_route(
    node: Arc<Node>,
    camera: String,
    file: String,
    query: HashMap<String, String>,
) -> Response {
    match playback::serve(&node, &camera, &file, &query).await {
        Ok(r) => r,
        Err(e) => refuse(
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            e,
        ),
    }
}
