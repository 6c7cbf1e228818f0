//! `GET /api/cluster/plan`: the §D.2 planner's last plan and the last one that moved
//! sessions (prediction, method, objective, solve time, each move and its result). Any node
//! answers with what it planned; only the elected scheduler plans.

use crate::cluster::PlanView;
use crate::node::Node;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;

pub fn router<S: Clone + Send + Sync + 'static>(node: Arc<Node>) -> Router<S> {
    Router::new()
        .route("/api/cluster/plan", get(plan))
        .with_state(node)
}

async fn plan(State(node): State<Arc<Node>>) -> Result<Json<PlanView>, (StatusCode, String)> {
    let c = node.cluster.get().ok_or((
        StatusCode::NOT_FOUND,
        "the cluster is off on this node\n".to_string(),
    ))?;
    Ok(Json(c.plan_view()))
}
