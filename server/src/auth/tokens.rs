//! API tokens for programs (issue 44): a Prometheus scraper, a VMS's integration, a script.
//!
//! A token is named and scoped by the same [`Rights`] as a user (camera patterns, the
//! `operate`/`admin` roles, and `metrics` for `/metrics` alone), may expire, and is stored
//! as the SHA-256 of its secret only — in the config's `[[http.api_token]]` or, cluster-wide,
//! in the registry. The secret is 32 random bytes, shown once when it is made: a hash of
//! that much entropy needs no slow KDF or salt (nobody can search 2^256 secrets), and the
//! lookup by hash reveals nothing by its timing (an attacker who could time it learns bits
//! of a hash, not of a secret). Tokens prove themselves on HTTP only (`Authorization:
//! Bearer`); RTSP clients log in as users.

use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use vigil_conf::{Rights, TokenConfig};

/// Every token vigil makes starts with this, so a secret scanner (or a person) recognises
/// one pasted into a ticket or a repository.
pub const PREFIX: &str = "vigil_";

/// A new token: its secret (shown once) and the hex SHA-256 that is stored.
pub fn generate() -> (String, String) {
    let mut raw = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut raw);
    let secret = format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    );
    let hash = hash_hex(&secret);
    (secret, hash)
}

/// The hex SHA-256 of a presented secret: what the config and the registry store.
pub fn hash_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The wall clock in Unix seconds, what expiries are written in.
pub fn now_unix() -> u64 {
    u64::try_from(vigil_storage::now_ms() / 1000).unwrap_or(0)
}

/// One token the node accepts.
#[derive(Debug)]
pub struct Entry {
    pub name: String,
    pub rights: Arc<Rights>,
    /// Unix seconds after which it is refused.
    pub expires: Option<u64>,
}

/// What a presented bearer secret is.
#[derive(Debug, Clone)]
pub enum Found {
    Valid(Arc<Entry>),
    /// A token that existed and has expired (its name): not a guess, so not counted as a
    /// failure, but refused.
    Expired(String),
    Unknown,
}

/// The tokens in force, by the SHA-256 of their secrets. Replaced whole on a registry
/// version or a SIGHUP.
#[derive(Debug, Default)]
pub struct Tokens {
    by_hash: HashMap<[u8; 32], Arc<Entry>>,
}

impl Tokens {
    /// The table of `list`; an entry whose hash is not 64 hex digits (the config's and the
    /// registry's checks refuse those first) is left out.
    pub fn new(list: &[TokenConfig]) -> Tokens {
        let mut by_hash = HashMap::with_capacity(list.len());
        for t in list {
            let mut h = [0u8; 32];
            if hex::decode_to_slice(&t.sha256, &mut h).is_err() {
                continue;
            }
            by_hash.insert(
                h,
                Arc::new(Entry {
                    name: t.name.clone(),
                    rights: Arc::new(t.rights.clone()),
                    expires: t.expires,
                }),
            );
        }
        Tokens { by_hash }
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// The token `secret` proves at `now_unix`.
    pub fn find(&self, secret: &str, now_unix: u64) -> Found {
        let h: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        match self.by_hash.get(&h) {
            Some(e) if e.expires.is_some_and(|t| now_unix >= t) => Found::Expired(e.name.clone()),
            Some(e) => Found::Valid(e.clone()),
            None => Found::Unknown,
        }
    }
}

/// The rights a named scope gives a token (`vigil token add --scope`, the API's `scope`):
/// `metrics` (`/metrics` only), `read` (every camera live and recorded, and the lists),
/// `operate`, `admin`. Unknown names are refused with the list.
pub fn scope_rights(scopes: &[String], rights: &mut Rights) -> Result<(), String> {
    for s in scopes {
        match s.trim() {
            "metrics" => rights.metrics = true,
            "read" => {
                for list in [&mut rights.read, &mut rights.playback] {
                    if !list.iter().any(|p| p == "*") {
                        list.push("*".into());
                    }
                }
            }
            "operate" => rights.operate = true,
            "admin" => rights.admin = true,
            "" => {}
            other => {
                return Err(format!(
                    "unknown scope {other:?}: metrics, read, operate or admin"
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, hash: String, expires: Option<u64>) -> TokenConfig {
        TokenConfig {
            name: name.into(),
            sha256: hash,
            expires,
            created: None,
            rights: Rights {
                metrics: true,
                ..Rights::default()
            },
        }
    }

    #[test]
    fn a_token_proves_itself_by_its_secret_until_it_expires() {
        let (secret, hash) = generate();
        assert!(secret.starts_with(PREFIX) && secret.len() == PREFIX.len() + 43);
        assert_eq!(hash, hash_hex(&secret));
        assert!(!hash.contains(&secret[PREFIX.len()..]));
        let (other, other_hash) = generate();
        assert_ne!(secret, other);
        let t = Tokens::new(&[
            config("prometheus", hash, None),
            config("old", other_hash, Some(1000)),
            config("broken", "zz".into(), None),
        ]);
        assert_eq!(t.len(), 2);
        match t.find(&secret, 5000) {
            Found::Valid(e) => assert!(e.name == "prometheus" && e.rights.metrics),
            f => panic!("{f:?}"),
        }
        assert!(matches!(t.find(&other, 999), Found::Valid(_)));
        assert!(matches!(t.find(&other, 1000), Found::Expired(n) if n == "old"));
        assert!(matches!(t.find("vigil_guess", 0), Found::Unknown));
        assert!(matches!(t.find("", 0), Found::Unknown));
    }

    #[test]
    fn scopes_name_rights() {
        let mut r = Rights::default();
        scope_rights(&["metrics".into(), "read".into(), "read".into()], &mut r).unwrap();
        assert!(r.metrics && !r.operate && !r.admin);
        assert_eq!(r.read, ["*"]);
        assert_eq!(r.playback, ["*"]);
        assert!(r.export.is_empty());
        let e = scope_rights(&["root".into()], &mut r).unwrap_err();
        assert!(e.contains("root") && e.contains("metrics, read"), "{e}");
        scope_rights(&["operate".into(), "admin".into()], &mut r).unwrap();
        assert!(r.operate && r.admin);
    }
}
