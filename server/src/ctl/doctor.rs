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

/// The fsync time past which the writer pool cannot close every camera's segments in time:
/// each of `cameras` closes a segment every `segment_secs` with one fsync, on
/// `writer_threads` threads, so an fsync must take less than threads × segment / cameras;
/// half of that leaves room for the frame writes. Never above 100 ms (a healthy LUN or share
/// answers an fsync in a few ms; 100 ms is a sick one whatever the load).
pub fn fsync_budget(writer_threads: usize, segment_secs: f64, cameras: usize) -> Duration {
    let cap = Duration::from_millis(100);
    if cameras == 0 {
        return cap;
    }
    let secs = writer_threads as f64 * segment_secs / cameras as f64 / 2.0;
    Duration::from_secs_f64(secs.max(0.0)).min(cap)
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
    Der(&'static str),
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
        out.push(parse_validity(&der)?);
    }
    if out.is_empty() {
        return Err(CertError::Empty { path: path.into() });
    }
    Ok(out)
}

/// One DER element: tag, contents, what follows. Single-byte tags and definite lengths only
/// (all X.509 needs up to the validity).
fn tlv(input: &[u8]) -> Result<(u8, &[u8], &[u8]), CertError> {
    let (&tag, rest) = input.split_first().ok_or(CertError::Der("truncated"))?;
    if tag & 0x1f == 0x1f {
        return Err(CertError::Der("multi-byte tag"));
    }
    let (&first, mut rest) = rest.split_first().ok_or(CertError::Der("truncated"))?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(CertError::Der("bad length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(CertError::Der("truncated"));
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The validity of a DER certificate: Certificate → TBSCertificate → [version], serial,
/// signature algorithm, issuer, validity (RFC 5280 §4.1).
pub fn parse_validity(der: &[u8]) -> Result<Validity, CertError> {
    const SEQ: u8 = 0x30;
    let (tag, cert, _) = tlv(der)?;
    let (tbs_tag, tbs, _) = tlv(cert)?;
    if tag != SEQ || tbs_tag != SEQ {
        return Err(CertError::Der("not a certificate sequence"));
    }
    let (mut t, mut rest) = {
        let (t, c, r) = tlv(tbs)?;
        let _ = c;
        (t, r)
    };
    if t == 0xa0 {
        // [0] version: the serial follows.
        let (t2, _, r) = tlv(rest)?;
        t = t2;
        rest = r;
    }
    if t != 0x02 {
        return Err(CertError::Der("no serial number"));
    }
    let (_, _, rest) = tlv(rest)?; // signature algorithm
    let (_, _, rest) = tlv(rest)?; // issuer
    let (vtag, validity, _) = tlv(rest)?;
    if vtag != SEQ {
        return Err(CertError::Der("no validity"));
    }
    let (t1, nb, rest) = tlv(validity)?;
    let (t2, na, _) = tlv(rest)?;
    Ok(Validity {
        not_before: asn1_time(t1, nb)?,
        not_after: asn1_time(t2, na)?,
    })
}

/// UTCTime (`YYMMDDHHMMSSZ`, 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as Unix s.
fn asn1_time(tag: u8, v: &[u8]) -> Result<i64, CertError> {
    let s = std::str::from_utf8(v).map_err(|_| CertError::Der("time is not ASCII"))?;
    let (year, rest) = match (tag, s.len()) {
        (0x17, 13) => {
            let yy: i64 = num(&s[..2])?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &s[2..])
        }
        (0x18, 15) => (num(&s[..4])?, &s[4..]),
        _ => return Err(CertError::Der("unsupported time")),
    };
    if !rest.ends_with('Z') {
        return Err(CertError::Der("time not in UTC"));
    }
    let f = |i: usize| num(&rest[i..i + 2]);
    let (mo, d, h, mi, se) = (f(0)?, f(2)?, f(4)?, f(6)?, f(8)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return Err(CertError::Der("time out of range"));
    }
    Ok(days_from_civil(year, mo, d) * 86_400 + h * 3600 + mi * 60 + se)
}

fn num(s: &str) -> Result<i64, CertError> {
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CertError::Der("time has a non-digit"));
    }
    s.parse()
        .map_err(|_| CertError::Der("time has a non-digit"))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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

// ---- the shell: gather the facts, print the findings ----

/// The `--api` default of `vigil ctl`: doctor then asks the API the config's `[http]
/// listen` names instead.
pub const DEFAULT_API: &str = "http://127.0.0.1:8080";

/// Runs every check; an error when any FAILs (so the exit status is non-zero).
pub fn run(api: &str, config_path: Option<&Path>, json: bool) -> anyhow::Result<()> {
    let Some(path) = config_path else {
        anyhow::bail!(
            "vigil ctl doctor checks a node's config: give it with --config FILE (e.g. \
             /etc/vigil/vigil.toml)"
        );
    };
    let findings = gather(api, path);
    print(&findings, json)?;
    let failed = findings.iter().filter(|f| f.level == Level::Fail).count();
    if failed > 0 {
        anyhow::bail!("doctor: {failed} check(s) failed");
    }
    Ok(())
}

fn print(findings: &[Finding], json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(findings)?);
        return Ok(());
    }
    for f in findings {
        let level = match f.level {
            Level::Ok => "OK",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        };
        // A multi-line detail (a TOML error's excerpt) stays under its check.
        let detail = f.detail.trim_end().replace('\n', &format!("\n{:<20}", ""));
        println!("{level:<5} {:<13} {detail}", f.check);
        if let Some(fix) = &f.fix {
            println!("{:<19} fix: {fix}", "");
        }
    }
    let n = |l: Level| findings.iter().filter(|f| f.level == l).count();
    println!(
        "{} OK, {} WARN, {} FAIL",
        n(Level::Ok),
        n(Level::Warn),
        n(Level::Fail)
    );
    Ok(())
}

/// The base URL of the node's API: `--api` when given, else the config's `[http] listen`
/// (a wildcard address asked on loopback).
fn api_base(api: &str, config: &Config) -> String {
    if api != DEFAULT_API {
        return api.trim_end_matches('/').to_string();
    }
    let mut a = config.http.listen;
    if a.ip().is_unspecified() {
        a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{a}")
}

fn gather(api: &str, path: &Path) -> Vec<Finding> {
    let parsed = Config::load(path);
    let mut out = vec![check_config(path, &parsed)];
    let Ok(config) = parsed else {
        return out;
    };
    let token = config.http.token().ok().flatten();
    let base = api_base(api, &config);
    let node = fetch(&base, "/api/node", token.as_deref());
    let node = match node {
        Ok((v, _)) => {
            let id = v["id"].as_str().unwrap_or("?").to_string();
            if id == config.node.id {
                out.push(Finding::ok("node API", format!("{base} answers as {id}")));
            } else {
                out.push(Finding::warn(
                    "node API",
                    format!(
                        "{base} answers as node {id}, the config names {}",
                        config.node.id
                    ),
                    "--api names another node than this config's: give the API of the node \
                     this file configures",
                ));
            }
            Some(v)
        }
        Err(e) => {
            out.push(Finding::warn(
                "node API",
                format!("{e}; the checks against the running node and its cluster are skipped"),
                "start the node, or name its admin API with --api http://HOST:PORT",
            ));
            None
        }
    };

    // The other members' root ids and clocks, asked once at their own APIs.
    let (peer_roots, clocks) = if config.cluster.enabled && node.is_some() {
        peer_facts(&base, token.as_deref())
    } else {
        (Vec::new(), Vec::new())
    };
    if config.storage.enabled {
        let node = node.as_ref();
        storage_checks(
            &config,
            node,
            &base,
            token.as_deref(),
            &peer_roots,
            &mut out,
        );
    } else {
        out.push(Finding::ok(
            "storage root",
            "recording is off ([storage] enabled = false)",
        ));
    }

    out.push(if !config.cluster.enabled {
        Finding::ok("clock skew", "not in a cluster: no members to compare with")
    } else if node.is_some() {
        check_clock(&clocks)
    } else {
        Finding::warn(
            "clock skew",
            "skipped: the node's API does not answer, so its members are unknown",
            "start the node and run doctor again",
        )
    });

    let now = vigil_storage::now_ms() / 1000;
    let c = &config.cluster;
    for (label, p, renew) in [
        ("[cluster] ca_cert", &c.ca_cert, RENEW_CLUSTER_CA),
        ("[cluster] node_cert", &c.node_cert, RENEW_NODE_CERT),
        ("[tls] cert", &config.tls.cert, RENEW_LISTENER_CERT),
    ] {
        if let Some(p) = p {
            out.push(check_cert(label, p, &cert_validity(p), now, renew));
        }
    }

    let need = nofile_need(&config);
    match node.as_ref().and_then(|v| v["open_files_limit"].as_u64()) {
        Some(soft) => out.push(check_nofile(soft, need, "the node's")),
        None => match crate::hostinfo::open_file_limit() {
            Ok((soft, _)) => out.push(check_nofile(soft, need, "this shell's")),
            Err(e) => out.push(Finding::warn(
                "open files",
                format!("getrlimit: {e}"),
                "check LimitNOFILE in the unit",
            )),
        },
    }
    out
}

fn storage_checks(
    config: &Config,
    node: Option<&serde_json::Value>,
    base: &str,
    token: Option<&str>,
    peers: &[PeerRoot],
    out: &mut Vec<Finding>,
) {
    let root = &config.storage.root;
    if root.is_relative() {
        out.push(Finding::warn(
            "storage root",
            format!(
                "[storage] root = {} is relative: checked from this shell's directory, the \
                 node takes it from its own working directory",
                root.display()
            ),
            "give [storage] root as an absolute path (where the shared volume is mounted)",
        ));
    }
    let probe = probe_root(root);
    let cameras = config.cameras.iter().filter(|c| c.record).count().max(
        node.and_then(|_| fetch(base, "/api/recordings", token).ok())
            .and_then(|(v, _)| v.as_array().map(Vec::len))
            .unwrap_or(0),
    );
    let budget = fsync_budget(
        config.storage.writer_threads(),
        config.storage.segment_secs,
        cameras,
    );
    out.push(check_root(root, &probe, budget));
    if !matches!(probe, RootProbe::Writable { .. }) {
        return;
    }
    match crate::hostinfo::fs_space(root) {
        Ok(space) => {
            let hour = node.and_then(|_| recording_bytes_per_hour(base, token));
            out.extend(check_space(space, hour, config.storage.retention_max_bytes));
        }
        Err(e) => out.push(Finding::fail(
            "free space",
            format!("statvfs {}: {e}", root.display()),
            "check the volume's mount",
        )),
    }
    let local = vigil_storage::read_root_id(root).ok().flatten();
    let running = node.and_then(|v| v["storage_root_id"].as_str());
    out.push(check_same_root(local.as_deref(), running, peers));
}

/// Writes, fsyncs and renames three 64 KiB temp files in `root` (then removes them): the
/// slowest fsync.
fn probe_root(root: &Path) -> RootProbe {
    use std::io::Write;
    match std::fs::metadata(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return RootProbe::Missing,
        Err(e) => return RootProbe::Unwritable(e.to_string()),
        Ok(m) if !m.is_dir() => return RootProbe::NotADirectory,
        Ok(_) => {}
    }
    let mut slowest = Duration::ZERO;
    for i in 0..3 {
        let tmp = root.join(format!(".vigil-doctor-{}-{i}.tmp", std::process::id()));
        let done = tmp.with_extension("probe");
        let r = (|| -> std::io::Result<Duration> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&[0u8; 64 * 1024])?;
            let t = std::time::Instant::now();
            f.sync_all()?;
            let took = t.elapsed();
            std::fs::rename(&tmp, &done)?;
            std::fs::File::open(root)?.sync_all()?;
            Ok(took)
        })();
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(&done);
        match r {
            Ok(took) => slowest = slowest.max(took),
            Err(e) => return RootProbe::Unwritable(e.to_string()),
        }
    }
    RootProbe::Writable { fsync: slowest }
}

/// What the node writes per hour now: the ingest bitrate of the cameras it records.
fn recording_bytes_per_hour(base: &str, token: Option<&str>) -> Option<u64> {
    let (recs, _) = fetch(base, "/api/recordings", token).ok()?;
    let (paths, _) = fetch(base, "/api/paths", token).ok()?;
    let recording: std::collections::HashSet<&str> = recs
        .as_array()?
        .iter()
        .filter(|r| r["state"] == "recording")
        .filter_map(|r| r["camera"].as_str())
        .collect();
    let kbps: u64 = paths
        .as_array()?
        .iter()
        .filter(|p| {
            p["path"]
                .as_str()
                .and_then(|p| p.strip_prefix("live/"))
                .is_some_and(|c| recording.contains(c))
        })
        .filter_map(|p| p["bitrate_kbps"].as_u64())
        .sum();
    Some(kbps.saturating_mul(1000 / 8).saturating_mul(3600))
}

/// The other alive members' root ids and clocks, each asked at its own API.
fn peer_facts(base: &str, token: Option<&str>) -> (Vec<PeerRoot>, Vec<ClockSample>) {
    let mut roots = Vec::new();
    let mut clocks = Vec::new();
    let Ok((view, _)) = fetch(base, "/api/cluster/nodes", token) else {
        return (roots, clocks);
    };
    let self_id = view["self_id"].as_str().unwrap_or_default();
    for n in view["nodes"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let id = n["id"].as_str().unwrap_or_default().to_string();
        if id == self_id || n["alive"] != true {
            continue;
        }
        let Some(api) = member_api(n) else {
            roots.push(PeerRoot {
                node: id,
                root_id: None,
            });
            continue;
        };
        match fetch(&api, "/api/node", token) {
            Ok((v, (t0, t1))) => {
                if let Some(peer_now) = v["now_ms"].as_i64() {
                    clocks.push(ClockSample {
                        node: id.clone(),
                        skew_ms: peer_now - (t0 + t1) / 2,
                        rtt_ms: t1 - t0,
                    });
                }
                roots.push(PeerRoot {
                    node: id,
                    root_id: v["storage_root_id"].as_str().map(str::to_string),
                });
            }
            Err(_) => roots.push(PeerRoot {
                node: id,
                root_id: None,
            }),
        }
    }
    (roots, clocks)
}

/// A member's API base from the cluster view: its advertised `[http] listen`, a wildcard
/// address replaced by the host of its gossip address.
fn member_api(n: &serde_json::Value) -> Option<String> {
    let mut api: std::net::SocketAddr = n["api"].as_str()?.parse().ok()?;
    if api.ip().is_unspecified() {
        let gossip: std::net::SocketAddr = n["gossip"].as_str()?.parse().ok()?;
        api.set_ip(gossip.ip());
    }
    Some(format!("http://{api}"))
}

/// GET as JSON with a 3 s bound; also the local clock (Unix ms) before and after.
fn fetch(
    base: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(serde_json::Value, (i64, i64)), String> {
    let url = format!("{}{path}", base.trim_end_matches('/'));
    let mut req = ureq::get(&url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let t0 = vigil_storage::now_ms();
    let resp = req
        .config()
        .timeout_global(Some(Duration::from_secs(3)))
        .build()
        .call();
    let t1 = vigil_storage::now_ms();
    let mut resp = resp.map_err(|e| match e {
        ureq::Error::StatusCode(code @ (401 | 403)) => {
            format!("{url} answered {code} (the config's [http] token is not this node's)")
        }
        e => format!("no answer from {url} ({e})"),
    })?;
    let body = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("{url}: {e}"))?;
    let v = serde_json::from_str(&body).map_err(|e| format!("{url}: not JSON ({e})"))?;
    Ok((v, (t0, t1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostinfo::Space;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn civil_days_match_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 1, 1) * 86_400, 946_684_800);
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        // UTCTime's century window and GeneralizedTime.
        assert_eq!(asn1_time(0x17, b"491231235959Z").unwrap(), 2_524_607_999);
        assert_eq!(asn1_time(0x17, b"500101000000Z").unwrap(), -631_152_000);
        assert_eq!(asn1_time(0x18, b"20500101000000Z").unwrap(), 2_524_608_000);
        assert!(asn1_time(0x17, b"491231235959+0100").is_err());
        assert!(asn1_time(0x17, b"49123123595Z").is_err());
        assert!(asn1_time(0x18, b"2050130100000Z0").is_err());
    }

    fn cert_pem(not_before: (i32, u8, u8), not_after: (i32, u8, u8)) -> String {
        let mut p = rcgen::CertificateParams::new(vec!["node-1".to_string()]).expect("params");
        p.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        p.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let key = rcgen::KeyPair::generate().expect("key");
        p.self_signed(&key).expect("cert").pem()
    }

    #[test]
    fn the_validity_of_rcgen_certificates_is_read_back() {
        let dir = tempfile_dir();
        let path = dir.join("chain.pem");
        // A chain: the second ends first (2049: UTCTime; 2051: GeneralizedTime).
        let text = cert_pem((2020, 1, 1), (2051, 6, 1)) + &cert_pem((2021, 3, 4), (2049, 12, 31));
        std::fs::write(&path, text).expect("write");
        let v = cert_validity(&path).expect("parse");
        assert_eq!(
            v,
            vec![
                Validity {
                    not_before: 1_577_836_800,
                    not_after: days_from_civil(2051, 6, 1) * 86_400,
                },
                Validity {
                    not_before: days_from_civil(2021, 3, 4) * 86_400,
                    not_after: days_from_civil(2049, 12, 31) * 86_400,
                },
            ]
        );
        std::fs::write(&path, "no pem here").expect("write");
        assert!(matches!(cert_validity(&path), Err(CertError::Empty { .. })));
        assert!(matches!(
            cert_validity(&dir.join("missing.pem")),
            Err(CertError::Read { .. })
        ));
        assert!(parse_validity(&[0x30, 0x05, 0x30]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "vigil-doctor-test-{}-{}",
            std::process::id(),
            vigil_storage::now_ms()
        ));
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    #[test]
    fn certificates_fail_when_expired_or_early_and_warn_within_thirty_days() {
        let p = Path::new("/etc/vigil/node.pem");
        let day = 86_400;
        let now = 1_800_000_000;
        let v = |nb: i64, na: i64| {
            Ok(vec![Validity {
                not_before: nb,
                not_after: na,
            }])
        };
        let c = |r| check_cert("[cluster] node_cert", p, &r, now, RENEW_NODE_CERT);
        assert_eq!(c(v(now - day, now + 31 * day)).level, Level::Ok);
        let w = c(v(now - day, now + 29 * day));
        assert_eq!(w.level, Level::Warn);
        assert!(w.detail.contains("in 29 days"), "{}", w.detail);
        let f = c(v(now - 10 * day, now - 1));
        assert_eq!(f.level, Level::Fail);
        assert!(f.detail.contains("expired"), "{}", f.detail);
        assert!(f
            .fix
            .as_deref()
            .is_some_and(|x| x.contains("vigil cluster cert")));
        let early = c(v(now + 60, now + 90 * day));
        assert_eq!(early.level, Level::Fail);
        assert!(
            early.detail.contains("not valid before"),
            "{}",
            early.detail
        );
        // A chain: the CA's end counts when it comes first.
        let chain = Ok(vec![
            Validity {
                not_before: now - day,
                not_after: now + 400 * day,
            },
            Validity {
                not_before: now - day,
                not_after: now + 3 * day,
            },
        ]);
        assert_eq!(c(chain).level, Level::Warn);
        let missing = c(Err(CertError::Empty { path: p.into() }));
        assert_eq!(missing.level, Level::Fail);
    }

    #[test]
    fn the_fsync_budget_follows_cameras_threads_and_segments() {
        // 16 threads, 4 s segments, 2000 cameras: 500 fsyncs/s, 32 ms each at most, half.
        assert_eq!(fsync_budget(16, 4.0, 2000), ms(16));
        assert_eq!(fsync_budget(16, 4.0, 10), ms(100));
        assert_eq!(fsync_budget(8, 4.0, 0), ms(100));
        let root = Path::new("/srv/vigil");
        let b = ms(16);
        assert_eq!(
            check_root(root, &RootProbe::Writable { fsync: ms(3) }, b).level,
            Level::Ok
        );
        let slow = check_root(root, &RootProbe::Writable { fsync: ms(40) }, b);
        assert_eq!(slow.level, Level::Warn);
        assert!(slow.detail.contains("40 ms"), "{}", slow.detail);
        for p in [
            RootProbe::Missing,
            RootProbe::NotADirectory,
            RootProbe::Unwritable("Permission denied".into()),
        ] {
            let f = check_root(root, &p, b);
            assert_eq!(f.level, Level::Fail, "{p:?}");
            assert!(f.fix.is_some());
        }
        assert!(check_root(root, &RootProbe::Missing, b)
            .fix
            .is_some_and(|f| f.contains("mount the shared volume at /srv/vigil")));
    }

    #[test]
    fn free_space_fails_under_an_hour_of_recording_and_warns_under_ten_percent() {
        let g = 1u64 << 30;
        let space = |free: u64| Space {
            size: 1000 * g,
            available: free,
        };
        let one = |s, need| check_space(s, need, 0).remove(0).level;
        assert_eq!(one(space(500 * g), None), Level::Ok);
        assert_eq!(one(space(99 * g), None), Level::Warn);
        assert_eq!(one(space(0), None), Level::Fail);
        // 200 cameras at 4 Mb/s: 360 GB an hour.
        let hour = 200 * 4_000_000 / 8 * 3600;
        assert_eq!(hour, 360_000_000_000);
        assert_eq!(one(space(300 * g), Some(hour)), Level::Fail);
        assert_eq!(one(space(400 * g), Some(hour)), Level::Ok);
        let r = check_space(space(500 * g), None, 2000 * g);
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].level, Level::Warn);
        assert!(r[1]
            .fix
            .as_deref()
            .is_some_and(|f| f.contains(&(900 * g).to_string())));
    }

    #[test]
    fn members_on_another_root_fail_and_silent_ones_warn() {
        let peer = |n: &str, id: Option<&str>| PeerRoot {
            node: n.into(),
            root_id: id.map(Into::into),
        };
        assert_eq!(check_same_root(Some("a"), Some("a"), &[]).level, Level::Ok);
        assert_eq!(
            check_same_root(
                Some("a"),
                None,
                &[peer("n2", Some("a")), peer("n3", Some("a"))]
            )
            .level,
            Level::Ok
        );
        let f = check_same_root(Some("a"), Some("a"), &[peer("n2", Some("b"))]);
        assert_eq!(f.level, Level::Fail);
        assert!(f.detail.contains("n2 (id b)"), "{}", f.detail);
        let running = check_same_root(Some("a"), Some("b"), &[]);
        assert_eq!(running.level, Level::Fail);
        assert_eq!(
            check_same_root(Some("a"), None, &[peer("n2", None)]).level,
            Level::Warn
        );
        assert_eq!(check_same_root(None, None, &[]).level, Level::Warn);
    }

    #[test]
    fn clock_skew_counts_only_what_the_round_trip_cannot_explain() {
        let s = |skew, rtt| ClockSample {
            node: "n2".into(),
            skew_ms: skew,
            rtt_ms: rtt,
        };
        assert_eq!(check_clock(&[]).level, Level::Ok);
        assert_eq!(check_clock(&[s(30, 2)]).level, Level::Ok);
        // 300 ms off, measured over a 200 ms round trip: 200 ms certain → OK.
        assert_eq!(check_clock(&[s(300, 200)]).level, Level::Ok);
        assert_eq!(check_clock(&[s(-300, 2)]).level, Level::Warn);
        let f = check_clock(&[s(10, 2), s(-2500, 4)]);
        assert_eq!(f.level, Level::Fail);
        assert!(f.detail.contains("-2500 ms"), "{}", f.detail);
    }

    #[test]
    fn the_open_file_need_adds_connections_sessions_and_cameras() {
        let c = Config::default();
        // 10 000 RTSP + 512 API + 2 × 4000 sessions + 256.
        assert_eq!(nofile_need(&c), 18_768);
        let w = check_nofile(1024, 18_768, "the node's");
        assert_eq!(w.level, Level::Warn);
        assert!(w
            .fix
            .as_deref()
            .is_some_and(|f| f.contains("LimitNOFILE=65536")));
        assert_eq!(check_nofile(u64::MAX, 18_768, "x").level, Level::Ok);
        assert_eq!(check_nofile(20_000, 18_768, "x").level, Level::Ok);
    }

    #[test]
    fn a_config_error_is_shown_typed() {
        let e = Config::from_toml("[rtsp]\nlisen = 1");
        let f = check_config(Path::new("/etc/vigil/vigil.toml"), &e);
        assert_eq!(f.level, Level::Fail);
        assert!(f.detail.contains("lisen"), "{}", f.detail);
        let ok = check_config(Path::new("x"), &Config::from_toml(""));
        assert_eq!(ok.level, Level::Ok);
    }
}
