//! A node's report across several gossip keys, so it may be larger than one datagram.
//!
//! Chitchat sends a node's changed key/values in version order, as many as fit in one
//! datagram (64 KiB, compressed), per round; a single value that does not fit is never sent,
//! and holds back every newer key of that node behind it. One JSON report grew past that at
//! ~800 playback sessions, and peers kept the node's last small report (issue 13). So the
//! bulky lists (streams, resident cache ranges, live, relayed and recorded cameras) go in chunks of
//! [`CHUNK_BYTES`] under their own keys, and the `report` key holds the rest of the report
//! plus a manifest: every chunk key with the chitchat version it had when the report was
//! published. The `report` key is set last, so it has the highest version and a peer that
//! has it has also received the chunks before it (chitchat applies a node's key/values in
//! version order); a peer assembles a report only when every chunk's version matches the
//! manifest, and otherwise keeps the previous whole report until a consistent set arrives.
//! An unchanged chunk keeps its version (chitchat ignores setting the same value), so only
//! what changed travels again.
//!
//! Why not fetch the bulky parts over the QUIC channel on demand: that channel needs the
//! cluster certificates (optional), would add a connection per pair of nodes (2450 at 50
//! nodes) and a fetch on every change, while gossip already spreads the data with
//! anti-entropy (a peer that missed an update catches up from any node, not only the owner).

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use vigil_cluster::Stream;

use super::report::Report;

/// The key of the report itself (with the manifest).
pub const REPORT_KEY: &str = "report";
/// Chunk keys: `report:<list>:<n>`.
const CHUNK_PREFIX: &str = "report:";
/// JSON text per chunk; compresses to a few KiB, far inside a datagram.
pub const CHUNK_BYTES: usize = 16 * 1024;

/// The `report` key's value.
#[derive(Serialize, Deserialize)]
struct Head {
    /// The report with `streams`, `cached`, `live`, `edges` and `recording` empty.
    report: Report,
    /// Chunk keys in order, each with the version it was published at.
    chunks: Vec<(String, u64)>,
}

/// The report as key/values: the chunks, then the head once their versions are known.
pub struct Split {
    pub chunks: Vec<(String, String)>,
    head: Report,
}

/// Packs JSON-serialised items into arrays of at most `CHUNK_BYTES` (an item larger than that
/// gets a chunk of its own).
fn pack<T: Serialize>(list: &str, items: &[T], out: &mut Vec<(String, String)>) {
    let mut cur = String::from("[");
    let mut n = 0;
    for item in items {
        let json = serde_json::to_string(item).unwrap_or_else(|_| "null".into());
        if cur.len() > 1 && cur.len() + json.len() + 2 > CHUNK_BYTES {
            cur.push(']');
            out.push((
                format!("{CHUNK_PREFIX}{list}:{n}"),
                std::mem::take(&mut cur),
            ));
            cur.push('[');
            n += 1;
        }
        if cur.len() > 1 {
            cur.push(',');
        }
        cur.push_str(&json);
    }
    if cur.len() > 1 {
        cur.push(']');
        out.push((format!("{CHUNK_PREFIX}{list}:{n}"), cur));
    }
}

/// Splits a report into its head and chunks.
pub fn split(mut r: Report) -> Split {
    let mut chunks = Vec::new();
    pack("streams", &std::mem::take(&mut r.streams), &mut chunks);
    let cached: Vec<(String, Vec<(i64, i64)>)> =
        std::mem::take(&mut r.cached).into_iter().collect();
    pack("cached", &cached, &mut chunks);
    pack("live", &std::mem::take(&mut r.live), &mut chunks);
    pack("edges", &std::mem::take(&mut r.edges), &mut chunks);
    pack("recording", &std::mem::take(&mut r.recording), &mut chunks);
    Split { chunks, head: r }
}

impl Split {
    /// The head's value, given each chunk's version after it was set.
    pub fn head(self, version_of: impl Fn(&str) -> u64) -> String {
        let chunks = self
            .chunks
            .iter()
            .map(|(k, _)| (k.clone(), version_of(k)))
            .collect();
        serde_json::to_string(&Head {
            report: self.head,
            chunks,
        })
        .unwrap_or_default()
    }

    /// Chunk keys of an earlier report (among `existing`) that this one no longer has.
    pub fn obsolete<'a>(&self, existing: impl Iterator<Item = &'a str>) -> Vec<String> {
        let now: HashSet<&str> = self.chunks.iter().map(|(k, _)| k.as_str()).collect();
        existing
            .filter(|k| k.starts_with(CHUNK_PREFIX) && !now.contains(k))
            .map(str::to_string)
            .collect()
    }
}

/// What a peer needs to assemble a report: the head's text and, for each chunk key it names,
/// the (version, text) the peer holds.
#[derive(Debug)]
pub enum Assembly {
    /// Every chunk is there at its manifest version: parse with [`assemble`].
    Ready { head: String, chunks: Vec<String> },
    /// Some chunk has not arrived yet (or is newer: the next head is on its way).
    Incomplete,
    /// The head does not parse.
    Invalid,
}

/// Checks the manifest of `head` against the chunks a peer holds (`get` gives a key's
/// version and text) and collects what [`assemble`] needs. Only the manifest is parsed here
/// (the report itself is not), so this can run under the gossip lock cheaply.
pub fn gather<'a>(head: &str, get: impl Fn(&str) -> Option<(u64, &'a str)>) -> Assembly {
    #[derive(Deserialize)]
    struct Manifest {
        chunks: Vec<(String, u64)>,
    }
    let Ok(m) = serde_json::from_str::<Manifest>(head) else {
        return Assembly::Invalid;
    };
    let mut chunks = Vec::with_capacity(m.chunks.len());
    for (key, version) in &m.chunks {
        match get(key) {
            Some((v, text)) if v == *version => chunks.push(text.to_string()),
            _ => return Assembly::Incomplete,
        }
    }
    Assembly::Ready {
        head: head.to_string(),
        chunks,
    }
}

/// Parses a head and its chunks (in manifest order) back into the report.
pub fn assemble(head: &str, chunks: &[String]) -> Option<Report> {
    let h: Head = serde_json::from_str(head).ok()?;
    let mut r = h.report;
    for ((key, _), text) in h.chunks.iter().zip(chunks) {
        let list = key.strip_prefix(CHUNK_PREFIX)?.split(':').next()?;
        match list {
            "streams" => r
                .streams
                .extend(serde_json::from_str::<Vec<Stream>>(text).ok()?),
            "cached" => r.cached.extend(
                serde_json::from_str::<Vec<(String, Vec<(i64, i64)>)>>(text)
                    .ok()?
                    .into_iter()
                    .collect::<BTreeMap<_, _>>(),
            ),
            "live" => r
                .live
                .extend(serde_json::from_str::<Vec<String>>(text).ok()?),
            "edges" => r
                .edges
                .extend(serde_json::from_str::<Vec<String>>(text).ok()?),
            "recording" => r
                .recording
                .extend(serde_json::from_str::<Vec<String>>(text).ok()?),
            _ => return None,
        }
    }
    Some(r)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;
    use vigil_cluster::{Indicators, StreamSource};

    pub(crate) fn big_report(streams: usize, cameras: usize, live: usize) -> Report {
        Report {
            rtsp: "rtsp://127.0.0.1:8554".into(),
            api: "http://127.0.0.1:8080".into(),
            rpc: None,
            priority: 1,
            started_ms: 1,
            bord_bps: 1e9,
            cpu: 0.5,
            mem: 0.25,
            indicators: Indicators::default(),
            sessions: streams as u32,
            max_sessions: 10_000,
            session_list: Vec::new(),
            streams: (0..streams)
                .map(|i| Stream {
                    camera: format!("camera-{}", i % 997),
                    position_ms: 1_700_000_000_000 + i as i64,
                    vbr_bps: 2e6,
                    source: StreamSource::Storage,
                    session: None,
                })
                .collect(),
            cached: (0..cameras)
                .map(|c| {
                    let ranges = (0..4).map(|k| (k * 10_000, k * 10_000 + 4000)).collect();
                    (format!("camera-{c}"), ranges)
                })
                .collect(),
            cache_bytes: 1,
            live: (0..live).map(|i| format!("live-camera-{i}")).collect(),
            asleep: Vec::new(),
            edges: (0..live / 2).map(|i| format!("relayed-{i}")).collect(),
            period_s: 1,
            at_ms: 2,
            draining: false,
            movable: Vec::new(),
            plays_recordings: true,
            recording: (0..live).map(|i| format!("cam{i}")).collect(),
        }
    }

    /// A node state in miniature: keys with versions, like chitchat's.
    #[derive(Default)]
    struct Kv {
        max: u64,
        map: HashMap<String, (u64, String)>,
    }

    impl Kv {
        fn set(&mut self, k: &str, v: String) {
            if self.map.get(k).is_some_and(|(_, old)| *old == v) {
                return;
            }
            self.max += 1;
            self.map.insert(k.to_string(), (self.max, v));
        }
        fn publish(&mut self, r: &Report) {
            let s = split(r.clone());
            for (k, v) in &s.chunks {
                self.set(k, v.clone());
            }
            for k in s.obsolete(self.map.keys().map(String::as_str)) {
                self.map.remove(&k);
            }
            let head = s.head(|k| self.map[k].0);
            self.set(REPORT_KEY, head);
        }
        fn read(&self) -> Assembly {
            let head = &self.map[REPORT_KEY].1;
            gather(head, |k| self.map.get(k).map(|(v, t)| (*v, t.as_str())))
        }
    }

    #[test]
    fn a_report_far_larger_than_a_datagram_splits_and_reassembles() {
        let r = big_report(5000, 1000, 500);
        let whole = serde_json::to_string(&r).unwrap().len();
        assert!(whole > 4 * 65_507, "{whole} bytes");
        let mut kv = Kv::default();
        kv.publish(&r);
        assert!(kv.map.values().all(|(_, v)| v.len() <= CHUNK_BYTES + 1024));
        let Assembly::Ready { head, chunks } = kv.read() else {
            panic!("not ready");
        };
        assert!(head.len() < 16 * 1024, "head {} bytes", head.len());
        assert_eq!(assemble(&head, &chunks), Some(r.clone()));

        // A smaller report: the unchanged chunks keep their versions, obsolete ones go.
        let before = kv.map.clone();
        let mut smaller = r.clone();
        smaller.streams.truncate(100);
        smaller.at_ms = 3;
        kv.publish(&smaller);
        let Assembly::Ready { head, chunks } = kv.read() else {
            panic!("not ready");
        };
        assert_eq!(assemble(&head, &chunks), Some(smaller));
        let kept = kv
            .map
            .iter()
            .filter(|(k, v)| k.starts_with("report:cached") && before.get(*k) == Some(v))
            .count();
        assert!(kept > 0, "unchanged cache chunks were re-versioned");
        assert!(
            kv.map
                .keys()
                .filter(|k| k.starts_with("report:streams"))
                .count()
                == 1
        );
    }

    #[test]
    fn a_head_ahead_of_its_chunks_is_incomplete() {
        let mut kv = Kv::default();
        kv.publish(&big_report(2000, 0, 0));
        let old = kv.map.clone();
        let mut r2 = big_report(2000, 0, 0);
        r2.streams[0].position_ms += 1;
        kv.publish(&r2);
        // The peer has the new head but an old first chunk.
        let mut peer = Kv {
            max: 0,
            map: kv.map.clone(),
        };
        peer.map
            .insert("report:streams:0".into(), old["report:streams:0"].clone());
        assert!(matches!(peer.read(), Assembly::Incomplete));
        assert!(matches!(gather("{", |_| None), Assembly::Invalid));
    }
}
