//! The sending side of a migrated session (node B): sessions whose RTSP connection stays on
//! another node (the steering node, A) and whose media this node sends.
//!
//! A hosted session lives on a lease: every call from its steering node renews it
//! (`Status` is A's heartbeat). A steering node that falls silent for `lease_ms` (it died,
//! and the viewer's connection with it) makes this node stop sending and forget the session,
//! so nothing keeps streaming to a viewer nobody steers.
//!
//! Fault injection for tests and drills: a node started with
//! `VIGIL_FAULT_MIGRATION_PREPARE_STALL=<file>` holds every `Prepare` it receives (before it
//! does anything) for as long as that file exists, logging when it starts to, so a test can
//! kill the node while the steering node waits for its answer. Only whoever starts the
//! process can set it.

use crate::cluster::Cluster;
use crate::handoff::{
    MigrationReply, PrepareSpec, SessionStatus, WireCursor, WireRun, WireStopped, WireTrack,
};
use crate::library::Library;
use crate::net::raw::RawSender;
use crate::node::command::SourceMode;
use crate::node::{Node, SessionInfo, SessionKindView};
use crate::playback::task::{
    self, to_wire, Cursor, PlayParams, Progress, Sink, Stopped, TrackOut, UdpOut, UdpVia,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use vigil_proto::sdp::{self, SessionDescription};

mod live;

struct Hosted {
    spec: PrepareSpec,
    info: Arc<SessionInfo>,
    sdp: SessionDescription,
    outs: Vec<UdpOut>,
    running: Option<(CancellationToken, JoinHandle<Stopped>)>,
    progress: Arc<Mutex<Option<Progress>>>,
    touched: Instant,
}

pub struct Host {
    node: Arc<Node>,
    /// The shell whose RPC serves this host (weak: the shell holds the host through the
    /// migration service); a live viewer's camera may be relayed through it.
    cluster: std::sync::Weak<Cluster>,
    sessions: Mutex<HashMap<String, Hosted>>,
    lives: Mutex<HashMap<String, live::HostedLive>>,
    raw: Mutex<Option<Arc<RawSender>>>,
    lease: Duration,
    /// The Prepare-stall fault file (see the module's doc).
    stall_prepare: Option<std::path::PathBuf>,
}

/// The environment variable naming the Prepare-stall fault file.
pub const PREPARE_STALL_ENV: &str = "VIGIL_FAULT_MIGRATION_PREPARE_STALL";

type Reply = MigrationReply;

fn failed(why: impl std::fmt::Display) -> Reply {
    MigrationReply::Failed(why.to_string())
}

/// Output state of a session's tracks: codecs from its SDP, identities from the wire.
pub fn tracks_from_wire(sdp: &SessionDescription, wire: &[WireTrack]) -> Vec<TrackOut> {
    sdp.media
        .iter()
        .zip(wire)
        .map(|(m, w)| TrackOut {
            codec: m.codec(),
            payload_type: m.payload_type,
            clock_rate: m.clock_rate.max(1),
            identity: w.identity.clone(),
            seq: w.seq,
            enabled: w.enabled,
        })
        .collect()
}

pub fn cursor_to_wire(c: &Cursor) -> WireCursor {
    WireCursor {
        segment_start_ms: c.segment.start_ms,
        frame: c.frame,
    }
}

/// The segment a wire cursor names, from this node's view of the shared store.
pub async fn cursor_from_wire(
    library: &Library,
    camera: &str,
    c: WireCursor,
) -> Result<Cursor, String> {
    let index = library
        .index(camera)
        .await
        .map_err(|e| format!("index of {camera}: {e}"))?;
    let segment = index
        .segment_at(c.segment_start_ms)
        .filter(|s| s.start_ms == c.segment_start_ms)
        .ok_or_else(|| format!("no segment of {camera} starts at {}", c.segment_start_ms))?;
    Ok(Cursor {
        segment,
        frame: c.frame,
    })
}

pub fn stopped_to_wire(s: &Stopped) -> WireStopped {
    WireStopped {
        tracks: to_wire(&s.tracks),
        resume: s.resume.as_ref().map(cursor_to_wire),
        anchor: s.anchor,
        last_sent_us: s.last_sent_us,
    }
}

impl Host {
    pub fn new(node: Arc<Node>, cluster: &Arc<Cluster>, lease: Duration) -> Arc<Host> {
        let host = Arc::new(Host {
            node: node.clone(),
            cluster: Arc::downgrade(cluster),
            sessions: Mutex::new(HashMap::new()),
            lives: Mutex::new(HashMap::new()),
            raw: Mutex::new(None),
            lease,
            stall_prepare: std::env::var_os(PREPARE_STALL_ENV).map(Into::into),
        });
        node.tasks
            .spawn(reap(Arc::downgrade(&host), node.shutdown.clone()));
        host
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Hosted>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lives(&self) -> std::sync::MutexGuard<'_, HashMap<String, live::HostedLive>> {
        self.lives.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The raw socket of `preserve` mode, opened on first use.
    pub fn raw_sender(&self) -> Result<Arc<RawSender>, crate::net::raw::PreserveError> {
        let mut g = self.raw.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = g.as_ref() {
            return Ok(r.clone());
        }
        let r = Arc::new(RawSender::open()?);
        *g = Some(r.clone());
        Ok(r)
    }

    /// The sockets a moved session's media leaves by: a port pair of this node per track
    /// (`own`), or the raw socket with the steering node's ports as the source (`preserve`).
    pub async fn bind_outs(&self, spec: &PrepareSpec) -> Result<Vec<UdpOut>, String> {
        let mut outs = Vec::new();
        match spec.mode {
            SourceMode::Own => {
                let ip = self.node.config.rtsp.listen.ip();
                for d in &spec.dests {
                    let Some(pair) = self.node.ports.bind_pair(ip).await else {
                        return Err("no free UDP port pair".into());
                    };
                    outs.push(UdpOut {
                        track: d.track,
                        via: UdpVia::Socket {
                            rtp: Arc::new(pair.rtp.connected_to(d.rtp)),
                            rtcp: Arc::new(pair.rtcp),
                        },
                        dest_rtp: d.rtp,
                        dest_rtcp: d.rtcp,
                        // A session with SRTP does not move (`Session::steered`).
                        srtp: None,
                    });
                }
            }
            SourceMode::Preserve => {
                let raw = self.raw_sender().map_err(|e| e.to_string())?;
                for d in &spec.dests {
                    if let std::net::IpAddr::V4(src) = d.src_rtp.ip() {
                        if let Some(gateway) = crate::procfs::route_gateway(src) {
                            let e = crate::net::raw::PreserveError::NotOnLink { src, gateway };
                            return Err(e.to_string());
                        }
                    }
                    outs.push(UdpOut {
                        track: d.track,
                        via: UdpVia::Spoofed {
                            raw: raw.clone(),
                            src_rtp: d.src_rtp,
                            src_rtcp: d.src_rtcp,
                        },
                        dest_rtp: d.rtp,
                        dest_rtcp: d.rtcp,
                        srtp: None,
                    });
                }
            }
        }
        Ok(outs)
    }

    /// Holds a `Prepare` while the stall fault file exists (see the module's doc).
    pub async fn fault_stall(&self, session: &str) {
        if let Some(file) = self.stall_prepare.as_ref().filter(|f| f.exists()) {
            warn!(session, "fault injection: Prepare stalled");
            while file.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    pub async fn prepare(&self, spec: PrepareSpec) -> Reply {
        self.fault_stall(&spec.session).await;
        let Some(library) = self.node.library.clone() else {
            return failed("recording is disabled on this node");
        };
        if self.sessions().contains_key(&spec.session) {
            return failed(format!("session {} is already hosted here", spec.session));
        }
        // The recorded SDP (codecs of the tracks) and the segment playing now, warmed in this
        // node's cache before it says ready.
        let index = match library.index(&spec.camera).await {
            Ok(i) => i,
            Err(e) => return failed(format!("recordings of {}: {e}", spec.camera)),
        };
        let Some(meta) = index
            .segment_at(spec.position_ms)
            .or_else(|| index.segments().next())
        else {
            return failed(format!("no recordings of {}", spec.camera));
        };
        let seg = match library.segment(&meta).await {
            Ok(s) => s,
            Err(e) => return failed(format!("reading {}: {e}", spec.camera)),
        };
        library.read_ahead(&index, &meta, spec.end_ms);
        let sdp = match sdp::parse(&seg.0.header.sdp) {
            Ok(s) => s,
            Err(e) => return failed(format!("recorded SDP: {e}")),
        };
        let outs = match self.bind_outs(&spec).await {
            Ok(o) => o,
            Err(e) => return failed(e),
        };
        let info = Arc::new(SessionInfo::new(
            spec.session.clone(),
            format!("playback/{}", spec.camera),
            SessionKindView::Playback,
            spec.client,
            CancellationToken::new(),
        ));
        *info.transport.lock().unwrap_or_else(|p| p.into_inner()) =
            format!("udp ({} source, steered by {})", spec.mode, spec.from);
        *info.steered_by.lock().unwrap_or_else(|p| p.into_inner()) = Some(spec.from.clone());
        self.node.register_session(info.clone());
        info!(session = %spec.session, from = %spec.from, camera = %spec.camera, mode = %spec.mode, "migration: prepared");
        self.sessions().insert(
            spec.session.clone(),
            Hosted {
                spec,
                info,
                sdp,
                outs,
                running: None,
                progress: Arc::new(Mutex::new(None)),
                touched: Instant::now(),
            },
        );
        MigrationReply::Ready
    }

    pub async fn start(&self, session: &str, run: WireRun) -> Reply {
        let Some(library) = self.node.library.clone() else {
            return failed("recording is disabled on this node");
        };
        let (camera, sdp) = {
            let mut g = self.sessions();
            let Some(h) = g.get_mut(session) else {
                return failed(format!("session {session} is not prepared here"));
            };
            if h.running.is_some() {
                return failed(format!("session {session} is already running here"));
            }
            h.touched = Instant::now();
            (h.spec.camera.clone(), h.sdp.clone())
        };
        let cursor = match cursor_from_wire(&library, &camera, run.cursor).await {
            Ok(c) => c,
            Err(e) => return failed(e),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut g = self.sessions();
            let Some(h) = g.get_mut(session) else {
                return failed(format!("session {session} was released"));
            };
            let params = PlayParams {
                start: cursor,
                scale: run.scale,
                keyframes_only: run.keyframes_only,
                end_ms: run.end_ms,
                range_end_only: run.range_end_only,
                camera,
                cname: h.spec.cname.clone(),
                payload_max: self.node.config.rtsp.rtp_payload_max(),
                anchor: run.anchor,
                progress: Some(h.progress.clone()),
                first_sent: Some(tx),
            };
            let cancel = CancellationToken::new();
            let handle = self.node.tasks.spawn(task::run(
                library,
                tracks_from_wire(&sdp, &run.tracks),
                params,
                Sink::Udp(h.outs.clone()),
                h.info.clone(),
                cancel.clone(),
            ));
            h.running = Some((cancel, handle));
        }
        // Answer once the first frame is out (at most one frame interval away): the
        // steering node reports the handoff gap from it.
        MigrationReply::Started {
            first_sent_us: super::first_sent(rx).await,
        }
    }

    pub async fn stop(&self, session: &str) -> Reply {
        let running = {
            let mut g = self.sessions();
            let Some(h) = g.get_mut(session) else {
                return failed(format!("session {session} is not hosted here"));
            };
            h.touched = Instant::now();
            h.running.take()
        };
        let Some((cancel, handle)) = running else {
            return MigrationReply::Stopped(None);
        };
        cancel.cancel();
        match handle.await {
            Ok(stopped) => MigrationReply::Stopped(Some(stopped_to_wire(&stopped))),
            Err(e) => failed(format!("sender task: {e}")),
        }
    }

    /// The heartbeat of a steering node: renews the lease of each session it names.
    pub fn status(&self, sessions: &[String]) -> Reply {
        let mut g = self.sessions();
        let list = sessions
            .iter()
            .map(|id| {
                let Some(h) = g.get_mut(id) else {
                    if let Some(st) = self.live_status(id) {
                        return st;
                    }
                    return SessionStatus {
                        session: id.clone(),
                        hosted: false,
                        running: false,
                        ended: false,
                        progress: None,
                        live: None,
                    };
                };
                h.touched = Instant::now();
                let ended = h.running.as_ref().is_some_and(|(_, j)| j.is_finished());
                let progress = h
                    .progress
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_ref()
                    .map(|p| WireStopped {
                        tracks: p.tracks.clone(),
                        resume: Some(cursor_to_wire(&p.cursor)),
                        anchor: p.anchor,
                        last_sent_us: None,
                    });
                SessionStatus {
                    session: id.clone(),
                    hosted: true,
                    running: h.running.is_some() && !ended,
                    ended,
                    progress,
                    live: None,
                }
            })
            .collect();
        MigrationReply::Status(list)
    }

    /// Forget a session: stop its sender (no BYE: the session goes on elsewhere).
    pub fn release(&self, session: &str) -> Reply {
        let removed = self.sessions().remove(session);
        let Some(h) = removed else {
            self.release_live(session);
            return MigrationReply::Done;
        };
        if let Some((cancel, _)) = &h.running {
            cancel.cancel();
        }
        self.node.unregister_session(&h.info.id);
        info!(session, "migration: released");
        MigrationReply::Done
    }

    /// Drop the sessions whose steering node has been silent longer than the lease.
    fn expire(&self) {
        let mut expired: Vec<String> = self
            .sessions()
            .iter()
            .filter(|(_, h)| h.touched.elapsed() > self.lease)
            .map(|(id, _)| id.clone())
            .collect();
        expired.extend(
            self.lives()
                .iter()
                .filter(|(_, h)| h.touched.elapsed() > self.lease)
                .map(|(id, _)| id.clone()),
        );
        for id in expired {
            warn!(session = %id, lease = ?self.lease, "migration: steering node silent past the lease, stopping");
            self.release(&id);
        }
    }

    pub fn hosted(&self) -> usize {
        self.sessions().len() + self.lives().len()
    }
}

async fn reap(host: std::sync::Weak<Host>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match host.upgrade() {
            Some(h) => h.expire(),
            None => return,
        }
    }
}
