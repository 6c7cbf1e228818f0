//! `vigil ctl`: the admin API as tables (or JSON for scripts).

use crate::admin::views::{
    CacheView, ClusterNodesView, ClusterSessionsView, IngestView, PathView, RecordingsView,
    SchedulerView, SessionView,
};
use anyhow::Context;
use clap::Subcommand;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};

#[derive(Subcommand, Debug, Clone)]
pub enum What {
    /// Paths: source, codecs, ingest bitrate, readers.
    Paths,
    /// Sessions: client, transport, bytes, duration.
    Sessions {
        /// Every node's sessions, from the gossip reports, with a NODE column.
        #[arg(long)]
        cluster: bool,
    },
    /// Where a camera should push: the node chosen by the `knn-class` policy (or holding it).
    Ingest { camera: String },
    /// Recorded ranges and gaps of a camera.
    Recordings { camera: String },
    /// Playback cache: hit/miss counters, bytes, resident segment ranges.
    Cache,
    /// Cluster members as this node sees them: addresses, alive, load and its parts, class,
    /// sessions, cache bytes, which one is the scheduler.
    Nodes,
    /// The elected scheduler, its term, the policy and the recent placement decisions.
    Scheduler,
    /// Move a playing UDP session's media to another node now; prints the measured gap.
    Migrate {
        session: String,
        node: String,
        /// Source address of the moved media: own (the target's) or preserve (this node's,
        /// needs CAP_NET_RAW on the target). Default: the node's `cluster.migration.mode`.
        #[arg(long)]
        mode: Option<String>,
    },
    /// Stop placing on a node and move its sessions off; prints progress and what could not
    /// move.
    Drain { node: String },
    /// Let a drained node take placements again.
    Undrain { node: String },
    /// Move a pull camera to another node now (atomic: the node pulls it and has a keyframe
    /// before the old one lets go); prints how long each step took.
    MoveCamera { camera: String, node: String },
    /// Save a recorded range as an MP4 file (plain, moov first; starts on the keyframe at
    /// or before --start).
    Export {
        camera: String,
        /// RFC 3339, e.g. 2026-11-29T08:00:00Z
        #[arg(long)]
        start: String,
        #[arg(long)]
        end: String,
        #[arg(short = 'o', long)]
        output: std::path::PathBuf,
        /// A fragmented MP4 streamed as it is read (no first pass over the range).
        #[arg(long)]
        fragmented: bool,
    },
    /// The scheduler's last migration plan (§D.2): prediction, objective, solve time, moves.
    Plan,
    /// Cameras: the node holding each, live or asleep, viewers, bitrate, recording, and
    /// where it is bound and why.
    Cameras,
    /// The registry's cameras (issue 26): add, set, rm, ls, import.
    Camera {
        #[command(subcommand)]
        cmd: registry::CameraCmd,
    },
    /// ONVIF cameras on the node's network: a WS-Discovery probe from the node
    /// (`[onvif] discovery_address`), the devices that answered.
    Discover {
        /// Probe this address (ip:port) instead of the multicast group.
        #[arg(long)]
        target: Option<String>,
        /// How long to collect answers (default: the node's `[onvif] discovery_timeout_ms`).
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
    /// Steer a camera added through ONVIF (PTZ): move, stop, goto, set, presets.
    Ptz {
        camera: String,
        #[command(subcommand)]
        cmd: registry::PtzCmd,
    },
    /// The registry's RTSP users: add, set, rm, ls, import.
    User {
        #[command(subcommand)]
        cmd: registry::UserCmd,
    },
    /// API tokens for programs (cluster-wide through the registry): add (prints the secret
    /// once), ls, rm.
    Token {
        #[command(subcommand)]
        cmd: tokens::TokenCmd,
    },
    /// The audit trail: `ls` (every node's, filtered, through the API) and `verify` (the
    /// proof, read from the storage root with --config).
    Audit {
        #[command(subcommand)]
        cmd: audit::AuditCmd,
    },
    /// Check a node's setup and print what to fix: the config (--config), the storage root
    /// (writable, fsync time, free space, the same root as the other members), clock skew
    /// against the members, certificates' expiry, the open-file limit. Asks the running node
    /// at --api (default: the config's [http] listen). Exits non-zero on any FAIL.
    Doctor,
}

pub mod audit;
mod cameras;
pub mod doctor;
mod export;
mod plan;
pub mod registry;
pub(crate) mod steer;
mod tokens;

/// POST a JSON body to a node's admin API (the lab moves cameras through it).
pub use steer::post;

/// The admin token: from the config file given, else from `VIGIL_API_TOKEN`.
pub fn token(config: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    if let Some(path) = config {
        return Ok(vigil_conf::Config::load(path)?.http.token()?);
    }
    Ok(std::env::var("VIGIL_API_TOKEN")
        .ok()
        .filter(|t| !t.is_empty()))
}

/// Who asks, for the change log: the local user and host.
fn actor() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".into());
    let host = gethostname_lossy();
    format!("{user}@{host} (vigil ctl)")
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect()
}

fn gethostname_lossy() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// One request to the API; a refusal comes back as an error carrying the node's reason.
pub(crate) fn send(
    api: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<(&str, String)>,
    if_version: Option<u64>,
) -> anyhow::Result<String> {
    let url = format!("{}{path}", api.trim_end_matches('/'));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = ureq::http::Request::builder()
        .method(method)
        .uri(&url)
        .header("X-Vigil-Actor", actor());
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    if let Some(v) = if_version {
        req = req.header("If-Match", format!("\"{v}\""));
    }
    let (content_type, text) = body.unwrap_or(("application/json", String::new()));
    let req = req
        .header("Content-Type", content_type)
        .body(text)
        .context("building the request")?;
    let mut resp = agent
        .run(req)
        .with_context(|| format!("cannot reach the admin API at {url} (is the node running?)"))?;
    let status = resp.status();
    let text = resp.body_mut().read_to_string()?;
    if status.is_success() {
        return Ok(text);
    }
    // The refusal's text names the row and field, or the current version of a lost edit.
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) if v["error"].is_string() => {
            anyhow::bail!("{}: {}", status.as_u16(), v["error"].as_str().unwrap_or(""))
        }
        _ => anyhow::bail!("{}: {}", status.as_u16(), text.trim_end()),
    }
}

fn get(api: &str, token: Option<&str>, path: &str) -> anyhow::Result<String> {
    let url = format!("{}{path}", api.trim_end_matches('/'));
    let mut req = ureq::get(&url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::StatusCode(code @ (401 | 403))) => anyhow::bail!(
            "the admin API at {url} answered {code}: give its token with --config FILE or \
             VIGIL_API_TOKEN"
        ),
        Err(e) => {
            return Err(e).with_context(|| {
                format!("cannot reach the admin API at {url} (is the node running?)")
            })
        }
    };
    Ok(resp.body_mut().read_to_string()?)
}

pub fn run(api: &str, token: Option<&str>, json: bool, what: What) -> anyhow::Result<()> {
    let get = |api: &str, path: &str| get(api, token, path);
    let body = match &what {
        What::Migrate {
            session,
            node,
            mode,
        } => return steer::migrate(api, token, json, session, node, mode.as_deref()),
        What::Drain { node } => return steer::drain(api, token, json, node),
        What::Undrain { node } => return steer::undrain(api, token, json, node),
        What::MoveCamera { camera, node } => {
            return steer::move_camera(api, token, json, camera, node)
        }
        What::Export {
            camera,
            start,
            end,
            output,
            fragmented,
        } => {
            let r = export::Request {
                camera,
                start,
                end,
                output,
                fragmented: *fragmented,
            };
            return export::export(api, token, &r);
        }
        What::Plan => return plan::show(api, token, json),
        What::Audit { cmd } => return audit::ls(api, token, json, cmd),
        What::Token { cmd } => return tokens::run(api, token, json, cmd.clone()),
        What::Doctor => anyhow::bail!("vigil ctl doctor reads its config itself (cli.rs)"),
        What::Cameras => return cameras::show(api, token, json),
        What::Camera { cmd } => return registry::camera(api, token, json, cmd.clone()),
        What::User { cmd } => return registry::user(api, token, json, cmd.clone()),
        What::Ptz { camera, cmd } => return registry::ptz(api, token, json, camera, cmd),
        What::Discover { target, timeout_ms } => {
            return registry::discover(api, token, json, target.clone(), *timeout_ms)
        }
        What::Paths => get(api, "/api/paths")?,
        What::Sessions { cluster: false } => get(api, "/api/sessions")?,
        What::Sessions { cluster: true } => get(api, "/api/cluster/sessions")?,
        What::Ingest { camera } => get(api, &format!("/api/ingest/{camera}"))?,
        What::Recordings { camera } => get(api, &format!("/api/recordings/{camera}"))?,
        What::Cache => get(api, "/api/cache")?,
        What::Nodes => get(api, "/api/cluster/nodes")?,
        What::Scheduler => get(api, "/api/cluster/scheduler")?,
    };
    if json {
        println!("{}", body.trim_end());
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY);
    match what {
        What::Paths => {
            let rows: Vec<PathView> = serde_json::from_str(&body).context("unexpected answer")?;
            table.set_header(["PATH", "SOURCE", "LIVE", "CODECS", "KBIT/S", "READERS"]);
            for p in rows {
                table.add_row([
                    p.path,
                    p.source,
                    if p.live { "yes".into() } else { "no".into() },
                    p.codecs.join("+"),
                    p.bitrate_kbps.to_string(),
                    p.readers.to_string(),
                ]);
            }
        }
        What::Recordings { .. } => {
            let r: RecordingsView = serde_json::from_str(&body).context("unexpected answer")?;
            println!("{}: {} segments, {} bytes", r.camera, r.segments, r.bytes);
            table.set_header(["", "FROM", "TO", "SECS"]);
            for x in &r.ranges {
                table.add_row([
                    "recorded".to_string(),
                    x.start.clone(),
                    x.end.clone(),
                    format!("{:.1}", x.secs),
                ]);
            }
            for x in &r.gaps {
                table.add_row([
                    "gap".to_string(),
                    x.start.clone(),
                    x.end.clone(),
                    format!("{:.1}", x.secs),
                ]);
            }
        }
        What::Cache => {
            let c: CacheView = serde_json::from_str(&body).context("unexpected answer")?;
            let n = |k: &str| c.stats.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
            println!(
                "hits {}  misses {}  storage reads {}  evictions {}  bytes {} of {}  load p50/p99 {}/{} µs",
                n("hits"), n("misses"), n("loads"), n("evictions"), n("bytes"), n("budget_bytes"),
                n("load_p50_us"), n("load_p99_us")
            );
            println!(
                "start list: {} bytes of {} (limit)  playback opens {}, from memory {}",
                n("start_bytes"),
                n("start_limit_bytes"),
                n("opens"),
                n("opens_cached")
            );
            table.set_header(["CAMERA", "FROM", "TO", "SECS"]);
            for (cam, ranges) in &c.resident {
                for x in ranges {
                    table.add_row([
                        cam.clone(),
                        x.start.clone(),
                        x.end.clone(),
                        format!("{:.1}", x.secs),
                    ]);
                }
            }
        }
        What::Nodes => {
            let v: ClusterNodesView = serde_json::from_str(&body).context("unexpected answer")?;
            println!(
                "seen from {}: scheduler {} (term {}), gossip sent {} B, received {} B, rejected {}",
                v.self_id,
                v.scheduler.as_deref().unwrap_or("-"),
                v.term,
                v.gossip.bytes_sent,
                v.gossip.bytes_received,
                v.gossip.rejected
            );
            for c in &v.id_conflicts {
                println!(
                    "WARNING: node id {} is used by {} live nodes (gossip {}): give each its own [node] id",
                    c.id,
                    c.gossip.len(),
                    c.gossip.join(", ")
                );
            }
            table.set_header([
                "ID",
                "SCHED",
                "ALIVE",
                "RTSP",
                "GOSSIP",
                "API",
                "LOAD",
                "CPU",
                "MEM",
                "NET",
                "CLASS",
                "SESSIONS",
                "CACHE BYTES",
                "LIVE",
            ]);
            for n in v.nodes {
                table.add_row([
                    n.id,
                    if n.scheduler {
                        "*".into()
                    } else {
                        String::new()
                    },
                    if n.alive { "yes".into() } else { "no".into() },
                    n.rtsp.unwrap_or_default(),
                    n.gossip,
                    n.api.unwrap_or_default(),
                    n.load.map_or("-".into(), |l| format!("{l:.1}")),
                    format!("{:.1}", n.load_cpu),
                    format!("{:.1}", n.load_mem),
                    format!("{:.1}", n.load_net),
                    n.class.unwrap_or_default(),
                    n.sessions.to_string(),
                    n.cache_bytes.to_string(),
                    n.live.join(","),
                ]);
            }
        }
        What::Scheduler => {
            let v: SchedulerView = serde_json::from_str(&body).context("unexpected answer")?;
            println!(
                "scheduler {} (term {}), policy {}, seen from {}; decisions by {}",
                v.scheduler.as_deref().unwrap_or("-"),
                v.term,
                v.policy,
                v.self_id,
                v.decided_by
            );
            table.set_header([
                "AT", "KIND", "CAMERA", "TIME", "NODE", "REDIRECT", "VIA", "REASON",
            ]);
            for d in v.decisions {
                table.add_row([
                    d.at,
                    d.kind,
                    d.camera,
                    d.time,
                    d.node.unwrap_or_else(|| "rejected".into()),
                    if d.redirected {
                        "302".into()
                    } else {
                        String::new()
                    },
                    match (&d.asked_by, &d.decided_by) {
                        (Some(a), _) => format!("{} for {a}", d.via),
                        (None, Some(b)) if d.via == "scheduler" => format!("scheduler {b}"),
                        _ => d.via.clone(),
                    },
                    d.reason,
                ]);
            }
            if !v.migrations.is_empty() {
                next_section(
                    &mut table,
                    "REM migrations (§A.5), newest first:",
                    &[
                        "AT", "NODE", "LOAD", "σ", "P", "SESSION", "CAMERA", "TO", "RESULT",
                        "REASON",
                    ],
                );
                for m in v.migrations {
                    table.add_row([
                        vigil_proto::rtsp::rfc3339(m.at_ms),
                        m.node,
                        format!("{:.1}", m.load),
                        format!("{:.1}", m.sigma),
                        format!("{:.2}", m.p),
                        m.session.unwrap_or_default(),
                        m.camera.unwrap_or_default(),
                        m.to.unwrap_or_else(|| "-".into()),
                        m.result,
                        m.reason,
                    ]);
                }
            }
            if !v.camera_moves.is_empty() {
                next_section(
                    &mut table,
                    "Camera moves (§B.3–§B.5), newest first:",
                    &[
                        "AT", "TRIGGER", "FROM", "GL", "CAMERA", "TO", "RESULT", "REASON",
                    ],
                );
                for m in v.camera_moves {
                    table.add_row([
                        vigil_proto::rtsp::rfc3339(m.at_ms),
                        m.trigger,
                        m.from,
                        m.decision.map_or("-".into(), |d| format!("{:.3}", d.gl)),
                        m.camera.unwrap_or_else(|| "-".into()),
                        m.to.unwrap_or_else(|| "-".into()),
                        m.result,
                        m.reason,
                    ]);
                }
            }
        }
        What::Ingest { .. } => {
            let v: IngestView = serde_json::from_str(&body).context("unexpected answer")?;
            table.set_header(["CAMERA", "NODE", "URL", "REASON"]);
            table.add_row([v.camera, v.node, v.url, v.reason]);
        }
        What::Sessions { cluster: true } => {
            let v: ClusterSessionsView =
                serde_json::from_str(&body).context("unexpected answer")?;
            if !v.truncated.is_empty() {
                println!(
                    "seen from {}; lists capped (more sessions than reported) on: {}",
                    v.self_id,
                    v.truncated.join(", ")
                );
            }
            table.set_header(["NODE", "ID", "PATH", "KIND", "CLIENT", "KBIT/S"]);
            for s in v.sessions {
                table.add_row([s.node, s.id, s.path, s.kind, s.client, s.kbps.to_string()]);
            }
        }
        What::Sessions { cluster: false } => {
            let rows: Vec<SessionView> =
                serde_json::from_str(&body).context("unexpected answer")?;
            table.set_header([
                "ID",
                "PATH",
                "KIND",
                "CLIENT",
                "TRANSPORT",
                "BYTES",
                "SECS",
                "KBIT/S",
                "NOW KBIT/S",
                "NODE",
                "MOVES",
                "AT",
            ]);
            for s in rows {
                let node = match &s.steered_by {
                    Some(by) => format!("{} (for {by})", s.node),
                    None => s.node,
                };
                table.add_row([
                    s.id,
                    s.path,
                    s.kind,
                    s.client,
                    s.transport,
                    s.bytes.to_string(),
                    format!("{:.1}", s.duration_secs),
                    s.bitrate_kbps.to_string(),
                    s.current_kbps.to_string(),
                    node,
                    s.moves.to_string(),
                    s.position_ms
                        .map_or_else(|| "-".into(), vigil_proto::rtsp::rfc3339),
                ]);
            }
        }
        What::Migrate { .. }
        | What::Drain { .. }
        | What::MoveCamera { .. }
        | What::Undrain { .. }
        | What::Export { .. }
        | What::Plan
        | What::Audit { .. }
        | What::Token { .. }
        | What::Doctor
        | What::Cameras
        | What::Camera { .. }
        | What::User { .. }
        | What::Discover { .. }
        | What::Ptz { .. } => {}
    }
    println!("{table}");
    Ok(())
}

/// Prints the table so far and starts the next one under `title`.
fn next_section(table: &mut Table, title: &str, header: &[&str]) {
    println!("{table}");
    *table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY);
    println!("{title}");
    table.set_header(header.to_vec());
}
