//! Bearer-token gate of the admin API, as one layer over the whole router: every route a
//! later change adds is covered without naming it.
//!
//! * Write routes (any method but GET/HEAD) always need the token; with none configured
//!   they are refused (403) — a node without a token is read-only.
//! * Reads need it too when the API listens beyond loopback (without a token configured,
//!   such a node serves only `/api/health`).
//! * `/api/health` is always open (load balancers, process supervisors), and so are reads
//!   of the console's static files (`console::is_static`): the page holds no secret and asks
//!   the operator for the token its API calls need.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use vigil_proto::rtsp::auth::constant_time_eq;

/// What the gate needs to know.
#[derive(Clone)]
pub struct Gate {
    pub token: Option<Arc<str>>,
    /// The API listens on a loopback address only.
    pub loopback: bool,
}

/// Whether a request may pass: None, or the refusal. Pure, for the tests.
pub fn judge(
    gate: &Gate,
    method: &Method,
    path: &str,
    authorization: Option<&str>,
) -> Option<(StatusCode, &'static str)> {
    if path == "/api/health" {
        return None;
    }
    // A WHEP offer (and its resource's DELETE and PATCH) is a viewer's request, gated like
    // HLS: open on loopback, the token beyond it.
    let viewing = method == Method::GET || method == Method::HEAD || path.starts_with("/whep/");
    // A CORS preflight carries no credentials and does nothing: it is answered (with CORS
    // headers only for a cluster member's page) so the request after it can be judged.
    if method == Method::OPTIONS && path.starts_with("/whep/") {
        return None;
    }
    // A PTZ command with an RTSP user's Basic credentials: the route checks the user's
    // `ptz` right itself (`onvif_api::ptz`).
    if method == Method::POST
        && is_ptz(path)
        && authorization
            .is_some_and(|a| a.get(..6).is_some_and(|p| p.eq_ignore_ascii_case("basic ")))
    {
        return None;
    }
    let write = !viewing;
    if !write && (gate.loopback || super::console::is_static(path)) {
        return None;
    }
    let Some(token) = &gate.token else {
        return Some((
            StatusCode::FORBIDDEN,
            "this route needs the admin token: set [http] token or token_file\n",
        ));
    };
    let presented = authorization
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim);
    match presented {
        Some(p) if constant_time_eq(p.as_bytes(), token.as_bytes()) => None,
        _ => Some((
            StatusCode::UNAUTHORIZED,
            "missing or wrong admin token (Authorization: Bearer …)\n",
        )),
    }
}

/// `/api/cameras/<id>/ptz`.
pub fn is_ptz(path: &str) -> bool {
    path.strip_prefix("/api/cameras/")
        .and_then(|r| r.strip_suffix("/ptz"))
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

pub async fn layer(State(gate): State<Gate>, req: Request, next: Next) -> Response {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match judge(&gate, req.method(), req.uri().path(), auth) {
        None => next.run(req).await,
        Some((status, why)) => {
            let mut r = (status, why).into_response();
            if status == StatusCode::UNAUTHORIZED {
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer realm=\"vigil admin\""),
                );
            }
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_always_need_the_token_reads_beyond_loopback() {
        let with = |loopback| Gate {
            token: Some("s3cret".into()),
            loopback,
        };
        let none = Gate {
            token: None,
            loopback: true,
        };
        let post = Method::POST;
        let get = Method::GET;
        // Loopback: reads open, writes need the token.
        assert_eq!(judge(&with(true), &get, "/api/paths", None), None);
        assert_eq!(
            judge(&with(true), &post, "/api/sessions/x/migrate", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            judge(&with(true), &post, "/api/x", Some("Bearer s3cret")),
            None
        );
        assert_eq!(
            judge(&with(true), &Method::DELETE, "/api/x", Some("Bearer wrong")).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        // No token configured: read-only.
        assert_eq!(
            judge(&none, &post, "/api/x", Some("Bearer ")).map(|r| r.0),
            Some(StatusCode::FORBIDDEN)
        );
        // Beyond loopback: reads too, but never health.
        assert_eq!(
            judge(&with(false), &get, "/metrics", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            judge(&with(false), &get, "/metrics", Some("Bearer s3cret")),
            None
        );
        assert_eq!(judge(&with(false), &get, "/api/health", None), None);
        // PTZ with a user's Basic credentials goes to the route, which checks the right;
        // no other write does.
        let basic = Some("Basic b3A6cHc=");
        assert_eq!(
            judge(&with(false), &post, "/api/cameras/gate/ptz", basic),
            None
        );
        for path in [
            "/api/cameras/gate/onvif",
            "/api/cameras/ptz",
            "/api/cameras/a/b/ptz",
        ] {
            assert_eq!(
                judge(&with(false), &post, path, basic).map(|r| r.0),
                Some(StatusCode::UNAUTHORIZED),
                "{path}"
            );
        }
        assert!(judge(&with(false), &post, "/api/cameras/gate/ptz", Some("Basé")).is_some());
        let open = Gate {
            token: None,
            loopback: false,
        };
        assert_eq!(
            judge(&open, &get, "/api/paths", None).map(|r| r.0),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(judge(&open, &get, "/api/health", None), None);
        // The console's page and files: open to read anywhere, never to write.
        assert_eq!(judge(&with(false), &get, "/", None), None);
        assert_eq!(judge(&open, &get, "/console/console.js", None), None);
        assert_eq!(
            judge(&with(false), &post, "/", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            judge(&with(false), &get, "/api/cameras", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
    }

    #[test]
    fn a_whep_offer_is_gated_as_a_viewer_not_as_a_write() {
        let gate = |loopback| Gate {
            token: Some("s3cret".into()),
            loopback,
        };
        let post = Method::POST;
        // On loopback a viewer needs no token, as for HLS; beyond it, it does.
        assert_eq!(judge(&gate(true), &post, "/whep/live/cam", None), None);
        assert_eq!(
            judge(&gate(false), &post, "/whep/live/cam", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            judge(&gate(false), &post, "/whep/live/cam", Some("Bearer s3cret")),
            None
        );
        assert_eq!(
            judge(&gate(false), &Method::DELETE, "/whep/resource/x", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        // Steering a recording beyond loopback needs the token as the offer did.
        for m in [&post, &Method::GET] {
            assert_eq!(
                judge(&gate(false), m, "/whep/resource/x/control", None).map(|r| r.0),
                Some(StatusCode::UNAUTHORIZED),
                "{m}"
            );
        }
        // A CORS preflight carries no credentials: answered beyond loopback too.
        assert_eq!(
            judge(&gate(false), &Method::OPTIONS, "/whep/live/cam", None),
            None
        );
        assert_eq!(
            judge(&gate(false), &Method::OPTIONS, "/api/sessions", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        // Only the WHEP prefix: another write on loopback still needs the token.
        assert_eq!(
            judge(&gate(true), &post, "/api/whep/live/cam", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
    }
}
