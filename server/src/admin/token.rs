//! The HTTP gate, as one layer over the whole router: every route a later change adds is
//! covered without naming it (`access::need` sends an unnamed route to the admin role).
//!
//! The gate decides *who* asks (`access::Principal`) from the request's credentials alone:
//! the admin token or a program's API token (`Authorization: Bearer`, `auth::tokens`), an
//! `[auth]` user (HTTP Basic or a console session: the same users and rights as RTSP), or
//! nobody (the `[auth] anonymous` rights). No listener or address
//! grants anything once a token or a user exists. The one exception is the open node — no
//! token and no users, the embedded demo — whose *local* caller reads everything and writes
//! nothing; a request is local only when it came in on the plain listener bound to loopback,
//! from a loopback peer, naming a loopback host (`Arrival`). The HTTPS listener never is:
//! it once inherited the plain listener's loopback exemption and served every recording to
//! anyone who reached it. The `Host` check keeps a page that DNS-rebinds its own name to
//! 127.0.0.1 from reading a loopback API through the operator's browser.
//!
//! The principal rides on in the request's extensions: routes that list cameras show only
//! what it may see, PTZ names it.

use super::access::{self, Need, Principal};
use super::signin::Proof;
use crate::auth::tokens::Found;
use crate::auth::Right;
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

/// The gate's state in the router: the rule above, the node whose `Auth` checks users and
/// counts wrong tokens and passwords, and the console's sign-in sessions.
#[derive(Clone)]
pub struct GateState {
    pub gate: Gate,
    pub node: Arc<crate::node::Node>,
    pub sessions: Arc<super::signin::Sessions>,
    /// The cluster shell when on: a placed WHEP playback offer's marker is checked with it.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// HLS viewers seen lately (one viewing, one audit record).
    pub hls_seen: Arc<super::trail::HlsSeen>,
}

/// The longest random pause before a wrong token or password is answered: a guesser
/// learns nothing from timing and gets fewer tries per connection.
const FAILURE_JITTER_MS: u64 = 300;

/// The credentials a request presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presented<'a> {
    None,
    Bearer(&'a str),
    /// The whole `Authorization` value (`Basic …`), for `Auth::http_user`.
    Basic(&'a str),
}

fn presented(authorization: Option<&str>) -> Presented<'_> {
    let Some(a) = authorization else {
        return Presented::None;
    };
    let scheme = |s: &str| a.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s));
    if scheme("bearer ") {
        Presented::Bearer(a[7..].trim())
    } else if scheme("basic ") {
        Presented::Basic(a)
    } else {
        Presented::None
    }
}

/// Where one connection came in, set by the accept loop (`listener::serve`) on every
/// request of the connection. A request without it (a router driven some other way) is
/// judged as coming from the network.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub peer: SocketAddr,
    /// The connection came in on the plain listener, bound to a loopback address.
    pub plain_loopback_listener: bool,
    /// The connection is TLS (the HTTPS listener): a sign-in cookie is `Secure`.
    pub tls: bool,
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

/// Why a request is refused: the answer's status and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub why: String,
}

/// The refusal of `principal` asking for `need`, or None when it may. Pure, for the tests.
/// `configured`: the node has an admin token, users or API tokens (something could prove
/// who asks).
pub fn judge(
    principal: &Principal,
    configured: bool,
    method: &Method,
    path: &str,
    need: &Need,
) -> Option<Refusal> {
    if principal.allows(need, method, path) {
        return None;
    }
    let refuse = |status, why: String| Some(Refusal { status, why });
    if !principal.is_proven() {
        if !configured {
            return refuse(
                StatusCode::FORBIDDEN,
                "this route needs credentials: set [http] token or token_file, or add users\n"
                    .into(),
            );
        }
        return refuse(
            StatusCode::UNAUTHORIZED,
            "credentials needed: Authorization: Bearer <token>, or a user's Basic credentials\n"
                .into(),
        );
    }
    let why = match need {
        Need::Camera(right, camera) => format!("no {} right on camera {camera:?}\n", right.name()),
        Need::Operate => "this needs the operate role\n".into(),
        Need::Metrics => "this needs the metrics right or the admin role\n".into(),
        Need::Admin | Need::Listing | Need::Open => "this needs the admin role\n".into(),
    };
    refuse(StatusCode::FORBIDDEN, why)
}

/// `/api/cameras/<id>/ptz`.
pub fn is_ptz(path: &str) -> bool {
    path.strip_prefix("/api/cameras/")
        .and_then(|r| r.strip_suffix("/ptz"))
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

pub(super) fn too_many(wait: std::time::Duration) -> Response {
    let mut r = (
        StatusCode::TOO_MANY_REQUESTS,
        "too many failed logins: wait before trying again\n",
    )
        .into_response();
    r.headers_mut().insert(
        header::RETRY_AFTER,
        header::HeaderValue::from(wait.as_secs().max(1)),
    );
    r
}

/// The random pause before a wrong token or password is answered.
pub async fn failure_pause() {
    let jitter = rand::Rng::gen_range(&mut rand::thread_rng(), 0..=FAILURE_JITTER_MS);
    tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
}

/// Whether a write carrying a session cookie names the session's CSRF token: a page of
/// another site cannot read it, so it cannot forge the write with the operator's cookie.
fn csrf_ok(headers: &header::HeaderMap, expected: &str) -> bool {
    headers
        .get(super::signin::CSRF_HEADER)
        .is_some_and(|v| constant_time_eq(v.as_bytes(), expected.as_bytes()))
}

/// A 401 after a random pause, with the challenges a client can answer: Bearer always,
/// Basic where users exist and the route serves media (ffmpeg and browsers answer it for
/// an HLS or export URL; an API call from the console must not pop a browser dialog).
async fn unauthorized(
    node: &crate::node::Node,
    need: &Need,
    failed: bool,
    why: String,
) -> Response {
    if failed {
        failure_pause().await;
    }
    let mut r = (StatusCode::UNAUTHORIZED, why).into_response();
    let h = r.headers_mut();
    h.append(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"vigil admin\""),
    );
    if let (Need::Camera(..), Some(realm)) = (need, node.auth.realm_with_users()) {
        if let Ok(v) = header::HeaderValue::from_str(&format!("Basic realm=\"{realm}\"")) {
            h.append(header::WWW_AUTHENTICATE, v);
        }
    }
    r
}

/// GET, HEAD, OPTIONS: what a cookie alone may do.
fn is_read(m: &Method) -> bool {
    m == Method::GET || m == Method::HEAD || m == Method::OPTIONS
}

/// The user a request's session cookie names, with the rights the policy gives now; a
/// session of a user who is gone, or whose password changed since sign-in, is ended.
fn session_user(
    st: &GateState,
    headers: &header::HeaderMap,
) -> Option<(super::signin::Found, Arc<vigil_conf::Rights>)> {
    let id = super::signin::cookie_of(headers)?;
    let found = st.sessions.find(id, std::time::Instant::now())?;
    match st.node.auth.user_now(&found.user) {
        Some((rights, stamp)) if stamp == found.stamp => Some((found, rights)),
        Some(_) => {
            st.sessions.remove(id);
            None
        }
        None => {
            st.sessions.remove_user(&found.user);
            None
        }
    }
}

/// Who asks, from the request's credentials alone: the principal and how it was proven, or
/// the answer to send instead (401 after a pause, 429 while the address backs off, 403 for
/// a cookie-borne write without its CSRF token).
async fn identify(
    st: &GateState,
    (headers, method): (&header::HeaderMap, &Method),
    need: &Need,
    arrival: Option<Arrival>,
    configured: bool,
) -> Result<(Principal, Proof), Response> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let local = arrival.is_some_and(|a| a.is_local(host));
    let peer = arrival.map(|a| a.peer.ip());
    let node = &st.node;
    match presented(auth) {
        Presented::Bearer(t) => {
            if let Some(wait) = peer.and_then(|p| node.auth.bearer_blocked(p)) {
                return Err(too_many(wait));
            }
            if st
                .gate
                .token
                .as_ref()
                .is_some_and(|token| constant_time_eq(t.as_bytes(), token.as_bytes()))
            {
                return Ok((Principal::Admin, Proof::Token));
            }
            match node.auth.token(t) {
                Found::Valid(e) => {
                    let label = format!("token:{}", e.name);
                    let rights = e.rights.clone();
                    Ok((Principal::Token { label, rights }, Proof::Token))
                }
                // Not a guess (its hash is known): refused without counting or pausing.
                Found::Expired(name) => {
                    let why = format!("API token {name:?} has expired\n");
                    Err(unauthorized(node, need, false, why).await)
                }
                Found::Unknown => {
                    if let Some(p) = peer {
                        node.auth.bearer_failed(p);
                    }
                    let why = "wrong token\n".to_string();
                    Err(unauthorized(node, need, true, why).await)
                }
            }
        }
        Presented::Basic(h) => {
            let ip = peer.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
            match node.auth.http_user(ip, h) {
                Ok(login) => Ok((
                    Principal::User {
                        name: login.name,
                        rights: login.rights,
                    },
                    Proof::Basic,
                )),
                Err(crate::auth::BasicRefusal::BackingOff(wait)) => Err(too_many(wait)),
                Err(_) => {
                    let why = "wrong user or password\n".to_string();
                    Err(unauthorized(node, need, true, why).await)
                }
            }
        }
        Presented::None => match session_user(st, headers) {
            Some((found, rights)) => {
                // Signing in again or out needs no token: those routes hold nothing to forge.
                if !is_read(method) && *need != Need::Open && !csrf_ok(headers, &found.csrf) {
                    return Err((
                        StatusCode::FORBIDDEN,
                        "a signed-in write needs the session's X-Vigil-CSRF header\n",
                    )
                        .into_response());
                }
                let name = found.user;
                Ok((Principal::User { name, rights }, Proof::Session(found.csrf)))
            }
            None if local && !configured => Ok((Principal::OpenLocal, Proof::Local)),
            None => Ok((Principal::Anonymous(node.auth.anonymous()), Proof::None)),
        },
    }
}

/// A WHEP offer another member sent here (a playback it placed, a live camera held here)
/// carries that member's signed marker (`cluster::marker`), which grants the viewer that
/// one right on that one camera — the browser does not carry the credentials (a cookie, a
/// Basic login) across the redirect to another origin. Checked, not consumed: the route
/// consumes it (`whep_api::place`, `whep_api::offer_live`).
fn placed_viewer(st: &GateState, req: &Request, need: &Need) -> Option<Principal> {
    let (Need::Camera(right @ (Right::Read | Right::Playback), camera), Some(cluster)) =
        (need, &st.cluster)
    else {
        return None;
    };
    let path = req.uri().path();
    let mut rights = vigil_conf::Rights::default();
    let (prefix, granted) = if *right == Right::Read {
        ("/whep/live/", &mut rights.read)
    } else {
        ("/whep/playback/", &mut rights.playback)
    };
    if req.method() != Method::POST || !path.starts_with(prefix) {
        return None;
    }
    granted.push(camera.clone());
    let url = format!("http://node{path}?{}", req.uri().query()?);
    let user = cluster.marker_user(&url)?;
    Some(Principal::User {
        name: if user.is_empty() {
            "placed".into()
        } else {
            user
        },
        rights: Arc::new(rights),
    })
}

/// Whether `need` starts a viewing (what a required, broken audit trail holds back).
fn starts_viewing(need: &Need) -> bool {
    matches!(
        need,
        Need::Camera(Right::Read | Right::Playback | Right::Export, _)
    )
}

/// The request passed on to its route, and what it did written to the audit trail.
async fn serve_and_trail(
    st: &GateState,
    mut req: Request,
    next: Next,
    who: (Principal, Proof),
    need: Need,
    arrival: Option<Arrival>,
) -> Response {
    let node = &st.node;
    if starts_viewing(&need) && !node.audit_admits() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the audit trail cannot be written and [audit] required = true: no new viewing until it can\n",
        )
            .into_response();
    }
    let trail = node
        .audit
        .clone()
        .filter(|_| matches!(need, Need::Camera(..)) || !is_read(req.method()))
        .map(|a| {
            let uri = req.uri();
            let at = (uri.path().to_string(), uri.query().map(str::to_string));
            (a, who.0.clone(), req.method().clone(), at)
        });
    req.extensions_mut().insert(who.0);
    req.extensions_mut().insert(who.1);
    let resp = next.run(req).await;
    if let Some((audit, principal, method, (path, query))) = trail {
        let served = super::trail::Served {
            who: &principal,
            need: &need,
            method: &method,
            path: &path,
            query: query.as_deref(),
            status: resp.status().as_u16(),
            client: arrival.map(|a| a.peer.to_string()).unwrap_or_default(),
            at_ms: vigil_storage::now_ms(),
        };
        if let Some(e) = super::trail::event_of(&served, |k| st.hls_seen.first(k, served.at_ms)) {
            audit.record(e);
        }
    }
    resp
}

pub async fn layer(State(st): State<GateState>, req: Request, next: Next) -> Response {
    let arrival = req.extensions().get::<Arrival>().copied();
    let need = access::need(req.method(), req.uri().path());
    let configured =
        st.gate.token.is_some() || st.node.auth.has_users() || st.node.auth.has_tokens();
    let (principal, proof) = match identify(
        &st,
        (req.headers(), req.method()),
        &need,
        arrival,
        configured,
    )
    .await
    {
        Ok(p) => p,
        Err(answer) => return answer,
    };
    let refusal = judge(
        &principal,
        configured,
        req.method(),
        req.uri().path(),
        &need,
    );
    match refusal {
        None => serve_and_trail(&st, req, next, (principal, proof), need, arrival).await,
        Some(r) => {
            if let Some(placed) = placed_viewer(&st, &req, &need) {
                return serve_and_trail(&st, req, next, (placed, Proof::None), need, arrival).await;
            }
            if r.status == StatusCode::UNAUTHORIZED {
                return unauthorized(&st.node, &need, false, r.why).await;
            }
            if let Principal::User { .. } = principal {
                st.node
                    .auth
                    .stats
                    .forbidden
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            (r.status, r.why).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_conf::Rights;

    fn status(p: &Principal, configured: bool, m: &Method, path: &str) -> Option<StatusCode> {
        judge(p, configured, m, path, &access::need(m, path)).map(|r| r.status)
    }

    fn nobody() -> Principal {
        Principal::Anonymous(Arc::new(Rights::default()))
    }

    #[test]
    fn credentials_are_read_by_scheme() {
        assert_eq!(presented(None), Presented::None);
        assert_eq!(
            presented(Some("Bearer s3cret ")),
            Presented::Bearer("s3cret")
        );
        assert_eq!(
            presented(Some("bearer s3cret")),
            Presented::Bearer("s3cret")
        );
        assert_eq!(
            presented(Some("Basic b3A6cHc=")),
            Presented::Basic("Basic b3A6cHc=")
        );
        assert_eq!(presented(Some("Basé")), Presented::None);
        assert_eq!(presented(Some("Digest x")), Presented::None);
    }

    /// Loopback grants nothing once a token or a user exists: whoever is not proven gets
    /// 401 on every route but health and the console's files, on any listener.
    #[test]
    fn nobody_proven_gets_401_once_anything_is_configured() {
        let get = Method::GET;
        for path in [
            "/api/export/cam",
            "/hls/live/cam/index.m3u8",
            "/api/recordings/cam",
            "/api/sessions",
            "/api/cameras",
            "/api/paths",
            "/metrics",
        ] {
            assert_eq!(
                status(&nobody(), true, &get, path),
                Some(StatusCode::UNAUTHORIZED),
                "{path}"
            );
            // On a node with nothing configured, only its local caller reads.
            assert_eq!(
                status(&nobody(), false, &get, path),
                Some(StatusCode::FORBIDDEN),
                "{path}"
            );
            assert_eq!(
                status(&Principal::OpenLocal, false, &get, path),
                None,
                "{path}"
            );
            assert_eq!(status(&Principal::Admin, true, &get, path), None, "{path}");
        }
        let post = Method::POST;
        assert_eq!(
            status(&nobody(), true, &post, "/whep/live/cam"),
            Some(StatusCode::UNAUTHORIZED)
        );
        for p in [&nobody(), &Principal::OpenLocal] {
            assert_eq!(status(p, true, &get, "/api/health"), None);
            assert_eq!(status(p, true, &get, "/"), None);
            assert_eq!(status(p, true, &get, "/console/console.js"), None);
            assert_eq!(status(p, true, &Method::OPTIONS, "/whep/live/cam"), None);
        }
        // The open node's local caller writes nothing.
        assert_eq!(
            status(
                &Principal::OpenLocal,
                false,
                &post,
                "/api/sessions/x/migrate"
            ),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            status(&Principal::OpenLocal, false, &post, "/whep/live/cam"),
            None
        );
    }

    #[test]
    fn a_user_is_refused_with_403_naming_what_is_missing() {
        let guard = Principal::User {
            name: "guard".into(),
            rights: Arc::new(Rights {
                read: vec!["gate-*".into()],
                ..Rights::default()
            }),
        };
        let get = Method::GET;
        let m = &get;
        let p = "/api/export/gate-1";
        let r = judge(&guard, true, m, p, &access::need(m, p)).expect("refused");
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert!(
            r.why.contains("export") && r.why.contains("gate-1"),
            "{}",
            r.why
        );
        assert_eq!(
            status(&guard, true, &get, "/api/cluster/nodes"),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            status(&guard, true, &get, "/hls/live/gate-1/index.m3u8"),
            None
        );
    }

    fn arrival(peer: &str, plain_loopback_listener: bool) -> Arrival {
        Arrival {
            peer: peer.parse().expect("addr"),
            plain_loopback_listener,
            tls: !plain_loopback_listener,
        }
    }

    /// Issue 44's critical finding: the HTTPS listener beyond loopback served every read
    /// without the token because the gate asked only whether the *plain* listener was on
    /// loopback. Now only a request on the plain loopback listener, from a loopback peer,
    /// naming a loopback host is local — and even that grants only on an open node.
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
    }
}
