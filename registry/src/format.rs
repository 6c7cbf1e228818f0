//! One version of the registry as a file: a header line naming the format, the version,
//! the body's length and its SHA-256, then the JSON body. A file that was cut short, had a
//! byte changed, or is a different version than its name says is refused as a whole; the
//! node keeps the last version it read whole.
//!
//! ```text
//! vigil-registry 1 version=42 bytes=1234 sha256=9f86d0…
//! {"change":{…},"registry":{"cameras":{…},"users":{…}}}
//! ```

use crate::dir::ChangeRecord;
use crate::model::Registry;
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

pub fn encode(version: u64, body: &Body) -> Vec<u8> {
    // Serialising plain maps and strings cannot fail.
    let json = serde_json::to_vec(body).unwrap_or_default();
    let sum = hex::encode(Sha256::digest(&json));
    let mut out = format!(
        "{MAGIC} version={version} bytes={} sha256={sum}\n",
        json.len()
    )
    .into_bytes();
    out.extend_from_slice(&json);
    out
}

/// The body of version `version`'s file, or why it is refused (no secret in the reason).
pub fn decode(version: u64, bytes: &[u8]) -> Result<Body, String> {
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
        return Err(format!("holds version {v}, named {version}"));
    }
    let len: usize = field("bytes")?.parse().map_err(|_| "bad length")?;
    let json = &bytes[nl + 1..];
    if json.len() != len {
        return Err(format!("body is {} bytes, header says {len}", json.len()));
    }
    if hex::encode(Sha256::digest(json)) != field("sha256")? {
        return Err("checksum mismatch".into());
    }
    let body: Body = serde_json::from_slice(json).map_err(|e| format!("body: {e}"))?;
    body.registry.check().map_err(|e| e.to_string())?;
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

    #[test]
    fn a_file_reads_back_only_whole_and_under_its_own_version() {
        let b = body();
        let bytes = encode(3, &b);
        assert_eq!(decode(3, &bytes).unwrap(), b);
        assert!(decode(4, &bytes).unwrap_err().contains("named 4"));
        // Cut short, a byte flipped in the body, garbage: each refused with its reason.
        let cut = &bytes[..bytes.len() - 5];
        assert!(decode(3, cut).unwrap_err().contains("header says"));
        let mut flipped = bytes.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0x20;
        assert_eq!(decode(3, &flipped).unwrap_err(), "checksum mismatch");
        assert!(decode(3, b"hello").is_err());
        assert!(decode(3, b"{}\n{}").unwrap_err().contains("not a vigil"));
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
        assert!(decode(3, &encode(3, &b)).unwrap_err().contains("id"));
    }
}
