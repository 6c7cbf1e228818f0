//! API tokens at runtime (issue 44), kept cluster-wide in the registry: `GET /api/tokens`
//! (names, rights, expiry; never a secret or a hash), `POST /api/tokens` (a new token: the
//! secret is in this one answer and nowhere else), `DELETE /api/tokens/{name}` (revoked on
//! every node within a registry poll). All of them need the admin role, like every route
//! nobody opened (`access::need`). The config's `[[http.api_token]]` entries count too, on
//! their node only; they are changed in the file, and listed here as `from: "config"`.

use super::api::AppState;
use super::registry_api::{json, refuse, shell, with_version, ApiError};
use crate::auth::tokens;
use crate::node::Node;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{delete, get};
use axum::Router;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use vigil_conf::{Rights, TokenConfig};
use vigil_registry::Edit;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/tokens", get(list).post(add))
        .route("/api/tokens/{name}", delete(remove))
}

/// A token as listed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenView {
    pub name: String,
    #[serde(flatten)]
    pub rights: Rights,
    pub expires: Option<u64>,
    pub created: Option<u64>,
    /// `registry` (cluster-wide) or `config` (this node's file).
    pub from: String,
}

fn view(t: &TokenConfig, from: &str) -> TokenView {
    TokenView {
        name: t.name.clone(),
        rights: t.rights.clone(),
        expires: t.expires,
        created: t.created,
        from: from.into(),
    }
}

async fn list(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    let (version, reg) = shell(&node)?.current();
    let mut out: Vec<TokenView> = reg.tokens.values().map(|t| view(t, "registry")).collect();
    out.extend(
        node.config
            .http
            .api_tokens
            .iter()
            .map(|t| view(t, "config")),
    );
    Ok(with_version(StatusCode::OK, version, out))
}

/// `POST /api/tokens`: a name, scopes and/or rights like a user's, and an expiry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewToken {
    name: String,
    #[serde(default)]
    scope: Vec<String>,
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    playback: Vec<String>,
    #[serde(default)]
    export: Vec<String>,
    #[serde(default)]
    ptz: Vec<String>,
    /// Days from now; absent or 0: never.
    #[serde(default)]
    expires_days: u64,
}

/// What a new token's answer holds: the secret, once.
#[derive(Debug, Serialize, Deserialize)]
pub struct Made {
    pub name: String,
    pub token: String,
    pub expires: Option<u64>,
    pub version: u64,
}

/// The longest expiry a token may be given (ten years): a larger number is a mistake.
const MAX_EXPIRES_DAYS: u64 = 3650;

async fn add(
    State(node): State<Arc<Node>>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let b: NewToken = json("token", &body)?;
    let mut rights = Rights {
        read: b.read,
        playback: b.playback,
        export: b.export,
        ptz: b.ptz,
        ..Rights::default()
    };
    tokens::scope_rights(&b.scope, &mut rights).map_err(|e| field_error(&b.name, "scope", &e))?;
    if rights == Rights::default() {
        return Err(field_error(
            &b.name,
            "scope",
            "a token needs a scope (metrics, read, operate, admin) or camera rights",
        ));
    }
    if b.expires_days > MAX_EXPIRES_DAYS {
        return Err(field_error(
            &b.name,
            "expires_days",
            &format!("at most {MAX_EXPIRES_DAYS}"),
        ));
    }
    let now = tokens::now_unix();
    let (secret, sha256) = tokens::generate();
    let token = TokenConfig {
        name: b.name.clone(),
        sha256,
        expires: (b.expires_days > 0).then(|| now + b.expires_days * 86_400),
        created: Some(now),
        rights,
    };
    let expires = token.expires;
    let shell = shell(&node)?;
    let w = shell
        .write(
            &node,
            Edit::AddToken(token),
            super::registry_api::expected(&headers)?,
            &super::registry_api::actor(&headers),
        )
        .await?;
    let made = Made {
        name: b.name,
        token: secret,
        expires,
        version: w.version,
    };
    Ok(with_version(StatusCode::CREATED, w.version, made))
}

fn field_error(name: &str, field: &str, why: &str) -> ApiError {
    vigil_registry::FieldError::token(name, field, why).into()
}

async fn remove(
    State(node): State<Arc<Node>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if node.config.http.api_tokens.iter().any(|t| t.name == name)
        && !shell(&node)?.current().1.tokens.contains_key(&name)
    {
        return Err(refuse(
            StatusCode::CONFLICT,
            format!("token {name:?} is in this node's config file: remove it there and SIGHUP"),
        ));
    }
    super::registry_api::write(&node, &headers, Edit::RemoveToken(name), false).await
}
