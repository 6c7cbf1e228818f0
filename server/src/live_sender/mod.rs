//! A live viewer's sender, whichever node runs it: this node's pump (`LivePump`: hub → the
//! viewer's RTP identity → UDP or its RTSP connection, RTCP SR/BYE, its reader given back
//! when stopped for a handoff) or, for a UDP viewer, the node the viewer moved to
//! (`RemoteLiveSender`, implemented by migration).
//! Above the node (the pump reads `Node` and `SessionInfo`), below both `rtsp`, whose
//! viewers hold a `LiveSender`, and `migrate`, which moves it and runs a moved viewer's pump
//! (`migrate::host::live`): neither names the other for it. The pumps of one stream's
//! viewers are one task (`group`), TCP and UDP viewers alike.

mod group;
mod slot;

use crate::live::handoff::LiveHandoff;
use crate::live::reader::Reader;
use crate::net::tcp_sink::TcpSink;
use crate::node::command::MoveError;
use crate::node::{Node, SessionInfo};
use crate::playback::task::UdpOut;
use futures::future::BoxFuture;
use group::{Cmd, Groups};
use slot::{Shared, Slot};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Who sends a live UDP viewer's media: this node's pump or the node the viewer moved to.
pub type LiveSender = crate::sender::Sender<LivePump, Box<dyn RemoteLiveSender>>;

/// The node sending a live viewer's media, seen from the node that steers it.
pub trait RemoteLiveSender: Send + Sync {
    /// The sending node's id.
    fn node(&self) -> &str;
    /// PAUSE (or the PLAY that resumes) of the viewer, carried to the sending node in the
    /// background: the RTSP answer does not wait on another node.
    fn set_paused(&self, paused: bool);
    /// Stop the viewer there after its last packet and get its state back (what a sender
    /// that continues it needs). On an error the sender there goes on.
    fn stop(&self) -> BoxFuture<'_, Result<LiveHandoff, MoveError>>;
    /// The viewer's state as the sending node last reported it (its heartbeat answer), and
    /// when that report came; taken once (the node is gone, the viewer comes home).
    fn take_last(&self) -> Option<(LiveHandoff, Instant)>;
    /// Forget the viewer there (in the background).
    fn release(self: Box<Self>);
}

/// What a stopped pump leaves: the viewer's reader (where it is in the hub, its RTP
/// identity) and when its last packet left (µs since the epoch).
pub struct Pumped {
    pub reader: Reader,
    pub last_sent_us: Option<i64>,
    /// The group had ended the viewer on its own (the publisher ended, the node shuts
    /// down), its RTCP BYE sent.
    pub ended: bool,
}

/// Where a viewer's packets go.
pub(crate) enum Outs {
    /// A UDP viewer: a socket pair and the client's ports per track.
    Udp(Vec<UdpOut>),
    /// A viewer playing over its RTSP connection (interleaved).
    Tcp(TcpOut),
}

/// A TCP viewer's side of its connection: the socket its connection task shares (answers,
/// RTCP, playback), and the interleaved channels of each track.
pub struct TcpOut {
    pub sink: Arc<TcpSink>,
    /// By track: the channel of its RTP.
    pub rtp: Vec<Option<u8>>,
    /// By track: the channel of its RTCP.
    pub rtcp: Vec<Option<u8>>,
}

/// A live viewer's pump: hub → the viewer's identity → UDP, sent by its stream's group
/// (`group`: one task for every UDP viewer of a stream on this node). Dropped without
/// `end` or `stop`, the viewer ends as with `end`.
pub struct LivePump {
    id: u64,
    tx: mpsc::UnboundedSender<Cmd>,
    shared: Arc<Shared>,
    /// Neither `end` nor `stop` was called.
    open: bool,
}

impl LivePump {
    /// `first_sent` learns when the first packet left (µs since the epoch); `progress`, if
    /// given, gets the viewer's state every period (a moved viewer's sender reports it to
    /// the steering node, which continues from it if this node dies).
    pub fn spawn(
        node: Arc<Node>,
        info: Arc<SessionInfo>,
        reader: Reader,
        outs: Vec<UdpOut>,
        first_sent: Option<tokio::sync::oneshot::Sender<i64>>,
        progress: Option<Progress>,
    ) -> LivePump {
        LivePump::start(node, info, reader, Outs::Udp(outs), first_sent, progress)
    }

    /// A live viewer playing over its plain RTSP connection: the group writes to the
    /// connection's socket beside the connection task (`net::tcp_sink`), never waiting on
    /// it: a viewer whose socket has not taken the last batch is skipped until it has.
    pub fn spawn_tcp(node: Arc<Node>, info: Arc<SessionInfo>, reader: Reader, out: TcpOut) -> Self {
        LivePump::start(node, info, reader, Outs::Tcp(out), None, None)
    }

    fn start(
        node: Arc<Node>,
        info: Arc<SessionInfo>,
        reader: Reader,
        outs: Outs,
        first_sent: Option<tokio::sync::oneshot::Sender<i64>>,
        progress: Option<Progress>,
    ) -> LivePump {
        let groups = node.extensions.get_or_init(|| Arc::new(Groups::default()));
        let id = groups.next_id();
        let shared = Arc::new(Shared::default());
        let slot = Slot::new(id, info, reader, outs, first_sent, progress, shared.clone());
        let tx = groups.add(&node, slot);
        LivePump {
            id,
            tx,
            shared,
            open: true,
        }
    }

    pub fn set_paused(&self, paused: bool) {
        let _ = self.tx.send(Cmd::Pause(self.id, paused));
    }

    /// Stop for good (RTCP BYE).
    pub fn end(mut self) {
        self.open = false;
        let _ = self.tx.send(Cmd::End(self.id));
    }

    /// Stop without a BYE (the stream goes on from another sender) and give the state back.
    pub async fn stop(mut self) -> Option<Pumped> {
        self.open = false;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = self.tx.send(Cmd::Stop(self.id, tx));
        match rx.await {
            Ok(p) => Some(p),
            // The viewer had ended on its own (the publisher ended, the node shuts down).
            Err(_) => self.shared.left().take(),
        }
    }

    /// Stop without a BYE and without waiting (the session is over: a TEARDOWN).
    pub fn discard(mut self) {
        self.open = false;
        let (tx, _) = tokio::sync::oneshot::channel();
        let _ = self.tx.send(Cmd::Stop(self.id, tx));
    }

    pub fn is_finished(&self) -> bool {
        self.shared.finished.load(Ordering::Acquire)
    }
}

impl Drop for LivePump {
    fn drop(&mut self) {
        if self.open {
            let _ = self.tx.send(Cmd::End(self.id));
        }
    }
}

/// Where a pump publishes its viewer's state, and how often: the digests of the last
/// packets cost a few µs, so not per batch.
pub struct Progress {
    pub state: Arc<Mutex<Option<LiveHandoff>>>,
    pub every: Duration,
}

#[cfg(test)]
mod tests;
