//! The registry's routes (issue 26 §2), every write behind the admin token like every other
//! write route:
//!
//! - `GET /api/cameras` (the cameras' state, `cameras_api`) · `POST /api/cameras` (a camera,
//!   as a `[[camera]]` in JSON) · `GET|PUT|DELETE /api/cameras/{id}` (`PUT`: the fields to
//!   change) · `POST /api/cameras/import` (a JSON array, or CSV with `Content-Type:
//!   text/csv` or `?format=csv`: validated whole, one bad row → 400 naming row and field,
//!   nothing changed);
//! - `GET|POST /api/users`, `GET|PUT|DELETE /api/users/{name}`, `POST /api/users/import`
//!   (a password is hashed into HA1 with this node's realm and never kept);
//! - `GET /api/registry` (version, errors, last change), `GET /api/registry/cameras` (every
//!   camera's record), `GET /api/registry/changes`.
//!
//! A write may carry `If-Match: "<version>"` (the version the operator read): another
//! version written since → 409 with the current one (its `ETag` and `version` field).
//! Without it, the edit applies to the newest version. `X-Vigil-Actor` names who asks in
//! the change log. No answer carries a camera password, sealed or not, or a user's hashes.

use super::api::AppState;
use crate::node::Node;
use crate::registry::{Shell, WriteError, Written};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use vigil_conf::{CameraConfig, Rights, Source};
use vigil_registry::{CameraPatch, Edit, RegistryError, UserInput, UserPatch};

/// Imports are read whole before anything is applied: 10 000 cameras are about 1 MB of CSV.
const IMPORT_LIMIT: usize = 64 << 20;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/cameras",
            get(super::cameras_api::cameras).post(add_camera),
        )
        .route(
            "/api/cameras/import",
            post(import_cameras).layer(DefaultBodyLimit::max(IMPORT_LIMIT)),
        )
        .route(
            "/api/cameras/{id}",
            get(get_camera).put(set_camera).delete(remove_camera),
        )
        .route("/api/users", get(users).post(add_user))
        .route(
            "/api/users/import",
            post(import_users).layer(DefaultBodyLimit::max(IMPORT_LIMIT)),
        )
        .route(
            "/api/users/{name}",
            get(get_user).put(set_user).delete(remove_user),
        )
        .route("/api/registry", get(status))
        .route("/api/registry/cameras", get(camera_records))
        .route("/api/registry/changes", get(changes))
}

/// A camera as the API shows it: the registry's record with the URL's credentials taken
/// out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CameraRecordView {
    #[serde(flatten)]
    pub camera: CameraConfig,
    /// The source URL names a user whose password is stored sealed.
    pub has_password: bool,
}

/// A user as the API shows it: name and rights (never the hashes).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserView {
    pub name: String,
    #[serde(flatten)]
    pub rights: Rights,
}

/// The API's refusal: status, text, and what the caller needs to act on it.
#[derive(Debug, Serialize)]
pub(super) struct Refusal {
    pub(super) error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) row: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) field: Option<String>,
    /// The registry's version now (409).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) version: Option<u64>,
}

pub(super) struct ApiError(pub(super) StatusCode, pub(super) Refusal);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.0, Json(&self.1)).into_response();
        if let Some(v) = self.1.version {
            if let Ok(etag) = header::HeaderValue::from_str(&format!("\"{v}\"")) {
                r.headers_mut().insert(header::ETAG, etag);
            }
        }
        r
    }
}

pub(super) fn refuse(status: StatusCode, error: impl Into<String>) -> ApiError {
    ApiError(
        status,
        Refusal {
            error: error.into(),
            row: None,
            field: None,
            version: None,
        },
    )
}

impl From<WriteError> for ApiError {
    fn from(e: WriteError) -> Self {
        let text = e.to_string();
        match e {
            WriteError::Registry(RegistryError::Invalid(f)) => ApiError(
                StatusCode::BAD_REQUEST,
                Refusal {
                    error: text,
                    row: f.row,
                    field: Some(f.field),
                    version: None,
                },
            ),
            WriteError::Registry(RegistryError::NotFound { .. }) => {
                refuse(StatusCode::NOT_FOUND, text)
            }
            WriteError::Registry(RegistryError::Exists { .. }) => {
                refuse(StatusCode::CONFLICT, text)
            }
            WriteError::Registry(RegistryError::Conflict { current }) => ApiError(
                StatusCode::CONFLICT,
                Refusal {
                    error: text,
                    row: None,
                    field: None,
                    version: Some(current),
                },
            ),
            WriteError::Unavailable(_) => refuse(StatusCode::SERVICE_UNAVAILABLE, text),
            WriteError::Registry(_) => refuse(StatusCode::INTERNAL_SERVER_ERROR, text),
        }
    }
}

impl From<vigil_registry::FieldError> for ApiError {
    fn from(f: vigil_registry::FieldError) -> Self {
        WriteError::Registry(RegistryError::Invalid(f)).into()
    }
}

pub(super) fn shell(node: &Node) -> Result<Arc<Shell>, ApiError> {
    crate::registry::of(node).ok_or_else(|| {
        refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "the registry is off on this node: set [registry] enabled = true",
        )
    })
}

/// `If-Match: "7"` (or `7`): the version the edit was made against.
pub(super) fn expected(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(v) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .map(|s| s.trim().trim_start_matches("W/").trim_matches('"'))
        .and_then(|s| s.parse().ok())
        .map(Some)
        .ok_or_else(|| {
            refuse(
                StatusCode::BAD_REQUEST,
                "If-Match: the registry version, e.g. \"7\"",
            )
        })
}

/// Who asks, for the change log: `X-Vigil-Actor` (printable, up to 64 characters) or "api".
pub(super) fn actor(headers: &HeaderMap) -> String {
    headers
        .get("x-vigil-actor")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|a| !a.is_empty() && a.len() <= 64 && a.chars().all(|c| !c.is_control()))
        .unwrap_or("api")
        .to_string()
}

pub(super) fn with_version<T: Serialize>(status: StatusCode, version: u64, body: T) -> Response {
    let mut r = (status, Json(body)).into_response();
    if let Ok(etag) = header::HeaderValue::from_str(&format!("\"{version}\"")) {
        r.headers_mut().insert(header::ETAG, etag);
    }
    r
}

pub(super) async fn write(
    node: &Arc<Node>,
    headers: &HeaderMap,
    edit: Edit,
    created: bool,
) -> Result<Response, ApiError> {
    let shell = shell(node)?;
    let w: Written = shell
        .write(node, edit, expected(headers)?, &actor(headers))
        .await?;
    let status = if created && !w.changes.is_empty() {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(with_version(status, w.version, &w))
}

/// A JSON body parsed here, so a bad one is a 400 naming the field like every other refusal.
pub(super) fn json<T: serde::de::DeserializeOwned>(
    what: &'static str,
    body: &str,
) -> Result<T, ApiError> {
    serde_json::from_str(body).map_err(|e| {
        let field = e
            .to_string()
            .split('`')
            .nth(1)
            .unwrap_or("body")
            .to_string();
        ApiError(
            StatusCode::BAD_REQUEST,
            Refusal {
                error: format!("{what}: {e}"),
                row: None,
                field: Some(field),
                version: None,
            },
        )
    })
}

pub fn camera_view(stored: &vigil_registry::StoredCamera) -> CameraRecordView {
    let mut camera = stored.camera.clone();
    if let Source::Pull { url } = &camera.source {
        camera.source = Source::Pull {
            url: crate::auth::redact_url(url),
        };
    }
    CameraRecordView {
        camera,
        has_password: stored.sealed_password.is_some(),
    }
}

async fn add_camera(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let cam: CameraConfig = json("camera", &body)?;
    write(&node, &headers, Edit::AddCamera(cam), true).await
}

async fn get_camera(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (version, reg) = shell(&node)?.current();
    let stored = reg.cameras.get(&id).ok_or_else(|| {
        refuse(
            StatusCode::NOT_FOUND,
            format!("camera {id:?} does not exist"),
        )
    })?;
    Ok(with_version(StatusCode::OK, version, camera_view(stored)))
}

async fn set_camera(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let patch: CameraPatch = json("camera", &body)?;
    write(&node, &headers, Edit::SetCamera { id, patch }, false).await
}

async fn remove_camera(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    write(&node, &headers, Edit::RemoveCamera(id), false).await
}

#[derive(Debug, Deserialize)]
struct ImportQuery {
    format: Option<String>,
}

fn is_csv(headers: &HeaderMap, q: &ImportQuery) -> bool {
    q.format.as_deref() == Some("csv")
        || headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/csv"))
}

async fn import_cameras(
    State(node): State<Arc<Node>>,
    Query(q): Query<ImportQuery>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let cams = if is_csv(&headers, &q) {
        vigil_registry::import::cameras_from_csv(&body)?
    } else {
        vigil_registry::import::cameras_from_json(&body)?
    };
    write(&node, &headers, Edit::ImportCameras(cams), false).await
}

/// HA1 of a user's password with this node's realm (`[auth] realm`, every node the same).
fn hasher(node: &Node) -> impl Fn(&str, &str) -> (String, String) + '_ {
    use vigil_proto::rtsp::auth::{ha1, Algorithm};
    let realm = node
        .config
        .auth
        .as_ref()
        .map_or("vigil", |a| a.realm.as_str());
    move |name, password| {
        (
            ha1(Algorithm::Md5, name, realm, password),
            ha1(Algorithm::Sha256, name, realm, password),
        )
    }
}

fn user_view(u: &vigil_conf::UserConfig) -> UserView {
    UserView {
        name: u.name.clone(),
        rights: u.rights.clone(),
    }
}

async fn users(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    let (version, reg) = shell(&node)?.current();
    let list: Vec<UserView> = reg.users.values().map(user_view).collect();
    Ok(with_version(StatusCode::OK, version, list))
}

async fn get_user(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let (version, reg) = shell(&node)?.current();
    let u = reg.users.get(&name).ok_or_else(|| {
        refuse(
            StatusCode::NOT_FOUND,
            format!("user {name:?} does not exist"),
        )
    })?;
    Ok(with_version(StatusCode::OK, version, user_view(u)))
}

async fn add_user(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let input: UserInput = json("user", &body)?;
    let user = input.into_user(&hasher(&node))?;
    write(&node, &headers, Edit::AddUser(user), true).await
}

/// `PUT /api/users/{name}`: a new password and/or rights lists.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserPatchBody {
    password: Option<String>,
    read: Option<Vec<String>>,
    playback: Option<Vec<String>>,
    publish: Option<Vec<String>>,
    ptz: Option<Vec<String>>,
    export: Option<Vec<String>>,
    operate: Option<bool>,
    admin: Option<bool>,
}

async fn set_user(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let b: UserPatchBody = json("user", &body)?;
    if b.password.as_deref() == Some("") {
        return Err(
            vigil_registry::FieldError::user(&name, "password", "must not be empty").into(),
        );
    }
    let patch = UserPatch {
        ha1: b.password.map(|p| hasher(&node)(&name, &p)),
        read: b.read,
        playback: b.playback,
        publish: b.publish,
        ptz: b.ptz,
        export: b.export,
        operate: b.operate,
        admin: b.admin,
    };
    write(&node, &headers, Edit::SetUser { name, patch }, false).await
}

async fn remove_user(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    write(&node, &headers, Edit::RemoveUser(name), false).await
}

async fn import_users(
    State(node): State<Arc<Node>>,
    Query(q): Query<ImportQuery>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let inputs = if is_csv(&headers, &q) {
        vigil_registry::import::users_from_csv(&body)?
    } else {
        vigil_registry::import::users_from_json(&body)?
    };
    let hash = hasher(&node);
    let users = inputs
        .into_iter()
        .enumerate()
        .map(|(i, u)| u.into_user(&hash).map_err(|e| e.at_row(i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    write(&node, &headers, Edit::ImportUsers(users), false).await
}

async fn camera_records(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    let (version, reg) = shell(&node)?.current();
    let list: Vec<CameraRecordView> = reg.cameras.values().map(camera_view).collect();
    Ok(with_version(StatusCode::OK, version, list))
}

async fn status(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    let s = shell(&node)?.status();
    Ok(with_version(StatusCode::OK, s.version, s))
}

#[derive(Debug, Deserialize)]
struct ChangesQuery {
    limit: Option<usize>,
}

async fn changes(
    State(node): State<Arc<Node>>,
    Query(q): Query<ChangesQuery>,
) -> Result<Response, ApiError> {
    let shell = shell(&node)?;
    let list = shell.changes(q.limit.unwrap_or(100).min(10_000)).await;
    Ok(Json(list).into_response())
}
