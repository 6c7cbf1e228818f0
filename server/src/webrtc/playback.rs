//! A recording over WebRTC: the offer (placed at the recording's bitrate, started where
//! `playback::locate` finds the start, as RTSP's) and the viewer's steering of it
//! (`POST /whep/resource/<id>/control`) by the rules of `vigil_session::steer`.

use super::negotiate::carried_tracks;
use super::{peer, recording, Answered, Service, Viewer, WhepError};
use crate::playback::locate::{first_segment, index, locate, Bounds, LocateError, Opens};
use crate::playback::task::Cursor;
use std::sync::Arc;
use vigil_proto::codec::Codec as HubCodec;

impl Service {
    /// Answers a WHEP offer for a recording of `camera` (`query`: `start=…[&end=…]`, as the
    /// RTSP playback URL's): the same sender as RTSP playback, from the keyframe at or
    /// before `start`, to `end` or the recording's end.
    pub async fn offer_playback(
        self: &Arc<Service>,
        camera: &str,
        query: Option<&str>,
        offer: &str,
        viewer: Viewer<'_>,
    ) -> Result<Answered, WhepError> {
        self.admit(viewer)?;
        let node = &self.node;
        let req = crate::playback::request::parse(&format!("playback/{camera}"), query)
            .map_err(|e| WhepError::BadRequest(e.message))?
            .ok_or_else(|| WhepError::NoRecording(camera.to_string()))?;
        let library = self.library(camera)?;
        let (start, seg) = self
            .locate(
                &library,
                &req.camera,
                req.start_ms,
                req.end_ms,
                Opens::Counted,
            )
            .await?;
        let sdp = vigil_proto::sdp::parse(&seg.0.header.sdp)
            .map_err(|e| WhepError::Storage(e.to_string()))?;
        let codecs: Vec<HubCodec> = sdp.media.iter().map(|m| m.codec()).collect();
        let tracks = carried_tracks(camera, &codecs)?;
        let plan = recording::Plan {
            library,
            tracks: vigil_session::tracks::new_tracks(&sdp, &[]),
            template: recording::Template {
                camera: req.camera.clone(),
                cname: node.config.node.id.clone(),
                payload_max: node.config.rtsp.rtp_payload_max(),
            },
            steer: vigil_session::Steer::new(
                req.end_ms,
                node.config.playback.keyframes_only_above_scale,
            ),
            start,
            shown: Default::default(),
        };
        self.answer(
            &format!("playback/{camera}"),
            offer,
            viewer,
            &tracks,
            peer::Source::Recording(Box::new(plan)),
        )
    }

    fn library(&self, camera: &str) -> Result<crate::library::Library, WhepError> {
        self.node
            .library
            .clone()
            .ok_or_else(|| WhepError::NoRecording(camera.to_string()))
    }

    /// The bitrate of the recording where a playback of `camera` from `t_ms` starts — what
    /// a placement expects the playback to cost, as an RTSP DESCRIBE's — or None when
    /// nothing plays from there (the offer is then refused here, not placed).
    pub async fn start_bitrate(&self, camera: &str, t_ms: i64, end_ms: Option<i64>) -> Option<f64> {
        let library = self.library(camera).ok()?;
        let (_, first) = first_segment(&library, camera, t_ms, self.bounds(end_ms))
            .await
            .ok()?;
        Some(
            first
                .bitrate_bps()
                .unwrap_or(crate::cluster::report::DEFAULT_VBR_BPS),
        )
    }

    /// How a start is found here: `[playback] start_tolerance_secs`, `[storage]
    /// request_read_timeout_ms`.
    fn bounds(&self, end_ms: Option<i64>) -> Bounds {
        Bounds::of(&self.node.config, end_ms)
    }

    /// Where a recording of `camera` plays from `t_ms` (`playback::locate`, as RTSP's
    /// seek).
    async fn locate(
        &self,
        library: &crate::library::Library,
        camera: &str,
        t_ms: i64,
        end_ms: Option<i64>,
        opens: Opens,
    ) -> Result<(Cursor, Arc<crate::library::CachedSegment>), WhepError> {
        let bounds = self.bounds(end_ms);
        let found = async {
            let index = index(library, camera, bounds.read_limit).await?;
            locate(library, &index, t_ms, bounds, opens).await
        };
        found.await.map_err(|e| match e {
            LocateError::NoCamera(_) | LocateError::NotRecorded(_) => {
                WhepError::NoRecording(camera.to_string())
            }
            LocateError::TimedOut(_) => WhepError::Storage(e.to_string()),
            LocateError::Read(e) => WhepError::Storage(e.to_string()),
        })
    }

    /// Steers the recording of resource `id` (`POST /whep/resource/<id>/control`): a seek's
    /// position is found before the peer is told, so a seek to nothing changes nothing.
    pub async fn control(
        &self,
        id: &str,
        control: vigil_session::Control,
    ) -> Result<vigil_session::SteerState, WhepError> {
        let (commands, playback) = {
            let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            let h = peers.by_id.get(id).ok_or(WhepError::NoResource)?;
            (h.commands.clone(), h.playback.clone())
        };
        let (camera, end_ms, _) = playback.ok_or(WhepError::NotPlayback)?;
        let cursor = match control {
            vigil_session::Control::Seek(t) => {
                // The steer's refusal (past the URL's end) before any read.
                if let Some(end) = end_ms.filter(|e| t >= *e) {
                    return Err(vigil_session::SteerError::PastEnd {
                        at_ms: t,
                        end_ms: end,
                    }
                    .into());
                }
                let library = self.library(&camera)?;
                Some(
                    self.locate(&library, &camera, t, end_ms, Opens::Seek)
                        .await?
                        .0,
                )
            }
            _ => None,
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        commands
            .send(recording::Command {
                control,
                cursor,
                reply,
            })
            .await
            .map_err(|_| WhepError::NoResource)?;
        answer.await.map_err(|_| WhepError::NoResource)?
    }

    /// Where the recording of resource `id` is: its steer state (None for a live viewer).
    pub fn steer_state(&self, id: &str) -> Result<vigil_session::SteerState, WhepError> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let h = peers.by_id.get(id).ok_or(WhepError::NoResource)?;
        let (_, _, shown) = h.playback.as_ref().ok_or(WhepError::NotPlayback)?;
        let state = *shown.lock().unwrap_or_else(|p| p.into_inner());
        Ok(state)
    }

    /// The media time (UTC ms) of the last frame resource `id` was sent.
    pub fn position_ms(&self, id: &str) -> Option<i64> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let ms = peers
            .by_id
            .get(id)?
            .info
            .position_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        (ms > 0).then_some(ms)
    }
}
