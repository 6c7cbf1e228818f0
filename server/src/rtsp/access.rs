//! The gate at request dispatch: a signed placement marker from another node, then the
//! node's authentication and rights (`crate::auth`), before any method runs.

use super::conn::Conn;
use crate::auth::{required, Right};
use vigil_proto::rtsp::{Method, Request, Response, StatusCode};

impl Conn {
    /// The 503 for a request past this connection's `limits.requests_per_sec`, if it is.
    pub(super) fn over_request_rate(&mut self, req: &Request) -> Option<Response> {
        let wait = self.requests.take(std::time::Instant::now()).err()?;
        crate::limits::LimitStats::bump(&self.node.limit_stats.request_rate);
        let mut resp = Response::new(StatusCode::SERVICE_UNAVAILABLE);
        resp.reason = "Service Unavailable (too many requests on this connection)".into();
        resp = resp.header("Retry-After", retry_after(wait));
        if let Some(cseq) = req.cseq() {
            resp = resp.header("CSeq", cseq.to_string());
        }
        Some(resp)
    }

    /// None: the request may proceed. Some: the refusal to answer instead.
    pub(super) fn gate(&mut self, req: &Request) -> Option<Response> {
        self.placed = false;
        let path = super::handler::url_path(&req.uri).unwrap_or_default();
        let announced = self.announced.as_ref().map(|a| a.path.name.as_str());
        let need: Option<(Right, String)> = required(&req.method, &path, announced);
        if req.method == Method::Describe {
            let limited = self
                .node
                .describes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(self.peer.ip(), std::time::Instant::now());
            if let Err(wait) = limited {
                crate::limits::LimitStats::bump(&self.node.limit_stats.describe_rate);
                let mut r = Response::new(StatusCode::SERVICE_UNAVAILABLE);
                r.reason = "Service Unavailable (too many DESCRIBEs from this address)".into();
                return Some(r.header("Retry-After", retry_after(wait)));
            }
            if let Some(cluster) = &self.cluster {
                if let Some(marker) = cluster.accept_marker(&req.uri, self.auth.id) {
                    if let Some(refusal) = self.relay_loop(&path, &marker.user) {
                        return Some(refusal);
                    }
                    // The node that redirected here placed the request and, with [auth],
                    // checked this right for marker.user: no second login, no second placement.
                    self.placed = true;
                    if let Some(n) = need.clone() {
                        tracing::debug!(user = %marker.user, "placed by another node");
                        self.auth.grant_placed(n);
                    }
                }
            }
        }
        let peer = self.peer.ip();
        self.node.auth.check(&mut self.auth, req, need, peer).err()
    }
}

impl Conn {
    /// A relay request (`user`: `edge:<node>`, signed into the marker) from the very node
    /// this one relays `path` from is refused: serving it would close a loop with no source
    /// in it. A drain or move that re-binds a camera to its edge opens one for a moment —
    /// the old holder starts relaying from the new one before the new one has taken the
    /// camera over (`ingest::pull::take_over`) — and in that moment the two nodes replayed
    /// each other's GOP caches back and forth, megabytes in a fraction of a second, which
    /// threw the edge's viewers thousands of packets ahead. The refused relay retries
    /// (backoff), by when the new holder pulls the camera itself.
    fn relay_loop(&self, path: &str, user: &str) -> Option<Response> {
        let from = user.strip_prefix("edge:")?;
        let entry = self.node.path(path)?;
        if entry.relay_from().as_deref() != Some(from) {
            return None;
        }
        tracing::info!(%path, node = %from, "refused a relay to the node this one relays from");
        let mut r = Response::new(StatusCode::SERVICE_UNAVAILABLE);
        r.reason = "Service Unavailable (this node relays the camera from you)".into();
        Some(r.header("Retry-After", "1"))
    }
}

/// A `Retry-After` value: whole seconds, at least 1.
fn retry_after(wait: std::time::Duration) -> String {
    (wait.as_secs_f64().ceil().max(1.0) as u64).to_string()
}
