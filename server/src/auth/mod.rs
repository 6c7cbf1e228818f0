//! Who may watch, play back and publish what on this node's RTSP port.
//!
//! The protocol (parsing, challenges, Digest verification, nonces) is `vigil_proto::rtsp::auth`;
//! this module is the node's policy around it: the users and rights of the config (replaced
//! on SIGHUP without touching running sessions), the node's nonce key, failed attempts per
//! client address and their back-off, and what one connection has proven.
//!
//! A connection that has logged in keeps its user: later requests without `Authorization`
//! are that user's (the TCP connection is the credential, as a session cookie would be);
//! requests that carry one are verified again. Rights are checked on every DESCRIBE,
//! ANNOUNCE and SETUP; the other methods act only on the connection's own session.

mod failures;
mod rights;
pub mod tokens;

pub use failures::Failures;
pub use rights::{grants, required, Right};

use rand::RngCore;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tracing::{info, warn};
use vigil_conf::{AuthConfig, DigestAlgorithm, Rights, UserConfig};
use vigil_proto::rtsp::auth::{
    basic_challenge, check_nonce, constant_time_eq, digest_challenge, ha1, make_nonce,
    parse_authorization, Algorithm, Credentials, NonceCheck,
};
use vigil_proto::rtsp::{Request, Response, StatusCode};

/// The `[auth]` section in force.
struct Policy {
    cfg: AuthConfig,
    algorithms: Vec<Algorithm>,
    users: HashMap<String, UserConfig>,
    /// Each user's rights, shared by every request that proves the user (not cloned per
    /// request).
    rights: HashMap<String, Arc<Rights>>,
}

impl Policy {
    fn new(cfg: &AuthConfig) -> Self {
        Self {
            algorithms: cfg
                .digest
                .iter()
                .map(|a| match a {
                    DigestAlgorithm::Sha256 => Algorithm::Sha256,
                    DigestAlgorithm::Md5 => Algorithm::Md5,
                })
                .collect(),
            users: cfg
                .users
                .iter()
                .map(|u| (u.name.clone(), u.clone()))
                .collect(),
            rights: cfg
                .users
                .iter()
                .map(|u| (u.name.clone(), Arc::new(u.rights.clone())))
                .collect(),
            cfg: cfg.clone(),
        }
    }
}

/// Refusals, exported to `/metrics`.
#[derive(Debug, Default)]
pub struct AuthStats {
    /// 401 answers to requests without (valid) credentials.
    pub challenges: AtomicU64,
    /// Wrong credentials: bad password, unknown user, wrong realm, foreign or replayed nonce.
    pub failures: AtomicU64,
    /// Requests refused because their address is backing off after failures.
    pub backoff_refusals: AtomicU64,
    /// Logged-in users asking for a camera their rights do not cover (403).
    pub forbidden: AtomicU64,
}

pub struct Auth {
    policy: RwLock<Option<Arc<Policy>>>,
    /// The API tokens in force: the config's and the registry's.
    tokens: RwLock<TokenSources>,
    /// Key of this node's nonces (random per process: a restart invalidates them, and
    /// clients simply get a fresh challenge).
    nonce_key: [u8; 32],
    failures: Mutex<Failures>,
    next_conn: AtomicU64,
    pub stats: AuthStats,
}

/// What one connection has proven.
pub struct ConnAuth {
    /// Unique per connection in this process (nonce binding, marker replay rule).
    pub id: u64,
    binding: Vec<u8>,
    /// The user this connection logged in as.
    pub user: Option<String>,
    /// Rights granted by a redirect marker from another node (the viewer logged in there).
    grants: Vec<(Right, String)>,
    /// Highest nonce count seen per nonce (qop=auth): a lower or equal one is a replay.
    nonce_counts: HashMap<String, u32>,
}

impl ConnAuth {
    /// Grants `need` to this connection: a signed redirect marker from another node, where
    /// the viewer logged in. Only that right on that camera: the connection does not become
    /// the user (who may not even exist on this node).
    pub fn grant_placed(&mut self, need: (Right, String)) {
        if !self.grants.contains(&need) {
            self.grants.push(need);
        }
    }

    /// The user name to carry in a redirect ("" if none).
    pub fn user_name(&self) -> &str {
        self.user.as_deref().unwrap_or("")
    }
}

/// Where the API tokens in force come from, and their table.
#[derive(Default)]
struct TokenSources {
    config: Vec<vigil_conf::TokenConfig>,
    registry: Vec<vigil_conf::TokenConfig>,
    table: Arc<tokens::Tokens>,
}

/// A user proven over HTTP.
#[derive(Debug, Clone)]
pub struct Login {
    pub name: String,
    pub rights: Arc<Rights>,
    /// The password's fingerprint when it was proven ([`stamp`]): a console session ends
    /// when the password changes.
    pub stamp: u64,
}

/// A fingerprint of a user's password (the first 64 bits of its SHA-256 HA1, in memory
/// only): sessions made with one password end when it changes.
fn stamp(u: &UserConfig) -> u64 {
    u.ha1_sha256
        .get(..16)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or(0)
}

/// Why [`Auth::http_user`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BasicRefusal {
    /// No `[auth]` users on this node.
    NoUsers,
    /// Too many failures from the address: retry after this.
    BackingOff(Duration),
    /// Unknown user, wrong password, not Basic.
    Failed,
}

enum Verdict {
    /// The nonce is ours but old: a new challenge with `stale=true`, not a failure.
    Stale,
    Failed(String),
}

const NONCE_COUNTS_KEPT: usize = 64;

impl Auth {
    pub fn new(cfg: Option<&AuthConfig>) -> Self {
        let mut nonce_key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut nonce_key);
        let (max, backoff) = limits(cfg);
        Self {
            policy: RwLock::new(cfg.map(|c| Arc::new(Policy::new(c)))),
            tokens: RwLock::new(TokenSources::default()),
            nonce_key,
            failures: Mutex::new(Failures::new(max, backoff)),
            next_conn: AtomicU64::new(1),
            stats: AuthStats::default(),
        }
    }

    /// Replace users and rights (SIGHUP). Sessions already set up are not affected; the next
    /// DESCRIBE/ANNOUNCE/SETUP is judged by the new policy.
    pub fn reload(&self, cfg: Option<&AuthConfig>) {
        let (max, backoff) = limits(cfg);
        self.failures().set_limits(max, backoff);
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) =
            cfg.map(|c| Arc::new(Policy::new(c)));
        info!(
            users = cfg.map_or(0, |c| c.users.len()),
            enabled = cfg.is_some(),
            "authentication reloaded"
        );
    }

    pub fn enabled(&self) -> bool {
        self.policy().is_some()
    }

    /// The config's `[[http.api_token]]` (at start and on SIGHUP).
    pub fn set_config_tokens(&self, list: &[vigil_conf::TokenConfig]) {
        self.set_tokens(|t| t.config = list.to_vec());
    }

    /// The registry's tokens (each version that changes them).
    pub fn set_registry_tokens(&self, list: &[vigil_conf::TokenConfig]) {
        self.set_tokens(|t| t.registry = list.to_vec());
    }

    fn set_tokens(&self, change: impl FnOnce(&mut TokenSources)) {
        let mut t = self.tokens.write().unwrap_or_else(|p| p.into_inner());
        change(&mut t);
        let all: Vec<vigil_conf::TokenConfig> =
            t.config.iter().chain(&t.registry).cloned().collect();
        t.table = Arc::new(tokens::Tokens::new(&all));
        info!(tokens = t.table.len(), "API tokens loaded");
    }

    /// Whether any API token exists (then nothing is granted by place).
    pub fn has_tokens(&self) -> bool {
        !self.token_table().is_empty()
    }

    fn token_table(&self) -> Arc<tokens::Tokens> {
        self.tokens
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .table
            .clone()
    }

    /// The API token a bearer secret proves now.
    pub fn token(&self, secret: &str) -> tokens::Found {
        self.token_table().find(secret, tokens::now_unix())
    }

    fn policy(&self) -> Option<Arc<Policy>> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, Failures> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// State for a new connection from `peer`.
    pub fn connection(&self, peer: SocketAddr) -> ConnAuth {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        ConnAuth {
            id,
            binding: format!("{id}/{peer}").into_bytes(),
            user: None,
            grants: Vec::new(),
            nonce_counts: HashMap::new(),
        }
    }

    /// Whether `req` may go on. `need`: the right and camera it requires
    /// ([`required`]). Err: the answer to send instead (401 with challenges, 403, or 503
    /// while the address backs off).
    pub fn check(
        &self,
        conn: &mut ConnAuth,
        req: &Request,
        need: Option<(Right, String)>,
        peer: IpAddr,
    ) -> Result<(), Response> {
        let Some(policy) = self.policy() else {
            return Ok(());
        };
        let Some((right, camera)) = need else {
            return Ok(());
        };
        if conn.grants.iter().any(|(r, c)| *r == right && *c == camera)
            || grants(&policy.cfg.anonymous, right, &camera)
        {
            return Ok(());
        }
        let now = Instant::now();
        let header = req.headers.get("Authorization");
        let claimed = header.and_then(|h| claimed_user(&policy, h));
        if let Some(wait) = self.failures().blocked(peer, claimed.as_deref(), now) {
            self.stats.backoff_refusals.fetch_add(1, Ordering::Relaxed);
            let mut r = Response::new(StatusCode::SERVICE_UNAVAILABLE);
            r.reason = "Service Unavailable (too many failed logins)".into();
            return Err(r.header("Retry-After", wait.as_secs().max(1).to_string()));
        }
        let user = match header {
            None => match &conn.user {
                Some(u) if policy.users.contains_key(u) => u.clone(),
                _ => return Err(self.challenge(&policy, conn, false)),
            },
            Some(header) => match self.verify(&policy, conn, req, header) {
                Ok(u) => u,
                Err(Verdict::Stale) => return Err(self.challenge(&policy, conn, true)),
                Err(Verdict::Failed(why)) => {
                    self.failures().failed(peer, claimed.as_deref(), now);
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    warn!(%peer, reason = %why, "RTSP login failed");
                    return Err(self.challenge(&policy, conn, false));
                }
            },
        };
        self.failures().succeeded(&user);
        let allowed = policy
            .users
            .get(&user)
            .is_some_and(|u| grants(&u.rights, right, &camera));
        conn.user = Some(user);
        if allowed {
            return Ok(());
        }
        self.stats.forbidden.fetch_add(1, Ordering::Relaxed);
        let mut r = Response::new(StatusCode::FORBIDDEN);
        r.reason = format!("Forbidden (no {} right on {camera})", right.name());
        Err(r)
    }

    /// Whether any user exists: then nothing is granted by place (`admin::token`).
    pub fn has_users(&self) -> bool {
        self.policy().is_some_and(|p| !p.users.is_empty())
    }

    /// The realm, when users exist to answer its challenge.
    pub fn realm_with_users(&self) -> Option<String> {
        self.policy()
            .filter(|p| !p.users.is_empty())
            .map(|p| p.cfg.realm.clone())
    }

    /// What anyone may do unproven: `[auth] anonymous`, or nothing without `[auth]`.
    pub fn anonymous(&self) -> Arc<Rights> {
        Arc::new(
            self.policy()
                .map(|p| p.cfg.anonymous.clone())
                .unwrap_or_default(),
        )
    }

    /// The user an HTTP request's Basic credentials prove (`header`: the `Authorization`
    /// value) and their rights, or why not ([`Auth::http_login`]).
    pub fn http_user(&self, peer: IpAddr, header: &str) -> Result<Login, BasicRefusal> {
        match parse_authorization(header) {
            Ok(Credentials::Basic { user, password }) => self.http_login(peer, &user, &password),
            _ => self.http_login(peer, "", ""),
        }
    }

    /// The user `name` with `password` over HTTP (Basic, the console's sign-in) and their
    /// rights, or why not. The password is checked against the user's HA1 (MD5 of
    /// `name:realm:password`) in constant time, and failures count toward the address's
    /// and the user's back-off like RTSP logins. Basic carries the password: the HTTPS
    /// listener is the one for users beyond loopback.
    pub fn http_login(
        &self,
        peer: IpAddr,
        name: &str,
        password: &str,
    ) -> Result<Login, BasicRefusal> {
        let policy = self.policy().ok_or(BasicRefusal::NoUsers)?;
        let now = Instant::now();
        let claimed = policy.users.contains_key(name).then(|| name.to_string());
        if let Some(wait) = self.failures().blocked(peer, claimed.as_deref(), now) {
            self.stats.backoff_refusals.fetch_add(1, Ordering::Relaxed);
            return Err(BasicRefusal::BackingOff(wait));
        }
        let verified = policy.users.get(name).filter(|u| {
            let h = ha1(Algorithm::Md5, name, &policy.cfg.realm, password);
            constant_time_eq(h.as_bytes(), u.ha1_md5.to_ascii_lowercase().as_bytes())
        });
        let Some(user) = verified else {
            self.failures().failed(peer, claimed.as_deref(), now);
            self.stats.failures.fetch_add(1, Ordering::Relaxed);
            warn!(%peer, "HTTP login failed");
            return Err(BasicRefusal::Failed);
        };
        self.failures().succeeded(&user.name);
        Ok(Login {
            name: user.name.clone(),
            rights: policy.rights.get(name).cloned().unwrap_or_default(),
            stamp: stamp(user),
        })
    }

    /// The rights user `name` has now and their password's fingerprint, if the user exists
    /// (a signed-in session is judged by them on every request, so a removed user's
    /// sessions stop at once, and a changed password's too).
    pub fn user_now(&self, name: &str) -> Option<(Arc<Rights>, u64)> {
        let policy = self.policy()?;
        let u = policy.users.get(name)?;
        Some((policy.rights.get(name).cloned()?, stamp(u)))
    }

    /// How much longer `peer` must wait before an admin API bearer token it presents is
    /// checked, if it must: wrong tokens count toward the same back-off as wrong passwords,
    /// so an address guessing either is slowed alike.
    pub fn bearer_blocked(&self, peer: IpAddr) -> Option<Duration> {
        let wait = self.failures().blocked(peer, None, Instant::now());
        if wait.is_some() {
            self.stats.backoff_refusals.fetch_add(1, Ordering::Relaxed);
        }
        wait
    }

    /// A wrong admin API bearer token from `peer`.
    pub fn bearer_failed(&self, peer: IpAddr) {
        self.failures().failed(peer, None, Instant::now());
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        warn!(%peer, "admin API token refused");
    }

    /// 401 with a Digest challenge per offered algorithm (preferred first: ffmpeg takes the
    /// last one it can do) and Basic when enabled.
    fn challenge(&self, policy: &Policy, conn: &ConnAuth, stale: bool) -> Response {
        self.stats.challenges.fetch_add(1, Ordering::Relaxed);
        let nonce = make_nonce(&self.nonce_key, &conn.binding, nonce_time());
        let mut r = Response::new(StatusCode::UNAUTHORIZED);
        for alg in &policy.algorithms {
            r = r.header(
                "WWW-Authenticate",
                digest_challenge(&policy.cfg.realm, &nonce, *alg, stale),
            );
        }
        if policy.cfg.basic {
            r = r.header("WWW-Authenticate", basic_challenge(&policy.cfg.realm));
        }
        r
    }

    fn verify(
        &self,
        policy: &Policy,
        conn: &mut ConnAuth,
        req: &Request,
        header: &str,
    ) -> Result<String, Verdict> {
        let fail = |why: &str| Verdict::Failed(why.to_string());
        let realm = &policy.cfg.realm;
        match parse_authorization(header).map_err(|e| Verdict::Failed(e.to_string()))? {
            Credentials::Basic { user, password } => {
                if !policy.cfg.basic {
                    return Err(fail("Basic is not enabled"));
                }
                let u = policy
                    .users
                    .get(&user)
                    .ok_or_else(|| fail("unknown user"))?;
                let h = ha1(Algorithm::Sha256, &user, realm, &password);
                if !constant_time_eq(h.as_bytes(), u.ha1_sha256.to_ascii_lowercase().as_bytes()) {
                    return Err(Verdict::Failed(format!("wrong password for {user}")));
                }
                Ok(user)
            }
            Credentials::Digest(d) => {
                if d.realm != *realm {
                    return Err(fail("wrong realm"));
                }
                if !policy.algorithms.contains(&d.algorithm) {
                    return Err(fail("digest algorithm not offered"));
                }
                let lifetime = policy.cfg.nonce_lifetime_secs.saturating_mul(1000);
                match check_nonce(
                    &self.nonce_key,
                    &conn.binding,
                    &d.nonce,
                    nonce_time(),
                    lifetime,
                ) {
                    NonceCheck::Fresh => {}
                    NonceCheck::Stale => return Err(Verdict::Stale),
                    NonceCheck::Invalid => return Err(fail("nonce not issued to this connection")),
                }
                if d.uri != req.uri {
                    return Err(fail("digest uri is not the request's"));
                }
                let u = policy
                    .users
                    .get(&d.username)
                    .ok_or_else(|| fail("unknown user"))?;
                let stored = match d.algorithm {
                    Algorithm::Md5 => &u.ha1_md5,
                    Algorithm::Sha256 => &u.ha1_sha256,
                };
                if !d.verify(&stored.to_ascii_lowercase(), req.method.as_str()) {
                    return Err(Verdict::Failed(format!(
                        "wrong digest response for {}",
                        d.username
                    )));
                }
                if let Some(nc) = d.nc {
                    if conn.nonce_counts.len() >= NONCE_COUNTS_KEPT
                        && !conn.nonce_counts.contains_key(&d.nonce)
                    {
                        conn.nonce_counts.clear();
                    }
                    let last = conn.nonce_counts.entry(d.nonce.clone()).or_insert(0);
                    if nc <= *last {
                        return Err(fail("nonce count replayed"));
                    }
                    *last = nc;
                }
                Ok(d.username)
            }
        }
    }
}

/// The name an `Authorization` value claims, when it is one of the policy's users: what the
/// back-off counts per user (made-up names are counted per address only, so they cannot
/// grow the table).
fn claimed_user(policy: &Policy, header: &str) -> Option<String> {
    let name = match parse_authorization(header).ok()? {
        Credentials::Basic { user, .. } => user,
        Credentials::Digest(d) => d.username,
    };
    policy.users.contains_key(&name).then_some(name)
}

/// A URL without its user and password, for logs and API answers (a pulled camera's URL
/// carries its credentials).
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => "<unparsable URL>".into(),
    }
}

fn limits(cfg: Option<&AuthConfig>) -> (u32, Duration) {
    let d = AuthConfig::default();
    let c = cfg.unwrap_or(&d);
    (
        c.max_failures.max(1),
        Duration::from_secs(c.backoff_max_secs.max(1)),
    )
}

/// The wall clock as nonces carry it: unsigned ms, 0 before the epoch.
fn nonce_time() -> u64 {
    u64::try_from(vigil_storage::now_ms()).unwrap_or(0)
}
