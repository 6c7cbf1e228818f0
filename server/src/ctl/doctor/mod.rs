//! `vigil ctl doctor`: what makes a node lose recordings or drop out of its cluster without
//! an error anyone reads (a share not mounted, a full or slow volume, a skewed clock, a
//! certificate past its date, an open-file limit below the load) is checked before it
//! happens, each finding with what to change.
//!
//! The checks are pure functions over gathered facts (hand-computed unit tests below); the
//! shell at the end gathers the facts (the config file, the storage root, the running node's
//! API and its members') and prints the findings. A check that needs the running node is
//! skipped with a warning when it does not answer, never guessed.

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vigil_conf::Config;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One check's outcome: what was found and, unless OK, what to change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub level: Level,
    pub check: &'static str,
    pub detail: String,
    pub fix: Option<String>,
}

impl Finding {
    fn ok(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding {
            level: Level::Ok,
            check,
            detail: detail.into(),
            fix: None,
        }
    }
    fn warn(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            level: Level::Warn,
            check,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            level: Level::Fail,
            check,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

const GIB: f64 = (1u64 << 30) as f64;

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB)
}

/// The config file parsed and validated, or the typed error that stops the node at start.
pub fn check_config(path: &Path, parsed: &Result<Config, vigil_conf::ConfigError>) -> Finding {
    match parsed {
        Ok(_) => Finding::ok("config", format!("{} parses and validates", path.display())),
        Err(e) => Finding::fail(
            "config",
            format!("{}: {e}", path.display()),
            "correct the file (conf/vigil.toml lists every key with its default); the node \
             refuses to start on it",
        ),
    }
}

/// What probing the storage root found.
#[derive(Debug, Clone, PartialEq)]
pub enum RootProbe {
    Missing,
    NotADirectory,
    /// A temp file could not be written, fsynced and renamed: the error.
    Unwritable(String),
    /// Written: the slowest of the probe's fsyncs.
    Writable {
        fsync: Duration,
    },
}

/// The fsync time past which the writer pool cannot close every camera's segments in time.
/// Without group commit (`commit_interval_ms` = 0) each of `cameras` closes a segment every
/// `segment_secs` with one fsync, on `writer_threads` threads, so an fsync must take less
/// than threads × segment / cameras. With it, one sync serves every segment closed in the
/// interval, and a camera's segment must be synced before its next one closes: less than
/// the segment less the interval, whatever the number of cameras. Half of either leaves
/// room for the frame writes. Never above 100 ms (a healthy LUN or share answers an fsync in
/// a few ms; 100 ms is a sick one whatever the load).
pub fn fsync_budget(
    writer_threads: usize,
    segment_secs: f64,
    cameras: usize,
    commit_interval: Duration,
) -> Duration {
    let cap = Duration::from_millis(100);
    let secs = if !commit_interval.is_zero() {
        segment_secs - commit_interval.as_secs_f64()
    } else if cameras == 0 {
        return cap;
    } else {
        writer_threads as f64 * segment_secs / cameras as f64
    };
    Duration::from_secs_f64((secs / 2.0).max(0.0)).min(cap)
}

pub fn check_root(root: &Path, probe: &RootProbe, budget: Duration) -> Finding {
    let r = root.display();
    match probe {
        RootProbe::Missing => Finding::fail(
            "storage root",
            format!("{r} does not exist"),
            format!(
                "mount the shared volume at {r} (or create the directory for a single node); \
                 a node started without it records to whatever directory it creates there, \
                 which the other members never see"
            ),
        ),
        RootProbe::NotADirectory => Finding::fail(
            "storage root",
            format!("{r} is not a directory"),
            "point [storage] root at the directory where the shared volume is mounted",
        ),
        RootProbe::Unwritable(e) => Finding::fail(
            "storage root",
            format!("cannot write a file in {r}: {e}"),
            format!(
                "give the node's user write access to {r} (owner or mode), and check the \
                 volume is mounted read-write"
            ),
        ),
        RootProbe::Writable { fsync } if *fsync > budget => Finding::warn(
            "storage root",
            format!(
                "{r} is writable, but an fsync took {} ms (budget {} ms for this node's \
                 cameras and writer threads)",
                fsync.as_millis(),
                budget.as_millis()
            ),
            "the volume is slow to make writes durable: recordings will fall behind and \
             drop frames; check the LUN/share's latency and load, or raise [storage] \
             writer_threads",
        ),
        RootProbe::Writable { fsync } => Finding::ok(
            "storage root",
            format!(
                "{r} is writable, fsync {:.1} ms (budget {} ms)",
                fsync.as_secs_f64() * 1000.0,
                budget.as_millis()
            ),
        ),
    }
}

/// Free space of the root: FAIL below an hour of what the node records now (when the
/// running node told its ingest rate) or when nothing is free, WARN below 10 %; and a
/// retention bound larger than the volume, which never deletes before the volume is full.
pub fn check_space(
    space: crate::hostinfo::Space,
    hour_need: Option<u64>,
    retention_max_bytes: u64,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let free = space.available;
    let share = if space.size == 0 {
        0.0
    } else {
        free as f64 / space.size as f64
    };
    let detail = format!(
        "{} free of {} ({:.0} %)",
        gib(free),
        gib(space.size),
        share * 100.0
    );
    let fix = "free space on the volume or let retention delete earlier ([storage] \
               retention_max_bytes, retention_max_age_hours), or grow the LUN/share";
    out.push(match hour_need {
        _ if free == 0 => Finding::fail("free space", detail, fix),
        Some(need) if free < need => Finding::fail(
            "free space",
            format!(
                "{detail}: less than one hour of this node's recording ({})",
                gib(need)
            ),
            fix,
        ),
        _ if share < 0.10 => Finding::warn("free space", format!("{detail}: under 10 %"), fix),
        _ => Finding::ok("free space", detail),
    });
    if retention_max_bytes > space.size && space.size > 0 {
        out.push(Finding::warn(
            "retention",
            format!(
                "[storage] retention_max_bytes = {} is more than the volume holds ({})",
                gib(retention_max_bytes),
                gib(space.size)
            ),
            format!(
                "lower retention_max_bytes below the volume's size (e.g. {} bytes, 90 %), so \
                 retention deletes before the disk is full",
                space.size / 10 * 9
            ),
        ));
    }
    out
}

/// Another member's answer about its storage root.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerRoot {
    pub node: String,
    /// None: the member records nothing (or is a version without the id).
    pub root_id: Option<String>,
}

/// The root this config names against the root the running node opened and the roots the
/// other members opened, by the id each root holds (`VIGIL-STORAGE-ID`).
pub fn check_same_root(local: Option<&str>, running: Option<&str>, peers: &[PeerRoot]) -> Finding {
    const C: &str = "same root";
    let Some(local) = local else {
        return Finding::warn(
            C,
            "the root holds no VIGIL-STORAGE-ID yet: no node has opened it",
            "start the node once (it writes the id), then run doctor again",
        );
    };
    if let Some(running) = running.filter(|r| *r != local) {
        return Finding::fail(
            C,
            format!(
                "the running node records to a root with id {running}, this config's root \
                 has id {local}"
            ),
            "the node runs with another [storage] root than this file names (or the volume \
             was mounted after it started): restart it on this config",
        );
    }
    let differ: Vec<String> = peers
        .iter()
        .filter_map(|p| match &p.root_id {
            Some(id) if id != local => Some(format!("{} (id {id})", p.node)),
            _ => None,
        })
        .collect();
    let silent: Vec<&str> = peers
        .iter()
        .filter(|p| p.root_id.is_none())
        .map(|p| p.node.as_str())
        .collect();
    if !differ.is_empty() {
        return Finding::fail(
            C,
            format!(
                "this root has id {local}; other members record to other roots: {}",
                differ.join(", ")
            ),
            "mount the one shared volume at [storage] root on every member: a member on \
             another root records cameras nobody else can play back, and their leases do \
             not exclude each other",
        );
    }
    let agreeing = peers.len() - silent.len();
    let mut detail = format!("root id {local}");
    if peers.is_empty() {
        detail.push_str(": no other member to compare with");
    } else {
        detail.push_str(&format!(", the same on {agreeing} other member(s)"));
    }
    if !silent.is_empty() {
        return Finding::warn(
            C,
            format!("{detail}; no root id from: {}", silent.join(", ")),
            "those members record nothing, or did not answer: run doctor on them",
        );
    }
    Finding::ok(C, detail)
}

/// One member's clock against this host's: its `now_ms` less the middle of the request's
/// round trip, measured here.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockSample {
    pub node: String,
    pub skew_ms: i64,
    pub rtt_ms: i64,
}

/// Skew past which a camera moved between two nodes gets segments that overlap or leave a
/// gap visibly (the recorder stamps frames with the node's wall clock).
pub const SKEW_WARN_MS: i64 = 250;
/// Half a default segment: recordings of a moved camera are misplaced by more than that;
/// gossip drops a node at 30 s.
pub const SKEW_FAIL_MS: i64 = 2000;

pub fn check_clock(samples: &[ClockSample]) -> Finding {
    const C: &str = "clock skew";
    if samples.is_empty() {
        return Finding::ok(C, "no other member to compare with");
    }
    // What is certain of each skew: the round trip's half is not.
    let worst = samples
        .iter()
        .map(|s| (s, (s.skew_ms.abs() - s.rtt_ms / 2).max(0)))
        .max_by_key(|(_, v)| *v);
    let Some((s, v)) = worst else {
        return Finding::ok(C, "no other member to compare with");
    };
    let detail = format!(
        "largest skew {} ms against {} (± {} ms), {} member(s) compared",
        s.skew_ms,
        s.node,
        s.rtt_ms / 2,
        samples.len()
    );
    let fix = "run NTP or chrony on every node against one source (timedatectl \
               set-ntp true); recordings are stamped with each node's clock, and gossip \
               drops datagrams more than 30 s off";
    if v > SKEW_FAIL_MS {
        Finding::fail(C, detail, fix)
    } else if v > SKEW_WARN_MS {
        Finding::warn(C, detail, fix)
    } else {
        Finding::ok(C, detail)
    }
}

/// A certificate's validity window (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// Why a certificate file's dates could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    Empty { path: PathBuf },
    #[error("{path}: {reason}")]
    Pem { path: PathBuf, reason: String },
    #[error("not an X.509 certificate: {0}")]
    Der(String),
}

/// Expiry warning horizon.
pub const CERT_WARN_DAYS: i64 = 30;

/// How to replace the cluster's certificates: the CA's end is every node's.
pub const RENEW_CLUSTER_CA: &str = "make a new CA (`vigil cluster ca --out DIR`), issue every \
    node's certificate from it again (`vigil cluster cert --ca DIR --node ID --out DIR`) and \
    restart the nodes";
pub const RENEW_NODE_CERT: &str = "issue it again from the cluster CA (`vigil cluster cert --ca \
    CA_DIR --node ID --out DIR`) and restart the node";

/// How to replace the RTSPS/HTTPS listeners' certificate: no restart needed.
pub const RENEW_LISTENER_CERT: &str = "get a new one from your PKI (a lab: `vigil cluster cert \
    --ca CA_DIR --node ID --host NAME --out DIR`) and write it over [tls] cert and key: the node \
    takes it within [tls] reload_check_ms, or at once on SIGHUP";

/// The certificates of a PEM file (a chain: the earliest end counts) against `now` (Unix s);
/// `renew` says how to replace them. Written over a path so any certificate the config
/// names (cluster, a TLS listener) is checked the same way.
pub fn check_cert(
    label: &str,
    path: &Path,
    certs: &Result<Vec<Validity>, CertError>,
    now: i64,
    renew: &str,
) -> Finding {
    const C: &str = "certificate";
    let p = path.display();
    let certs = match certs {
        Ok(c) => c,
        Err(e) => {
            return Finding::fail(
                C,
                format!("{label}: {e}"),
                format!("point {label} at its PEM certificate, or {renew}"),
            )
        }
    };
    let day = 86_400;
    let t = |s: i64| vigil_proto::rtsp::rfc3339(s.saturating_mul(1000));
    if let Some(v) = certs.iter().find(|v| v.not_before > now) {
        return Finding::fail(
            C,
            format!("{label} {p} is not valid before {}", t(v.not_before)),
            format!(
                "this host's clock is behind, or the certificate was made on a host whose \
                 clock is ahead: set the clock right (NTP), or {renew}"
            ),
        );
    }
    let Some(end) = certs.iter().map(|v| v.not_after).min() else {
        return Finding::fail(C, format!("{label} {p}: no certificate"), renew);
    };
    if end <= now {
        Finding::fail(
            C,
            format!("{label} {p} expired at {}", t(end)),
            format!("{renew}; until then this node's calls to the others fail"),
        )
    } else if end - now < CERT_WARN_DAYS * day {
        Finding::warn(
            C,
            format!(
                "{label} {p} expires at {} (in {} days)",
                t(end),
                (end - now) / day
            ),
            format!("before then, {renew}"),
        )
    } else {
        Finding::ok(
            C,
            format!(
                "{label} {p} valid until {} ({} days)",
                t(end),
                (end - now) / day
            ),
        )
    }
}

/// Reads every certificate of a PEM file and its validity.
pub fn cert_validity(path: &Path) -> Result<Vec<Validity>, CertError> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let bytes = std::fs::read(path).map_err(|source| CertError::Read {
        path: path.into(),
        source,
    })?;
    let mut out = Vec::new();
    for der in CertificateDer::pem_slice_iter(&bytes) {
        let der = der.map_err(|e| CertError::Pem {
            path: path.into(),
            reason: e.to_string(),
        })?;
        let (_, cert) =
            x509_parser::parse_x509_certificate(&der).map_err(|e| CertError::Der(e.to_string()))?;
        let v = cert.validity();
        out.push(Validity {
            not_before: v.not_before.timestamp(),
            not_after: v.not_after.timestamp(),
        });
    }
    if out.is_empty() {
        return Err(CertError::Empty { path: path.into() });
    }
    Ok(out)
}

/// File descriptors the config can need at once: every RTSP and API connection, two UDP
/// sockets per session (RTP and RTCP), per camera a pull connection and a segment being
/// written, and 256 for the runtime, listeners, storage reads and the cluster.
pub fn nofile_need(config: &Config) -> u64 {
    let l = &config.limits;
    (l.max_connections as u64)
        .saturating_add(config.http.max_connections as u64)
        .saturating_add(2 * l.max_sessions as u64)
        .saturating_add(2 * config.cameras.len() as u64)
        .saturating_add(256)
}

/// `whose`: "the node's" (from its API) or "this shell's" (a guess for the service).
/// The registry as the running node reports it (`GET /api/registry`, None: no answer): a
/// newest version it could not read is kept from it, so changes made since do not apply.
pub fn check_registry(status: Option<&crate::registry::Status>) -> Finding {
    const CHECK: &str = "registry";
    let Some(s) = status else {
        return Finding::warn(
            CHECK,
            "[registry] enabled, but the node does not report it",
            "start the node (with this config) and run doctor again",
        );
    };
    match &s.error {
        Some(e) => Finding::warn(
            CHECK,
            format!("serving version {} of {}; a newer one does not read: {e}", s.version, s.path),
            "replace or remove the bad version file (the next change is written past it), or              give this node the cluster's [registry] secret_key",
        ),
        None => Finding::ok(
            CHECK,
            format!(
                "version {}: {} cameras, {} users{}",
                s.version,
                s.cameras,
                s.users,
                s.last_change
                    .as_ref()
                    .map_or(String::new(), |c| format!(", last changed by {}", c.by))
            ),
        ),
    }
}

pub fn check_nofile(soft: u64, need: u64, whose: &str) -> Finding {
    const C: &str = "open files";
    let detail = format!(
        "{whose} open-file limit {} for up to {need} descriptors ([limits] max_connections, \
         2 × max_sessions, [http] max_connections, cameras)",
        if soft == u64::MAX {
            "unlimited".to_string()
        } else {
            soft.to_string()
        }
    );
    if soft >= need {
        Finding::ok(C, detail)
    } else {
        Finding::warn(
            C,
            detail,
            format!(
                "raise it: LimitNOFILE={} in the systemd unit (or `ulimit -n` before `vigil \
                 serve`), or lower [limits]; past the limit new connections fail with EMFILE",
                need.next_power_of_two().max(65_536)
            ),
        )
    }
}

mod shell;
pub use shell::{run, DEFAULT_API};

#[cfg(test)]
mod tests;
