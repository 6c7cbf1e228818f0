//! The shell of `vigil ctl doctor`: gather the facts (the config file, the storage root, the
//! running node's API and its members'), run the checks of the parent module, print the
//! findings.

use super::*;

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

    if config.registry.enabled {
        let status = node
            .as_ref()
            .and_then(|_| fetch(&base, "/api/registry", token.as_deref()).ok())
            .and_then(|(v, _)| serde_json::from_value(v).ok());
        out.push(check_registry(status.as_ref()));
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
        Duration::from_millis(config.storage.commit_interval_ms),
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
        match fetch(&api, "/api/node", token_for(&api, token)) {
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
/// address replaced by the host of its gossip address. A loopback API of a member whose
/// gossip is not on loopback is that member's own loopback, unreachable from here (asking it
/// would ask this node): None.
fn member_api(n: &serde_json::Value) -> Option<String> {
    let mut api: std::net::SocketAddr = n["api"].as_str()?.parse().ok()?;
    let gossip: std::net::SocketAddr = n["gossip"].as_str()?.parse().ok()?;
    if api.ip().is_unspecified() {
        api.set_ip(gossip.ip());
    }
    if api.ip().is_loopback() && !gossip.ip().is_loopback() {
        return None;
    }
    Some(format!("http://{api}"))
}

/// The admin token goes to a member's plain-HTTP API only on loopback: anyone on the path
/// could read it on the wire, and a member's advertised address is what any holder of the
/// gossip key may claim (issue 44, L2). Beyond loopback the member is asked without it.
fn token_for<'a>(api: &str, token: Option<&'a str>) -> Option<&'a str> {
    let loopback = url::Url::parse(api)
        .ok()
        .and_then(|u| u.host().map(|h| h.to_owned()))
        .is_some_and(|h| match h {
            url::Host::Ipv4(ip) => ip.is_loopback(),
            url::Host::Ipv6(ip) => ip.is_loopback(),
            url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        });
    token.filter(|_| loopback)
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

    /// Issue 44, L2: the token is never sent in clear beyond loopback, and a member
    /// claiming a loopback API from another host is not asked (it would be this node).
    #[test]
    fn the_token_stays_on_loopback() {
        assert_eq!(token_for("http://127.0.0.2:8080", Some("t")), Some("t"));
        assert_eq!(token_for("http://[::1]:8080", Some("t")), Some("t"));
        assert_eq!(token_for("http://198.18.0.11:8080", Some("t")), None);
        assert_eq!(token_for("http://evil.example:8080", Some("t")), None);
        let member = |api: &str, gossip: &str| {
            member_api(&serde_json::json!({ "api": api, "gossip": gossip }))
        };
        assert_eq!(
            member("0.0.0.0:8080", "198.18.0.11:7946").as_deref(),
            Some("http://198.18.0.11:8080")
        );
        assert_eq!(member("127.0.0.1:8080", "198.18.0.11:7946"), None);
        assert_eq!(
            member("127.0.0.2:8080", "127.0.0.2:7946").as_deref(),
            Some("http://127.0.0.2:8080")
        );
    }
}
