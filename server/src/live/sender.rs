//! The handle a live UDP viewer keeps on the node sending its media after a move. The
//! viewer (`rtsp::udp_session::UdpPlay`) pauses and releases it without knowing how the
//! other node is reached; migration implements it (`migrate::steer_live`), so the RTSP code
//! and the migration code need not name each other.

use std::any::Any;

/// The node sending a live viewer's media, seen from the node that steers it.
pub trait RemoteLiveSender: Send + Sync {
    /// The sending node's id.
    fn node(&self) -> &str;
    /// PAUSE (or the PLAY that resumes) of the viewer, carried to the sending node in the
    /// background: the RTSP answer does not wait on another node.
    fn set_paused(&self, paused: bool);
    /// Forget the viewer there (in the background).
    fn release(self: Box<Self>);
    /// The implementation's own handle, for the module that made it (the move and the
    /// heartbeat read fields the viewer has no business with).
    fn as_any(&self) -> &dyn Any;
    /// The same, by value (a move hands the handle back to the module that made it).
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}
