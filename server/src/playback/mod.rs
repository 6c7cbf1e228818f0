//! Playback of recordings over RTSP: the URL and the paced sender task, reading through
//! the node's `library` (store + cache). The RTSP methods are in `rtsp::playback_methods`.

pub mod locate;
pub mod request;
pub mod sender;
mod tally;
pub mod task;
pub mod window;

/// A session's sans-IO core (`vigil_session`) with this node's playback cursor: the RTSP
/// connection drives it, a move of the session's media restarts the sender from it.
pub type SessionCore = vigil_session::Session<task::Cursor>;
