//! One version of the registry as a file: a header line naming the format, the version,
//! the body's length, its SHA-256 and its signature, then the JSON body. A file that was cut
//! short, had a byte changed, is a different version than its name says, or is not signed
//! with the cluster's registry key is refused as a whole; the node keeps the last version it
//! read whole.
//!
//! ```text
//! vigil-registry 1 version=42 bytes=1234 sha256=9f86d0… hmac=4c1a…
//! {"change":{…},"registry":{"cameras":{…},"users":{…}}}
//! ```
//!
//! The body is the registry as files hold it (`stored`: users' HA1s sealed); in memory
//! they are clear.
//!
//! The signature (`hmac`: HMAC-SHA256 of the version and the body under [`MacKey`], from
//! `[registry] secret_key` or the cluster key) is what keeps whoever can write the share but
//! holds no key from adding a user or re-pointing a camera (issue 44, H3): the checksum
//! alone anyone can recompute. A node without any key writes and reads unsigned files,
//! and says so at start.

use crate::dir::ChangeRecord;
use crate::model::Registry;
use crate::secret::SecretKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const MAGIC: &str = "vigil-registry 1";

/// What a version file holds besides its header: the registry, and the change that made it
/// (so the change log can never disagree with the versions it describes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Body {
    pub change: ChangeRecord,
    pub registry: Registry,
}

/// The key registry versions are signed with. No `Debug` of its bytes.
#[derive(Clone)]
pub struct MacKey(pub(crate) [u8; 32]);

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(..)")
    }
}

impl MacKey {
    /// The MAC of version `version` with body `json`, fed and not yet finished.
    fn mac(&self, version: u64, json: &[u8]) -> hmac::Hmac<Sha256> {
        use hmac::Mac;
        // HMAC takes a key of any length: 32 bytes cannot be refused.
        let mut mac = <hmac::Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        mac.update(format!("vigil-registry version={version}\n").as_bytes());
        mac.update(json);
        mac
    }

    /// The signature of version `version` with body `json`, hex.
    fn sign(&self, version: u64, json: &[u8]) -> String {
        use hmac::Mac;
        hex::encode(self.mac(version, json).finalize().into_bytes())
    }

    /// Whether `given` (hex) signs version `version` with body `json`: compared in constant
    /// time by the `hmac` crate.
    fn verify(&self, version: u64, json: &[u8], given: &str) -> bool {
        use hmac::Mac;
        hex::decode(given).is_ok_and(|tag| self.mac(version, json).verify_slice(&tag).is_ok())
    }
}

/// Version `version`'s file, its users sealed and the whole signed with `key` when given.
pub fn encode(version: u64, body: &Body, key: Option<&SecretKey>) -> Vec<u8> {
    // Serialising plain maps and strings cannot fail.
    let json = serde_json::to_vec(&crate::stored::seal(body, key)).unwrap_or_default();
    let sum = hex::encode(Sha256::digest(&json));
    let mac = key.map_or(String::new(), |k| {
        format!(" hmac={}", k.mac_key().sign(version, &json))
    });
    let mut out = format!(
        "{MAGIC} version={version} bytes={} sha256={sum}{mac}\n",
        json.len()
    )
    .into_bytes();
    out.extend_from_slice(&json);
    out
}

/// Why a version file is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Cut short, changed, another version, not a registry file: the reason.
    Corrupt(String),
    /// Whole, but not signed with this node's key (written by someone without it).
    Unsigned,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Corrupt(why) => f.write_str(why),
            Refusal::Unsigned => {
                f.write_str("not signed with this cluster's registry key (written without it)")
            }
        }
    }
}

impl From<String> for Refusal {
    fn from(why: String) -> Refusal {
        Refusal::Corrupt(why)
    }
}

impl From<&str> for Refusal {
    fn from(why: &str) -> Refusal {
        Refusal::Corrupt(why.into())
    }
}

/// The body of version `version`'s file, or why it is refused (no secret in the reason);
/// with `key`, only a file signed with it is read, and its sealed users are opened with it.
pub fn decode(version: u64, bytes: &[u8], key: Option<&SecretKey>) -> Result<Body, Refusal> {
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| "header is not text")?;
    let rest = header
        .strip_prefix(MAGIC)
        .ok_or("not a vigil registry file (format 1)")?;
    let mut fields = std::collections::HashMap::new();
    for kv in rest.split_whitespace() {
        let (k, v) = kv.split_once('=').ok_or("malformed header")?;
        fields.insert(k, v);
    }
    let field = |k: &str| fields.get(k).copied().ok_or(format!("header lacks {k}"));
    let v: u64 = field("version")?.parse().map_err(|_| "bad version")?;
    if v != version {
        return Err(format!("holds version {v}, named {version}").into());
    }
    let len: usize = field("bytes")?.parse().map_err(|_| "bad length")?;
    let json = &bytes[nl + 1..];
    if json.len() != len {
        return Err(format!("body is {} bytes, header says {len}", json.len()).into());
    }
    if hex::encode(Sha256::digest(json)) != field("sha256")? {
        return Err("checksum mismatch".into());
    }
    if let Some(key) = key {
        if !fields
            .get("hmac")
            .is_some_and(|m| key.mac_key().verify(version, json, m))
        {
            return Err(Refusal::Unsigned);
        }
    }
    let stored: crate::stored::StoredBody =
        serde_json::from_slice(json).map_err(|e| format!("body: {e}"))?;
    let body = crate::stored::open(stored, key)?;
    body.registry
        .check()
        .map_err(|e| Refusal::Corrupt(e.to_string()))?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StoredCamera;
    use vigil_conf::{CameraConfig, Source};

    fn body() -> Body {
        let mut registry = Registry::default();
        registry.cameras.insert(
            "gate".into(),
            StoredCamera {
                camera: CameraConfig::new("gate", Source::Push),
                sealed_password: None,
            },
        );
        Body {
            change: ChangeRecord::new(3, "alice", "n1", Vec::new()),
            registry,
        }
    }

    fn why(r: Result<Body, Refusal>) -> String {
        r.map(|_| String::new()).unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn a_file_reads_back_only_whole_and_under_its_own_version() {
        let b = body();
        let bytes = encode(3, &b, None);
        assert_eq!(decode(3, &bytes, None).unwrap(), b);
        assert!(why(decode(4, &bytes, None)).contains("named 4"));
        // Cut short, a byte flipped in the body, garbage: each refused with its reason.
        let cut = &bytes[..bytes.len() - 5];
        assert!(why(decode(3, cut, None)).contains("header says"));
        let mut flipped = bytes.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0x20;
        assert_eq!(why(decode(3, &flipped, None)), "checksum mismatch");
        assert!(decode(3, b"hello", None).is_err());
        assert!(why(decode(3, b"{}\n{}", None)).contains("not a vigil"));
    }

    /// Issue 44, H3: a share writer without the key can write a file whose checksum is
    /// right; with the key, only signed files read — an unsigned one, one signed with
    /// another key, one whose signature belongs to another version or body.
    #[test]
    fn only_a_file_signed_with_the_key_reads() {
        let (key, other) = (
            SecretKey::from_bytes([7; 32]),
            SecretKey::from_bytes([8; 32]),
        );
        let b = body();
        let signed = encode(3, &b, Some(&key));
        assert_eq!(decode(3, &signed, Some(&key)).unwrap(), b);
        assert_eq!(
            decode(3, &encode(3, &b, None), Some(&key)),
            Err(Refusal::Unsigned)
        );
        assert_eq!(decode(3, &signed, Some(&other)), Err(Refusal::Unsigned));
        // The signature of version 3 on a file named 4 (the version field rewritten, the
        // checksum still right): refused.
        let text = String::from_utf8(signed.clone()).unwrap();
        let moved = text.replacen("version=3", "version=4", 1);
        assert_eq!(
            decode(4, moved.as_bytes(), Some(&key)),
            Err(Refusal::Unsigned)
        );
        // An attacker's user added to a signed body, the checksum recomputed: refused.
        let mut evil = body();
        evil.change.by = "mallory".into();
        let forged = encode(3, &evil, Some(&other));
        assert_eq!(decode(3, &forged, Some(&key)), Err(Refusal::Unsigned));
        // A signed file is still read by a node without a key.
        assert_eq!(decode(3, &signed, None).unwrap(), b);
    }

    #[test]
    fn a_well_summed_file_with_a_camera_that_breaks_the_rules_is_refused() {
        let mut b = body();
        b.registry.cameras.insert(
            "../etc".into(),
            StoredCamera {
                camera: CameraConfig::new("../etc", Source::Push),
                sealed_password: None,
            },
        );
        assert!(why(decode(3, &encode(3, &b, None), None)).contains("id"));
    }
}
