//! `GET /api/cluster/plan`: the §D.2 planner's last plan and the last one that moved
//! sessions (prediction, method, objective, solve time, each move and its result). Any node
//! answers with what it planned; only the elected scheduler plans.

use super::api::AppState;
use crate::cluster::{Cluster, PlanView};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;

pub(super) fn router() -> Router<AppState> {
    Router::new().route("/api/cluster/plan", get(plan))
}

async fn plan(
    State(cluster): State<Option<Arc<Cluster>>>,
) -> Result<Json<PlanView>, (StatusCode, String)> {
    let c = cluster.ok_or((
        StatusCode::NOT_FOUND,
        "the cluster is off on this node\n".to_string(),
    ))?;
    Ok(Json(c.plan_view()))
}
