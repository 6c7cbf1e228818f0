//! `[webhooks]`: where the node posts its events (camera online/offline, recordings, members,
//! the scheduler, migrations, registry changes) as signed JSON, and how hard it tries.
//!
//! Every bound has a default an operator can override, because a receiver that is down must
//! cost the node a fixed amount of memory and time whatever its events' rate: the queue is
//! bounded (the oldest events are dropped and counted), each attempt has a timeout, and the
//! retries stop after `max_attempts`.

use crate::ConfigError;
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookConfig {
    /// The receivers, each sent every event: `http://` or `https://` (the certificate
    /// verified against `[tls] client_ca`, else the system's CAs). Empty: no webhooks.
    pub urls: Vec<String>,
    /// The key of the body's HMAC-SHA256, sent as `X-Vigil-Signature: sha256=<hex>`; or the
    /// first line of `secret_file`. Empty: events are sent unsigned.
    pub secret: Secret,
    pub secret_file: Option<PathBuf>,
    /// Only these events (`camera_online`, `recording_error`, …); empty: all of them.
    pub events: Vec<String>,
    /// One attempt's limit, connection to answer (ms).
    pub timeout_ms: u64,
    /// Attempts per event, the first included; then it is given up (and counted).
    pub max_attempts: u32,
    /// The delay before the first retry (ms), doubled each time up to `backoff_max_ms`,
    /// with a random half of it as jitter.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// Events waiting per receiver; beyond it the oldest is dropped
    /// (`vigil_webhook_dropped_total`).
    pub queue: usize,
    /// How often the node samples the state events are derived from (cameras online,
    /// recordings, members, scheduler), ms.
    pub sample_ms: u64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            secret: Secret::default(),
            secret_file: None,
            events: Vec::new(),
            timeout_ms: 5_000,
            max_attempts: 6,
            backoff_initial_ms: 500,
            backoff_max_ms: 30_000,
            queue: 1_024,
            sample_ms: 1_000,
        }
    }
}

/// The events a webhook can ask for by name.
pub const WEBHOOK_EVENTS: &[&str] = &[
    "camera_online",
    "camera_offline",
    "recording_started",
    "recording_stopped",
    "recording_error",
    "node_up",
    "node_down",
    "scheduler_changed",
    "migration_done",
    "migration_failed",
    "registry_changed",
];

/// A secret that never prints: `Debug` shows whether it is set, nothing of it.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "Secret(none)"
        } else {
            "Secret(<redacted>)"
        })
    }
}

impl WebhookConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(format!("webhooks.{m}")));
        for u in &self.urls {
            let host = u
                .strip_prefix("http://")
                .or_else(|| u.strip_prefix("https://"))
                .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
            if host.is_none_or(|h| h.is_empty() || h.contains('@'))
                || u.contains(char::is_whitespace)
            {
                return bad(format!(
                    "urls: {u:?} must be an http:// or https://host[:port]/path URL without \
                     credentials"
                ));
            }
        }
        if let Some(e) = self
            .events
            .iter()
            .find(|e| !WEBHOOK_EVENTS.contains(&e.as_str()))
        {
            return bad(format!(
                "events: unknown event {e:?} (one of {WEBHOOK_EVENTS:?})"
            ));
        }
        if !self.secret.is_empty() && self.secret_file.is_some() {
            return bad("give secret or secret_file, not both".into());
        }
        if !(100..=120_000).contains(&self.timeout_ms) {
            return bad("timeout_ms must be between 100 and 120000".into());
        }
        if !(1..=100).contains(&self.max_attempts) {
            return bad("max_attempts must be between 1 and 100".into());
        }
        if self.backoff_initial_ms == 0 || self.backoff_max_ms < self.backoff_initial_ms {
            return bad("backoff_initial_ms must be > 0 and at most backoff_max_ms".into());
        }
        if self.backoff_max_ms > 3_600_000 {
            return bad("backoff_max_ms must be at most an hour".into());
        }
        if !(1..=1_000_000).contains(&self.queue) {
            return bad("queue must be between 1 and 1000000".into());
        }
        if !(100..=60_000).contains(&self.sample_ms) {
            return bad("sample_ms must be between 100 and 60000".into());
        }
        Ok(())
    }

    /// The signing key: `secret`, else `secret_file`'s first line; None: unsigned.
    pub fn signing_key(&self) -> Result<Option<Secret>, ConfigError> {
        let key = crate::inline_or_file(self.secret.expose(), self.secret_file.as_deref())?;
        Ok(key.map(Secret))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut WebhookConfig)) -> Result<(), ConfigError> {
        let mut c = WebhookConfig::default();
        f(&mut c);
        c.validate()
    }

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        assert!(with(|_| ()).is_ok());
        assert!(with(|c| c.urls = vec!["http://127.0.0.1:9/hook".into()]).is_ok());
        for (url, ok) in [
            ("https://h/x", true),
            ("https://u@h/x", false),
            ("http://", false),
            ("http://u:p@h/x", false),
            ("ftp://h/x", false),
            ("http://h x/", false),
            ("http://h:80", true),
        ] {
            assert_eq!(with(|c| c.urls = vec![url.into()]).is_ok(), ok, "{url}");
        }
        let e = with(|c| c.events = vec!["camera_exploded".into()]).unwrap_err();
        assert!(e.to_string().contains("camera_exploded"), "{e}");
        assert!(with(|c| c.queue = 0).is_err());
        assert!(with(|c| c.max_attempts = 0).is_err());
        assert!(with(|c| c.backoff_max_ms = 10).is_err());
        assert!(with(|c| c.timeout_ms = 0).is_err());
    }

    #[test]
    fn the_secret_never_prints() {
        let c = WebhookConfig {
            secret: Secret::new("hunter2-webhook"),
            ..Default::default()
        };
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("redacted"),
            "{shown}"
        );
    }
}
