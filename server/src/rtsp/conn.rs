//! One RTSP connection: the I/O loop around the sans-IO parser and the method handlers.
//!
//! The connection task reads requests and interleaved data, answers them, and — for a
//! viewer playing over TCP — also pumps its media, so control and media share one writer
//! and a PLAY answer always precedes the first packet. UDP sessions hand media to a task of
//! their own (see `udp_session`).

use super::session::Session;
use super::tcp_media::PUMP_BATCH;
pub(super) use super::to_ingest::{ConnRead, IngestMove};
use crate::cluster::Cluster;
use crate::live::reader::OutPacket;
use crate::net::tcp::InterleavedWriter;
use crate::net::tcp_sink::TcpSink;
use crate::net::tls::Acceptor;
use crate::node::Node;
use crate::steering::CommandHandler;
use bytes::{Buf, BytesMut};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, info_span, Instrument};
use vigil_proto::rtcp;
use vigil_proto::rtsp::{parse_frame, Frame, Limits, Response};

/// Accept RTSP connections until shutdown. `cluster`: the node's cluster shell when
/// `[cluster] enabled` (placement, migration, relays), handed to every connection. `tls`:
/// RTSPS on this listener (`[rtsp] tls_listen`): each connection's handshake comes first,
/// in its own task, after the address's handshake budget admitted it.
pub async fn serve(
    node: Arc<Node>,
    cluster: Option<Arc<Cluster>>,
    listener: TcpListener,
    tls: Option<Acceptor>,
) {
    while let Some((stream, peer)) = crate::net::tcp::accept(&listener, &node.shutdown).await {
        Node::bump(&node.counters.rtsp_connections);
        let (l, s) = (&node.config.limits, &node.limit_stats);
        let Some(slot) = node.connections.admit(
            peer,
            l.max_connections,
            l.max_connections_per_address,
            [&s.connections, &s.connections_per_address],
        ) else {
            continue;
        };
        if let Some(Err(e)) = tls.as_ref().map(|t| t.admit(peer, &node.limit_stats)) {
            debug!(%peer, "RTSPS connection refused: {e}");
            continue;
        }
        let (node, cluster, tls) = (node.clone(), cluster.clone(), tls.clone());
        let span = info_span!("rtsp", %peer);
        node.tasks.clone().spawn(
            async move {
                let stream = match tls {
                    None => Accepted::Plain(stream),
                    Some(tls) => match tls.handshake(stream).await {
                        Ok(s) => Accepted::Tls(Box::new(s)),
                        Err(e) => {
                            debug!("RTSPS: {e}");
                            return;
                        }
                    },
                };
                if let Err(e) = connection(node, cluster, stream, peer, slot).await {
                    debug!("connection ended: {e}");
                }
            }
            .instrument(span),
        );
    }
}

/// An accepted connection's byte stream: plain TCP, or TLS over it (RTSPS).
pub enum Accepted {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Accepted {
    fn tcp(&self) -> &TcpStream {
        match self {
            Accepted::Plain(s) => s,
            Accepted::Tls(s) => s.get_ref().0,
        }
    }

    /// The read and write halves, each boxed so one connection type serves both; on plain
    /// TCP the write half is a sink its stream's live sender writes to as well.
    fn split(self) -> (ConnRead, ConnWrite, Option<Arc<TcpSink>>) {
        match self {
            Accepted::Plain(s) => {
                let (r, w) = s.into_split();
                let sink = TcpSink::new(w);
                (ConnRead::Plain(r), Box::new(sink.writer()), Some(sink))
            }
            Accepted::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (ConnRead::Tls(r), Box::new(w), None)
            }
        }
    }
}

pub type ConnWrite = Box<dyn AsyncWrite + Send + Sync + Unpin>;

/// Per-connection state shared with the method handlers.
pub struct Conn {
    pub node: Arc<Node>,
    /// The cluster shell, when `[cluster] enabled`: given at accept by `serve` (the node
    /// does not hold it, being below the cluster).
    pub cluster: Option<Arc<Cluster>>,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Every write to the peer, control and media, fails with `TimedOut` once the socket has
    /// taken no byte for the slow-reader timeout (`[live] slow_reader_timeout_ms`). The
    /// bound is on progress, not on a whole write: a viewer on a slow link that drains a
    /// 100 KiB batch over seconds is reading, and is skipped to keyframes, not dropped.
    pub writer: Writer,
    pub session: Option<Session>,
    pub announced: Option<super::handler::Announced>,
    /// What this connection has proven (login, rights granted by a redirect marker).
    pub auth: crate::auth::ConnAuth,
    /// The current request carries a valid placement marker: serve it here, do not place.
    pub placed: bool,
    /// RTSPS: the connection is TLS, so a description may carry SRTP keys.
    pub tls: bool,
    /// The SRTP keys the last DESCRIBE on this connection gave its tracks (RTSPS only).
    pub srtp_offer: Option<crate::net::srtp::Offer>,
    pub(super) tcp: InterleavedWriter,
    /// Plain TCP: the socket under `writer`, shared with the live sender of a viewer
    /// playing here (`live_sender`), whose writes never wait: what the socket has not
    /// taken is drained by this task. None on RTSPS, whose viewers this task pumps itself.
    pub(super) sink: Option<Arc<TcpSink>>,
    pub(super) out: Vec<OutPacket>,
    pub(super) last_sr: Instant,
    /// A write timed out: the peer reads nothing, so nothing more is written.
    pub(super) stalled: bool,
    /// Commands to the session from outside the connection (migration).
    pub commands: Option<tokio::sync::mpsc::Receiver<crate::node::command::SessionCommand>>,
    /// Requests and interleaved frames parsed so far (progress, for the request deadline).
    frames: u64,
    /// Requests allowed on this connection (`limits.requests_per_sec`).
    pub(super) requests: crate::limits::TokenBucket,
    /// A publisher's RECORD started its media over this connection: the loop hands it to
    /// the ingest runtime after the answer ([`Conn::detach`]). Set once per connection.
    pub(super) to_ingest: IngestMove,
}

/// What ended a turn of the connection's loop.
pub(super) enum Exit {
    Closed,
    /// Hand the connection to the ingest runtime.
    ToIngest,
}

/// The connection loop's own state, kept when the connection moves runtime.
pub(super) struct LoopState {
    deadline: Duration,
    opened: Instant,
    /// Since when `buf` has held part of a frame without any frame completing (slowloris).
    partial_since: Option<Instant>,
    limits: Limits,
    buf: BytesMut,
    last_input: Instant,
}

pub(super) enum Event {
    Shutdown,
    SessionCancelled,
    Read(std::io::Result<usize>),
    Media,
    Playback(Option<crate::playback::task::TcpOut>),
    Command(Option<crate::node::command::SessionCommand>),
    /// Bytes wait in the sink: drain them (bounded by the slow-reader timeout).
    Flush,
    Tick,
}

const TCP_SEND_BUFFER: usize = 256 * 1024;

/// The connection's write half behind its progress timeout (see [`Conn::writer`]).
pub type Writer = crate::net::stall::StallWriter<ConnWrite>;

async fn connection<S: Send + 'static>(
    node: Arc<Node>,
    cluster: Option<Arc<Cluster>>,
    stream: Accepted,
    peer: SocketAddr,
    slot: S,
) -> std::io::Result<()> {
    let tcp = stream.tcp();
    tcp.set_nodelay(true)?;
    // Without a cap Linux lets a viewer's send buffer grow to tcp_wmem's maximum (4 MB), so
    // a stalled viewer would be noticed only after seconds of buffered video and would pin
    // that much kernel memory. 256 KiB (the kernel doubles it) holds a GOP of a 2 Mb/s stream.
    let _ = socket2::SockRef::from(tcp).set_send_buffer_size(TCP_SEND_BUFFER);
    let local = tcp.local_addr()?;
    let fd = tcp.as_raw_fd();
    let tls = matches!(stream, Accepted::Tls(_));
    let (mut rd, writer, sink) = stream.split();
    let writer = Writer::over(
        writer,
        fd,
        Duration::from_millis(node.config.live.slow_reader_timeout_ms),
    );
    let mut conn = Conn {
        node: node.clone(),
        cluster,
        peer,
        local,
        writer,
        session: None,
        announced: None,
        auth: node.auth.connection(peer),
        placed: false,
        tls,
        srtp_offer: None,
        tcp: InterleavedWriter::default(),
        sink,
        out: Vec::with_capacity(PUMP_BATCH),
        last_sr: Instant::now(),
        stalled: false,
        commands: None,
        frames: 0,
        to_ingest: IngestMove::No,
        requests: {
            let per_sec = node.config.limits.requests_per_sec;
            let burst = (per_sec * 2.0).clamp(1.0, f64::from(u32::MAX)) as u32;
            crate::limits::TokenBucket::new(per_sec, burst, Instant::now())
        },
    };
    let mut st = LoopState {
        deadline: Duration::from_millis(node.config.limits.request_deadline_ms),
        opened: Instant::now(),
        partial_since: None,
        limits: Limits::default(),
        buf: BytesMut::with_capacity(4096),
        last_input: Instant::now(),
    };
    let result = loop {
        match run(&mut conn, &mut rd, &mut st).await {
            Ok(Exit::ToIngest) => match conn.detach(rd) {
                Ok(socket) => {
                    super::to_ingest::go_on(conn, socket, st, slot);
                    return Ok(());
                }
                Err(Some(back)) => rd = back,
                Err(None) => break Ok(()),
            },
            Ok(Exit::Closed) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    conn.close().await;
    result
}

/// The connection's loop: requests, interleaved media, the session's events, until the
/// connection ends or moves.
pub(super) async fn run(
    conn: &mut Conn,
    rd: &mut ConnRead,
    st: &mut LoopState,
) -> std::io::Result<Exit> {
    let node = conn.node.clone();
    let LoopState {
        deadline,
        opened,
        partial_since,
        limits,
        buf,
        last_input,
    } = st;
    let (deadline, opened, limits) = (*deadline, *opened, &*limits);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut commands = conn.commands.take();
        let event = {
            let command = async {
                match commands.as_mut() {
                    Some(rx) => Event::Command(rx.recv().await),
                    None => std::future::pending().await,
                }
            };
            let cancel = conn.session.as_ref().map(|s| s.info.cancel.clone());
            let cancelled = async move {
                match cancel {
                    Some(c) => c.cancelled_owned().await,
                    None => std::future::pending().await,
                }
            };
            let sink = conn.sink.clone();
            let media = conn.next_media();
            let queued = async move {
                match sink {
                    Some(sink) => sink.queued().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = node.shutdown.cancelled() => Event::Shutdown,
                _ = cancelled => Event::SessionCancelled,
                r = rd.read_buf(buf) => Event::Read(r),
                m = media => m,
                c = command => c,
                _ = queued => Event::Flush,
                _ = tick.tick() => Event::Tick,
            }
        };
        if conn.commands.is_none() {
            conn.commands = commands;
        }
        match event {
            Event::Command(None) => conn.commands = None,
            Event::Command(Some(cmd)) => {
                let handler = node.extensions.get::<CommandHandler>();
                if let (Some(session), Some(handler)) = (conn.session.as_mut(), handler) {
                    (handler.0)(&node, conn.cluster.as_ref(), session.steered(), cmd).await;
                }
            }
            Event::Shutdown => break Ok(Exit::Closed),
            Event::SessionCancelled => {
                // Deliver what a finished playback queued (its last frames and BYE) first.
                let _ = conn.drain_playback().await;
                break Ok(Exit::Closed);
            }
            Event::Playback(Some(out)) => {
                if let Err(e) = conn.write_playback(out).await {
                    break Err(e);
                }
            }
            Event::Playback(None) => {
                if let Some(pb) = conn.session.as_mut().and_then(|s| s.playback.as_mut()) {
                    pb.tcp_rx = None;
                }
            }
            Event::Read(Ok(0)) => break Ok(Exit::Closed),
            Event::Read(Err(e)) => break Err(e),
            Event::Read(Ok(_)) => {
                *last_input = Instant::now();
                let before = conn.frames;
                match conn.process_input(buf, limits).await {
                    Ok(true) => {}
                    Ok(false) => break Ok(Exit::Closed),
                    Err(e) => break Err(e),
                }
                *partial_since = match (buf.is_empty(), conn.frames != before) {
                    (true, _) => None,
                    (false, true) => Some(Instant::now()),
                    (false, false) => partial_since.or(Some(Instant::now())),
                };
                if conn.to_ingest == IngestMove::Due {
                    break Ok(Exit::ToIngest);
                }
            }
            Event::Media => {
                if let Err(e) = conn.pump_tcp().await {
                    break Err(e);
                }
            }
            Event::Flush => {
                if let Err(e) = conn.flush_queued().await {
                    break Err(e);
                }
            }
            Event::Tick => {
                // Slowloris: a request trickling in, or a connection that never completes
                // its first one, is dropped after the request deadline.
                let trickling = partial_since.is_some_and(|t| t.elapsed() > deadline);
                if trickling || (conn.frames == 0 && opened.elapsed() > deadline) {
                    crate::limits::LimitStats::bump(&node.limit_stats.request_deadline);
                    debug!("no complete request within {deadline:?}: closed");
                    break Ok(Exit::Closed);
                }
                // A connection that never set up a session (or sent half a frame) gets the
                // session timeout too, so idle sockets cannot pile up.
                let idle = Duration::from_secs(node.config.limits.session_timeout_secs.into());
                if conn.session.is_none() && last_input.elapsed() > idle {
                    debug!("idle connection closed");
                    break Ok(Exit::Closed);
                }
                // An ANNOUNCE that never reached RECORD frees its camera.
                let announce_timeout =
                    Duration::from_millis(node.config.limits.announce_timeout_ms);
                if conn
                    .announced
                    .as_ref()
                    .is_some_and(|a| !a.recorded && a.at.elapsed() > announce_timeout)
                {
                    crate::limits::LimitStats::bump(&node.limit_stats.announce_timeout);
                    debug!("ANNOUNCE without RECORD within {announce_timeout:?}: closed");
                    break Ok(Exit::Closed);
                }
                if conn.session_expired() {
                    Node::bump(&node.counters.sessions_timed_out);
                    info!("session timed out");
                    break Ok(Exit::Closed);
                }
                if let Err(e) = conn.maybe_sender_report().await {
                    break Err(e);
                }
            }
        }
    }
}

impl Conn {
    fn session_expired(&mut self) -> bool {
        let now = Instant::now();
        self.session.as_mut().is_some_and(|s| s.expired(now))
    }

    /// Parse and handle everything complete in `buf`. Ok(false) = close the connection.
    async fn process_input(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> std::io::Result<bool> {
        loop {
            match parse_frame(buf, limits) {
                Ok(None) => return Ok(true),
                Ok(Some((frame, consumed))) => {
                    buf.advance(consumed);
                    self.frames += 1;
                    match frame {
                        Frame::Request(req) => {
                            if let Some(resp) = self.over_request_rate(&req) {
                                self.write_response(&resp).await?;
                                continue;
                            }
                            let (resp, keep) = self.handle(req).await;
                            self.write_response(&resp).await?;
                            self.after_response().await?;
                            if !keep {
                                return Ok(false);
                            }
                        }
                        Frame::Interleaved { channel, payload } => {
                            self.interleaved(channel, payload);
                        }
                        // A client has no business answering us; ignore rather than fail.
                        Frame::Response(_) => {}
                    }
                }
                Err(e) => {
                    Node::bump(&self.node.counters.rtsp_bad_requests);
                    debug!("malformed input: {e}");
                    let mut resp = Response::new(e.status());
                    if let Some(cseq) = e.cseq() {
                        resp = resp.header("CSeq", cseq.to_string());
                    }
                    self.write_response(&resp).await?;
                    match e.resync() {
                        Some(n) if n > 0 && n <= buf.len() => buf.advance(n),
                        _ => return Ok(false),
                    }
                }
            }
        }
    }

    /// Interleaved data from the client: a publisher's media, or any client's RTCP.
    fn interleaved(&mut self, channel: u8, payload: bytes::Bytes) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        session.touch();
        let Some((track, is_rtp)) = session.track_of_channel(channel) else {
            return;
        };
        if !is_rtp {
            let plain = session.unprotect_rtcp(track, &payload);
            if plain.is_none_or(|p| rtcp::parse_compound(&p).is_err()) {
                Node::bump(&self.node.counters.rtp_garbage);
            }
            return;
        }
        if let Some(producer) = session.producer.as_mut() {
            session
                .info
                .packets
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            session
                .info
                .bytes
                .fetch_add(payload.len() as u64, std::sync::atomic::Ordering::Relaxed);
            if !producer.push_raw(track, payload) {
                Node::bump(&self.node.counters.rtp_garbage);
            }
        }
    }

    /// Write an RTSP response; a peer that takes nothing within the slow-reader timeout is
    /// dropped (it may be sending requests without ever reading the answers).
    async fn write_response(&mut self, resp: &Response) -> std::io::Result<()> {
        let r = self.writer.write_all(&resp.to_bytes()).await;
        if r.as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
        {
            self.stalled = true;
        }
        r
    }

    /// End of the connection: say goodbye to viewers, release the session.
    pub(super) async fn close(&mut self) {
        self.leave_group().await;
        self.goodbye_bounded().await;
        self.end_session();
        self.release_announce();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.writer.shutdown()).await;
    }

    /// Tear the session down (TEARDOWN, timeout, disconnect).
    pub fn end_session(&mut self) {
        self.commands = None;
        if let Some(session) = self.session.take() {
            session.end(&self.node);
        }
    }

    /// Release a publisher reservation made by ANNOUNCE that never reached RECORD.
    pub fn release_announce(&mut self) {
        if let Some(a) = self.announced.take() {
            let mut publisher = a.path.publisher();
            if publisher
                .as_ref()
                .is_some_and(|p| p.session_id == a.session_id)
            {
                *publisher = None;
            }
            drop(publisher);
            self.node.release_path(&a.path.name);
        }
    }

    /// A DESCRIBE answer's SDP: on RTSPS with `[tls] srtp` on, every track `RTP/SAVP` with
    /// a fresh key (kept for the SETUPs that follow), else the plain description.
    pub fn describe_sdp(
        &mut self,
        sdp: &vigil_proto::sdp::SessionDescription,
        base: &str,
        session_id: u64,
        range: &str,
    ) -> String {
        let origin = self.local_ip().to_string();
        if !self.tls || self.node.config.tls.srtp == vigil_conf::SrtpMode::Off {
            return sdp.render(&origin, session_id, range);
        }
        let (offer, key_mgmt) = crate::net::srtp::Offer::new(base.to_string(), sdp.media.len());
        self.srtp_offer = Some(offer);
        sdp.render_srtp(&origin, session_id, range, &key_mgmt)
    }

    pub fn local_ip(&self) -> std::net::IpAddr {
        self.local.ip()
    }
}
