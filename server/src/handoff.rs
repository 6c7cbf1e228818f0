//! The migration calls between nodes (carried by the cluster RPC: QUIC, mutual TLS): the
//! messages alone, below both the cluster that carries them and `migrate`, which serves and
//! makes them, so neither of the two names the other's inside.
//!
//! The steering node (A) keeps the viewer's RTSP connection; the sending node (B) runs the
//! media. `Prepare` makes B ready (sockets, the segment in its cache), `Start` hands B the
//! exact state (RTP identity per track, next frame, pacing anchor), `Stop` takes it back,
//! `Status` is A's heartbeat and B's lease, `Release` forgets the session on B.

use crate::node::command::{MoveReport, SourceMode};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use vigil_proto::rtp::RtpIdentity;

/// Pacing anchor: the frame of decode time `media_ms` is due at wall-clock `wall_us`
/// (µs since the Unix epoch). Wall clock, not `Instant`, because a migrated session keeps
/// its pacing on another node (nodes keep their clocks in sync with NTP).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Anchor {
    pub wall_us: i64,
    pub media_ms: i64,
}

/// One set-up track's destination at the client, and the steering node's server ports
/// (the source the client saw at SETUP).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireDest {
    pub track: usize,
    pub rtp: SocketAddr,
    pub rtcp: SocketAddr,
    pub src_rtp: SocketAddr,
    pub src_rtcp: SocketAddr,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrepareSpec {
    /// The session id (the same on both nodes).
    pub session: String,
    /// The steering node.
    pub from: String,
    pub camera: String,
    pub start_ms: i64,
    pub end_ms: Option<i64>,
    pub client: SocketAddr,
    pub dests: Vec<WireDest>,
    pub mode: SourceMode,
    pub cname: String,
    /// Where playback is now: the segment B loads into its cache before it says ready.
    pub position_ms: i64,
    /// A live viewer of `live/<camera>` (B holds the camera or relays it from its holder)
    /// rather than a playback.
    #[serde(default)]
    pub live: bool,
}

/// The next frame: the segment (by its start, unique per camera) and the frame in it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WireCursor {
    pub segment_start_ms: i64,
    pub frame: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireTrack {
    pub identity: RtpIdentity,
    /// The sender's own input sequence counter.
    pub seq: u16,
    pub enabled: bool,
}

/// What B needs to continue exactly where the previous sender stopped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireRun {
    pub tracks: Vec<WireTrack>,
    pub cursor: WireCursor,
    pub anchor: Option<Anchor>,
    pub scale: f64,
    pub keyframes_only: bool,
    pub end_ms: Option<i64>,
    /// `end_ms` is a PLAY Range's end: the session stays when it is reached.
    #[serde(default)]
    pub range_end_only: bool,
}

/// A stopped sender's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireStopped {
    pub tracks: Vec<WireTrack>,
    pub resume: Option<WireCursor>,
    pub anchor: Option<Anchor>,
    pub last_sent_us: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MigrationCall {
    Prepare(PrepareSpec),
    Start {
        session: String,
        run: WireRun,
    },
    Stop {
        session: String,
    },
    /// A live viewer: continue it from this state (`crate::live::handoff`).
    StartLive {
        session: String,
        handoff: crate::live::handoff::LiveHandoff,
    },
    /// A live viewer: stop sending it and give its state back.
    StopLive {
        session: String,
    },
    /// A live viewer sent here: its client paused (true) or resumed (false).
    PauseLive {
        session: String,
        paused: bool,
    },
    /// The steering node's heartbeat: every session it steered to this node, in one call.
    Status {
        sessions: Vec<String>,
    },
    Release {
        session: String,
    },
    /// To the node holding a session's RTSP connection: move its media to `to`.
    MoveOut {
        session: String,
        to: String,
        mode: Option<SourceMode>,
    },
    /// To a node: stop taking placements and move every movable session off.
    Drain {
        undrain: bool,
    },
    /// To a node: how its drain is going.
    DrainStatus,
}

/// A hosted session's state, as the heartbeat answers it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionStatus {
    pub session: String,
    /// False: this node does not host it (any more: its lease ran out).
    pub hosted: bool,
    pub running: bool,
    /// The run ended by itself (end of recording or range): the session is over.
    pub ended: bool,
    pub progress: Option<WireStopped>,
    /// A live viewer's state as last reported by its sender: where a take-back continues.
    #[serde(default)]
    pub live: Option<crate::live::handoff::LiveHandoff>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MigrationReply {
    Ready,
    Started {
        first_sent_us: Option<i64>,
    },
    Stopped(Option<WireStopped>),
    StoppedLive(crate::live::handoff::LiveHandoff),
    /// One entry per session asked about, in the order asked.
    Status(Vec<SessionStatus>),
    Done,
    Moved(MoveReport),
    Drain(DrainStatus),
    Failed(String),
}

/// A drain's progress, as the drained node answers `DrainStatus` (and the API and `ctl`
/// show it).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DrainStatus {
    pub node: String,
    pub draining: bool,
    /// Every session was tried.
    pub done: bool,
    pub total: u32,
    pub moved: u32,
    /// Sessions that could not move, with why.
    pub failed: Vec<(String, String)>,
}
