//! `[audit]`: the trail of every access to video and every change (issue 44 §2).

use crate::{ConfigError, Secret};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// Keep the trail, under `<[storage] root>/audit/<node>/` (so it outlives the node). Off
    /// where recording is off (no root).
    pub enabled: bool,
    /// While the trail cannot be written (the share refuses, the queue is full), refuse new
    /// sessions (true) or serve them and log the gap (false).
    pub required: bool,
    /// Day files older than this are removed (independent of video retention).
    pub retention_days: u32,
    /// Events waiting for the writer; past it they are dropped and counted (a viewer never
    /// waits for the trail).
    pub queue: usize,
    /// A signed checkpoint this often when anything was written since the last.
    pub checkpoint_secs: u64,
    /// The key checkpoints are signed with (any text, ≥ 16 characters; each node signs
    /// with its own key derived from it). Empty: the cluster key, else the registry's
    /// `secret_key`, else checkpoints are unsigned (a warning at start).
    pub key: Secret,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            required: false,
            retention_days: 365,
            queue: 8192,
            checkpoint_secs: 60,
            key: Secret::default(),
        }
    }
}

impl AuditConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.retention_days == 0
            || self.queue == 0
            || !(1..=86_400).contains(&self.checkpoint_secs)
            || (!self.key.is_empty() && self.key.expose().len() < 16)
        {
            return Err(ConfigError::Invalid(
                "audit.retention_days and audit.queue must be at least 1, \
                 audit.checkpoint_secs 1–86400, audit.key empty or 16 characters or more"
                    .into(),
            ));
        }
        Ok(())
    }
}
