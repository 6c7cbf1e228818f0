//! A vigil node: live RTSP ingest (push and pull), fan-out to any number of viewers over
//! RTP/UDP and RTP/TCP-interleaved, the admin API, and the `vigil` command line.
//!
//! Protocol rules live in the sans-IO crate `vigil_proto`; this crate is the tokio shell
//! around it. See ARCHITECTURE.md for the map and the invariants.

pub mod admin;
pub mod audit;
pub mod auth;
pub mod cli;
pub mod cluster;
pub mod ctl;
pub mod devtools;
pub mod export;
pub mod handoff;
pub mod hls;
pub mod hostinfo;
pub mod ingest;
#[cfg(test)]
mod layering;
pub mod library;
pub mod limits;
pub mod live;
pub mod live_sender;
pub mod migrate;
pub mod net;
pub mod node;
pub mod onvif;
pub mod playback;
pub mod procfs;
pub mod record;
pub mod registry;
pub mod rtsp;
pub mod sender;
pub mod serve;
pub mod steering;
pub mod systemd;
pub mod user;
pub mod webhook;
pub mod webrtc;
