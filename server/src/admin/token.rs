//! Bearer-token gate of the admin API, as one layer over the whole router: every route a
//! later change adds is covered without naming it.
//!
//! * Write routes (any method but GET/HEAD) always need the token; with none configured
//!   they are refused (403) — a node without a token is read-only.
//! * Reads need it too unless the request is *local*: it came in on the plain listener
//!   bound to loopback, from a loopback peer, naming a loopback host (`Arrival`). The HTTPS
//!   listener never grants anything by place — it is the one that serves the network, and it
//!   once inherited the plain listener's loopback exemption, which served every recording to
//!   anyone who reached it. The `Host` check keeps a web page that DNS-rebinds its own name
//!   to 127.0.0.1 from reading the loopback API with the operator's browser.
//! * `/api/health` is always open (load balancers, process supervisors), and so are reads
//!   of the console's static files (`console::is_static`): the page holds no secret and asks
//!   the operator for the token its API calls need.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use vigil_proto::rtsp::auth::constant_time_eq;

/// What the gate needs to know.
#[derive(Clone)]
pub struct Gate {
    pub token: Option<Arc<str>>,
}

/// The gate's state in the router: the rule above, and the node whose back-off counts wrong
/// tokens (`Auth::bearer_failed`).
#[derive(Clone)]
pub struct GateState {
    pub gate: Gate,
    pub node: Arc<crate::node::Node>,
}

/// The longest random pause before a wrong token is answered: a guesser learns nothing
/// from timing and gets fewer tries per connection.
const FAILURE_JITTER_MS: u64 = 300;

/// Whether `authorization` presents a bearer token at all.
fn presents_bearer(authorization: Option<&str>) -> bool {
    authorization.is_some_and(|a| {
        a.get(..7)
            .is_some_and(|p| p.eq_ignore_ascii_case("bearer "))
    })
}

/// Where one connection came in, set by the accept loop (`listener::serve`) on every
/// request of the connection. A request without it (a router driven some other way) is
/// judged as coming from the network.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub peer: SocketAddr,
    /// The connection came in on the plain listener, bound to a loopback address.
    pub plain_loopback_listener: bool,
}

impl Arrival {
    /// Whether a request of this connection naming `host` is local: the plain loopback
    /// listener, a loopback peer and a loopback `Host`. Anything else is the network.
    pub fn is_local(&self, host: Option<&str>) -> bool {
        self.plain_loopback_listener
            && self.peer.ip().is_loopback()
            && host.is_some_and(host_is_loopback)
    }
}

/// `:` and a port number.
fn is_port(rest: &str) -> bool {
    rest.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `localhost`, a 127/8 address or `[::1]`, with or without a port.
fn host_is_loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, rest)) if rest.is_empty() || is_port(rest) => addr,
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a request may pass: None, or the refusal. Pure, for the tests. `local`: the
/// request is local (`Arrival::is_local`).
pub fn judge(
    gate: &Gate,
    local: bool,
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
    if !write && (local || super::console::is_static(path)) {
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

pub async fn layer(State(st): State<GateState>, req: Request, next: Next) -> Response {
    let gate = &st.gate;
    let headers = req.headers();
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let arrival = req.extensions().get::<Arrival>().copied();
    let local = arrival.is_some_and(|a| a.is_local(host));
    let bearer = presents_bearer(auth);
    // An address backing off after wrong tokens or passwords: its token is not checked.
    if let (true, Some(a)) = (bearer, arrival) {
        if let Some(wait) = st.node.auth.bearer_blocked(a.peer.ip()) {
            let mut r = (
                StatusCode::TOO_MANY_REQUESTS,
                "too many failed logins: wait before trying again\n",
            )
                .into_response();
            r.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from(wait.as_secs().max(1)),
            );
            return r;
        }
    }
    match judge(gate, local, req.method(), req.uri().path(), auth) {
        None => next.run(req).await,
        Some((status, why)) => {
            if status == StatusCode::UNAUTHORIZED && bearer {
                if let Some(a) = arrival {
                    st.node.auth.bearer_failed(a.peer.ip());
                }
                let jitter = rand::Rng::gen_range(&mut rand::thread_rng(), 0..=FAILURE_JITTER_MS);
                tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
            }
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
        let with = || Gate {
            token: Some("s3cret".into()),
        };
        let none = Gate { token: None };
        let post = Method::POST;
        let get = Method::GET;
        // Loopback: reads open, writes need the token.
        assert_eq!(judge(&with(), true, &get, "/api/paths", None), None);
        assert_eq!(
            judge(&with(), true, &post, "/api/sessions/x/migrate", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            judge(&with(), true, &post, "/api/x", Some("Bearer s3cret")),
            None
        );
        assert_eq!(
            judge(
                &with(),
                true,
                &Method::DELETE,
                "/api/x",
                Some("Bearer wrong")
            )
            .map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        // No token configured: read-only.
        assert_eq!(
            judge(&none, true, &post, "/api/x", Some("Bearer ")).map(|r| r.0),
            Some(StatusCode::FORBIDDEN)
        );
        // Beyond loopback: reads too, but never health.
        assert_eq!(
            judge(&with(), false, &get, "/metrics", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            judge(&with(), false, &get, "/metrics", Some("Bearer s3cret")),
            None
        );
        assert_eq!(judge(&with(), false, &get, "/api/health", None), None);
        // PTZ with a user's Basic credentials goes to the route, which checks the right;
        // no other write does.
        let basic = Some("Basic b3A6cHc=");
        assert_eq!(
            judge(&with(), false, &post, "/api/cameras/gate/ptz", basic),
            None
        );
        for path in [
            "/api/cameras/gate/onvif",
            "/api/cameras/ptz",
            "/api/cameras/a/b/ptz",
        ] {
            assert_eq!(
                judge(&with(), false, &post, path, basic).map(|r| r.0),
                Some(StatusCode::UNAUTHORIZED),
                "{path}"
            );
        }
        assert!(judge(&with(), false, &post, "/api/cameras/gate/ptz", Some("Basé")).is_some());
        let open = Gate { token: None };
        assert_eq!(
            judge(&open, false, &get, "/api/paths", None).map(|r| r.0),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(judge(&open, false, &get, "/api/health", None), None);
        // The console's page and files: open to read anywhere, never to write.
        assert_eq!(judge(&with(), false, &get, "/", None), None);
        assert_eq!(judge(&open, false, &get, "/console/console.js", None), None);
        assert_eq!(
            judge(&with(), false, &post, "/", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            judge(&with(), false, &get, "/api/cameras", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
    }

    #[test]
    fn a_whep_offer_is_gated_as_a_viewer_not_as_a_write() {
        let gate = || Gate {
            token: Some("s3cret".into()),
        };
        let post = Method::POST;
        // On loopback a viewer needs no token, as for HLS; beyond it, it does.
        assert_eq!(judge(&gate(), true, &post, "/whep/live/cam", None), None);
        assert_eq!(
            judge(&gate(), false, &post, "/whep/live/cam", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            judge(
                &gate(),
                false,
                &post,
                "/whep/live/cam",
                Some("Bearer s3cret")
            ),
            None
        );
        assert_eq!(
            judge(&gate(), false, &Method::DELETE, "/whep/resource/x", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        // Steering a recording beyond loopback needs the token as the offer did.
        for m in [&post, &Method::GET] {
            assert_eq!(
                judge(&gate(), false, m, "/whep/resource/x/control", None).map(|r| r.0),
                Some(StatusCode::UNAUTHORIZED),
                "{m}"
            );
        }
        // A CORS preflight carries no credentials: answered beyond loopback too.
        assert_eq!(
            judge(&gate(), false, &Method::OPTIONS, "/whep/live/cam", None),
            None
        );
        assert_eq!(
            judge(&gate(), false, &Method::OPTIONS, "/api/sessions", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        // Only the WHEP prefix: another write on loopback still needs the token.
        assert_eq!(
            judge(&gate(), true, &post, "/api/whep/live/cam", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
    }

    fn arrival(peer: &str, plain_loopback_listener: bool) -> Arrival {
        Arrival {
            peer: peer.parse().expect("addr"),
            plain_loopback_listener,
        }
    }

    /// Issue 44's critical finding: the HTTPS listener beyond loopback served every read
    /// without the token because the gate asked only whether the *plain* listener was on
    /// loopback. Now only a request on the plain loopback listener, from a loopback peer,
    /// naming a loopback host is local.
    #[test]
    fn only_the_plain_loopback_listener_with_a_loopback_peer_and_host_is_local() {
        let plain = arrival("127.0.0.1:40000", true);
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST",
            "127.0.0.3",
            "[::1]:8080",
        ] {
            assert!(plain.is_local(Some(host)), "{host}");
        }
        // DNS rebinding: a page of another name that resolves to 127.0.0.1.
        for host in [
            "evil.example:8080",
            "evil.example",
            "localhost.evil.example",
            "[::1",
            "",
            "10.1.2.3:8080",
        ] {
            assert!(!plain.is_local(Some(host)), "{host}");
        }
        assert!(!plain.is_local(None));
        // The HTTPS listener (or a plain one beyond loopback) never is, whoever connects.
        assert!(!arrival("127.0.0.1:40000", false).is_local(Some("127.0.0.1:8443")));
        // A peer beyond loopback never is.
        assert!(!arrival("198.18.0.2:40000", true).is_local(Some("127.0.0.1:8080")));
        // Not local: every read route needs the token, the export and HLS among them.
        let gate = Gate {
            token: Some("s3cret".into()),
        };
        for path in [
            "/api/export/cam",
            "/hls/live/cam/index.m3u8",
            "/api/recordings/cam",
            "/api/sessions",
            "/api/cameras",
            "/metrics",
        ] {
            assert_eq!(
                judge(&gate, false, &Method::GET, path, None).map(|r| r.0),
                Some(StatusCode::UNAUTHORIZED),
                "{path}"
            );
        }
        assert_eq!(
            judge(&gate, false, &Method::POST, "/whep/live/cam", None).map(|r| r.0),
            Some(StatusCode::UNAUTHORIZED)
        );
        // With no token configured, nothing but health and the console's files.
        let none = Gate { token: None };
        assert_eq!(
            judge(&none, false, &Method::GET, "/api/export/cam", None).map(|r| r.0),
            Some(StatusCode::FORBIDDEN)
        );
    }
}
