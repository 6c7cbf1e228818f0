//! The JSON shapes of the admin API, shared by the server and `vigil ctl`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathView {
    pub path: String,
    /// "push", "demo" or the pull URL with credentials removed.
    pub source: String,
    pub live: bool,
    pub codecs: Vec<String>,
    pub bitrate_kbps: u64,
    pub readers: usize,
    pub packets_in: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionView {
    pub id: String,
    pub path: String,
    pub kind: String,
    pub transport: String,
    pub client: String,
    pub bytes: u64,
    pub packets: u64,
    pub duration_secs: f64,
    pub bitrate_kbps: u64,
}
