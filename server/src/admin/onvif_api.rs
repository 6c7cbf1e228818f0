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
//! - `POST /api/cameras/{id}/ptz` (`{"move": {"pan", "tilt", "zoom", "timeout_ms"}}`,
//!   `"stop"`, `{"goto_preset": {"preset"}}`, `{"set_preset": {"name"}}`, `"presets"`): a
//!   PTZ command to a camera added through ONVIF, on its stored profile, with the
//!   credentials of its URL. Allowed with the admin token, or with HTTP Basic credentials
//!   of an RTSP user holding the `ptz` right on the camera (the token gate lets those
//!   through to here). At most [`PTZ_BURST`] commands at once per camera, then
//!   [`PTZ_PER_SEC`] a second (429 beyond).
//!
//! One discovery runs at a time on a node (a probe floods the camera network's multicast
//! group and holds a thread for its wait), [`MAX_ONBOARDING`] onboarding flows and
//! [`MAX_PTZ_IN_FLIGHT`] PTZ commands; beyond, 429. Every request goes to the device's own
//! host, whatever addresses it names (`vigil_onvif::onboard::on_device_host`).

use super::api::AppState;
use super::registry_api::{actor, expected, json, refuse, shell, with_version, ApiError};
use crate::node::Node;
use crate::onvif::OnvifError;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json as value, Map, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::info;
use vigil_conf::{CameraConfig, Source};
use vigil_onvif::Credentials;
use vigil_registry::{CameraPatch, Edit};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/onvif/discover", post(discover))
        .route("/api/cameras/{id}/onvif", post(onboard))
        .route("/api/cameras/{id}/ptz", post(ptz))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscoverBody {
    target: Option<SocketAddr>,
    timeout_ms: Option<u64>,
}

/// Onboarding flows (`POST /api/cameras/{id}/onvif`) a node runs at once.
pub const MAX_ONBOARDING: usize = 4;

/// PTZ commands a node has in flight at once, over all cameras: each holds a blocking thread
/// for up to a few request timeouts, so a user with the `ptz` right on a few slow or
/// blackholed devices could otherwise take hundreds of the pool's threads (issue 44, M4).
pub const MAX_PTZ_IN_FLIGHT: usize = 16;

/// The device work under way for the API (in `node.extensions`).
#[derive(Default)]
struct OnvifWork {
    discovering: AtomicUsize,
    onboarding: AtomicUsize,
    ptz: AtomicUsize,
}

/// One unit of `counter` held until dropped.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A unit of `counter` if fewer than `max` are held.
fn slot(counter: &AtomicUsize, max: usize) -> Option<Slot<'_>> {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| Slot(counter))
}

fn work(node: &Node) -> Arc<OnvifWork> {
    node.extensions
        .get_or_init(|| Arc::new(OnvifWork::default()))
}

async fn discover(State(node): State<Arc<Node>>, body: String) -> Result<Response, ApiError> {
    let b: DiscoverBody = if body.trim().is_empty() {
        DiscoverBody::default()
    } else {
        json("discover", &body)?
    };
    let work = work(&node);
    let _one = slot(&work.discovering, 1).ok_or_else(|| {
        refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "a discovery is already running on this node (one at a time)",
        )
    })?;
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
    // A bad id is refused before the device is asked anything.
    vigil_conf::check_camera_id(&id).map_err(|e| field("id", e))?;
    let work = work(&node);
    let _one = slot(&work.onboarding, MAX_ONBOARDING).ok_or_else(|| {
        refuse(
            StatusCode::TOO_MANY_REQUESTS,
            format!("{MAX_ONBOARDING} ONVIF onboardings are running on this node: try again"),
        )
    })?;
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

/// A camera's PTZ commands: this many at once (a joystick's burst)…
pub const PTZ_BURST: f64 = 10.0;
/// …then this many a second (a held joystick repeats a move every ~200 ms; more is a loop or
/// a flood, and a camera's web server is small).
pub const PTZ_PER_SEC: f64 = 5.0;

/// Token buckets per camera (only cameras that exist get one), in `node.extensions`.
#[derive(Default)]
struct PtzLimiter {
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl PtzLimiter {
    fn take(&self, camera: &str, now: Instant) -> bool {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = b.entry(camera.to_string()).or_insert((PTZ_BURST, now));
        let refilled = now.saturating_duration_since(*at).as_secs_f64() * PTZ_PER_SEC;
        *tokens = (*tokens + refilled).min(PTZ_BURST);
        *at = now;
        if *tokens < 1.0 {
            return false;
        }
        *tokens -= 1.0;
        true
    }
}

/// How long what a PTZ command learnt of a device (its clock offset, its PTZ service) is
/// reused: clocks drift by seconds a day, and a token is accepted within minutes of it.
pub const PTZ_KNOWN_FOR: Duration = Duration::from_secs(600);

/// Per camera, what its last PTZ command learnt, for the device and profile it was for
/// (in `node.extensions`; a re-pointed or re-profiled camera starts again).
#[derive(Default)]
struct PtzKnown {
    by_camera: Mutex<HashMap<String, (String, vigil_onvif::Known, Instant)>>,
}

impl PtzKnown {
    fn get(&self, camera: &str, device: &str, now: Instant) -> Option<vigil_onvif::Known> {
        let m = self.by_camera.lock().unwrap_or_else(|p| p.into_inner());
        m.get(camera)
            .filter(|(d, _, at)| d == device && now.saturating_duration_since(*at) < PTZ_KNOWN_FOR)
            .map(|(_, k, _)| k.clone())
    }

    fn put(&self, camera: &str, device: &str, known: Option<vigil_onvif::Known>, now: Instant) {
        let mut m = self.by_camera.lock().unwrap_or_else(|p| p.into_inner());
        match known {
            Some(k) => m.insert(camera.to_string(), (device.to_string(), k, now)),
            None => m.remove(camera),
        };
    }
}

async fn ptz(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    axum::Extension(principal): axum::Extension<super::access::Principal>,
    body: String,
) -> Result<Response, ApiError> {
    // The gate let the request through only for a principal with the `ptz` right on the
    // camera (`access::need`); the command is logged under its name.
    let by = principal.name().to_string();
    let command: vigil_onvif::ptz::Command = json("ptz", &body)?;
    let cam = shell(&node)?
        .current()
        .1
        .cameras
        .get(&id)
        .map(|s| s.camera.clone())
        .ok_or_else(|| {
            refuse(
                StatusCode::NOT_FOUND,
                format!("camera {id:?} does not exist"),
            )
        })?;
    let (Some(device), Some(profile)) = (cam.onvif.clone(), cam.onvif_profile.clone()) else {
        return Err(refuse(
            StatusCode::CONFLICT,
            format!("camera {id:?} was not added through ONVIF (no device or profile to steer)"),
        ));
    };
    let limiter = node
        .extensions
        .get_or_init(|| Arc::new(PtzLimiter::default()));
    if !limiter.take(&id, Instant::now()) {
        return Err(refuse(
            StatusCode::TOO_MANY_REQUESTS,
            format!("camera {id:?}: more than {PTZ_PER_SEC} PTZ commands a second"),
        ));
    }
    let work = work(&node);
    let _one = slot(&work.ptz, MAX_PTZ_IN_FLIGHT).ok_or_else(|| {
        refuse(
            StatusCode::TOO_MANY_REQUESTS,
            format!("{MAX_PTZ_IN_FLIGHT} PTZ commands are in flight on this node: try again"),
        )
    })?;
    let (user, password) = match node.camera(&id).map(|c| c.source) {
        Some(Source::Pull { url }) => url_credentials(&url),
        _ => Default::default(),
    };
    let creds = Credentials { user, password };
    let timeout = Duration::from_millis(node.config.onvif.request_timeout_ms);
    let op = command.operation();
    let learnt = node
        .extensions
        .get_or_init(|| Arc::new(PtzKnown::default()));
    // The profile is part of what the device was asked for: a new one starts again.
    let for_device = format!("{device} {profile}");
    let known = learnt.get(&id, &for_device, Instant::now());
    let answer = tokio::task::spawn_blocking(move || {
        crate::onvif::ptz(&device, creds, &profile, command, known.as_ref(), timeout)
    })
    .await
    .map_err(|e| refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let answer = match answer {
        Ok((answer, known)) => {
            learnt.put(&id, &for_device, known, Instant::now());
            answer
        }
        Err(e) => {
            learnt.put(&id, &for_device, None, Instant::now());
            return Err(refuse(StatusCode::BAD_GATEWAY, e.to_string()));
        }
    };
    info!(camera = %id, by = %by, operation = op, "PTZ");
    Ok(Json(value!({ "ptz": answer })).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_ptz_command_learnt_is_reused_for_its_device_for_a_while() {
        let k = PtzKnown::default();
        let t0 = Instant::now();
        let known = vigil_onvif::Known {
            offset_ms: Some(5),
            ptz: "http://cam/ptz".into(),
        };
        k.put("gate", "http://cam/d main", Some(known.clone()), t0);
        assert_eq!(k.get("gate", "http://cam/d main", t0), Some(known.clone()));
        assert_eq!(
            k.get("gate", "http://cam/d sub", t0),
            None,
            "another profile"
        );
        assert_eq!(k.get("door", "http://cam/d main", t0), None);
        assert_eq!(k.get("gate", "http://cam/d main", t0 + PTZ_KNOWN_FOR), None);
        k.put("gate", "http://cam/d main", None, t0);
        assert_eq!(
            k.get("gate", "http://cam/d main", t0),
            None,
            "forgotten on a failure"
        );
    }

    #[test]
    fn device_work_is_bounded_and_a_slot_is_given_back() {
        let n = AtomicUsize::new(0);
        let a = slot(&n, 2).expect("first");
        let b = slot(&n, 2).expect("second");
        assert!(slot(&n, 2).is_none(), "a third beyond the bound");
        drop(a);
        let c = slot(&n, 2).expect("given back");
        drop((b, c));
        assert_eq!(n.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn ptz_commands_are_limited_per_camera() {
        let l = PtzLimiter::default();
        let t0 = Instant::now();
        let burst = (0..20).filter(|_| l.take("a", t0)).count();
        assert_eq!(burst, PTZ_BURST as usize);
        assert!(l.take("b", t0), "another camera has its own bucket");
        assert!(!l.take("a", t0 + Duration::from_millis(100)));
        assert!(l.take("a", t0 + Duration::from_millis(200)));
    }
}
