//! Live viewers across nodes (issue 11 §3): where a live DESCRIBE is served — the camera's
//! holder, or an edge relaying from it — decided by the elected scheduler with
//! `vigil_cluster::place_live`, and where an edge relays from.

use vigil_cluster::{Request, RequestKind};

use super::now_ms;
use super::placement::{How, Placement};
use super::report;
use super::shell::{Cluster, State};

impl Cluster {
    /// The node a pull camera is bound to, else the node holding `camera` live from its own
    /// source (this one included); and the nodes relaying it.
    fn holder_and_edges(st: &State, camera: &str) -> Option<(String, Vec<String>)> {
        let reports = || {
            st.members
                .iter()
                .filter(|m| m.alive)
                .filter_map(|m| Some((m, m.report.as_ref()?)))
        };
        // A pull camera's binding names its holder even while a move has the destination
        // pulling it too (both report it live then).
        let bound = st
            .bindings
            .cameras
            .get(camera)
            .filter(|b| reports().any(|(m, _)| &m.id == *b))
            .cloned();
        let holder = bound.or_else(|| {
            reports()
                .find(|(_, r)| r.live.iter().any(|c| c == camera))
                .map(|(m, _)| m.id.clone())
        })?;
        let edges = reports()
            .filter(|(m, r)| m.id != holder && r.edges.iter().any(|c| c == camera))
            .map(|(m, _)| m.id.clone())
            .collect();
        Some((holder, edges))
    }

    /// Where a new live viewer of `camera` is served: None when no node holds it (the
    /// DESCRIBE is answered here as without a cluster). Asks the elected scheduler; decides
    /// from this node's view when it cannot be reached.
    pub async fn place_live(&self, camera: &str) -> Option<Placement> {
        let req = Request {
            camera: camera.to_string(),
            time_ms: now_ms(),
            vbr_bps: report::DEFAULT_VBR_BPS,
            kind: RequestKind::Live,
        };
        let (holder, edges) = Self::holder_and_edges(&self.state(), camera)?;
        let via = match self.ask_scheduler(&req).await {
            Ok(Some(p)) => return Some(p),
            Ok(None) if self.rpc.is_none() => "local",
            Ok(None) => "scheduler",
            Err(e) => {
                tracing::warn!(error = %e, camera, "scheduler not reached: deciding locally");
                "local fallback"
            }
        };
        let how = How::Live { holder, edges };
        let (_, placement, _) = self.decide_excluding(&req, how, "live", true, None, via, None);
        Some(placement)
    }

    /// Where a live viewer of `camera` served here goes when this node drains: the live
    /// placement as for a new viewer, this node left out.
    pub fn place_live_elsewhere(&self, camera: &str) -> Result<String, String> {
        let req = Request {
            camera: camera.to_string(),
            time_ms: now_ms(),
            vbr_bps: report::DEFAULT_VBR_BPS,
            kind: RequestKind::Live,
        };
        let (holder, edges) = Self::holder_and_edges(&self.state(), camera)
            .ok_or_else(|| format!("no node holds camera {camera} live"))?;
        self.decide_elsewhere(&req, How::Live { holder, edges })
    }

    /// The scheduler's side of a live placement asked by `from`: the chosen node, or the
    /// reason none can serve it.
    pub(super) fn decide_live_for(
        &self,
        req: &Request,
        from: &str,
    ) -> Result<(Option<String>, String), String> {
        let Some((holder, edges)) = Self::holder_and_edges(&self.state(), &req.camera) else {
            return Err(format!("no node holds camera {} live", req.camera));
        };
        let how = How::Live { holder, edges };
        let (node, _, reason) =
            self.decide_excluding(req, how, "live", true, Some(from), "scheduler", None);
        Ok((node, reason))
    }

    /// Another node holding `camera` (live, or bound to it), to relay it from.
    pub fn live_holder_of(&self, camera: &str) -> Option<String> {
        let (holder, _) = Self::holder_and_edges(&self.state(), camera)?;
        (holder != self.self_id).then_some(holder)
    }

    /// Where this node, as an edge, relays `camera` from: the holder's id and the URL of its
    /// `live/<camera>` with a fresh placement marker (the cluster's credential; one
    /// connection each). None when the camera has no other holder.
    pub fn relay_source(&self, camera: &str) -> Option<(String, String)> {
        let (holder, base) = {
            let st = self.state();
            let (holder, _) = Self::holder_and_edges(&st, camera)?;
            if holder == self.self_id {
                return None;
            }
            let base = st
                .members
                .iter()
                .find(|m| m.id == holder)
                .and_then(|m| m.report.as_ref())
                .map(|r| r.rtsp.clone())?;
            (holder, base)
        };
        let uri = format!("{}/live/{camera}", base.trim_end_matches('/'));
        let user = format!("edge:{}", self.self_id);
        Some((holder, self.redirect_url(&base, &uri, &user)))
    }
}
