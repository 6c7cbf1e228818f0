//! Console sign-in: a user's name and password once, then a server-side session named by an
//! `HttpOnly; SameSite=Strict` cookie (`Secure` over HTTPS), so no token is pasted into a
//! page and no password is kept by the browser.
//!
//! * `POST /api/signin` `{"user", "password"}` checks the password as HTTP Basic does
//!   (`Auth::http_login`: HA1 in constant time, failures back off address and user) and
//!   answers the cookie and a CSRF token. Over plain HTTP only to a local request: beyond
//!   loopback the cookie would cross the wire in clear.
//! * `GET /api/whoami`: who the gate saw (user, rights, how proven) and, for a session, its
//!   CSRF token — a page of another origin cannot read it (no CORS), so only the console
//!   can send it back.
//! * `POST /api/signout` ends the session.
//!
//! The gate (`token::layer`) turns a valid cookie into the user's principal with the
//! rights the policy gives *now* (a removed user's sessions stop at once), and refuses any
//! write that carries the cookie without the session's CSRF token in `X-Vigil-CSRF`.
//! Sessions expire after `[http] session_idle_secs` without a request and
//! `session_max_secs` after sign-in; at most [`MAX_SESSIONS`] live at once (sign-in then
//! fails closed with 503).

use super::access::Principal;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rand::RngCore;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The session cookie's name.
pub const COOKIE: &str = "vigil_session";
/// The header a cookie-borne write must carry the session's CSRF token in.
pub const CSRF_HEADER: &str = "x-vigil-csrf";
/// Live sessions a node keeps at most: a few per operator of a large control room, and a
/// bound on what sign-ins can make it hold.
pub const MAX_SESSIONS: usize = 4096;

/// One signed-in user.
#[derive(Debug, Clone)]
struct Entry {
    user: String,
    /// The password's fingerprint at sign-in (`auth::Login::stamp`).
    stamp: u64,
    csrf: String,
    started: Instant,
    last: Instant,
}

/// A session as the gate uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub user: String,
    pub stamp: u64,
    pub csrf: String,
}

/// Why a sign-in made no session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Full {
    /// [`MAX_SESSIONS`] live sessions.
    TooMany,
}

/// The sessions of this node, keyed by their random id. Time is passed in.
#[derive(Debug)]
pub struct Sessions {
    map: Mutex<HashMap<String, Entry>>,
    idle: Duration,
    absolute: Duration,
}

fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Sessions {
    pub fn new(idle: Duration, absolute: Duration) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            idle,
            absolute,
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn alive(&self, e: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(e.last) < self.idle
            && now.saturating_duration_since(e.started) < self.absolute
    }

    /// A new session for `user` signed in with the password of fingerprint `stamp`: its id
    /// (the cookie's value) and CSRF token.
    pub fn create(&self, user: &str, stamp: u64, now: Instant) -> Result<(String, String), Full> {
        let mut map = self.map();
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, e| self.alive(e, now));
            if map.len() >= MAX_SESSIONS {
                return Err(Full::TooMany);
            }
        }
        let (id, csrf) = (random_hex(), random_hex());
        map.insert(
            id.clone(),
            Entry {
                user: user.to_string(),
                stamp,
                csrf: csrf.clone(),
                started: now,
                last: now,
            },
        );
        Ok((id, csrf))
    }

    /// The live session `id` names, touched (its idle time starts again); an expired one
    /// is removed.
    pub fn find(&self, id: &str, now: Instant) -> Option<Found> {
        let mut map = self.map();
        let alive = map.get(id).map(|e| self.alive(e, now))?;
        if !alive {
            map.remove(id);
            return None;
        }
        let e = map.get_mut(id)?;
        e.last = now;
        Some(Found {
            user: e.user.clone(),
            stamp: e.stamp,
            csrf: e.csrf.clone(),
        })
    }

    /// Ends session `id` (no-op when unknown).
    pub fn remove(&self, id: &str) {
        self.map().remove(id);
    }

    /// Ends every session of `user` (a removed user, a changed password).
    pub fn remove_user(&self, user: &str) {
        self.map().retain(|_, e| e.user != user);
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The session id in a request's `Cookie` headers, if any.
pub fn cookie_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == COOKIE && !v.is_empty()).then_some(v)
        })
}

/// How the gate proved who asks: what `whoami` tells and the audit will name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    None,
    Token,
    Basic,
    /// A session cookie, with the session's CSRF token (writes need it too).
    Session(String),
    Local,
}

impl Proof {
    fn name(&self) -> &'static str {
        match self {
            Proof::None => "none",
            Proof::Token => "token",
            Proof::Basic => "basic",
            Proof::Session(_) => "session",
            Proof::Local => "local",
        }
    }
}

/// What the sign-in routes need.
#[derive(Clone)]
pub struct SignIn {
    pub node: Arc<crate::node::Node>,
    pub sessions: Arc<Sessions>,
}

pub(super) fn router() -> Router<SignIn> {
    Router::new()
        .route("/api/signin", post(sign_in))
        .route("/api/signout", post(sign_out))
        .route("/api/whoami", get(whoami))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Credentials {
    user: String,
    password: String,
}

fn text(status: StatusCode, why: &str) -> Response {
    (status, format!("{why}\n")).into_response()
}

fn set_cookie(value: &str, secure: bool, max_age: Option<u64>) -> Option<HeaderValue> {
    let mut c = format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict");
    if secure {
        c.push_str("; Secure");
    }
    if let Some(age) = max_age {
        c.push_str(&format!("; Max-Age={age}"));
    }
    HeaderValue::from_str(&c).ok()
}

async fn sign_in(
    State(st): State<SignIn>,
    arrival: Option<axum::Extension<super::token::Arrival>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let Some(axum::Extension(arrival)) = arrival else {
        return text(StatusCode::FORBIDDEN, "sign in over the node's listeners");
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if !arrival.tls && !arrival.is_local(host) {
        return text(
            StatusCode::FORBIDDEN,
            "sign in over HTTPS ([http] tls_listen): plain HTTP beyond loopback would carry the password and the session in clear",
        );
    }
    let Ok(c) = serde_json::from_str::<Credentials>(&body) else {
        return text(
            StatusCode::BAD_REQUEST,
            "expected JSON {\"user\": …, \"password\": …}",
        );
    };
    let started = Instant::now();
    let login = match st
        .node
        .auth
        .http_login(arrival.peer.ip(), &c.user, &c.password)
    {
        Ok(login) => login,
        Err(crate::auth::BasicRefusal::BackingOff(wait)) => return super::token::too_many(wait),
        Err(_) => {
            audit_signin(&st.node, "signin.failed", &c.user, arrival.peer);
            super::token::failure_pause().await;
            return text(StatusCode::UNAUTHORIZED, "wrong user or password");
        }
    };
    audit_signin(&st.node, "signin", &c.user, arrival.peer);
    let (id, csrf) = match st.sessions.create(&login.name, login.stamp, started) {
        Ok(s) => s,
        Err(Full::TooMany) => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many console sessions on this node: try again later",
            )
        }
    };
    tracing::info!(user = %c.user, peer = %arrival.peer, "console sign-in");
    let max_age = st.node.config.http.session_max_secs;
    let mut r = Json(serde_json::json!({ "user": c.user, "csrf": csrf })).into_response();
    if let Some(v) = set_cookie(&id, arrival.tls, Some(max_age)) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// A sign-in, or a refused one, in the audit trail. A refused name is kept as typed (at most
/// 64 characters): it may be a password typed into the wrong field, but the trail is the
/// admin's, and a guessed account is what an investigation asks for.
fn audit_signin(node: &crate::node::Node, kind: &str, user: &str, peer: std::net::SocketAddr) {
    if let Some(a) = &node.audit {
        a.record(crate::audit::Event {
            at_ms: vigil_storage::now_ms(),
            kind: kind.into(),
            user: user.chars().filter(|c| !c.is_control()).take(64).collect(),
            client: peer.to_string(),
            protocol: Some("http".into()),
            ..Default::default()
        });
    }
}

async fn sign_out(
    State(st): State<SignIn>,
    arrival: Option<axum::Extension<super::token::Arrival>>,
    headers: HeaderMap,
) -> Response {
    if let Some(id) = cookie_of(&headers) {
        st.sessions.remove(id);
    }
    let tls = arrival.is_some_and(|a| a.tls);
    let mut r = StatusCode::NO_CONTENT.into_response();
    if let Some(v) = set_cookie("", tls, Some(0)) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// Who the gate saw; a session's CSRF token comes from the lookup the gate already made.
async fn whoami(
    axum::Extension(who): axum::Extension<Principal>,
    proof: Option<axum::Extension<Proof>>,
) -> Json<serde_json::Value> {
    let proof = proof.map_or(Proof::None, |p| p.0);
    let csrf = match &proof {
        Proof::Session(csrf) => Some(csrf.clone()),
        _ => None,
    };
    let (user, rights) = match &who {
        Principal::User { name, rights } => (Some(name.clone()), Some((**rights).clone())),
        Principal::Token { label, rights } => (Some(label.clone()), Some((**rights).clone())),
        _ => (None, None),
    };
    Json(serde_json::json!({
        "user": user,
        "proof": proof.name(),
        "admin": matches!(who, Principal::Admin) || rights.as_ref().is_some_and(|r| r.admin),
        "operate": matches!(who, Principal::Admin) || rights.as_ref().is_some_and(|r| r.admin || r.operate),
        "rights": rights,
        "csrf": csrf,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_when_idle_and_at_their_end() {
        let s = Sessions::new(Duration::from_secs(10), Duration::from_secs(60));
        let t0 = Instant::now();
        let (id, csrf) = s.create("guard", 1, t0).expect("session");
        assert_eq!(id.len(), 64);
        assert_ne!(id, csrf);
        let at = |secs| t0 + Duration::from_secs(secs);
        // Each request starts the idle time again…
        for t in [5, 14, 23, 32, 41, 50, 59] {
            assert_eq!(
                s.find(&id, at(t)).map(|f| f.user),
                Some("guard".into()),
                "{t}"
            );
        }
        // …but not past the absolute end.
        assert_eq!(s.find(&id, at(61)), None);
        assert!(s.is_empty(), "an expired session is removed");
        let (id, _) = s.create("guard", 1, t0).expect("session");
        assert_eq!(s.find(&id, at(11)), None, "idle for 11 s");
        assert_eq!(s.find("not-a-session", t0), None);
    }

    #[test]
    fn sign_out_and_user_removal_end_sessions() {
        let s = Sessions::new(Duration::from_secs(10), Duration::from_secs(60));
        let t0 = Instant::now();
        let (a, _) = s.create("guard", 1, t0).expect("a");
        let (b, _) = s.create("guard", 1, t0).expect("b");
        let (c, _) = s.create("investigator", 1, t0).expect("c");
        s.remove(&a);
        assert_eq!(s.find(&a, t0), None);
        s.remove_user("guard");
        assert_eq!(s.find(&b, t0), None);
        assert!(s.find(&c, t0).is_some());
    }

    #[test]
    fn a_full_table_refuses_new_sessions_until_some_expire() {
        let s = Sessions::new(Duration::from_secs(10), Duration::from_secs(60));
        let t0 = Instant::now();
        for _ in 0..MAX_SESSIONS {
            s.create("u", 1, t0).expect("room");
        }
        assert_eq!(s.create("u", 1, t0), Err(Full::TooMany));
        // Expired ones make room.
        assert!(s.create("u", 1, t0 + Duration::from_secs(11)).is_ok());
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; vigil_session=abc; b=2"),
        );
        assert_eq!(cookie_of(&h), Some("abc"));
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("xvigil_session=abc"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("vigil_session="));
        assert_eq!(cookie_of(&h), None);
        let c = set_cookie("abc", true, Some(60)).expect("header");
        let c = c.to_str().expect("text");
        for part in [
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "Max-Age=60",
            "Path=/",
        ] {
            assert!(c.contains(part), "{c}");
        }
        let plain = set_cookie("abc", false, None).expect("header");
        assert!(!plain.to_str().expect("text").contains("Secure"));
    }
}
