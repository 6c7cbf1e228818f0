//! RTSP methods on recordings: `rtsp://HOST/playback/<camera>?start=…[&end=…]`.
//!
//! DESCRIBE advertises `a=range:npt=0-<end>` (so players enable seeking) and absolute
//! per-track control URLs that keep the query (clients resolve relative controls against a
//! URL with a query differently). PLAY takes `Range: npt=` (relative to the URL's start) or
//! `Range: clock=` (absolute) to seek, `Scale:`/`Speed:` for trick play, and answers with the
//! actual `Range`, `RTP-Info` and the echoed Scale/Speed. PLAY without Range resumes.

use super::conn::Conn;
use super::session::Media;
use crate::playback::request::{self, PlaybackRequest};
use crate::playback::task::{self, Cursor, PlayParams, Sink, Stopped, TcpOut, TrackOut};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vigil_proto::rtp::RtpIdentity;
use vigil_proto::rtsp::{
    format_rtp_info, parse_scale, NptTime, Range, Request, Response, RtpInfo, StatusCode,
};
use vigil_proto::sdp::{self, SessionDescription};
use vigil_storage::{CameraIndex, SegmentMeta};

use super::handler::{fail, take_udp_tracks};

/// Playback state of a session; survives PAUSE.
pub struct Playback {
    pub req: PlaybackRequest,
    pub sdp: SessionDescription,
    /// Per-track output state while no task runs (taken by the task, given back on stop).
    pub tracks: Option<Vec<TrackOut>>,
    /// Where PLAY without Range resumes.
    pub resume: Option<Cursor>,
    pub running: Option<(CancellationToken, JoinHandle<Stopped>)>,
    /// TCP sessions: the task's output, drained by the connection task.
    pub tcp_rx: Option<mpsc::Receiver<TcpOut>>,
    pub udp: Vec<task::UdpOut>,
    pub scale: f64,
    /// Stops the tasks that watch the client's UDP RTCP (keepalive).
    pub rtcp_watch: CancellationToken,
}

impl Playback {
    /// Stop everything at once (session end); the task sends nothing more.
    pub fn abort(self) {
        if let Some((cancel, _)) = &self.running {
            cancel.cancel();
        }
        self.rtcp_watch.cancel();
    }

    /// Stop the running task (PAUSE, seek, teardown) and keep its state for the next PLAY.
    pub async fn stop(&mut self) {
        if let Some((cancel, handle)) = self.running.take() {
            cancel.cancel();
            if let Ok(stopped) = handle.await {
                self.tracks = Some(stopped.tracks);
                self.resume = stopped.resume;
            }
        }
    }
}

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
    let index = library.index(&req.camera).await.map_err(|_| {
        fail(
            StatusCode::NOT_FOUND,
            format!("no recordings of camera {}", req.camera),
        )
    })?;
    let inside = index
        .first_ms()
        .zip(index.last_ms())
        .is_some_and(|(a, b)| a <= req.start_ms && req.start_ms <= b);
    let first = index
        .segment_at(req.start_ms)
        .cloned()
        .filter(|_| inside)
        .or_else(|| {
            if !inside {
                return None;
            }
            // A start inside a gap plays from the next recorded moment (before the end).
            index
                .segments()
                .find(|s| s.start_ms >= req.start_ms && req.end_ms.is_none_or(|e| s.start_ms < e))
                .cloned()
        })
        .ok_or_else(|| {
            let have = match (index.first_ms(), index.last_ms()) {
                (Some(a), Some(b)) => format!(
                    "recorded from {} to {}",
                    vigil_proto::rtsp::UtcTime { unix_millis: a }.to_rfc3339(),
                    vigil_proto::rtsp::UtcTime { unix_millis: b }.to_rfc3339()
                ),
                _ => "nothing recorded".into(),
            };
            fail(
                StatusCode::NOT_FOUND,
                format!("no recording of {} at that time ({have})", req.camera),
            )
        })?;
    Ok((req, index, first))
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

fn end_ms(req: &PlaybackRequest, index: &CameraIndex) -> i64 {
    let last = index.last_ms().unwrap_or(req.start_ms);
    req.end_ms.map_or(last, |e| e.min(last.max(req.start_ms)))
}

impl Conn {
    pub async fn describe_playback(&mut self, req: &Request) -> Response {
        let (preq, index, first) = match resolve(self, &req.uri).await {
            Ok(x) => x,
            Err(r) => return r,
        };
        // Unknown camera or time: 404 above, from the node asked. Otherwise, in a cluster,
        // place the request unless it was placed already (the redirect marker).
        if let Some(r) = self.place_playback(req, &preq, &index).await {
            return r;
        }
        let Some(library) = self.node.library.clone() else {
            return fail(StatusCode::NOT_FOUND, "recording is disabled");
        };
        let seg = match library.segment(&first).await {
            Ok(s) => s,
            Err(e) => {
                return fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("reading the recording: {e}"),
                )
            }
        };
        let sdp = match sdp::parse(&seg.0.header.sdp) {
            Ok(s) => s,
            Err(e) => {
                return fail(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("recorded SDP: {e}"),
                )
            }
        };
        let duration = (end_ms(&preq, &index) - preq.start_ms).max(0) as f64 / 1000.0;
        let mut body = sdp.render(
            &self.local_ip().to_string(),
            1,
            &format!("npt=0-{duration:.3}"),
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
        index: &CameraIndex,
    ) -> Option<Response> {
        let cluster = self.node.cluster.get()?;
        if self.placed {
            return None;
        }
        // Expected VBR: the recording's average bitrate.
        let span_ms = index
            .first_ms()
            .zip(index.last_ms())
            .map_or(0, |(a, b)| b - a);
        let vbr = if span_ms > 0 {
            index.total_bytes() as f64 * 8000.0 / span_ms as f64
        } else {
            crate::cluster::report::DEFAULT_VBR_BPS
        };
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
        let seg = library.segment(&first).await.map_err(|e| {
            fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the recording: {e}"),
            )
        })?;
        let sdp = sdp::parse(&seg.0.header.sdp).map_err(|e| {
            fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("recorded SDP: {e}"),
            )
        })?;
        Ok(Playback {
            req: preq,
            sdp,
            tracks: None,
            resume: None,
            running: None,
            tcp_rx: None,
            udp: Vec::new(),
            scale: 1.0,
            rtcp_watch: CancellationToken::new(),
        })
    }

    pub async fn play_playback(&mut self, req: &Request) -> Response {
        let node = self.node.clone();
        let Some(library) = node.library.clone() else {
            return fail(StatusCode::NOT_FOUND, "recording is disabled");
        };
        // Scale / Speed: positive, up to 16x.
        let mut scale_echo = None;
        let mut scale = None;
        for name in ["Scale", "Speed"] {
            if let Some(v) = req.headers.get(name) {
                match parse_scale(v) {
                    Ok(s) if s > 0.0 && s <= 16.0 => {
                        scale = Some(s);
                        scale_echo = Some((name, v.trim().to_string()));
                    }
                    _ => {
                        return fail(
                            StatusCode::HEADER_FIELD_NOT_VALID,
                            format!("{name}: {v} (want a positive rate up to 16)"),
                        )
                    }
                }
            }
        }
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
        pb.stop().await;
        if let Some(s) = scale {
            pb.scale = s;
        }
        let index = match library.index(&pb.req.camera).await {
            Ok(i) => i,
            Err(e) => return fail(StatusCode::NOT_FOUND, e),
        };
        // Where to start: a seek (Range), the resume point, or the URL's start.
        let seek_ms = match range {
            Some(Range::Npt {
                start: NptTime::Seconds(s),
                ..
            }) => Some(pb.req.start_ms + (s * 1000.0) as i64),
            Some(Range::Npt {
                start: NptTime::Now,
                ..
            }) => None,
            Some(Range::Clock { start, .. }) => Some(start.unix_millis),
            None => None,
        };
        let (cursor, seeked) = match (seek_ms, pb.resume.clone()) {
            (None, Some(c)) => (c, false),
            (target, _) => {
                let t = target.unwrap_or(pb.req.start_ms);
                let Some(meta) = index
                    .segment_at(t)
                    .cloned()
                    .or_else(|| index.segments().find(|s| s.start_ms >= t).cloned())
                else {
                    return fail(
                        StatusCode::INVALID_RANGE,
                        "nothing recorded at or after that time",
                    );
                };
                let seg = match library.segment(&meta).await {
                    Ok(s) => s,
                    Err(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, e),
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
        let seg = match library.segment(&cursor.segment).await {
            Ok(s) => s,
            Err(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, e),
        };
        let frames = &seg.0.frames;
        let actual_ms = frames
            .get(cursor.frame)
            .map_or(cursor.segment.start_ms, |f| f.time_ms);
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
        let end = end_ms(&pb.req, &index);
        let keyframes_only = pb.scale > node.config.playback.keyframes_only_above_scale;
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
                    activity.clone(),
                    node.clone(),
                    p.rtcp_watch.clone(),
                ));
                p.udp.push(task::UdpOut {
                    track: t.track,
                    rtp: Arc::new(t.pair.rtp),
                    rtcp,
                    dest_rtp: t.client_rtp,
                    dest_rtcp: t.client_rtcp,
                });
            }
            Sink::Udp(p.udp.clone())
        };
        let Some(pb) = session.playback.as_mut() else {
            return fail(StatusCode::INTERNAL_SERVER_ERROR, "session vanished");
        };
        let params = PlayParams {
            start: cursor,
            scale: pb.scale,
            keyframes_only,
            end_ms: pb.req.end_ms,
            camera: pb.req.camera.clone(),
            cname: node.config.node.id.clone(),
        };
        let cancel = CancellationToken::new();
        let handle = node.tasks.spawn(task::run(
            library,
            tracks,
            params,
            sink,
            session.info.clone(),
            cancel.clone(),
        ));
        pb.running = Some((cancel, handle));
        session.media = Media::Playback;
        let npt = |ms: i64| (ms - pb.req.start_ms).max(0) as f64 / 1000.0;
        let mut resp = Response::new(StatusCode::OK)
            .header(
                "Range",
                format!("npt={:.3}-{:.3}", npt(actual_ms), npt(end)),
            )
            .header("RTP-Info", format_rtp_info(&rtp_info));
        if let Some((name, v)) = scale_echo {
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
