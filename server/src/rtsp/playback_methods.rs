//! RTSP methods on recordings: `rtsp://HOST/playback/<camera>?start=…[&end=…]`.
//!
//! npt 0 of a presentation is its origin: the first frame it serves for the URL's start
//! (the keyframe at or before it, or the first frame of the next recording when the start
//! falls in a gap), so every npt the node says is a true position. DESCRIBE advertises
//! `a=range:npt=0-<end>` (so players enable seeking) and absolute per-track control URLs
//! that keep the query (clients resolve relative controls against a URL with a query
//! differently). PLAY takes `Range: npt=` (from the origin) or `Range: clock=` (absolute) to
//! seek and, with an end, to stop there (RFC 2326 §12.29: the earlier of it and the URL's
//! `end=` wins), `Scale:`/`Speed:` for trick play, and answers the range actually served (in
//! the unit asked), `RTP-Info` and the echoed Scale/Speed. PLAY without Range continues
//! where the session stopped (PAUSE or the end of a range).

use super::conn::Conn;
use super::playback_session::Playback;
use super::session::Media;
use crate::library::{Library, LibraryError};
use crate::playback::request::{self, PlaybackRequest};
use crate::playback::task::{self, Cursor, Sink, TrackOut};
use crate::playback::window;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use vigil_proto::rtp::RtpIdentity;
use vigil_proto::rtsp::{
    format_rtp_info, parse_scale, NptTime, Range, Request, Response, RtpInfo, StatusCode, UtcTime,
};
use vigil_proto::sdp::{self, SessionDescription};
use vigil_storage::{CameraIndex, SegmentMeta};

use super::handler::{fail, take_udp_tracks};

/// Resolve the playback URL of a request: 400 malformed, 404 unknown camera or no recording
/// at that time. Returns the request, the camera's index and the first segment to play.
pub async fn resolve(
    conn: &Conn,
    uri: &str,
) -> Result<(PlaybackRequest, CameraIndex, SegmentMeta), Response> {
    let url = url::Url::parse(uri).map_err(|_| fail(StatusCode::BAD_REQUEST, "bad URL"))?;
    let path = url.path().trim_matches('/');
    let req = match request::parse(path, url.query()) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(fail(StatusCode::NOT_FOUND, format!("no path {path}"))),
        Err(e) => return Err(fail(e.status, e.message)),
    };
    let Some(library) = conn.node.library.as_ref() else {
        return Err(fail(
            StatusCode::NOT_FOUND,
            "recording is disabled on this node",
        ));
    };
    let index = within(read_limit(&conn.node), library.index(&req.camera), |_| {
        fail(
            StatusCode::NOT_FOUND,
            format!("no recordings of camera {}", req.camera),
        )
    })
    .await?;
    let tolerance_ms = (conn.node.config.playback.start_tolerance_secs * 1000.0) as i64;
    let first =
        window::start_segment(&index, req.start_ms, req.end_ms, tolerance_ms).map_err(|why| {
            fail(
                StatusCode::NOT_FOUND,
                format!("no recording of {} at that time ({why})", req.camera),
            )
        })?;
    Ok((req, index, first))
}

/// `[storage] request_read_timeout_ms`: how long a request waits for storage.
fn read_limit(node: &crate::node::Node) -> Duration {
    Duration::from_millis(node.config.storage.request_read_timeout_ms)
}

/// A storage read a request waits for, bounded by `limit`: a hung shared volume gets the
/// client a 503 instead of holding its connection (whose task also serves its TEARDOWN and
/// session timeout). The read itself goes on in the background and fills the cache. A read
/// that fails is answered by `failed`.
async fn within<T>(
    limit: Duration,
    read: impl std::future::Future<Output = Result<T, LibraryError>>,
    failed: impl FnOnce(LibraryError) -> Response,
) -> Result<T, Response> {
    match tokio::time::timeout(limit, read).await {
        Ok(r) => r.map_err(failed),
        Err(_) => Err(fail(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("storage did not answer within {} ms", limit.as_millis()),
        )),
    }
}

/// The URL of a playback request with `suffix` added to the path (query kept).
fn control_url(uri: &str, suffix: &str) -> String {
    match url::Url::parse(uri) {
        Ok(mut u) => {
            let path = format!("{}/{suffix}", u.path().trim_end_matches('/'));
            u.set_path(&path);
            u.to_string()
        }
        Err(_) => format!("{uri}/{suffix}"),
    }
}

/// The base playback URL (without a trackID suffix) of a SETUP/PLAY URL.
fn base_url(uri: &str) -> String {
    match url::Url::parse(uri) {
        Ok(mut u) => {
            let path = u.path().to_string();
            if let Some((base, last)) = path.trim_end_matches('/').rsplit_once('/') {
                if last.starts_with("trackID=") {
                    u.set_path(base);
                }
            }
            u.to_string()
        }
        Err(_) => uri.to_string(),
    }
}

/// Which request reads a playback's first segment. A DESCRIBE opens the playback and is
/// counted in [`Library::opens`] (was its first segment cached?); the SETUP after it
/// re-reads what that DESCRIBE loaded and must not count as a second, cached, open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenedBy {
    Describe,
    Setup,
}

/// The recorded SDP of the first segment and the presentation's origin: the time of the
/// first frame served for `start_ms` (the keyframe at or before it, or the segment's first
/// frame when `start_ms` precedes the segment).
async fn open_first(
    library: &Library,
    limit: Duration,
    first: &SegmentMeta,
    start_ms: i64,
    by: OpenedBy,
) -> Result<(SessionDescription, i64), Response> {
    let failed = |e| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading the recording: {e}"),
        )
    };
    let seg = match by {
        OpenedBy::Describe => within(limit, library.open_segment(first), failed).await?,
        OpenedBy::Setup => within(limit, library.segment(first), failed).await?,
    };
    let sdp = sdp::parse(&seg.0.header.sdp).map_err(|e| {
        fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("recorded SDP: {e}"),
        )
    })?;
    let frames = &seg.0.frames;
    let origin = frames
        .get(seg.0.keyframe_at_or_before(start_ms))
        .map_or(first.start_ms, |f| f.time_ms);
    Ok((sdp, origin))
}

/// Seconds from the origin, for npt answers.
fn npt_of(ms: i64, origin_ms: i64) -> NptTime {
    NptTime::Seconds(ms.saturating_sub(origin_ms).max(0) as f64 / 1000.0)
}

/// Scale or Speed of a PLAY: None when neither is given, Some((value, header, echo)), or a
/// 456 naming the supported range.
fn rate_of(req: &Request) -> Result<Option<(f64, &'static str, String)>, Response> {
    let mut rate = None;
    for name in ["Scale", "Speed"] {
        let Some(v) = req.headers.get(name) else {
            continue;
        };
        let supported = format!(
            "supported {name}: {} to {}",
            window::RATES.start(),
            window::RATES.end()
        );
        match parse_scale(v) {
            Ok(s) if window::RATES.contains(&s) => rate = Some((s, name, v.trim().to_string())),
            Ok(s) if s < 0.0 => {
                return Err(fail(
                    StatusCode::HEADER_FIELD_NOT_VALID,
                    format!("{name}: {v}: reverse play is not supported; {supported}"),
                ))
            }
            _ => {
                return Err(fail(
                    StatusCode::HEADER_FIELD_NOT_VALID,
                    format!("{name}: {v}: {supported}"),
                ))
            }
        }
    }
    Ok(rate)
}

impl Conn {
    pub async fn describe_playback(&mut self, req: &Request) -> Response {
        let (preq, index, first) = match resolve(self, &req.uri).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        // Unknown camera or time: 404 above, from the node asked. Otherwise, in a cluster,
        // place the request unless it was placed already (the redirect marker).
        if let Some(r) = self.place_playback(req, &preq, &first).await {
            return r;
        }
        let Some(library) = self.node.library.clone() else {
            return fail(StatusCode::NOT_FOUND, "recording is disabled");
        };
        let (sdp, origin) = match open_first(
            &library,
            read_limit(&self.node),
            &first,
            preq.start_ms,
            OpenedBy::Describe,
        )
        .await
        {
            Ok(x) => x,
            Err(r) => return r,
        };
        let end = window::end_of(preq.end_ms, None, index.last_ms().unwrap_or(origin));
        let duration = npt_of(end, origin);
        let mut body = sdp.render(
            &self.local_ip().to_string(),
            1,
            &format!("npt=0-{duration}"),
        );
        let base = base_url(&req.uri);
        for i in 0..sdp.media.len() {
            body = body.replace(
                &format!("a=control:trackID={i}\r\n"),
                &format!(
                    "a=control:{}\r\n",
                    control_url(&base, &format!("trackID={i}"))
                ),
            );
        }
        Response::new(StatusCode::OK)
            .header("Content-Base", base)
            .body("application/sdp", body)
    }

    /// Cluster placement of a playback DESCRIBE: None to serve it here, or the 302 / 503.
    /// The elected scheduler decides (QUIC call); on timeout or error this node decides with
    /// the same policy over its own gossip view (issue 4 §4's fallback).
    async fn place_playback(
        &self,
        req: &Request,
        preq: &PlaybackRequest,
        first: &SegmentMeta,
    ) -> Option<Response> {
        let cluster = self.cluster.as_ref()?;
        if self.placed {
            return None;
        }
        // Expected VBR: the bitrate of the recording where the playback starts.
        let vbr = first
            .bitrate_bps()
            .unwrap_or(crate::cluster::report::DEFAULT_VBR_BPS);
        match cluster
            .place_playback(&preq.camera, preq.start_ms, vbr)
            .await
        {
            crate::cluster::Placement::Local => None,
            crate::cluster::Placement::Redirect { node, base } => {
                let location = cluster.redirect_url(&base, &req.uri, self.auth.user_name());
                tracing::info!(camera = %preq.camera, node = %node, %location, "playback DESCRIBE redirected");
                Some(Response::new(StatusCode::FOUND).header("Location", location))
            }
            crate::cluster::Placement::Reject(reason) => {
                crate::node::Node::bump(&self.node.counters.placements_rejected);
                Some(fail(StatusCode::SERVICE_UNAVAILABLE, reason))
            }
        }
    }

    /// Set up the playback state of a new session (first SETUP).
    pub async fn playback_for_setup(&mut self, uri: &str) -> Result<Playback, Response> {
        let (preq, _, first) = resolve(self, uri).await?;
        let library = self
            .node
            .library
            .clone()
            .ok_or_else(|| fail(StatusCode::NOT_FOUND, "recording is disabled"))?;
        let (sdp, origin_ms) = open_first(
            &library,
            read_limit(&self.node),
            &first,
            preq.start_ms,
            OpenedBy::Setup,
        )
        .await?;
        Ok(Playback {
            req: preq,
            origin_ms,
            sdp,
            tracks: None,
            resume: None,
            running: None,
            tcp_rx: None,
            udp: Vec::new(),
            scale: 1.0,
            range_end: None,
            rtcp_watch: CancellationToken::new(),
            remote: None,
            expected_bps: first.bitrate_bps(),
        })
    }

    pub async fn play_playback(&mut self, req: &Request) -> Response {
        let node = self.node.clone();
        let Some(library) = node.library.clone() else {
            return fail(StatusCode::NOT_FOUND, "recording is disabled");
        };
        let rate = match rate_of(req) {
            Ok(r) => r,
            Err(r) => return r,
        };
        let range = match req.headers.get("Range").map(Range::parse) {
            None => None,
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => return fail(StatusCode::INVALID_RANGE, e),
        };
        let session = match self.transition(req) {
            Ok(s) => s,
            Err(r) => return r,
        };
        let Some(pb) = session.playback.as_mut() else {
            return fail(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "not a playback session",
            );
        };
        let limit = read_limit(&node);
        let internal = |e| fail(StatusCode::INTERNAL_SERVER_ERROR, e);
        let not_found = |e| fail(StatusCode::NOT_FOUND, e);
        let index = match within(limit, library.index(&pb.req.camera), not_found).await {
            Ok(i) => i,
            Err(r) => return r,
        };
        let asked = match window::requested(range.as_ref(), pb.origin_ms) {
            Ok(r) => r,
            Err(why) => return fail(StatusCode::INVALID_RANGE, why),
        };
        // The end this PLAY plays to (before the recording's): the earlier of the URL's and
        // the Range's.
        let play_end = [pb.req.end_ms, asked.end].into_iter().flatten().min();
        // Where a seek lands, checked before anything stops (a refused PLAY changes nothing);
        // without one the session continues where it stopped, or starts at the origin.
        let tolerance_ms = (node.config.playback.start_tolerance_secs * 1000.0) as i64;
        let land = |t: i64| {
            window::start_segment(&index, t, play_end, tolerance_ms)
                .map(|meta| (t, meta))
                .map_err(|why| {
                    fail(
                        StatusCode::INVALID_RANGE,
                        format!("nothing to play from that time ({why})"),
                    )
                })
        };
        let seek = match asked.start.map(land).transpose() {
            Ok(s) => s,
            Err(r) => return r,
        };
        pb.stop().await;
        if let Some((s, _, _)) = &rate {
            pb.scale = *s;
        }
        let (cursor, seeked) = match (seek, pb.resume.clone()) {
            (None, Some(c)) => (c, false),
            (seek, _) => {
                let (t, meta) = match seek.map_or_else(|| land(pb.origin_ms), Ok) {
                    Ok(x) => x,
                    Err(r) => return r,
                };
                let seg = match within(limit, library.segment(&meta), internal).await {
                    Ok(s) => s,
                    Err(r) => return r,
                };
                let frame = seg.0.keyframe_at_or_before(t);
                (
                    Cursor {
                        segment: meta,
                        frame,
                    },
                    true,
                )
            }
        };
        let seg = match within(limit, library.segment(&cursor.segment), internal).await {
            Ok(s) => s,
            Err(r) => return r,
        };
        let frames = &seg.0.frames;
        let actual_ms = frames
            .get(cursor.frame)
            .map_or(cursor.segment.start_ms, |f| f.time_ms);
        if play_end.is_some_and(|e| e <= actual_ms) {
            return fail(StatusCode::INVALID_RANGE, "the range ends before it starts");
        }
        let end = window::end_of(
            pb.req.end_ms,
            asked.end,
            index.last_ms().unwrap_or(actual_ms),
        );
        // Output state: created on the first PLAY, continued (rebased after a seek) later.
        let mut tracks = match pb.tracks.take() {
            Some(t) => t,
            None => new_tracks(&pb.sdp, &session.setups),
        };
        if seeked {
            for t in &mut tracks {
                // Continue the timestamp line one frame interval on.
                t.identity.rebase((t.clock_rate / 25).max(1));
            }
        }
        let base = base_url(&req.uri);
        let rtp_info: Vec<RtpInfo> = tracks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.enabled)
            .map(|(i, t)| {
                let first_ts = frames[cursor.frame.min(frames.len())..]
                    .iter()
                    .find(|f| f.track as usize == i)
                    .map_or(0, |f| f.media_ts as u32);
                RtpInfo {
                    url: control_url(&base, &format!("trackID={i}")),
                    seq: Some(t.identity.next_seq()),
                    rtptime: Some(t.identity.project_timestamp(first_ts)),
                }
            })
            .collect();
        let sink = if session.is_tcp() {
            let (tx, rx) = mpsc::channel(32);
            if let Some(p) = session.playback.as_mut() {
                // Batches the stopped task queued that the connection has not written yet
                // already carry sequence numbers: they go out first (after this answer), or
                // the client would see a gap and, on a resume, miss a reference frame.
                // The old channel holds at most 32, so they fit.
                if let Some(mut old) = p.tcp_rx.take() {
                    while let Ok(out) = old.try_recv() {
                        let _ = tx.try_send(out);
                    }
                }
                p.tcp_rx = Some(rx);
            }
            Sink::Tcp(tx)
        } else {
            // First PLAY: the session's UDP sockets move to the playback state, where every
            // later PLAY (after PAUSE or a seek) finds them.
            let fresh = take_udp_tracks(session);
            let activity = session.activity.clone();
            let Some(p) = session.playback.as_mut() else {
                return fail(StatusCode::INTERNAL_SERVER_ERROR, "session vanished");
            };
            for t in fresh {
                let rtcp = Arc::new(t.pair.rtcp);
                node.tasks.spawn(super::udp_session::watch_rtcp(
                    rtcp.clone(),
                    t.client_rtcp.ip(),
                    activity.clone(),
                    node.clone(),
                    p.rtcp_watch.clone(),
                ));
                p.udp.push(task::UdpOut {
                    track: t.track,
                    via: task::UdpVia::Socket {
                        rtp: Arc::new(t.pair.rtp),
                        rtcp,
                    },
                    dest_rtp: t.client_rtp,
                    dest_rtcp: t.client_rtcp,
                });
            }
            Sink::Udp(p.udp.clone())
        };
        let Some(pb) = session.playback.as_mut() else {
            return fail(StatusCode::INTERNAL_SERVER_ERROR, "session vanished");
        };
        pb.range_end = asked.end;
        let params = pb.params(&node, cursor, None);
        pb.start(&node, library, tracks, params, sink, session.info.clone())
            .await;
        session.media = Media::Playback;
        let served = if asked.clock {
            Range::Clock {
                start: UtcTime {
                    unix_millis: actual_ms,
                },
                end: Some(UtcTime { unix_millis: end }),
            }
        } else {
            Range::Npt {
                start: npt_of(actual_ms, pb.origin_ms),
                end: Some(npt_of(end, pb.origin_ms)),
            }
        };
        tracing::debug!(camera = %pb.req.camera, range = %served, scale = pb.scale, "playback PLAY");
        let mut resp = Response::new(StatusCode::OK)
            .header("Range", served.to_string())
            .header("RTP-Info", format_rtp_info(&rtp_info));
        if let Some((_, name, v)) = rate {
            resp = resp.header(name, v);
        }
        resp
    }

    pub async fn pause_playback(&mut self, req: &Request) -> Response {
        let session = match self.transition(req) {
            Ok(s) => s,
            Err(r) => return r,
        };
        if let Some(pb) = session.playback.as_mut() {
            // The stopped task's queue is kept: the connection writes what it holds (media
            // sent before the pause, already numbered) and then drops it when it closes.
            pb.stop().await;
        }
        Response::new(StatusCode::OK)
    }
}

fn new_tracks(
    sdp: &SessionDescription,
    setups: &[Option<crate::live::reader::TrackSetup>],
) -> Vec<TrackOut> {
    sdp.media
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let setup = setups.get(i).copied().flatten();
            let (ssrc, seq, ts) = setup.map_or((0, 0, 0), |s| (s.ssrc, s.first_seq, s.first_ts));
            TrackOut {
                codec: m.codec(),
                payload_type: m.payload_type,
                clock_rate: m.clock_rate.max(1),
                identity: RtpIdentity::new(ssrc, seq, ts),
                seq: 0,
                enabled: setup.is_some(),
            }
        })
        .collect()
}
