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
use super::session::{Media, Session};
use crate::library::{Library, LibraryError};
use crate::node::Node;
use crate::playback::locate::{first_segment, index, locate, Bounds, LocateError, Opens};
use crate::playback::request::{self, PlaybackRequest};
use crate::playback::sender::{Handoff, Playback};
use crate::playback::task::{self, Cursor, Sink, TrackOut};
use crate::playback::window;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use vigil_proto::rtsp::{Request, Response, StatusCode};
use vigil_proto::sdp::{self, SessionDescription};
use vigil_session::{LivePause, PlayFrom, Presentation};
use vigil_storage::{CameraIndex, SegmentMeta};

use super::handler::fail;

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
    let bounds = Bounds::of(&conn.node.config, req.end_ms);
    let (index, first) = first_segment(library, &req.camera, req.start_ms, bounds)
        .await
        .map_err(|e| {
            refused(e, |why| {
                fail(
                    StatusCode::NOT_FOUND,
                    format!("no recording of {} at that time ({why})", req.camera),
                )
            })
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
        // Too many reads already wait on the volume: as good as a timeout.
        Ok(Err(e @ LibraryError::Busy(_))) => Err(fail(StatusCode::SERVICE_UNAVAILABLE, e)),
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
        let duration = vigil_session::window::npt_of(end, origin);
        let base = base_url(&req.uri);
        let mut body = self.describe_sdp(&sdp, &base, 1, &format!("npt=0-{duration}"));
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
                // The marker in `location` is a credential for 10 s: not logged.
                tracing::info!(camera = %preq.camera, node = %node, to = %base, "playback DESCRIBE redirected");
                Some(Response::new(StatusCode::FOUND).header("Location", location))
            }
            crate::cluster::Placement::Reject(reason) => {
                crate::node::Node::bump(&self.node.counters.placements_rejected);
                Some(fail(StatusCode::SERVICE_UNAVAILABLE, reason))
            }
        }
    }

    /// Set up the playback state of a new session (first SETUP): its sender and the core's
    /// presentation.
    pub async fn playback_for_setup(
        &mut self,
        uri: &str,
    ) -> Result<(Playback, Presentation<Cursor>), Response> {
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
        let presentation = Presentation::new(
            origin_ms,
            preq.end_ms,
            sdp.clone(),
            self.node.config.playback.keyframes_only_above_scale,
        );
        let playback = Playback::new(preq, sdp, first.bitrate_bps());
        Ok((playback, presentation))
    }

    /// PLAY on a recording: validate (the core: state, Scale, Range) → read where it
    /// starts (the index, the segment) → decide (the core: does the range end before it
    /// starts?) → stop the old sender → commit → start the new one. Everything that can
    /// refuse is checked before the old sender stops, except where a PLAY without Range
    /// continues a running sender: its position is known only once it has stopped, and if
    /// that PLAY is refused the sender is started again where it was.
    pub async fn play_playback(&mut self, req: &Request) -> Response {
        let node = self.node.clone();
        let Some(library) = node.library.clone() else {
            return fail(StatusCode::NOT_FOUND, "recording is disabled");
        };
        let session = match self.own_session_mut(req) {
            Ok(s) => s,
            Err(r) => return r,
        };
        let ask = match session.core.check_play(req) {
            Ok(a) => a,
            Err(r) => return r.into(),
        };
        let (Some(pb), Some(origin)) = (
            session.playback.as_ref(),
            session.core.playback().map(|p| p.origin_ms),
        ) else {
            return fail(
                StatusCode::METHOD_NOT_VALID_IN_THIS_STATE,
                "not a playback session",
            );
        };
        let camera = pb.req.camera.clone();
        let limit = read_limit(&node);
        let bounds = Bounds::of(&node.config, ask.play_end);
        let index = match index(&library, &camera, limit).await {
            Ok(i) => i,
            // Loading an index finds no camera or times out; it never reads a segment.
            Err(e) => return refused(e, |why| fail(StatusCode::NOT_FOUND, why)),
        };
        let seek = |t: i64| {
            let index = &index;
            let library = &library;
            async move {
                let (cursor, seg) = locate(library, index, t, bounds, Opens::Seek)
                    .await
                    .map_err(|e| {
                        refused(e, |why| {
                            fail(StatusCode::INVALID_RANGE, LocateError::NotRecorded(why))
                        })
                    })?;
                Ok::<_, Response>((cursor, Some(seg)))
            }
        };
        // Where it starts. `stopped`: the old sender had to stop first (and where its
        // pacing line was, to start it again if this PLAY is refused after all).
        let mut stopped = None;
        // A seek has read its segment already (`Some`); a resume reads it below.
        let ((cursor, read), seeks) = match session.core.play_from(&ask) {
            PlayFrom::Seek(t) => match seek(t).await {
                Ok(c) => (c, true),
                Err(r) => return r,
            },
            PlayFrom::Resume(c) => ((c, None), false),
            PlayFrom::WhereSending => {
                stopped = Some(session.stop_sender().await);
                match session.core.playback().and_then(|p| p.resume()).cloned() {
                    Some(c) => ((c, None), false),
                    None => match seek(origin).await {
                        Ok(c) => (c, true),
                        Err(r) => return r,
                    },
                }
            }
        };
        let read = match read {
            Some(seg) => Ok(seg),
            None => within(limit, library.segment(&cursor.segment), internal).await,
        };
        let seg = match read {
            Ok(s) => s,
            Err(r) => {
                restart_sender(session, &node, &library, stopped).await;
                return r;
            }
        };
        let frames = &seg.0.frames;
        let actual_ms = frames
            .get(cursor.frame)
            .map_or(cursor.segment.start_ms, |f| f.time_ms);
        let last_ms = index.last_ms().unwrap_or(actual_ms);
        let plan = match session.core.decide_play(ask, actual_ms, last_ms, seeks) {
            Ok(p) => p,
            Err(refusal) => {
                restart_sender(session, &node, &library, stopped).await;
                return refusal.into();
            }
        };
        // Every refusal is behind us: the old sender (a seek while playing) stops now.
        if stopped.is_none() {
            session.stop_sender().await;
        }
        let base = base_url(&req.uri);
        let first_ts = |i: usize| {
            frames[cursor.frame.min(frames.len())..]
                .iter()
                .find(|f| f.track as usize == i)
                .map_or(0, |f| f.media_ts as u32)
        };
        let url = |i: usize| control_url(&base, &format!("trackID={i}"));
        let (resp, tracks, window) =
            session
                .core
                .commit_play(plan, first_ts, url, std::time::Instant::now());
        start_sender(session, &node, library, tracks, cursor, window, None).await;
        if let Some(p) = session.core.playback() {
            let range = resp.headers.get("Range").unwrap_or("");
            tracing::debug!(camera = %camera, range = %range, scale = p.scale(), "playback PLAY");
        }
        resp
    }

    pub async fn pause_playback(&mut self, req: &Request) -> Response {
        let session = match self.own_session_mut(req) {
            Ok(s) => s,
            Err(r) => return r,
        };
        match session.core.check_pause() {
            Err(r) => return r.into(),
            // The stopped task's queue is kept: the connection writes what it holds (media
            // sent before the pause, already numbered) and then drops it when it closes.
            // Its state goes back to the core.
            Ok(LivePause::StopSender) => {
                session.stop_sender().await;
            }
            Ok(_) => {}
        }
        session.core.commit_pause(std::time::Instant::now());
        Response::new(StatusCode::OK)
    }
}

fn internal(e: LibraryError) -> Response {
    fail(StatusCode::INTERNAL_SERVER_ERROR, e)
}

/// The answer to a playback start that cannot be found: the same for every request but
/// for a time with nothing recorded, which `not_recorded` answers (a DESCRIBE's 404, a
/// seek's 457).
fn refused(e: LocateError, not_recorded: impl FnOnce(window::NotRecorded) -> Response) -> Response {
    match e {
        LocateError::NoCamera(_) => fail(StatusCode::NOT_FOUND, e),
        LocateError::NotRecorded(why) => not_recorded(why),
        LocateError::TimedOut(_) => fail(StatusCode::SERVICE_UNAVAILABLE, e),
        LocateError::Read(e) => internal(e),
    }
}

/// A refused PLAY that had to stop the running sender starts it again where it was, with
/// the window the session had (nothing of the refused PLAY was committed).
async fn restart_sender(
    session: &mut Session,
    node: &Arc<Node>,
    library: &Library,
    stopped: Option<Handoff>,
) {
    let Some(handoff) = stopped else {
        return;
    };
    if let Some((tracks, cursor, window)) = session.core.restart() {
        start_sender(
            session,
            node,
            library.clone(),
            tracks,
            cursor,
            window,
            handoff.anchor,
        )
        .await;
    }
}

/// Starts the session's sender from `cursor` with the core's `window`, its output on the
/// session's connection (TCP) or its UDP sockets (moved to the playback on the first PLAY).
async fn start_sender(
    session: &mut Session,
    node: &Arc<Node>,
    library: Library,
    tracks: Vec<TrackOut>,
    cursor: Cursor,
    window: vigil_session::SenderWindow,
    anchor: Option<crate::handoff::Anchor>,
) {
    let sink = sink_of(session, node);
    let info = session.info.clone();
    let Some(pb) = session.playback.as_mut() else {
        return;
    };
    let params = pb.params(node, window, cursor, anchor);
    pb.start(node, library, tracks, params, sink, info).await;
    session.media = Media::Playback;
}

/// The sender's output: a fresh queue to the connection (TCP), or the session's UDP
/// sockets, moved to the playback on the first PLAY where every later one finds them.
fn sink_of(session: &mut Session, node: &Arc<Node>) -> Sink {
    if session.is_tcp() {
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
        return Sink::Tcp(tx);
    }
    let fresh = session.take_udp_tracks();
    let activity = session.activity.clone();
    let Some(p) = session.playback.as_mut() else {
        return Sink::Udp(Vec::new());
    };
    for t in fresh {
        let Some(pair) = t.pair.into_own(t.track) else {
            continue;
        };
        let rtcp = Arc::new(pair.rtcp);
        node.tasks.spawn(super::udp_session::watch_rtcp(
            rtcp.clone(),
            t.client_rtcp.ip(),
            t.srtp.clone(),
            activity.clone(),
            node.clone(),
            p.rtcp_watch.clone(),
        ));
        p.udp.push(task::UdpOut {
            track: t.track,
            via: task::UdpVia::Socket {
                rtp: Arc::new(pair.rtp.connected_to(t.client_rtp)),
                rtcp,
            },
            dest_rtp: t.client_rtp,
            dest_rtcp: t.client_rtcp,
            srtp: t.srtp,
        });
    }
    Sink::Udp(p.udp.clone())
}
