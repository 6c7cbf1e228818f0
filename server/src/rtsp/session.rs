//! A server-side RTSP session as the shell holds it: the sans-IO core (`Core`: state,
//! transports, keepalive, the playback window and hand-back) beside what the core cannot
//! hold — the UDP sockets, the media task, the live path and the session's entry in the
//! node's registry.

use super::udp_session::{TrackPorts, UdpPlay, UdpRecord};
use crate::ingest::Producer;
use crate::live::reader::OutPacket;
use crate::live::reader::Reader;
use crate::live_sender::LivePump;
use crate::node::{Node, PathEntry, SessionInfo};
use crate::playback::sender::Playback;
use crate::steering::{LiveViewer, Steered, SteeredMedia};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;
use vigil_proto::rtsp::{SessionKind, SessionState};

/// The session core: the RFC 2326 rules, transports, keepalive and the playback
/// presentation (`vigil_session`), with the recording cursor as its resume position.
pub type Core = crate::playback::SessionCore;

/// Where the session's media is moved.
pub enum Media {
    None,
    /// Pumped by the connection task itself (RTSPS; on plain TCP until the PLAY answer is
    /// out and again for the BYE as the connection closes).
    TcpPlay(Reader),
    /// Sent by its stream's group over the connection's socket (plain TCP).
    TcpGroup(LivePump),
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

    /// When the client was last heard from (a request, or RTCP seen by a media task).
    pub fn last(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

pub struct Session {
    pub info: Arc<SessionInfo>,
    pub core: Core,
    /// The live path; None for playback sessions.
    pub path: Option<Arc<PathEntry>>,
    /// Playback of a recording (`playback/<camera>?start=…`): its sender.
    pub playback: Option<Playback>,
    /// By track: the UDP server ports of SETUP (a pair of its own, or the node's shared
    /// one), taken by the media task on PLAY/RECORD.
    pub pairs: Vec<Option<TrackPorts>>,
    /// By track: its SRTP, when the viewer set up `RTP/SAVP` on RTSPS.
    pub srtp: Vec<Option<Arc<crate::net::srtp::Track>>>,
    /// Shared with media tasks that see the client's RTCP; folded into the core's
    /// keepalive on each check.
    pub activity: Arc<Activity>,
    pub media: Media,
    /// TCP publishers: the producer fed from interleaved frames.
    pub producer: Option<Producer>,
}

impl Session {
    pub fn kind(&self) -> SessionKind {
        self.core.kind()
    }

    pub fn state(&self) -> SessionState {
        self.core.state()
    }

    /// The client was heard from now.
    pub fn touch(&mut self) {
        self.activity.touch();
        self.core.touch(Instant::now());
    }

    /// The keepalive ran out: no request and no RTCP (seen by a media task) for the timeout.
    pub fn expired(&mut self, now: Instant) -> bool {
        self.core.touch(self.activity.last());
        self.core.expired(now)
    }

    pub fn tcp_reader(&self) -> Option<&Reader> {
        match (&self.media, self.state()) {
            (Media::TcpPlay(r), SessionState::Playing) => Some(r),
            _ => None,
        }
    }

    pub fn tcp_reader_mut(&mut self) -> Option<&mut Reader> {
        match (&mut self.media, self.core.state()) {
            (Media::TcpPlay(r), SessionState::Playing) => Some(r),
            _ => None,
        }
    }

    /// The packets as this session's viewer takes them: SRTP-protected on the tracks it
    /// set up as `RTP/SAVP`, as they are on the others.
    pub fn protect<'a>(&self, packets: &'a [OutPacket]) -> Cow<'a, [OutPacket]> {
        if self.srtp.iter().all(Option::is_none) {
            return Cow::Borrowed(packets);
        }
        Cow::Owned(
            packets
                .iter()
                .filter_map(|p| match self.srtp_of(p.track) {
                    Some(t) => t.protect_one(p),
                    None => Some(p.clone()),
                })
                .collect(),
        )
    }

    /// One RTCP packet of ours for `track`, as SRTCP where the track is SRTP.
    pub fn protect_rtcp(&self, track: usize, packet: Vec<u8>) -> Option<Vec<u8>> {
        match self.srtp_of(track) {
            Some(t) => t.protect_rtcp(&packet),
            None => Some(packet),
        }
    }

    /// The client's RTCP on `track`, checked and decrypted where the track is SRTP.
    pub fn unprotect_rtcp(&self, track: usize, packet: &[u8]) -> Option<Vec<u8>> {
        match self.srtp_of(track) {
            Some(t) => t.unprotect_rtcp(packet),
            None => Some(packet.to_vec()),
        }
    }

    fn srtp_of(&self, track: usize) -> Option<&crate::net::srtp::Track> {
        self.srtp.get(track).and_then(|t| t.as_deref())
    }

    /// The track and whether it is the RTP (true) or RTCP channel.
    pub fn track_of_channel(&self, channel: u8) -> Option<(usize, bool)> {
        self.core.track_of_channel(channel)
    }

    pub fn rtp_channels(&self) -> Vec<Option<u8>> {
        self.core.rtp_channels()
    }

    pub fn rtcp_channel(&self, track: usize) -> Option<u8> {
        self.core.rtcp_channel(track)
    }

    pub fn is_tcp(&self) -> bool {
        self.core.is_tcp()
    }

    /// The UDP tracks' sockets and client addresses, for a media task starting now (each
    /// pair is taken once: later PLAYs find the task's copy).
    pub fn take_udp_tracks(&mut self) -> Vec<super::udp_session::UdpTrack> {
        let transports = self.core.transports();
        let setups = self.core.setups();
        self.pairs
            .iter_mut()
            .enumerate()
            .filter_map(|(i, pair)| match transports.get(i).copied().flatten() {
                Some(vigil_session::Transport::Udp {
                    client_rtp,
                    client_rtcp,
                    ..
                }) => pair.take().map(|pair| super::udp_session::UdpTrack {
                    track: i,
                    pair,
                    client_rtp,
                    client_rtcp,
                    ssrc: setups.get(i).and_then(|s| s.as_ref()).map(|s| s.ssrc),
                    srtp: self.srtp.get(i).cloned().flatten(),
                }),
                _ => None,
            })
            .collect()
    }

    /// Stops a playback's sender (here or on the node it moved to) and hands its state
    /// back to the core; where the pacing line was, for a sender that continues it.
    pub async fn stop_sender(&mut self) -> crate::playback::sender::Handoff {
        let Some(pb) = self.playback.as_mut() else {
            return Default::default();
        };
        let (handback, handoff) = pb.stop().await;
        if let Some(hb) = handback {
            self.core.sender_stopped(hb);
        }
        handoff
    }

    /// The session as the code that moves its media sees it (`steering`).
    pub fn steered(&mut self) -> Steered<'_> {
        let kind = self.kind();
        let media = if self.srtp.iter().any(Option::is_some) {
            // Its keys were handed out on this node's RTSPS connection; a sender elsewhere
            // would need them moved, which no handoff carries (a node's keys stay its own).
            SteeredMedia::Unmovable("an SRTP session's keys stay on the node that made them")
        } else if self.is_tcp() {
            SteeredMedia::Interleaved
        } else if let Some(playback) = self.playback.as_mut() {
            SteeredMedia::Playback {
                core: &mut self.core,
                playback,
            }
        } else if kind != SessionKind::Play {
            SteeredMedia::Unmovable("a publisher cannot move: its RTP comes to this node")
        } else {
            match (&self.path, &mut self.media) {
                (None, _) => SteeredMedia::Unmovable("not a live viewer"),
                (Some(path), Media::UdpPlay(play)) => SteeredMedia::Live(LiveViewer {
                    path,
                    sender: &mut play.sender,
                    outs: &play.outs,
                    paused: play.paused,
                }),
                (Some(_), _) => SteeredMedia::Unmovable("the viewer is not playing over UDP"),
            }
        };
        Steered {
            info: &self.info,
            media,
        }
    }

    /// Release everything the session holds. UDP media tasks send their RTCP BYE as they stop.
    pub fn end(mut self, node: &Node) {
        // A publisher that was taken over (`publisher_conflict = "takeover"`) must not end
        // the stream: its successor feeds the same readers once it sends RECORD.
        let taken_over = self.kind() == SessionKind::Record
            && self.path.as_ref().is_some_and(|path| {
                path.publisher()
                    .as_ref()
                    .is_some_and(|p| p.session_id != self.info.id)
            });
        match std::mem::replace(&mut self.media, Media::None) {
            Media::UdpPlay(p) => p.stop(),
            Media::UdpRecord(r) => r.stop(!taken_over),
            // A TEARDOWN's end: no BYE, as over RTSPS (the connection's close sends one).
            Media::TcpGroup(p) => p.discard(),
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
        if let (SessionKind::Record, Some(path)) = (self.kind(), &self.path) {
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
