//! `[storage]`, `[cache]` and `[playback]`: where recordings are written and kept, the
//! playback cache, and trick play.

use crate::ConfigError;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Recording root: a directory on the shared volume (iSCSI LUN or NFS share) that every
    /// node mounts at the same path. Relative paths are taken from the working directory.
    pub root: std::path::PathBuf,
    /// Record live cameras at all (each camera can opt out with `record = false`).
    pub enabled: bool,
    /// Target segment length; segments are cut at the first keyframe past it.
    pub segment_secs: f64,
    /// Delete recordings older than this (0 = keep forever).
    pub retention_max_age_hours: f64,
    /// Delete the oldest recordings while the root holds more than this (0 = no limit).
    pub retention_max_bytes: u64,
    /// Per-camera write lease lifetime on the shared root (renewed every third of it). A
    /// node that dies keeps its cameras' leases this long, so another node's recording of a
    /// re-bound camera starts at most this late (cluster).
    pub lease_ttl_secs: f64,
    /// Which live cameras are recorded: `all`, or only those `listed` as `[[camera]]`.
    /// Unset: `listed` when `[auth]` is on, `all` otherwise (see `Config::record_mode`).
    pub record: Option<RecordMode>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RecordMode {
    All,
    Listed,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            root: "./data".into(),
            enabled: true,
            segment_secs: 4.0,
            retention_max_age_hours: 0.0,
            retention_max_bytes: 0,
            lease_ttl_secs: 15.0,
            record: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Memory budget of the segmented playback cache.
    pub budget_mb: u64,
    /// Segments loaded ahead of each playing session.
    pub read_ahead_segments: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            budget_mb: 512,
            read_ahead_segments: 2,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlaybackConfig {
    /// Above this Scale only keyframes are sent (trick play).
    pub keyframes_only_above_scale: f64,
}

impl Default for PlaybackConfig {
    fn default() -> Self {
        Self {
            keyframes_only_above_scale: 2.0,
        }
    }
}

impl StorageConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(self.segment_secs >= 0.5 && self.segment_secs <= 60.0) {
            return Err(ConfigError::Invalid(
                "storage.segment_secs must be between 0.5 and 60".into(),
            ));
        }
        if !(self.lease_ttl_secs >= 1.0 && self.lease_ttl_secs <= 3600.0) {
            return Err(ConfigError::Invalid(
                "storage.lease_ttl_secs must be between 1 and 3600".into(),
            ));
        }
        Ok(())
    }
}
