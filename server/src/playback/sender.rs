//! The handle a playback session keeps on the node sending its media after a move. The
//! session (`rtsp::playback_session::Playback`) stops, restarts and releases it without
//! knowing how the other node is reached; migration implements it (`migrate::steer`), so
//! the RTSP code and the migration code need not name each other.

use crate::node::command::MoveError;
use crate::playback::task::{Cursor, PlayParams, TrackOut};
use futures::future::BoxFuture;
use std::any::Any;
use vigil_proto::sdp::SessionDescription;

/// A stopped sender's state, resolved against this node's index.
pub struct Resumed {
    pub tracks: Vec<TrackOut>,
    pub resume: Option<Cursor>,
    pub anchor: Option<crate::handoff::Anchor>,
    pub last_sent_us: Option<i64>,
}

/// The node sending a playback session's media, seen from the node that steers it.
pub trait RemoteSender: Send + Sync {
    /// The sending node's id.
    fn node(&self) -> &str;
    /// A sender runs there now (false while paused).
    fn running(&self) -> bool;
    /// Stop the sender there and get its exact state back (None: nothing ran).
    fn stop<'a>(
        &'a mut self,
        sdp: &'a SessionDescription,
        camera: &'a str,
    ) -> BoxFuture<'a, Result<Option<Resumed>, MoveError>>;
    /// The state of the sending node's last heartbeat (the node is gone).
    fn last_state<'a>(
        &'a self,
        sdp: &'a SessionDescription,
        camera: &'a str,
    ) -> BoxFuture<'a, Option<Resumed>>;
    /// Start the sender there; its first frame's wall time (µs) once it went out.
    fn start<'a>(
        &'a mut self,
        tracks: &'a [TrackOut],
        params: &'a PlayParams,
    ) -> BoxFuture<'a, Result<Option<i64>, MoveError>>;
    /// Forget the session there (in the background: the session goes on without it).
    fn release(self: Box<Self>);
    /// The implementation's own handle, for the module that made it (its heartbeat reads
    /// fields the session has no business with).
    fn as_any(&self) -> &dyn Any;
}
