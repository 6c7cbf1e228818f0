//! `GET /api/audit?camera=&user=&kind=&from=&to=&limit=&cursor=&order=`: the audit trail
//! of every node on the shared root (so across the cluster, from any node), oldest first
//! (`order=newest`: newest first), a page at a time. The admin role's (an unnamed route for
//! `access::need`).

use crate::audit::chain::Record;
use crate::audit::store::{self, Query};
use crate::node::Node;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;

/// A page holds at most this many records.
pub const MAX_LIMIT: usize = 1000;

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct AuditPage {
    pub records: Vec<Record>,
    /// The `cursor` of the next page, when there may be one.
    pub next: Option<String>,
}

pub(super) fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Arc<Node>: axum::extract::FromRef<S>,
{
    Router::new().route("/api/audit", get(audit))
}

fn bad(why: String) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, format!("{why}\n"))
}

/// The query and page of a request's parameters.
pub fn parse(query: Option<&str>) -> Result<(Query, usize, usize), String> {
    let mut q = Query::default();
    let (mut limit, mut skip) = (100usize, 0usize);
    let time = |v: &str| {
        vigil_proto::rtsp::UtcTime::parse_rfc3339(v)
            .map(|t| t.unix_millis)
            .map_err(|e| e.to_string())
    };
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "camera" => q.camera = Some(v.into_owned()),
            "user" => q.user = Some(v.into_owned()),
            "kind" => q.kind = Some(v.into_owned()),
            "from" => q.from_ms = Some(time(&v)?),
            "to" => q.to_ms = Some(time(&v)?),
            "limit" => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|l| (1..=MAX_LIMIT).contains(l))
                    .ok_or_else(|| format!("limit must be 1–{MAX_LIMIT}"))?
            }
            "cursor" => {
                skip = v
                    .parse()
                    .map_err(|_| "a cursor from a `next`".to_string())?
            }
            "order" => {
                q.newest_first = match v.as_ref() {
                    "newest" => true,
                    "oldest" => false,
                    _ => return Err("order is newest or oldest".into()),
                }
            }
            other => return Err(format!("unknown parameter {other:?}")),
        }
    }
    Ok((q, skip, limit))
}

async fn audit(
    State(node): State<Arc<Node>>,
    RawQuery(query): RawQuery,
) -> Result<Json<AuditPage>, (StatusCode, String)> {
    let Some(audit) = node.audit.clone() else {
        return Err((
            StatusCode::NOT_FOUND,
            "no audit trail on this node ([audit] enabled with recording on)\n".into(),
        ));
    };
    let (q, skip, limit) = parse(query.as_deref()).map_err(bad)?;
    let dir = audit.dir.clone();
    // One more than the page: whether a next page exists.
    let found = tokio::task::spawn_blocking(move || store::query(&dir, &q, skip, limit + 1))
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")))?
        .map_err(|e| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the audit trail cannot be read: {e}\n"),
            )
        })?;
    let more = found.len() > limit;
    let records: Vec<Record> = found.into_iter().take(limit).collect();
    Ok(Json(AuditPage {
        next: more.then(|| (skip + records.len()).to_string()),
        records,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_checked() {
        let (q, skip, limit) = parse(Some(
            "camera=gate-1&user=guard&from=2026-12-06T14:00:00Z&limit=5&cursor=10",
        ))
        .expect("good");
        assert_eq!(q.camera.as_deref(), Some("gate-1"));
        assert_eq!(q.user.as_deref(), Some("guard"));
        assert_eq!(q.from_ms, Some(1_796_565_600_000));
        assert_eq!((skip, limit), (10, 5));
        for bad in [
            "from=yesterday",
            "limit=0",
            "limit=5000",
            "cursor=x",
            "color=red",
        ] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(parse(None).expect("none").2, 100);
    }
}
