//! `[[camera]]`: the cameras a node serves, where their media comes from, and the checks of
//! their ids and sources.

use crate::ConfigError;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CameraConfig {
    /// Path suffix: the camera is served at `rtsp://host:port/live/<id>`.
    pub id: String,
    /// `"push"` (a camera or encoder publishes with ANNOUNCE/RECORD), `"demo"` (the bundled
    /// clip, looped), or an `rtsp://[user:pass@]host[:port]/path` URL the node pulls.
    #[serde(default)]
    pub source: Source,
    /// Pull cameras only: connect when the first reader arrives and disconnect a grace period
    /// after the last leaves (`true`), or stay connected always (`false`).
    #[serde(default = "default_true")]
    pub on_demand: bool,
    /// Pull cameras only: use RTP over the RTSP TCP connection (default) or UDP.
    #[serde(default)]
    pub pull_transport: PullTransport,
    /// Record this camera (when `[storage] enabled`).
    #[serde(default = "default_true")]
    pub record: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum PullTransport {
    #[default]
    Tcp,
    Udp,
}

fn default_true() -> bool {
    true
}

/// Where a camera's media comes from: `source` read once, when the config is.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(from = "String")]
pub enum Source {
    #[default]
    Push,
    Demo,
    /// Checked to be an `rtsp://` URL by [`validate`].
    Pull {
        url: String,
    },
}

impl From<String> for Source {
    fn from(s: String) -> Source {
        match s.as_str() {
            "push" => Source::Push,
            "demo" => Source::Demo,
            _ => Source::Pull { url: s },
        }
    }
}

/// The one rule for a camera id, wherever one arrives (config, a publisher's ANNOUNCE, a
/// playback URL, the ingest API). The id names a directory on the shared storage root, so
/// the storage crate's rule for path components is the rule.
pub fn is_valid_camera_id(id: &str) -> bool {
    vigil_storage::is_valid_id(id)
}

/// [`is_valid_camera_id`], with what to tell whoever sent an id it refuses.
pub fn check_camera_id(id: &str) -> Result<(), String> {
    if is_valid_camera_id(id) {
        return Ok(());
    }
    Err(format!(
        "camera id {id:?}: use up to 128 letters, digits, '-', '_' and '.', not starting with '.'"
    ))
}

/// Camera ids are well-formed and unique; pull sources are rtsp:// or rtsps:// URLs.
pub(crate) fn validate(cameras: &[CameraConfig]) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for cam in cameras {
        check_camera_id(&cam.id).map_err(ConfigError::Invalid)?;
        if !seen.insert(cam.id.as_str()) {
            return Err(ConfigError::Invalid(format!(
                "camera id {:?} is listed twice",
                cam.id
            )));
        }
        if let Source::Pull { url } = &cam.source {
            if !url.starts_with("rtsp://") && !url.starts_with("rtsps://") {
                return Err(ConfigError::Invalid(format!(
                    "camera {:?}: source must be \"push\", \"demo\" or an rtsp:// or \
                     rtsps:// URL, got {url:?}",
                    cam.id
                )));
            }
        }
    }
    Ok(())
}
