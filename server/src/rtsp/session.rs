//! A server-side RTSP session: its state, its tracks' transports, and its media task.

use super::playback_session::Playback;
use super::udp_session::{UdpPlay, UdpRecord};
use crate::ingest::Producer;
use crate::live::reader::{Reader, TrackSetup};
use crate::net::ports::UdpPair;
use crate::node::{Node, PathEntry, SessionInfo};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;
use vigil_proto::rtsp::{SessionKind, SessionState};

pub enum TrackTransport {
    Tcp {
        rtp_channel: u8,
        rtcp_channel: u8,
    },
    Udp {
        /// Taken by the media task on PLAY/RECORD.
        pair: Option<UdpPair>,
        client_rtp: SocketAddr,
        client_rtcp: SocketAddr,
        server_port: u16,
    },
}

impl TrackTransport {
    /// How `/api/sessions` names the transport: `tcp/<channel>` or `udp/<client port>`.
    pub fn describe(&self) -> String {
        match self {
            TrackTransport::Tcp { rtp_channel, .. } => format!("tcp/{rtp_channel}"),
            TrackTransport::Udp { client_rtp, .. } => format!("udp/{client_rtp}"),
        }
    }
}

/// Where the session's media is moved.
pub enum Media {
    None,
    /// Pumped by the connection task itself.
    TcpPlay(Reader),
    /// A recording is playing (its task and channel live in `Session::playback`).
    Playback,
    UdpPlay(UdpPlay),
    UdpRecord(UdpRecord),
}

/// Last activity (RTSP request or RTCP packet), in ms since `epoch`; shared with media tasks
/// that see the client's RTCP.
#[derive(Debug)]
pub struct Activity {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }

    pub fn touch(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    pub fn idle(&self) -> Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

pub struct Session {
    pub info: Arc<SessionInfo>,
    pub kind: SessionKind,
    pub state: SessionState,
    /// The live path; None for playback sessions.
    pub path: Option<Arc<PathEntry>>,
    /// Playback of a recording (`playback/<camera>?start=…`).
    pub playback: Option<Playback>,
    /// By track index of the stream's SDP; `None` for tracks not set up.
    pub tracks: Vec<Option<TrackTransport>>,
    pub setups: Vec<Option<TrackSetup>>,
    pub activity: Arc<Activity>,
    pub timeout: Duration,
    pub media: Media,
    /// TCP publishers: the producer fed from interleaved frames.
    pub producer: Option<Producer>,
}

impl Session {
    pub fn touch(&self) {
        self.activity.touch();
    }

    pub fn expired(&self) -> bool {
        self.activity.idle() > self.timeout
    }

    pub fn tcp_reader(&self) -> Option<&Reader> {
        match (&self.media, self.state) {
            (Media::TcpPlay(r), SessionState::Playing) => Some(r),
            _ => None,
        }
    }

    pub fn tcp_reader_mut(&mut self) -> Option<&mut Reader> {
        match (&mut self.media, self.state) {
            (Media::TcpPlay(r), SessionState::Playing) => Some(r),
            _ => None,
        }
    }

    /// The track and whether it is the RTP (true) or RTCP channel.
    pub fn track_of_channel(&self, channel: u8) -> Option<(usize, bool)> {
        self.tracks.iter().enumerate().find_map(|(i, t)| match t {
            Some(TrackTransport::Tcp {
                rtp_channel,
                rtcp_channel,
            }) if *rtp_channel == channel || *rtcp_channel == channel => {
                Some((i, *rtp_channel == channel))
            }
            _ => None,
        })
    }

    pub fn rtp_channels(&self) -> Vec<Option<u8>> {
        self.tracks
            .iter()
            .map(|t| match t {
                Some(TrackTransport::Tcp { rtp_channel, .. }) => Some(*rtp_channel),
                _ => None,
            })
            .collect()
    }

    pub fn rtcp_channel(&self, track: usize) -> Option<u8> {
        match self.tracks.get(track)? {
            Some(TrackTransport::Tcp { rtcp_channel, .. }) => Some(*rtcp_channel),
            _ => None,
        }
    }

    pub fn is_tcp(&self) -> bool {
        self.tracks
            .iter()
            .flatten()
            .any(|t| matches!(t, TrackTransport::Tcp { .. }))
    }

    /// Release everything the session holds. UDP media tasks send their RTCP BYE as they stop.
    pub fn end(mut self, node: &Node) {
        // A publisher that was taken over (`publisher_conflict = "takeover"`) must not end
        // the stream: its successor feeds the same readers once it sends RECORD.
        let taken_over = self.kind == SessionKind::Record
            && self.path.as_ref().is_some_and(|path| {
                path.publisher()
                    .as_ref()
                    .is_some_and(|p| p.session_id != self.info.id)
            });
        match std::mem::replace(&mut self.media, Media::None) {
            Media::UdpPlay(p) => p.stop(),
            Media::UdpRecord(r) => r.stop(!taken_over),
            Media::TcpPlay(_) | Media::Playback | Media::None => {}
        }
        if let Some(pb) = self.playback.take() {
            pb.abort();
        }
        *self.info.commands.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if let Some(p) = self.producer.take() {
            if !taken_over {
                p.finish();
            }
        }
        if let (SessionKind::Record, Some(path)) = (self.kind, &self.path) {
            let mut publisher = path.publisher();
            if publisher
                .as_ref()
                .is_some_and(|p| p.session_id == self.info.id)
            {
                *publisher = None;
            }
        }
        node.unregister_session(&self.info.id);
        if let Some(path) = &self.path {
            node.release_path(&path.name);
        }
        info!(
            session = %self.info.id,
            path = %self.info.path,
            bytes = self.info.bytes.load(Ordering::Relaxed),
            secs = self.info.started_at.elapsed().as_secs(),
            "session ended"
        );
    }
}
