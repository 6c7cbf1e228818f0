//! What vigil's end-to-end tests (`tests/`) and its lab (`lab/`, the `vigil-lab` binary)
//! both need, kept once: the project's light RTSP client, the harness that starts `vigil
//! serve` processes and clusters of them, cluster certificates, free ports, and media
//! (the demo clip written as recordings, ffmpeg-made fixture files).
//!
//! Not part of the node: `vigil-server` does not depend on this crate.

pub mod bed_node;
pub mod certs;
pub mod client;
pub mod cluster;
pub mod delay_line;
pub mod fixtures;
pub mod hosts;
pub mod media;
pub mod ports;
pub mod serve;

use std::path::{Path, PathBuf};

/// The workspace root (parent of this crate).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ has a parent")
        .to_path_buf()
}
