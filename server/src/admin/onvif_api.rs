//! ONVIF routes (issue 26 §3), behind the admin token like every write:
//!
//! - `POST /api/onvif/discover` (`{"target": "ip:port", "timeout_ms": N}`, both optional):
//!   a WS-Discovery probe from `[onvif] discovery_address` (or to a unicast target), the
//!   devices that answered (address, endpoint, XAddrs, scopes, model, name).
//! - `POST /api/cameras/{id}/onvif` (`{"device", "user", "password", "profile", "camera"}`):
//!   the node asks the device for its profiles and the profile's RTSP URI (the operator's
//!   machine may not reach the camera network; the node must), puts the user's credentials
//!   into it and adds the camera (`camera`: its other settings, as in `POST /api/cameras`)
//!   with `onvif` = the device URL and `onvif_profile` = the profile's token. For a camera
//!   that exists, it asks again (the stored device and profile and the credentials of its
//!   stored URL, unless given) and re-points the camera when the URI changed: `vigil ctl
//!   camera probe`. A device's refusal is 502 with
//!   what the device said. The answer: the registry write (`version`, `changes`) and
//!   `onvif` (the URI as the device gave it, without credentials; the profiles; the clock
//!   offset). The password is never logged or answered.

use super::api::AppState;
use super::registry_api::{actor, expected, json, refuse, shell, with_version, ApiError};
use crate::node::Node;
use crate::onvif::OnvifError;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde::Deserialize;
use serde_json::{json as value, Map, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;
use vigil_conf::{CameraConfig, Source};
use vigil_onvif::Credentials;
use vigil_registry::{CameraPatch, Edit};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/onvif/discover", post(discover))
        .route("/api/cameras/{id}/onvif", post(onboard))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscoverBody {
    target: Option<SocketAddr>,
    timeout_ms: Option<u64>,
}

async fn discover(State(node): State<Arc<Node>>, body: String) -> Result<Response, ApiError> {
    let b: DiscoverBody = if body.trim().is_empty() {
        DiscoverBody::default()
    } else {
        json("discover", &body)?
    };
    let cfg = &node.config.onvif;
    let wait = Duration::from_millis(
        b.timeout_ms
            .unwrap_or(cfg.discovery_timeout_ms)
            .clamp(1, 10_000),
    );
    let bind = cfg.discovery_address;
    let found = tokio::task::spawn_blocking(move || crate::onvif::discover(bind, b.target, wait))
        .await
        .map_err(|e| refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| {
            refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("WS-Discovery probe from {bind}: {e}"),
            )
        })?;
    info!(devices = found.len(), "ONVIF discovery");
    Ok(with_version(
        StatusCode::OK,
        0,
        value!({ "devices": found }),
    ))
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OnvifBody {
    device: Option<String>,
    user: Option<String>,
    password: Option<String>,
    profile: Option<String>,
    /// A new camera's other settings (`on_demand`, `record`, `group`, …).
    camera: Option<Map<String, Value>>,
}

fn field(name: &str, error: String) -> ApiError {
    let mut e = refuse(StatusCode::BAD_REQUEST, error);
    e.1.field = Some(name.into());
    e
}

/// The user and password a pull URL carries (percent-decoded).
fn url_credentials(url: &str) -> (String, String) {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    url::Url::parse(url).map_or_else(
        |_| Default::default(),
        |u| (decode(u.username()), decode(u.password().unwrap_or(""))),
    )
}

async fn onboard(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let b: OnvifBody = if body.trim().is_empty() {
        OnvifBody::default()
    } else {
        json("onvif", &body)?
    };
    let shell = shell(&node)?;
    let stored = shell.current().1.cameras.get(&id).map(|s| s.camera.clone());
    // The camera as the node runs it: its URL with the password opened.
    let running = node.camera(&id);
    if stored.is_some() && b.camera.is_some() {
        return Err(field(
            "camera",
            format!("camera {id:?} exists: change its settings with PUT /api/cameras/{id}"),
        ));
    }
    let device = b
        .device
        .clone()
        .or_else(|| stored.as_ref().and_then(|c| c.onvif.clone()))
        .ok_or_else(|| {
            field(
                "device",
                match &stored {
                    Some(_) => {
                        format!("camera {id:?} was not added through ONVIF: give its device URL")
                    }
                    None => "the device service URL (http://host/onvif/device_service)".into(),
                },
            )
        })?;
    let device = crate::onvif::device_url(&device).map_err(|e| field("device", e.to_string()))?;
    let (url_user, url_password) = match running.as_ref().map(|c| &c.source) {
        Some(Source::Pull { url }) => url_credentials(url),
        _ => Default::default(),
    };
    let creds = Credentials {
        user: b.user.clone().unwrap_or(url_user),
        password: b.password.clone().unwrap_or(url_password),
    };
    let (user, password) = (creds.user.clone(), creds.password.clone());
    let timeout = Duration::from_millis(node.config.onvif.request_timeout_ms);
    let profile = b
        .profile
        .clone()
        .or_else(|| stored.as_ref().and_then(|c| c.onvif_profile.clone()));
    let dev = device.clone();
    let resolved =
        tokio::task::spawn_blocking(move || crate::onvif::resolve(&dev, creds, profile, timeout))
            .await
            .map_err(|e| refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
            .map_err(|e: OnvifError| {
                info!(camera = %id, device = %device, "ONVIF onboarding failed: {e}");
                refuse(StatusCode::BAD_GATEWAY, e.to_string())
            })?;
    let url = vigil_onvif::media::with_credentials(&resolved.uri, &user, &password)
        .map_err(|e| refuse(StatusCode::BAD_GATEWAY, e.to_string()))?;
    info!(
        camera = %id,
        device = %device,
        profile = %resolved.profile.token,
        uri = %crate::auth::redact_url(&url),
        "ONVIF: stream URI resolved"
    );
    let source = Source::Pull { url };
    let (edit, created) = match &stored {
        None => {
            let mut m = b.camera.unwrap_or_default();
            m.insert("id".into(), id.clone().into());
            m.insert("source".into(), value!(source));
            m.insert("onvif".into(), device.clone().into());
            m.insert(
                "onvif_profile".into(),
                resolved.profile.token.clone().into(),
            );
            let cam: CameraConfig = json("camera", &Value::Object(m).to_string())?;
            (Edit::AddCamera(cam), true)
        }
        Some(cam) => {
            let repoint = running.as_ref().map(|c| &c.source) != Some(&source);
            let token = &resolved.profile.token;
            let patch = CameraPatch {
                source: repoint.then_some(source),
                onvif: (cam.onvif.as_deref() != Some(device.as_str())).then_some(device),
                onvif_profile: (cam.onvif_profile.as_ref() != Some(token)).then(|| token.clone()),
                ..Default::default()
            };
            if patch == CameraPatch::default() {
                let version = shell.current().0;
                let answer = value!({ "version": version, "changes": [], "onvif": resolved });
                return Ok(with_version(StatusCode::OK, version, answer));
            }
            (Edit::SetCamera { id, patch }, false)
        }
    };
    let w = shell
        .write(&node, edit, expected(&headers)?, &actor(&headers))
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let answer = value!({ "version": w.version, "changes": w.changes, "onvif": resolved });
    Ok(with_version(status, w.version, answer))
}
