//! `vigil ctl camera add|set|rm|ls|import` and `vigil ctl user add|set|rm|ls|import`: the
//! registry's API (`admin::registry_api`) from the command line, with its refusals as they
//! are (the row and field of a bad import, the current version of a lost edit).

use crate::admin::registry_api::{CameraRecordView, UserView};
use anyhow::{bail, Context};
use clap::Subcommand;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Subcommand, Debug, Clone)]
pub enum CameraCmd {
    /// Add a camera to the registry (every node serves it within about 2 s).
    Add {
        id: String,
        /// "push", "demo" or an rtsp:// / rtsps:// URL (a password in it is stored sealed).
        #[arg(long, default_value = "push")]
        source: String,
        #[command(flatten)]
        settings: Settings,
    },
    /// Change a camera's settings (the ones given; a new --source re-points it).
    Set {
        id: String,
        #[arg(long)]
        source: Option<String>,
        #[command(flatten)]
        settings: Settings,
        /// Refuse (409) unless the registry is still at this version.
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// Remove a camera: its viewers end, its recording stops (recordings are kept).
    Rm {
        id: String,
        #[arg(long)]
        if_version: Option<u64>,
    },
    /// The registry's cameras.
    Ls,
    /// Add or replace the cameras of a CSV or JSON file, all or none.
    Import {
        file: PathBuf,
        /// csv or json (default: from the file's extension).
        #[arg(long)]
        format: Option<String>,
    },
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct Settings {
    /// Pull only while somebody watches (true) or always (false).
    #[arg(long)]
    on_demand: Option<bool>,
    #[arg(long)]
    record: Option<bool>,
    /// A disabled camera is listed but not served (viewers get 404).
    #[arg(long)]
    enabled: Option<bool>,
    /// tcp or udp.
    #[arg(long)]
    pull_transport: Option<String>,
    #[arg(long)]
    retention_hours: Option<f64>,
    #[arg(long)]
    segment_secs: Option<f64>,
    /// A group name ("" clears it).
    #[arg(long)]
    group: Option<String>,
    /// key=value; repeat for several (replaces the camera's labels).
    #[arg(long = "label")]
    labels: Vec<String>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum UserCmd {
    /// Add an RTSP user (the password is hashed by the node, never stored).
    Add {
        name: String,
        #[arg(long)]
        password: String,
        #[command(flatten)]
        rights: RightsArgs,
    },
    /// Change a user's password or rights (the ones given).
    Set {
        name: String,
        #[arg(long)]
        password: Option<String>,
        #[command(flatten)]
        rights: RightsArgs,
        #[arg(long)]
        if_version: Option<u64>,
    },
    Rm {
        name: String,
        #[arg(long)]
        if_version: Option<u64>,
    },
    Ls,
    /// Add or replace the users of a CSV or JSON file, all or none.
    Import {
        file: PathBuf,
        #[arg(long)]
        format: Option<String>,
    },
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct RightsArgs {
    /// Camera patterns to watch live (repeat; `*` matches any run of characters).
    #[arg(long)]
    read: Vec<String>,
    #[arg(long)]
    playback: Vec<String>,
    #[arg(long)]
    publish: Vec<String>,
}

impl Settings {
    fn into_json(self, out: &mut Map<String, Value>) -> anyhow::Result<()> {
        let mut put = |k: &str, v: Value| {
            out.insert(k.into(), v);
        };
        if let Some(v) = self.on_demand {
            put("on_demand", v.into());
        }
        if let Some(v) = self.record {
            put("record", v.into());
        }
        if let Some(v) = self.enabled {
            put("enabled", v.into());
        }
        if let Some(v) = self.pull_transport {
            put("pull_transport", v.to_ascii_lowercase().into());
        }
        if let Some(v) = self.retention_hours {
            put("retention_hours", v.into());
        }
        if let Some(v) = self.segment_secs {
            put("segment_secs", v.into());
        }
        if let Some(v) = self.group {
            put("group", v.into());
        }
        if !self.labels.is_empty() {
            let mut labels = BTreeMap::new();
            for kv in self.labels {
                let (k, v) = kv
                    .split_once('=')
                    .with_context(|| format!("--label {kv:?}: write key=value"))?;
                labels.insert(k.to_string(), v.to_string());
            }
            put("labels", json!(labels));
        }
        Ok(())
    }
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
fn send(
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
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if v["error"].is_string() => {
            bail!("{}: {}", status.as_u16(), v["error"].as_str().unwrap_or(""))
        }
        _ => bail!("{}: {}", status.as_u16(), text.trim_end()),
    }
}

/// What a write answers: `{"version": N, "changes": [...]}`, printed as one line.
fn done(json_out: bool, text: &str) -> anyhow::Result<()> {
    if json_out {
        println!("{}", text.trim_end());
        return Ok(());
    }
    let v: Value = serde_json::from_str(text).context("unexpected answer")?;
    let changes = v["changes"].as_array().map_or(0, Vec::len);
    match changes {
        0 => println!("nothing to change (registry version {})", v["version"]),
        n => println!("{n} change(s): registry version {}", v["version"]),
    }
    Ok(())
}

fn format_of(file: &std::path::Path, format: Option<&str>) -> anyhow::Result<&'static str> {
    let f = format.map(str::to_ascii_lowercase).or_else(|| {
        file.extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
    });
    match f.as_deref() {
        Some("csv") => Ok("text/csv"),
        Some("json") => Ok("application/json"),
        _ => bail!("--format csv or json (the file's extension does not say)"),
    }
}

pub fn camera(
    api: &str,
    token: Option<&str>,
    json_out: bool,
    cmd: CameraCmd,
) -> anyhow::Result<()> {
    let send = |method: &str, path: &str, body: Option<(&str, String)>, v: Option<u64>| {
        send(api, token, method, path, body, v)
    };
    match cmd {
        CameraCmd::Add {
            id,
            source,
            settings,
        } => {
            let mut m = Map::new();
            m.insert("id".into(), id.into());
            m.insert("source".into(), source.into());
            settings.into_json(&mut m)?;
            let body = Value::Object(m).to_string();
            done(
                json_out,
                &send(
                    "POST",
                    "/api/cameras",
                    Some(("application/json", body)),
                    None,
                )?,
            )
        }
        CameraCmd::Set {
            id,
            source,
            settings,
            if_version,
        } => {
            let mut m = Map::new();
            if let Some(s) = source {
                m.insert("source".into(), s.into());
            }
            settings.into_json(&mut m)?;
            let body = Value::Object(m).to_string();
            let path = format!("/api/cameras/{id}");
            done(
                json_out,
                &send("PUT", &path, Some(("application/json", body)), if_version)?,
            )
        }
        CameraCmd::Rm { id, if_version } => done(
            json_out,
            &send("DELETE", &format!("/api/cameras/{id}"), None, if_version)?,
        ),
        CameraCmd::Import { file, format } => {
            let kind = format_of(&file, format.as_deref())?;
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            done(
                json_out,
                &send("POST", "/api/cameras/import", Some((kind, text)), None)?,
            )
        }
        CameraCmd::Ls => {
            let text = send("GET", "/api/registry/cameras", None, None)?;
            if json_out {
                println!("{}", text.trim_end());
                return Ok(());
            }
            let rows: Vec<CameraRecordView> =
                serde_json::from_str(&text).context("unexpected answer")?;
            let mut t = Table::new();
            t.load_preset(UTF8_BORDERS_ONLY);
            t.set_header([
                "CAMERA",
                "SOURCE",
                "ENABLED",
                "ON DEMAND",
                "RECORD",
                "GROUP",
                "LABELS",
            ]);
            let yn = |b: bool| if b { "yes" } else { "no" }.to_string();
            for r in rows {
                let c = r.camera;
                let labels: Vec<String> =
                    c.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                t.add_row([
                    c.id,
                    String::from(c.source),
                    yn(c.enabled),
                    yn(c.on_demand),
                    yn(c.record),
                    c.group.unwrap_or_default(),
                    labels.join(" "),
                ]);
            }
            println!("{t}");
            Ok(())
        }
    }
}

pub fn user(api: &str, token: Option<&str>, json_out: bool, cmd: UserCmd) -> anyhow::Result<()> {
    let send = |method: &str, path: &str, body: Option<(&str, String)>, v: Option<u64>| {
        send(api, token, method, path, body, v)
    };
    match cmd {
        UserCmd::Add {
            name,
            password,
            rights,
        } => {
            let body = json!({
                "name": name, "password": password,
                "read": rights.read, "playback": rights.playback, "publish": rights.publish,
            })
            .to_string();
            done(
                json_out,
                &send("POST", "/api/users", Some(("application/json", body)), None)?,
            )
        }
        UserCmd::Set {
            name,
            password,
            rights,
            if_version,
        } => {
            let mut m = Map::new();
            if let Some(p) = password {
                m.insert("password".into(), p.into());
            }
            for (k, v) in [
                ("read", rights.read),
                ("playback", rights.playback),
                ("publish", rights.publish),
            ] {
                if !v.is_empty() {
                    m.insert(k.into(), json!(v));
                }
            }
            let body = Value::Object(m).to_string();
            let path = format!("/api/users/{name}");
            done(
                json_out,
                &send("PUT", &path, Some(("application/json", body)), if_version)?,
            )
        }
        UserCmd::Rm { name, if_version } => done(
            json_out,
            &send("DELETE", &format!("/api/users/{name}"), None, if_version)?,
        ),
        UserCmd::Import { file, format } => {
            let kind = format_of(&file, format.as_deref())?;
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            done(
                json_out,
                &send("POST", "/api/users/import", Some((kind, text)), None)?,
            )
        }
        UserCmd::Ls => {
            let text = send("GET", "/api/users", None, None)?;
            if json_out {
                println!("{}", text.trim_end());
                return Ok(());
            }
            let rows: Vec<UserView> = serde_json::from_str(&text).context("unexpected answer")?;
            let mut t = Table::new();
            t.load_preset(UTF8_BORDERS_ONLY);
            t.set_header(["USER", "READ", "PLAYBACK", "PUBLISH"]);
            for u in rows {
                t.add_row([
                    u.name,
                    u.rights.read.join(" "),
                    u.rights.playback.join(" "),
                    u.rights.publish.join(" "),
                ]);
            }
            println!("{t}");
            Ok(())
        }
    }
}
