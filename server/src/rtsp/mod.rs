//! The RTSP server: connection I/O loop, method handlers, sessions and their media tasks.
//! Message parsing and the session state machine live in `vigil_proto::rtsp`.

mod access;
pub mod conn;
pub mod handler;
pub mod playback_methods;
pub mod session;
pub mod setup;
pub mod shared_ports;
mod tcp_media;
mod to_ingest;
pub mod udp_session;
