//! The API's write routes of migration (issue 7 §3): move a session, drain a node.
//!
//! `POST /api/sessions/{id}/migrate` `{"to": NODE, "mode": "own"|"preserve"}` → the move's
//! report (gap, timings) or 4xx with why; `POST /api/cluster/nodes/{id}/drain` and
//! `/undrain`, `GET /api/cluster/nodes/{id}/drain` → the drain's progress;
//! `POST /api/cluster/cameras/{camera}/move` `{"to": NODE}` → a camera move's record. Any node answers
//! for any other: the call is forwarded over the cluster RPC.

use super::api::AppState;
use crate::cluster::Cluster;
use crate::handoff::{DrainStatus, MigrationCall, MigrationReply};
use crate::node::command::{MoveError, MoveReport, SourceMode};
use crate::node::Node;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Deserialize)]
pub struct MigrateBody {
    pub to: String,
    #[serde(default)]
    pub mode: Option<String>,
}

type ApiError = (StatusCode, String);

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/sessions/{id}/migrate", post(migrate))
        .route(
            "/api/cluster/nodes/{id}/drain",
            post(drain).get(drain_status),
        )
        .route("/api/cluster/nodes/{id}/undrain", post(undrain))
        .route("/api/cluster/cameras/{camera}/move", post(move_camera))
}

fn cluster_of(cluster: &Option<Arc<Cluster>>) -> Result<&Arc<Cluster>, ApiError> {
    cluster.as_ref().ok_or((
        StatusCode::NOT_FOUND,
        "the cluster is off on this node\n".into(),
    ))
}

async fn migrate(
    State(node): State<Arc<Node>>,
    State(cluster): State<Option<Arc<Cluster>>>,
    Path(id): Path<String>,
    Json(body): Json<MigrateBody>,
) -> Result<Json<MoveReport>, ApiError> {
    let cluster = cluster_of(&cluster)?;
    let mode = match body.mode.as_deref().map(str::parse::<SourceMode>) {
        None => None,
        Some(Ok(m)) => Some(m),
        Some(Err(e)) => return Err((StatusCode::BAD_REQUEST, format!("{e}\n"))),
    };
    if body.to != cluster.self_id && !cluster.is_alive(&body.to) {
        return Err(move_refused(MoveError::NodeNotAlive { node: body.to }));
    }
    crate::migrate::move_anywhere(&node, Some(cluster), &id, &body.to, mode)
        .await
        .map(Json)
        .map_err(move_refused)
}

/// A refused move as the API answers it: 404 when it named something that is not there,
/// else 409; the body is the error's text, which `vigil ctl migrate` prints.
fn move_refused(e: MoveError) -> ApiError {
    let status = if e.not_found() {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::CONFLICT
    };
    (status, format!("{e}\n"))
}

/// `POST /api/cluster/cameras/{camera}/move` `{"to": NODE}`: an operator's camera move
/// (issue 11 §2), carried out by the scheduler (forwarded there over the cluster RPC).
async fn move_camera(
    State(cluster): State<Option<Arc<Cluster>>>,
    Path(camera): Path<String>,
    Json(body): Json<MigrateBody>,
) -> Result<Json<crate::cluster::CameraMoveRecord>, ApiError> {
    let cluster = cluster_of(&cluster)?;
    vigil_conf::check_camera_id(&camera)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("{e}\n")))?;
    cluster
        .move_camera_now(&camera, &body.to)
        .await
        .map(Json)
        .map_err(|e| {
            let status = if e.starts_with("no pull camera") || e.contains("not a live member") {
                StatusCode::NOT_FOUND
            } else {
                StatusCode::CONFLICT
            };
            (status, format!("{e}\n"))
        })
}

async fn drain_call(
    cluster: &Option<Arc<Cluster>>,
    id: &str,
    call: MigrationCall,
) -> Result<Json<DrainStatus>, ApiError> {
    let cluster = cluster_of(cluster)?;
    if id == cluster.self_id {
        let Some(svc) = cluster.migration.get() else {
            return Err((
                StatusCode::SERVICE_UNAVAILABLE,
                "migration is not ready\n".into(),
            ));
        };
        return match svc.handle(call).await {
            MigrationReply::Drain(s) => Ok(Json(s)),
            other => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("{other:?}\n"))),
        };
    }
    if !cluster.is_alive(id) {
        return Err((
            StatusCode::NOT_FOUND,
            format!("node {id} is not a live member of the cluster\n"),
        ));
    }
    match cluster
        .call_migration(id, call, Duration::from_secs(3))
        .await
    {
        Ok(MigrationReply::Drain(s)) => Ok(Json(s)),
        Ok(other) => Err((
            StatusCode::BAD_GATEWAY,
            format!("{id} answered {other:?}\n"),
        )),
        Err(e) => Err((StatusCode::BAD_GATEWAY, format!("{e:#}\n"))),
    }
}

async fn drain(
    State(cluster): State<Option<Arc<Cluster>>>,
    Path(id): Path<String>,
) -> Result<Json<DrainStatus>, ApiError> {
    drain_call(&cluster, &id, MigrationCall::Drain { undrain: false }).await
}

async fn undrain(
    State(cluster): State<Option<Arc<Cluster>>>,
    Path(id): Path<String>,
) -> Result<Json<DrainStatus>, ApiError> {
    drain_call(&cluster, &id, MigrationCall::Drain { undrain: true }).await
}

async fn drain_status(
    State(cluster): State<Option<Arc<Cluster>>>,
    Path(id): Path<String>,
) -> Result<Json<DrainStatus>, ApiError> {
    drain_call(&cluster, &id, MigrationCall::DrainStatus).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_naming_what_is_not_there_is_404_else_409() {
        let id = || "s1".to_string();
        let node = || "b".to_string();
        for e in [
            MoveError::NoSession { id: id() },
            MoveError::NoSessionInCluster { id: id() },
            MoveError::NodeNotAlive { node: node() },
        ] {
            assert_eq!(move_refused(e).0, StatusCode::NOT_FOUND);
        }
        for e in [
            MoveError::SteeredElsewhere {
                id: id(),
                by: node(),
            },
            MoveError::Ending { id: id() },
            MoveError::Busy { id: id() },
            MoveError::Timeout { id: id() },
            MoveError::AlreadyThere { node: node() },
            MoveError::NotMovable("not a playback session"),
            MoveError::PlaybackEnded,
            // The text of a remote refusal does not decide the status, even when it reads
            // like a missing session.
            MoveError::Refused {
                node: node(),
                reason: "no session s1 on this node".into(),
            },
            MoveError::NotPrepared {
                node: node(),
                source: Box::new(MoveError::Rpc {
                    node: node(),
                    error: "timed out".into(),
                }),
            },
        ] {
            assert_eq!(move_refused(e).0, StatusCode::CONFLICT);
        }
    }

    #[test]
    fn the_body_is_the_text_the_operator_and_the_tests_read() {
        let (_, body) = move_refused(MoveError::NoSession { id: "x".into() });
        assert_eq!(body, "no session x on this node\n");
        let (_, body) = move_refused(MoveError::NodeNotAlive { node: "n".into() });
        assert_eq!(body, "node n is not a live member of the cluster\n");
        let (_, body) = move_refused(MoveError::AlreadyThere { node: "a".into() });
        assert_eq!(body, "the session is already on a\n");
        let e = MoveError::NotPrepared {
            node: "b".into(),
            source: Box::new(MoveError::Refused {
                node: "b".into(),
                reason: "no camera".into(),
            }),
        };
        assert_eq!(e.to_string(), "b could not prepare: no camera");
    }
}
