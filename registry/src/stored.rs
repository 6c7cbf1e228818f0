//! The registry as its files hold it, beside the [`Registry`] a node holds in memory: users'
//! Digest HA1s sealed under the registry key (issue 44, H3).
//!
//! An HA1 is password-equivalent: it answers Digest for its realm, and an MD5 one is cheap
//! to crack. So whoever could read the share could log in as any user. Like a camera's
//! password, both HA1s are now sealed with XChaCha20-Poly1305 under `[registry] secret_key`
//! (or the key derived from the cluster key). The associated data is `user\0<name>`: a
//! sealed blob copied onto another user (or a camera, whose ids hold no NUL) does not open.
//!
//! In memory they stay in clear, because verification needs them. The sealing is done only
//! when a file is written (`format::encode`), so edits, diffs and views never see it.
//! Versions written before sealing hold the HA1s in clear; they are still read, and sealed
//! by the next write. A node without any key writes them in clear, as before; it says so at
//! start. It refuses a version holding sealed users it cannot open, naming the user.
//!
//! Tokens are stored as the SHA-256 of a 256-bit secret. That hash is not a secret (nobody
//! can search 2^256 secrets to match it), so tokens are not sealed. The registry's MAC keeps
//! anyone from adding one.

use crate::dir::ChangeRecord;
use crate::format::Body;
use crate::model::{Registry, StoredCamera};
use crate::secret::SecretKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use vigil_conf::{Rights, TokenConfig, UserConfig};

/// A version file's JSON body.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoredBody {
    change: ChangeRecord,
    registry: StoredRegistry,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredRegistry {
    cameras: BTreeMap<String, StoredCamera>,
    users: BTreeMap<String, StoredUser>,
    /// Absent from versions written before tokens existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    tokens: BTreeMap<String, TokenConfig>,
}

/// A user as stored: the HA1s sealed (`sealed_ha1`), or in clear (a version written before
/// sealing, or by a node without a key).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredUser {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ha1_md5: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ha1_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed_ha1: Option<String>,
    #[serde(flatten)]
    rights: Rights,
}

/// The associated data a user's HA1s are sealed under.
fn aad(name: &str) -> String {
    format!("user\0{name}")
}

/// `body` as a file holds it: each user's HA1s sealed under `key` when there is one.
pub(crate) fn seal(body: &Body, key: Option<&SecretKey>) -> StoredBody {
    let users = body
        .registry
        .users
        .iter()
        .map(|(name, u)| {
            let stored = match key {
                Some(k) => StoredUser {
                    name: u.name.clone(),
                    ha1_md5: None,
                    ha1_sha256: None,
                    sealed_ha1: Some(
                        k.seal(&aad(&u.name), &format!("{}:{}", u.ha1_md5, u.ha1_sha256)),
                    ),
                    rights: u.rights.clone(),
                },
                None => StoredUser {
                    name: u.name.clone(),
                    ha1_md5: Some(u.ha1_md5.clone()),
                    ha1_sha256: Some(u.ha1_sha256.clone()),
                    sealed_ha1: None,
                    rights: u.rights.clone(),
                },
            };
            (name.clone(), stored)
        })
        .collect();
    StoredBody {
        change: body.change.clone(),
        registry: StoredRegistry {
            cameras: body.registry.cameras.clone(),
            users,
            tokens: body.registry.tokens.clone(),
        },
    }
}

/// The body a file holds, each sealed user opened with `key`; or why not (the user named,
/// no secret in the reason).
pub(crate) fn open(stored: StoredBody, key: Option<&SecretKey>) -> Result<Body, String> {
    let mut users = BTreeMap::new();
    for (name, u) in stored.registry.users {
        let (ha1_md5, ha1_sha256) = match (u.sealed_ha1, u.ha1_md5, u.ha1_sha256) {
            (Some(sealed), None, None) => {
                let key = key.ok_or_else(|| {
                    format!(
                        "user {name:?}: its password hashes are sealed and this node has no \
                         [registry] secret_key"
                    )
                })?;
                let both = key
                    .open(&aad(&u.name), &sealed)
                    .map_err(|e| format!("user {name:?}: {e}"))?;
                let (md5, sha) = both
                    .split_once(':')
                    .ok_or_else(|| format!("user {name:?}: the sealed hashes are malformed"))?;
                (md5.to_string(), sha.to_string())
            }
            (None, Some(md5), Some(sha)) => (md5, sha),
            _ => {
                return Err(format!(
                    "user {name:?}: needs either sealed_ha1 or both ha1_md5 and ha1_sha256"
                ))
            }
        };
        let user = UserConfig {
            name: u.name,
            ha1_md5,
            ha1_sha256,
            rights: u.rights,
        };
        users.insert(name, user);
    }
    Ok(Body {
        change: stored.change,
        registry: Registry {
            cameras: stored.registry.cameras,
            users,
            tokens: stored.registry.tokens,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> Body {
        let mut registry = Registry::default();
        registry.users.insert(
            "alice".into(),
            UserConfig {
                name: "alice".into(),
                ha1_md5: "a".repeat(32),
                ha1_sha256: "b".repeat(64),
                rights: Rights {
                    read: vec!["gate-*".into()],
                    ..Rights::default()
                },
            },
        );
        Body {
            change: ChangeRecord::new(2, "seed", "n1", Vec::new()),
            registry,
        }
    }

    #[test]
    fn hashes_are_sealed_on_the_share_and_clear_in_memory() {
        let key = SecretKey::from_bytes([3; 32]);
        let b = body();
        let text = serde_json::to_string(&seal(&b, Some(&key))).unwrap();
        assert!(!text.contains("aaaa") && !text.contains("bbbb"), "{text}");
        assert!(
            text.contains("sealed_ha1") && text.contains("gate-*"),
            "{text}"
        );
        let back: StoredBody = serde_json::from_str(&text).unwrap();
        assert_eq!(open(back, Some(&key)).unwrap(), b);
        // Without the key, or with another, the version is refused naming the user.
        let back: StoredBody = serde_json::from_str(&text).unwrap();
        let e = open(back, None).unwrap_err();
        assert!(e.contains("\"alice\"") && e.contains("secret_key"), "{e}");
        let back: StoredBody = serde_json::from_str(&text).unwrap();
        let e = open(back, Some(&SecretKey::from_bytes([4; 32]))).unwrap_err();
        assert!(e.contains("does not open"), "{e}");
    }

    #[test]
    fn a_sealed_blob_moved_to_another_user_does_not_open() {
        let key = SecretKey::from_bytes([3; 32]);
        let mut b = body();
        let mut bob = b.registry.users["alice"].clone();
        bob.name = "bob".into();
        b.registry.users.insert("bob".into(), bob);
        let mut stored = seal(&b, Some(&key));
        let alice = stored.registry.users["alice"].sealed_ha1.clone();
        if let Some(u) = stored.registry.users.get_mut("bob") {
            u.sealed_ha1 = alice;
        }
        let e = open(stored, Some(&key)).unwrap_err();
        assert!(e.contains("\"bob\""), "{e}");
    }

    #[test]
    fn versions_written_before_sealing_still_read() {
        // A user as versions before issue 44 stored it: the HA1s in clear, no tokens key.
        let old = format!(
            r#"{{"change":{{"version":1,"at_ms":0,"by":"seed","node":"n1","items":[]}},
                "registry":{{"cameras":{{}},"users":{{"alice":{{"name":"alice",
                "ha1_md5":"{}","ha1_sha256":"{}","read":["gate-*"],"playback":[],
                "publish":[]}}}}}}}}"#,
            "a".repeat(32),
            "b".repeat(64)
        );
        let stored: StoredBody = serde_json::from_str(&old).unwrap();
        let key = SecretKey::from_bytes([3; 32]);
        let b = open(stored, Some(&key)).unwrap();
        assert_eq!(b.registry.users["alice"], body().registry.users["alice"]);
        // Without a key a node writes them in clear, as before.
        let text = serde_json::to_string(&seal(&b, None)).unwrap();
        assert!(
            text.contains(&"a".repeat(32)) && !text.contains("sealed"),
            "{text}"
        );
        // Half of each is refused.
        let half = old.replace(&format!(r#""ha1_md5":"{}","#, "a".repeat(32)), "");
        let stored: StoredBody = serde_json::from_str(&half).unwrap();
        assert!(open(stored, Some(&key))
            .unwrap_err()
            .contains("needs either"));
    }
}
