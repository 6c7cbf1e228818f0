//! `[auth]` and `[[auth.user]]`: who may watch, play back and publish which cameras.
//!
//! Passwords are never stored: each user carries HA1 = H(name:realm:password) for MD5 and
//! SHA-256 (what Digest verification needs; `vigil user add` writes them). Changing the realm
//! therefore invalidates every stored hash.

use crate::ConfigError;
use serde::{Deserialize, Serialize};

/// A Digest algorithm the node offers, spelled as in the `algorithm=` parameter (RFC 7616);
/// any other spelling is refused when the config is read (serde names the two it accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum DigestAlgorithm {
    #[serde(rename = "SHA-256")]
    Sha256,
    #[serde(rename = "MD5")]
    Md5,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The Digest/Basic realm the HA1 hashes were made with.
    pub realm: String,
    /// Accept Basic (password in clear on the wire, base64): only for clients that cannot do
    /// Digest, and only on trusted networks.
    pub basic: bool,
    /// Digest algorithms offered, preferred first (`"SHA-256"`, `"MD5"`).
    pub digest: Vec<DigestAlgorithm>,
    /// A nonce is accepted this long after it was issued; older ones get `stale=true` and the
    /// client retries without asking the user again.
    pub nonce_lifetime_secs: u64,
    /// Failed logins from one address before it is refused for a while.
    pub max_failures: u32,
    /// Longest refusal after repeated failures (it doubles from 1 s up to this).
    pub backoff_max_secs: u64,
    /// What anyone may do without logging in (default: nothing).
    pub anonymous: Rights,
    #[serde(rename = "user")]
    pub users: Vec<UserConfig>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            realm: "vigil".into(),
            basic: false,
            digest: vec![DigestAlgorithm::Sha256, DigestAlgorithm::Md5],
            nonce_lifetime_secs: 60,
            max_failures: 5,
            backoff_max_secs: 60,
            anonymous: Rights::default(),
            users: Vec::new(),
        }
    }
}

/// Camera-id patterns per right; `*` matches any run of characters (`"gate-*"`, `"*"`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Rights {
    /// Watch live: DESCRIBE/SETUP/PLAY on `live/<camera>`.
    pub read: Vec<String>,
    /// Play recordings: `playback/<camera>`.
    pub playback: Vec<String>,
    /// Publish: ANNOUNCE/RECORD to `live/<camera>`.
    pub publish: Vec<String>,
    /// Steer a PTZ camera: `POST /api/cameras/<camera>/ptz` with the user's credentials.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ptz: Vec<String>,
    /// Export recordings as MP4 files (`/api/export/<camera>`): a copy that leaves the
    /// system, so a right of its own beside `playback`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub export: Vec<String>,
    /// Steer the cluster: migrate sessions, drain and undrain nodes, move cameras, and read
    /// the node and cluster views those need.
    #[serde(skip_serializing_if = "is_false")]
    pub operate: bool,
    /// Everything the admin token may: cameras, users, the registry, ONVIF onboarding,
    /// `/metrics`.
    #[serde(skip_serializing_if = "is_false")]
    pub admin: bool,
    /// `/metrics` alone: a Prometheus scraper's token (HTTP).
    #[serde(skip_serializing_if = "is_false")]
    pub metrics: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: String,
    /// Hex MD5("name:realm:password").
    pub ha1_md5: String,
    /// Hex SHA-256("name:realm:password").
    pub ha1_sha256: String,
    #[serde(flatten)]
    pub rights: Rights,
}

impl AuthConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.realm.is_empty() || self.realm.contains(['"', '\\']) {
            return bad("auth.realm must be non-empty without quotes or backslashes".into());
        }
        if self.digest.is_empty() && !self.basic {
            return bad("auth: offer at least one of digest or basic".into());
        }
        if self.nonce_lifetime_secs == 0 {
            return bad("auth.nonce_lifetime_secs must be at least 1".into());
        }
        let mut seen = std::collections::HashSet::new();
        for u in &self.users {
            check_user(u).map_err(|e| ConfigError::Invalid(format!("auth.{e}")))?;
            if !seen.insert(u.name.as_str()) {
                return bad(format!("auth.user {:?} is listed twice", u.name));
            }
        }
        Ok(())
    }
}

/// One user's setting refused by [`check_user`]: the field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("user {user:?}: {field}: {message}")]
pub struct UserFieldError {
    pub user: String,
    pub field: &'static str,
    pub message: String,
}

/// An API token for a program (`[[http.api_token]]`, or the registry's): its name, the
/// SHA-256 of its secret (the secret itself is never stored), its rights, its expiry.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub name: String,
    /// Hex SHA-256 of the token's secret.
    pub sha256: String,
    /// Unix seconds from which it is refused; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
    /// Unix seconds it was made (shown in lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<u64>,
    #[serde(flatten)]
    pub rights: Rights,
}

/// One token's setting refused by [`check_token`]: the field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("token {token:?}: {field}: {message}")]
pub struct TokenFieldError {
    pub token: String,
    pub field: &'static str,
    pub message: String,
}

/// The rules of one API token: a name like a user's, a hex SHA-256, camera patterns like a
/// user's.
pub fn check_token(t: &TokenConfig) -> Result<(), TokenFieldError> {
    let err = |field: &'static str, message: &str| TokenFieldError {
        token: t.name.clone(),
        field,
        message: message.into(),
    };
    if !name_ok(&t.name) {
        return Err(err("name", NAME_RULE));
    }
    if t.sha256.len() != 64 || !t.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(err(
            "sha256",
            "the hex SHA-256 of the token (use `vigil ctl token add`)",
        ));
    }
    if !patterns_ok(&t.rights) {
        return Err(err("rights", PATTERN_RULE));
    }
    Ok(())
}

const NAME_RULE: &str = "1-64 characters, no ':', '\"' or '\\'";
const PATTERN_RULE: &str = "camera patterns of 1-128 printable characters";

/// A name that fits a Digest `username="…"` and a `user:pass@` URL.
fn name_ok(name: &str) -> bool {
    !(name.is_empty()
        || name.len() > 64
        || name.contains([':', '"', '\\'])
        || name.chars().any(char::is_control))
}

/// Every camera pattern of `r` non-empty, short and printable.
fn patterns_ok(r: &Rights) -> bool {
    r.read
        .iter()
        .chain(&r.playback)
        .chain(&r.publish)
        .chain(&r.ptz)
        .chain(&r.export)
        .all(|p| !(p.is_empty() || p.len() > 128 || p.chars().any(char::is_control)))
}

/// The rules of one user, from `[[auth.user]]` or the registry: a name that fits a Digest
/// `username="…"` and a `user:pass@` URL (no ':', quote or backslash, 1-64 characters),
/// hex HA1 hashes, and non-empty camera patterns.
pub fn check_user(u: &UserConfig) -> Result<(), UserFieldError> {
    let err = |field: &'static str, message: &str| UserFieldError {
        user: u.name.clone(),
        field,
        message: message.into(),
    };
    if !name_ok(&u.name) {
        return Err(err("name", NAME_RULE));
    }
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(&u.ha1_md5, 32) || !hex(&u.ha1_sha256, 64) {
        return Err(err(
            "password",
            "ha1_md5/ha1_sha256 must be hex hashes (use `vigil user add`)",
        ));
    }
    if !patterns_ok(&u.rights) {
        return Err(err("rights", PATTERN_RULE));
    }
    Ok(())
}
