//! The audit trail's file format and its proof, pure: records in, lines out; lines in, the
//! first record that was edited, removed or reordered out.
//!
//! One JSON object per line (`jq` reads it). Each record carries `prev`, the SHA-256 of the
//! whole previous line as written, so changing, removing or swapping any line breaks the
//! link of the line after it. Every so often the writer adds a `checkpoint` record whose
//! `sig` is an HMAC-SHA256, under the node's audit key, of its own `prev`: whoever can write
//! the share but holds no key can rewrite the chain from some point on, but not sign it, so
//! the next checkpoint (or the last one, for a cut tail) gives the rewrite away. What comes
//! after the last checkpoint is chained but unsigned, and the verifier says how much.
//!
//! Why hand-written: a hash chain over JSON lines is thirty lines of `sha2` and `hmac`; the
//! transparency-log crates carry Merkle trees and witnesses vigil does not need yet.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `prev` of a node's very first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The kind of a checkpoint record.
pub const CHECKPOINT: &str = "checkpoint";

/// One access to video, or one change, as the trail keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Per node, from 1, never reused.
    pub seq: u64,
    pub at_ms: i64,
    pub node: String,
    /// `live.start`, `live.stop`, `playback.start`, `playback.stop`, `export`, `ptz`,
    /// `signin`, `signin.failed`, `change`, `operate`, `checkpoint`.
    pub kind: String,
    /// Who: a user's name, `admin-token`, `anonymous`, `local`.
    pub user: String,
    /// The client's address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub camera: Option<String>,
    /// `rtsp`, `rtsps`, `hls`, `webrtc`, `http`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The recording time asked for or played, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<i64>,
    /// What else the kind tells: bytes, duration, the route and status of a change.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub detail: serde_json::Map<String, serde_json::Value>,
    /// SHA-256 (hex) of the previous line, or [`GENESIS`].
    pub prev: String,
    /// A checkpoint's HMAC-SHA256 (hex) of `prev` under the node's audit key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// What an event says before the chain places it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub at_ms: i64,
    pub kind: String,
    pub user: String,
    pub client: String,
    pub camera: Option<String>,
    pub protocol: Option<String>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    pub detail: serde_json::Map<String, serde_json::Value>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 (hex) of one line as written (without its newline).
pub fn line_hash(line: &str) -> String {
    hex(&Sha256::digest(line.as_bytes()))
}

fn sign(key: &[u8], prev: &str) -> String {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(prev.as_bytes());
    hex(&m.finalize().into_bytes())
}

fn signed_by(key: &[u8], prev: &str, sig: &str) -> bool {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(prev.as_bytes());
    let Some(bytes) = unhex(sig) else {
        return false;
    };
    m.verify_slice(&bytes).is_ok()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The writer's end of a node's chain: the next seq and the hash of the last line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub node: String,
    pub next_seq: u64,
    pub last_hash: String,
}

impl Chain {
    /// A chain with nothing written yet.
    pub fn new(node: &str) -> Self {
        Self {
            node: node.to_string(),
            next_seq: 1,
            last_hash: GENESIS.to_string(),
        }
    }

    /// The chain continued after `last_line`, the newest line on the share (a restart).
    pub fn resume(node: &str, last_line: &str) -> Result<Self, VerifyError> {
        let r: Record = serde_json::from_str(last_line).map_err(|e| VerifyError::Unreadable {
            line: 0,
            why: e.to_string(),
        })?;
        Ok(Self {
            node: node.to_string(),
            next_seq: r.seq + 1,
            last_hash: line_hash(last_line),
        })
    }

    /// `event` as the next line (no newline).
    pub fn append(&mut self, event: Event) -> String {
        self.push(Record {
            seq: self.next_seq,
            at_ms: event.at_ms,
            node: self.node.clone(),
            kind: event.kind,
            user: event.user,
            client: event.client,
            camera: event.camera,
            protocol: event.protocol,
            from_ms: event.from_ms,
            to_ms: event.to_ms,
            detail: event.detail,
            prev: self.last_hash.clone(),
            sig: None,
        })
    }

    /// A checkpoint signing everything so far (unsigned without a key).
    pub fn checkpoint(&mut self, at_ms: i64, key: Option<&[u8]>) -> String {
        let prev = self.last_hash.clone();
        self.push(Record {
            seq: self.next_seq,
            at_ms,
            node: self.node.clone(),
            kind: CHECKPOINT.into(),
            user: String::new(),
            client: String::new(),
            camera: None,
            protocol: None,
            from_ms: None,
            to_ms: None,
            detail: Default::default(),
            sig: key.map(|k| sign(k, &prev)),
            prev,
        })
    }

    fn push(&mut self, r: Record) -> String {
        let line = serde_json::to_string(&r).unwrap_or_default();
        self.next_seq += 1;
        self.last_hash = line_hash(&line);
        line
    }
}

/// Why a trail fails its proof, naming the first record at fault (1-based line numbers
/// over the lines given, and the record's seq where it reads).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("line {line}: not a record ({why})")]
    Unreadable { line: usize, why: String },
    #[error(
        "line {line} (seq {seq}): its prev is not the hash of the line before: \
         the record before it was edited, or records between were removed or reordered"
    )]
    Broken { line: usize, seq: u64 },
    #[error(
        "line {line} (seq {seq}): seq {seq} follows seq {after}: records removed or reordered"
    )]
    Sequence { line: usize, seq: u64, after: u64 },
    #[error("line {line} (seq {seq}): a checkpoint whose signature is not the node's key's: the chain before it was rewritten")]
    BadSignature { line: usize, seq: u64 },
}

/// What a sound trail holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    pub records: usize,
    /// Checkpoints whose signature the key confirmed.
    pub signed_checkpoints: usize,
    /// Records after the last signed checkpoint: chained, not yet signed.
    pub unsigned_tail: usize,
    /// The first record's `prev` is not the genesis (older files were removed by retention).
    pub starts_after_retention: bool,
}

/// Checks `lines` (one node's trail, oldest first). `key`: the node's audit key; without
/// it checkpoints are counted as unsigned.
pub fn verify<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    key: Option<&[u8]>,
) -> Result<Verified, VerifyError> {
    let mut out = Verified::default();
    let mut last: Option<(String, u64)> = None;
    for (i, line) in lines.into_iter().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let r: Record = serde_json::from_str(line).map_err(|e| VerifyError::Unreadable {
            line: n,
            why: e.to_string(),
        })?;
        match &last {
            None => out.starts_after_retention = r.prev != GENESIS,
            Some((hash, seq)) => {
                if r.prev != *hash {
                    return Err(VerifyError::Broken {
                        line: n,
                        seq: r.seq,
                    });
                }
                if r.seq != seq + 1 {
                    return Err(VerifyError::Sequence {
                        line: n,
                        seq: r.seq,
                        after: *seq,
                    });
                }
            }
        }
        out.records += 1;
        out.unsigned_tail += 1;
        if r.kind == CHECKPOINT {
            if let (Some(k), Some(sig)) = (key, r.sig.as_deref()) {
                if !signed_by(k, &r.prev, sig) {
                    return Err(VerifyError::BadSignature {
                        line: n,
                        seq: r.seq,
                    });
                }
                out.signed_checkpoints += 1;
                out.unsigned_tail = 0;
            } else if key.is_some() {
                return Err(VerifyError::BadSignature {
                    line: n,
                    seq: r.seq,
                });
            }
        }
        last = Some((line_hash(line), r.seq));
    }
    Ok(out)
}

/// The audit key of node `node` from the cluster's secret: one key per node, so a node's
/// key signs only its own trail.
pub fn node_key(secret: &[u8], node: &str) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(b"vigil-audit-key\0");
    m.update(node.as_bytes());
    m.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"audit-test-key";

    fn event(i: i64) -> Event {
        Event {
            at_ms: 1_000 + i,
            kind: "live.start".into(),
            user: "guard".into(),
            client: "198.18.0.2:40000".into(),
            camera: Some(format!("gate-{i}")),
            protocol: Some("rtsp".into()),
            ..Event::default()
        }
    }

    /// Ten records with a checkpoint after the fifth and at the end.
    fn trail() -> Vec<String> {
        let mut c = Chain::new("n1");
        let mut lines = Vec::new();
        for i in 0..10 {
            lines.push(c.append(event(i)));
            if i == 4 {
                lines.push(c.checkpoint(2_000, Some(KEY)));
            }
        }
        lines.push(c.checkpoint(3_000, Some(KEY)));
        lines
    }

    fn check(lines: &[String]) -> Result<Verified, VerifyError> {
        verify(lines.iter().map(String::as_str), Some(KEY))
    }

    #[test]
    fn a_written_trail_verifies() {
        let v = check(&trail()).expect("sound");
        assert_eq!(v.records, 12);
        assert_eq!(v.signed_checkpoints, 2);
        assert_eq!(v.unsigned_tail, 0);
        assert!(!v.starts_after_retention);
        // Without the key the chain still holds; the checkpoints are just not proven.
        let v = verify(trail().iter().map(String::as_str), None).expect("chain");
        assert_eq!(v.signed_checkpoints, 0);
    }

    #[test]
    fn an_edited_record_is_named() {
        let mut t = trail();
        t[2] = t[2].replace("gate-2", "gate-9");
        assert_eq!(check(&t), Err(VerifyError::Broken { line: 4, seq: 4 }));
    }

    #[test]
    fn a_removed_record_is_named() {
        let mut t = trail();
        t.remove(3);
        assert_eq!(check(&t), Err(VerifyError::Broken { line: 4, seq: 5 }));
    }

    #[test]
    fn swapped_records_are_named() {
        let mut t = trail();
        t.swap(6, 7);
        assert_eq!(check(&t), Err(VerifyError::Broken { line: 7, seq: 8 }));
    }

    /// Whoever rewrites the chain from some point on (recomputing every prev) cannot sign
    /// the next checkpoint.
    #[test]
    fn a_rewritten_chain_fails_at_the_next_checkpoint() {
        let t = trail();
        let mut c = Chain::resume("n1", &t[1]).expect("resume");
        let mut forged: Vec<String> = t[..2].to_vec();
        for i in 2..5 {
            let mut e = event(i);
            e.user = "someone-else".into();
            forged.push(c.append(e));
        }
        forged.push(c.checkpoint(2_000, Some(b"not-the-key")));
        assert_eq!(
            check(&forged),
            Err(VerifyError::BadSignature { line: 6, seq: 6 })
        );
        // An unsigned checkpoint where a key is expected is refused too.
        let mut c = Chain::resume("n1", &t[4]).expect("resume");
        let mut cut: Vec<String> = t[..5].to_vec();
        cut.push(c.checkpoint(2_000, None));
        assert_eq!(
            check(&cut),
            Err(VerifyError::BadSignature { line: 6, seq: 6 })
        );
    }

    #[test]
    fn a_trail_cut_by_retention_says_so_and_the_tail_is_counted() {
        let t = trail();
        let v = check(&t[6..]).expect("sound");
        assert!(v.starts_after_retention);
        let mut c = Chain::resume("n1", t.last().expect("line")).expect("resume");
        let mut more = t.clone();
        more.push(c.append(event(11)));
        more.push(c.append(event(12)));
        assert_eq!(check(&more).expect("sound").unsigned_tail, 2);
        assert!(matches!(
            check(&["{not json".to_string()]),
            Err(VerifyError::Unreadable { line: 1, .. })
        ));
    }

    #[test]
    fn node_keys_differ_per_node() {
        assert_ne!(node_key(b"s", "n1"), node_key(b"s", "n2"));
        assert_eq!(node_key(b"s", "n1"), node_key(b"s", "n1"));
    }
}
