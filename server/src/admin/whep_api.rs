//! WHEP (WebRTC-HTTP egress, RFC 9725) on the admin listener: `POST /whep/live/<camera>`
//! takes an SDP offer and answers 201 with the SDP answer and the resource's URL;
//! `DELETE` on that URL ends the peer; `POST <resource>/control` steers a recording (seek,
//! pause, resume, Scale: JSON, answered with where the playback is). Gated like HLS by the token layer (`token`): open
//! on loopback, the token beyond it.

use crate::webrtc::{Service, WhepError};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{patch, post};
use axum::Router;
use std::net::SocketAddr;
use std::sync::Arc;

/// The WebRTC service when `[webrtc] enabled`.
pub type WebRtc = Option<Arc<Service>>;

/// The cluster shell when `[cluster] enabled`.
type ClusterState = Option<Arc<crate::cluster::Cluster>>;

pub(super) fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    WebRtc: axum::extract::FromRef<S>,
    ClusterState: axum::extract::FromRef<S>,
{
    Router::new()
        .route("/whep/live/{camera}", post(offer_live).options(preflight))
        .route(
            "/whep/playback/{camera}",
            post(offer_playback).options(preflight),
        )
        .route(
            "/whep/resource/{id}",
            patch(trickle).delete(end).options(preflight),
        )
        .route(
            "/whep/resource/{id}/control",
            post(control).get(control_state).options(preflight),
        )
}

/// CORS for a page of another cluster member (its console playing a camera this node
/// holds, after the 307): that origin only, never `*` (a page from anywhere must not open
/// viewers on a loopback node).
fn with_cors(cluster: &ClusterState, headers: &HeaderMap, mut r: Response) -> Response {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return r;
    };
    if !cluster.as_ref().is_some_and(|c| c.is_member_origin(origin)) {
        return r;
    }
    let h = r.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(header::VARY, header::HeaderValue::from_static("Origin"));
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        header::HeaderValue::from_static("GET, POST, PATCH, DELETE, OPTIONS"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        header::HeaderValue::from_static("Content-Type, Authorization"),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        header::HeaderValue::from_static("Location, X-Vigil-Not-Carried"),
    );
    r
}

/// A browser's preflight before a cross-origin offer or DELETE.
async fn preflight(State(cluster): State<ClusterState>, headers: HeaderMap) -> Response {
    with_cors(&cluster, &headers, StatusCode::NO_CONTENT.into_response())
}

/// The HTTP status of a refusal, from its kind.
pub fn status_of(e: &WhepError) -> StatusCode {
    match e {
        WhepError::Off | WhepError::Full(_) | WhepError::UserFull(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        WhepError::NotLive(_) | WhepError::NoResource | WhepError::NoRecording(_) => {
            StatusCode::NOT_FOUND
        }
        WhepError::Storage(_) => StatusCode::SERVICE_UNAVAILABLE,
        WhepError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        WhepError::BadOffer(_) | WhepError::NoVideo | WhepError::BadRequest(_) => {
            StatusCode::BAD_REQUEST
        }
        WhepError::Codec { .. } | WhepError::NotSdp => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        WhepError::Rtc(_) => StatusCode::INTERNAL_SERVER_ERROR,
        WhepError::NotPlayback | WhepError::NotConnected => StatusCode::CONFLICT,
        WhepError::Steer(vigil_session::SteerError::Ended) => StatusCode::CONFLICT,
        WhepError::Steer(_) => StatusCode::BAD_REQUEST,
    }
}

fn refuse(e: WhepError) -> Response {
    let mut r = (status_of(&e), format!("{e}\n")).into_response();
    if let WhepError::RateLimited(wait) = e {
        let secs = wait.as_secs().max(1).to_string();
        if let Ok(v) = header::HeaderValue::from_str(&secs) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    r
}

/// The service, and the offer when the body says it is SDP; else the refusal.
fn offered(webrtc: WebRtc, headers: &HeaderMap) -> Result<Arc<Service>, WhepError> {
    let svc = webrtc.ok_or(WhepError::Off)?;
    let sdp = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/sdp"));
    if !sdp {
        return Err(WhepError::NotSdp);
    }
    Ok(svc)
}

/// The header naming the camera's tracks a WebRTC viewer does not get (AAC audio, a
/// second video): WebRTC has no payload format for AAC, and this node does not transcode.
pub const NOT_CARRIED: &str = "x-vigil-not-carried";

fn answered(r: Result<crate::webrtc::Answered, WhepError>) -> Response {
    match r {
        Ok(a) => {
            let mut r = (
                StatusCode::CREATED,
                [
                    (header::CONTENT_TYPE, "application/sdp".to_string()),
                    (header::LOCATION, format!("/whep/resource/{}", a.id)),
                ],
                a.sdp,
            )
                .into_response();
            if !a.not_carried.is_empty() {
                let why = format!(
                    "{} (no WebRTC payload format here; no transcoding: use RTSP or HLS for them)",
                    a.not_carried.join(", ")
                );
                if let Ok(v) = header::HeaderValue::from_str(&why) {
                    r.headers_mut().insert(NOT_CARRIED, v);
                }
            }
            r
        }
        Err(e) => refuse(e),
    }
}

/// The offer's viewer as the WebRTC service counts and records it.
fn viewer<'a>(client: SocketAddr, who: &'a super::access::Principal) -> crate::webrtc::Viewer<'a> {
    crate::webrtc::Viewer {
        client,
        name: who.name(),
        limit_key: who.limit_key(),
    }
}

/// `POST /whep/live/<camera>`: answered here when the camera is live here; in a cluster,
/// 307 to the node holding it with a signed marker for the viewer (a WHEP client repeats
/// its POST there, without the credentials it gave here). A marker serves one offer.
#[allow(clippy::too_many_arguments)] // axum extractors, each one thing the offer needs
async fn offer_live(
    State(webrtc): State<WebRtc>,
    State(cluster): State<ClusterState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    axum::Extension(who): axum::Extension<super::access::Principal>,
    Path(camera): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    body: String,
) -> Response {
    if let (Some(c), Some(q)) = (&cluster, &query) {
        let url = format!("http://node/whep/live/{camera}?{q}");
        if c.marker_user(&url).is_some() && c.accept_marker(&url, rand::random()).is_none() {
            let r = (StatusCode::FORBIDDEN, "this redirect was used already\n").into_response();
            return with_cors(&cluster, &headers, r);
        }
    }
    let r = match offered(webrtc, &headers) {
        Ok(svc) => match svc.offer_live(&camera, &body, viewer(client, &who)) {
            Err(WhepError::NotLive(_)) if cluster.is_some() => {
                let holder = cluster
                    .as_ref()
                    .and_then(|c| Some((c, c.live_holder_api(&camera)?)));
                match holder {
                    Some((c, (node, api))) => {
                        let base = crate::cluster::Cluster::api_base(&api);
                        let url = format!("http://node/whep/live/{camera}");
                        let to = c.redirect_url(&base, &url, who.name());
                        // Not the location: its marker lets whoever holds it view.
                        tracing::info!(camera, %node, "WHEP offer redirected");
                        (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)]).into_response()
                    }
                    None => refuse(WhepError::NotLive(camera.clone())),
                }
            }
            r => answered(r),
        },
        Err(e) => refuse(e),
    };
    with_cors(&cluster, &headers, r)
}

/// `POST /whep/playback/<camera>?start=<RFC 3339>[&end=…]`: a recording from that moment,
/// served where the cluster's placement puts it (as an RTSP playback DESCRIBE: 307 to the
/// chosen member's WHEP URL with a signed marker, which that member serves unplaced).
#[allow(clippy::too_many_arguments)] // axum extractors, each one thing the offer needs
async fn offer_playback(
    State(webrtc): State<WebRtc>,
    State(cluster): State<ClusterState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    axum::Extension(who): axum::Extension<super::access::Principal>,
    Path(camera): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    body: String,
) -> Response {
    let r = match offered(webrtc, &headers) {
        Ok(svc) => match place(&cluster, &svc, &camera, query.as_deref(), who.name()).await {
            Some(r) => r,
            None => answered(
                svc.offer_playback(&camera, query.as_deref(), &body, viewer(client, &who))
                    .await,
            ),
        },
        Err(e) => refuse(e),
    };
    with_cors(&cluster, &headers, r)
}

/// Cluster placement of a playback offer: None to serve it here (no cluster, a valid
/// marker, or the placement says so), or the 307 / 503. A bad URL, or a time with nothing
/// recorded, is left to the offer's own refusal (as an RTSP DESCRIBE's 404 comes from the
/// node asked).
async fn place(
    cluster: &ClusterState,
    svc: &crate::webrtc::Service,
    camera: &str,
    query: Option<&str>,
    user: &str,
) -> Option<Response> {
    let cluster = cluster.as_ref()?;
    // The request's own URL (a path-safe camera id: `request::parse` refuses others).
    let url = match query {
        Some(q) => format!("http://node/whep/playback/{camera}?{q}"),
        None => format!("http://node/whep/playback/{camera}"),
    };
    // Each offer is its own "connection": a marker serves one offer, never a replay.
    if cluster.accept_marker(&url, rand::random()).is_some() {
        return None;
    }
    let req = crate::playback::request::parse(&format!("playback/{camera}"), query).ok()??;
    let vbr = svc
        .start_bitrate(&req.camera, req.start_ms, req.end_ms)
        .await?;
    match cluster.place_playback(&req.camera, req.start_ms, vbr).await {
        crate::cluster::Placement::Local => None,
        crate::cluster::Placement::Redirect { node, .. } => {
            let api = cluster.member_api(&node)?;
            let to = cluster.redirect_url(&crate::cluster::Cluster::api_base(&api), &url, user);
            tracing::info!(camera, %node, "WHEP playback offer placed on another node");
            Some((StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to)]).into_response())
        }
        crate::cluster::Placement::Reject(reason) => {
            Some((StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response())
        }
    }
}

/// Trickled candidates are taken and not needed: the node is ICE-lite, so it learns each
/// address a viewer checks from (its peer-reflexive candidates) from the checks themselves.
async fn trickle(State(webrtc): State<WebRtc>, Path(id): Path<String>) -> Response {
    match webrtc.map(|s| s.exists(&id)) {
        Some(true) => StatusCode::NO_CONTENT.into_response(),
        Some(false) => refuse(WhepError::NoResource),
        None => refuse(WhepError::Off),
    }
}

async fn end(
    State(webrtc): State<WebRtc>,
    State(cluster): State<ClusterState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let r = match webrtc.map(|svc| svc.delete(&id)) {
        Some(Ok(())) => StatusCode::OK.into_response(),
        Some(Err(e)) => refuse(e),
        None => refuse(WhepError::Off),
    };
    with_cors(&cluster, &headers, r)
}

/// A recording viewer's control, as the console (or any WHEP client) sends it.
#[derive(serde::Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
enum ControlBody {
    /// `at`: an RFC 3339 time, as the playback URL's `start=`.
    Seek {
        at: String,
    },
    Pause,
    Resume,
    Scale {
        scale: f64,
    },
}

/// `POST /whep/resource/<id>/control` with `{"op":"seek","at":"…"}`, `{"op":"pause"}`,
/// `{"op":"resume"}` or `{"op":"scale","scale":2}`: 200 and where the playback is.
async fn control(
    State(webrtc): State<WebRtc>,
    State(cluster): State<ClusterState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let r = match webrtc {
        None => refuse(WhepError::Off),
        Some(svc) => match parse_control(&body) {
            Err(e) => refuse(e),
            Ok(c) => match svc.control(&id, c).await {
                Ok(state) => steered(&svc, &id, state),
                Err(e) => refuse(e),
            },
        },
    };
    with_cors(&cluster, &headers, r)
}

/// `GET /whep/resource/<id>/control`: where the recording is, without changing it.
async fn control_state(
    State(webrtc): State<WebRtc>,
    State(cluster): State<ClusterState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let r = match webrtc {
        None => refuse(WhepError::Off),
        Some(svc) => match svc.steer_state(&id) {
            Ok(state) => steered(&svc, &id, state),
            Err(e) => refuse(e),
        },
    };
    with_cors(&cluster, &headers, r)
}

fn steered(svc: &Service, id: &str, state: vigil_session::SteerState) -> Response {
    axum::Json(serde_json::json!({
        "scale": state.scale,
        "paused": state.paused,
        "ended": state.ended,
        "position_ms": svc.position_ms(id),
    }))
    .into_response()
}

fn parse_control(body: &[u8]) -> Result<vigil_session::Control, WhepError> {
    use vigil_session::Control;
    let body: ControlBody = serde_json::from_slice(body).map_err(|e| {
        WhepError::BadRequest(format!(
            "a control is JSON: {{\"op\":\"seek\",\"at\":\"<RFC 3339>\"}}, {{\"op\":\"pause\"}}, \
             {{\"op\":\"resume\"}} or {{\"op\":\"scale\",\"scale\":2}} ({e})"
        ))
    })?;
    Ok(match body {
        ControlBody::Seek { at } => {
            let span = vigil_proto::rtsp::TimeSpan::parse(Some(&at), None)
                .map_err(|e| WhepError::BadRequest(format!("seek: {e}")))?;
            Control::Seek(span.start_ms)
        }
        ControlBody::Pause => Control::Pause,
        ControlBody::Resume => Control::Resume,
        ControlBody::Scale { scale } => Control::Scale(scale),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_session::Control;

    #[test]
    fn controls_parse_from_json_and_bad_ones_say_what_is_expected() {
        assert_eq!(
            parse_control(br#"{"op":"seek","at":"2026-11-29T08:00:00Z"}"#).ok(),
            Some(Control::Seek(1_795_939_200_000))
        );
        assert_eq!(
            parse_control(br#"{"op":"pause"}"#).ok(),
            Some(Control::Pause)
        );
        assert_eq!(
            parse_control(br#"{"op":"scale","scale":0.5}"#).ok(),
            Some(Control::Scale(0.5))
        );
        for bad in [
            &b"{}"[..],
            br#"{"op":"rewind"}"#,
            br#"{"op":"seek","at":"yesterday"}"#,
            br#"{"op":"scale","scale":"fast"}"#,
            b"\xff\xfe",
        ] {
            let e = parse_control(bad).err();
            assert!(
                matches!(&e, Some(WhepError::BadRequest(m)) if m.contains("op") || m.contains("RFC 3339")),
                "{:?}: {e:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
