//! An event as a receiver gets it, sans-IO: the JSON body and its signature, so that what
//! a receiver must check is fixed by pure functions its tests (and ours) call directly.
//!
//! The signature is HMAC-SHA256 of the exact body bytes under `[webhooks] secret`, in
//! `X-Vigil-Signature: sha256=<hex>` (the GitHub convention, which receivers' libraries
//! already verify). The body carries its own time and id so a receiver can refuse replays
//! and drop the duplicates a retry after a lost answer makes.

use crate::node::events::{Event, Published};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

pub const SIGNATURE_HEADER: &str = "X-Vigil-Signature";
/// The event's name, so a receiver can route without parsing.
pub const EVENT_HEADER: &str = "X-Vigil-Event";

#[derive(Serialize)]
struct Envelope<'a> {
    /// Unique per event: node, the node's start (ms), sequence number.
    id: String,
    node: &'a str,
    at: String,
    at_ms: i64,
    #[serde(flatten)]
    event: &'a Event,
}

/// The JSON body of `p`, published by `node` (which started at `boot_ms`).
pub fn body(node: &str, boot_ms: i64, p: &Published) -> Vec<u8> {
    let at = jiff::Timestamp::from_millisecond(p.at_ms)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let env = Envelope {
        id: format!("{node}-{boot_ms}-{}", p.seq),
        node,
        at,
        at_ms: p.at_ms,
        event: &p.event,
    };
    // Strings and numbers only: serialising cannot fail.
    serde_json::to_vec(&env).unwrap_or_default()
}

fn mac(key: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!("any key length"))
}

/// The `X-Vigil-Signature` value of `body` under `key`: `sha256=<64 hex digits>`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let mut m = mac(key);
    m.update(body);
    let tag = m.finalize().into_bytes();
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Whether `header` is `body`'s signature under `key` (in constant time): what a receiver
/// does.
pub fn verify(key: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex) = header.trim().strip_prefix("sha256=") else {
        return false;
    };
    if hex.len() != 64 {
        return false;
    }
    let tag: Option<Vec<u8>> = (0..32)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    let Some(tag) = tag else {
        return false;
    };
    let mut m = mac(key);
    m.update(body);
    m.verify_slice(&tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published() -> Published {
        Published {
            seq: 7,
            at_ms: 1_767_225_600_000,
            event: Event::RecordingError {
                camera: "gate".into(),
                error: "disk full".into(),
            },
        }
    }

    #[test]
    fn the_body_names_the_event_its_node_time_and_id() {
        let b = body("n1", 42, &published());
        let v: serde_json::Value = serde_json::from_slice(&b).expect("JSON");
        assert_eq!(
            v,
            serde_json::json!({
                "id": "n1-42-7", "node": "n1", "at": "2026-01-01T00:00:00Z",
                "at_ms": 1_767_225_600_000_i64, "event": "recording_error",
                "camera": "gate", "error": "disk full",
            })
        );
    }

    /// RFC 4231 test case 2 (key "Jefe"): the signature is plain HMAC-SHA256 of the body.
    #[test]
    fn the_signature_is_hmac_sha256_of_the_body_and_verifies() {
        let body = b"what do ya want for nothing?";
        let sig = signature(b"Jefe", body);
        assert_eq!(
            sig,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(verify(b"Jefe", body, &sig));
        // A changed body, another key, a cut or malformed header: refused.
        assert!(!verify(b"Jefe", b"what do ya want for nothing!", &sig));
        assert!(!verify(b"jefe", body, &sig));
        assert!(!verify(b"Jefe", body, &sig[..sig.len() - 2]));
        assert!(!verify(b"Jefe", body, &sig.replace("sha256=", "sha1=")));
        assert!(!verify(
            b"Jefe",
            body,
            &format!("{}zz", &sig[..sig.len() - 2])
        ));
    }
}
