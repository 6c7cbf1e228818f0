//! `[[camera]]`: the cameras a node serves, where their media comes from, and the checks of
//! their ids and sources.

use crate::ConfigError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
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
    /// A disabled camera stays listed (in the registry) but is not served: no source, no
    /// recording, viewers answered 404.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Keep this camera's recordings this long (hours; 0: whatever the node-wide age
    /// limit); unset: `[storage] retention_max_age_hours`. The byte limit stays node-wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_hours: Option<f64>,
    /// Target segment length of this camera (seconds); unset: `[storage] segment_secs`.
    /// Taken by the camera's recorder when it starts (a running one keeps its length).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_secs: Option<f64>,
    /// Free-form `key = value` labels (site, floor, vendor…), for operators' filters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// A group name (a site, a building) the console and `vigil ctl` sort by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The camera's ONVIF device service (`http://host/onvif/device_service`, no
    /// credentials: those of `source` are used) when it was added through ONVIF: `vigil ctl
    /// camera probe` asks it again for the stream URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onvif: Option<String>,
    /// The ONVIF media profile (token) the stream URI was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onvif_profile: Option<String>,
}

impl CameraConfig {
    /// A camera with every setting at its default (`on_demand`, recorded, enabled).
    pub fn new(id: &str, source: Source) -> CameraConfig {
        CameraConfig {
            id: id.into(),
            source,
            on_demand: true,
            pull_transport: PullTransport::Tcp,
            record: true,
            enabled: true,
            retention_hours: None,
            segment_secs: None,
            labels: BTreeMap::new(),
            group: None,
            onvif: None,
            onvif_profile: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
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
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(from = "String", into = "String")]
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

impl From<Source> for String {
    fn from(s: Source) -> String {
        match s {
            Source::Push => "push".into(),
            Source::Demo => "demo".into(),
            Source::Pull { url } => url,
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

/// Camera ids are well-formed and unique; each camera passes [`check_camera`].
pub(crate) fn validate(cameras: &[CameraConfig]) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for cam in cameras {
        check_camera(cam).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if !seen.insert(cam.id.as_str()) {
            return Err(ConfigError::Invalid(format!(
                "camera id {:?} is listed twice",
                cam.id
            )));
        }
    }
    Ok(())
}

/// One camera's setting refused by [`check_camera`]: which field, and why (the registry's
/// API and import name the row and this field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("camera {camera:?}: {field}: {message}")]
pub struct CameraFieldError {
    pub camera: String,
    pub field: &'static str,
    pub message: String,
}

/// Labels and group: short printable text (they go to tables, JSON and log lines).
const TEXT_MAX: usize = 64;

/// The rules of one camera, wherever it comes from (`[[camera]]`, the registry's API, an
/// import): a path-safe id, a source that is `push`, `demo` or an `rtsp://`/`rtsps://` URL
/// with a host, segment length and retention in range, short printable labels and group.
pub fn check_camera(cam: &CameraConfig) -> Result<(), CameraFieldError> {
    let err = |field: &'static str, message: String| CameraFieldError {
        camera: cam.id.clone(),
        field,
        message,
    };
    check_camera_id(&cam.id).map_err(|m| err("id", m))?;
    if let Source::Pull { url } = &cam.source {
        let scheme_ok = url.starts_with("rtsp://") || url.starts_with("rtsps://");
        let host = url
            .split_once("://")
            .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""))
            .map(|auth| auth.rsplit('@').next().unwrap_or(""))
            .unwrap_or("");
        if !scheme_ok || host.is_empty() || url.chars().any(char::is_whitespace) {
            return Err(err(
                "source",
                "must be \"push\", \"demo\" or an rtsp:// or rtsps:// URL with a host".into(),
            ));
        }
    }
    if let Some(s) = cam.segment_secs {
        if !(0.5..=60.0).contains(&s) {
            return Err(err("segment_secs", "must be between 0.5 and 60".into()));
        }
    }
    if let Some(h) = cam.retention_hours {
        if !(h.is_finite() && h >= 0.0) {
            return Err(err("retention_hours", "must be 0 or more hours".into()));
        }
    }
    let printable =
        |s: &str| !s.is_empty() && s.len() <= TEXT_MAX && s.chars().all(|c| !c.is_control());
    if let Some(g) = &cam.group {
        if !printable(g) {
            return Err(err("group", format!("1-{TEXT_MAX} printable characters")));
        }
    }
    if let Some(u) = &cam.onvif {
        let rest = u
            .strip_prefix("http://")
            .or_else(|| u.strip_prefix("https://"));
        let host = rest.map_or("", |r| r.split(['/', '?', '#']).next().unwrap_or(""));
        if host.is_empty()
            || host.contains('@')
            || u.len() > 512
            || u.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(err(
                "onvif",
                "an http:// or https:// device service URL with a host and no credentials, \
                 up to 512 characters"
                    .into(),
            ));
        }
    }
    if let Some(p) = &cam.onvif_profile {
        if !printable(p) {
            return Err(err(
                "onvif_profile",
                format!("1-{TEXT_MAX} printable characters"),
            ));
        }
    }
    for (k, v) in &cam.labels {
        if !printable(k) || !printable(v) || k.contains(['=', ';']) {
            return Err(err(
                "labels",
                format!(
                    "keys and values of 1-{TEXT_MAX} printable characters, no '=' or ';' in keys"
                ),
            ));
        }
    }
    Ok(())
}
