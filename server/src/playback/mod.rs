//! Playback of recordings over RTSP: the URL and the paced sender task, reading through
//! the node's `library` (store + cache). The RTSP methods are in `rtsp::playback_methods`.

pub mod request;
pub mod sender;
mod tally;
pub mod task;
pub mod window;
