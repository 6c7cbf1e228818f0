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
        #[command(flatten)]
        onvif: OnvifArgs,
    },
    /// Ask a camera added through ONVIF for its stream URI again; re-points it if the URI
    /// changed.
    Probe {
        id: String,
        /// Another profile (token or name) than the one it has.
        #[arg(long)]
        profile: Option<String>,
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

/// `camera add --onvif`: the node asks the device for the stream URI.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OnvifArgs {
    /// The camera's ONVIF device service (http://host/onvif/device_service): the node asks
    /// it for the main profile's RTSP URI (or --profile's) and stores it with --user and
    /// the password read from stdin with --password-stdin (instead of --source).
    #[arg(long, conflicts_with = "source")]
    onvif: Option<String>,
    /// The ONVIF (and RTSP) user.
    #[arg(long, requires = "onvif")]
    user: Option<String>,
    /// A media profile token or name (default: the one with the most pixels).
    #[arg(long, requires = "onvif")]
    profile: Option<String>,
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
    /// Read the camera's password from the first line of stdin and put it into the
    /// --source URL (kept out of the shell's history and the process list).
    #[arg(long)]
    password_stdin: bool,
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
    /// Add a user (the password, read from the first line of stdin, is hashed by the node,
    /// never stored).
    Add {
        name: String,
        #[command(flatten)]
        rights: RightsArgs,
    },
    /// Change a user's password (--password-stdin) or rights (the ones given).
    Set {
        name: String,
        /// Read the new password from the first line of stdin.
        #[arg(long)]
        password_stdin: bool,
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
    /// Camera patterns the user may steer (PTZ).
    #[arg(long)]
    ptz: Vec<String>,
    /// Camera patterns whose recordings the user may export.
    #[arg(long)]
    export: Vec<String>,
    /// May migrate sessions, drain nodes and move cameras (`true`/`false`).
    #[arg(long)]
    operate: Option<bool>,
    /// May do everything the admin token does (`true`/`false`).
    #[arg(long)]
    admin: Option<bool>,
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

/// `source` with the password read from stdin when `from_stdin` (an rtsp:// or rtsps://
/// URL naming its user).
fn with_stdin_password(source: String, from_stdin: bool) -> anyhow::Result<String> {
    if !from_stdin {
        return Ok(source);
    }
    set_password(&source, &stdin_line()?)
}

/// The first line of stdin (a password), without its line end.
fn stdin_line() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// What `POST /api/cameras/{id}/onvif` answered, as one line per fact.
fn onboarded(json_out: bool, id: &str, text: &str) -> anyhow::Result<()> {
    if json_out {
        println!("{}", text.trim_end());
        return Ok(());
    }
    let v: Value = serde_json::from_str(text).context("unexpected answer")?;
    let o = &v["onvif"];
    let p = &o["profile"];
    println!(
        "{id}: {} (profile {} {}x{} {})",
        o["uri"].as_str().unwrap_or("?"),
        p["token"].as_str().unwrap_or("?"),
        p["width"],
        p["height"],
        p["encoding"].as_str().unwrap_or("")
    );
    done(false, text)
}

/// `url` with `password` (percent-encoded as URLs need) for the user it names.
fn set_password(url: &str, password: &str) -> anyhow::Result<String> {
    let mut u =
        url::Url::parse(url).context("--password-stdin needs an rtsp:// URL in --source")?;
    anyhow::ensure!(
        matches!(u.scheme(), "rtsp" | "rtsps") && !u.username().is_empty(),
        "--password-stdin needs an rtsp:// or rtsps:// --source that names its user (rtsp://user@host/…)"
    );
    u.set_password(Some(password))
        .map_err(|()| anyhow::anyhow!("the URL cannot carry a password"))?;
    Ok(u.to_string())
}

/// The writes cameras and users share, each with the registry version it was made
/// against when given.
enum Write {
    Put(String, Map<String, Value>, Option<u64>),
    Delete(String, Option<u64>),
    /// The import route, the file, its format.
    Import(&'static str, PathBuf, Option<String>),
}

fn write(api: &str, token: Option<&str>, json_out: bool, w: Write) -> anyhow::Result<()> {
    let text = match w {
        Write::Put(path, fields, v) => {
            let body = Value::Object(fields).to_string();
            super::send(
                api,
                token,
                "PUT",
                &path,
                Some(("application/json", body)),
                v,
            )?
        }
        Write::Delete(path, v) => super::send(api, token, "DELETE", &path, None, v)?,
        Write::Import(path, file, format) => {
            let body = import_body(&file, format)?;
            super::send(api, token, "POST", path, Some(body), None)?
        }
    };
    done(json_out, &text)
}

/// An import file as a request body: its content type (from `format`, else its
/// extension) and its text.
fn import_body(
    file: &std::path::Path,
    format: Option<String>,
) -> anyhow::Result<(&'static str, String)> {
    let kind = format_of(file, format.as_deref())?;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    Ok((kind, text))
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
        super::send(api, token, method, path, body, v)
    };
    let w = |op: Write| write(api, token, json_out, op);
    let onvif_post = |id: &str, m: Map<String, Value>| {
        let body = Value::Object(m).to_string();
        send(
            "POST",
            &format!("/api/cameras/{id}/onvif"),
            Some(("application/json", body)),
            None,
        )
    };
    match cmd {
        CameraCmd::Add {
            id,
            settings,
            onvif:
                OnvifArgs {
                    onvif: Some(device),
                    user,
                    profile,
                },
            ..
        } => {
            // Passwords come from stdin only: an argument is in /proc/*/cmdline and the
            // shell's history.
            let password = settings.password_stdin.then(stdin_line).transpose()?;
            let mut camera = Map::new();
            settings.into_json(&mut camera)?;
            let mut m = Map::new();
            m.insert("device".into(), device.into());
            for (k, v) in [("user", user), ("password", password), ("profile", profile)] {
                if let Some(v) = v {
                    m.insert(k.into(), v.into());
                }
            }
            if !camera.is_empty() {
                m.insert("camera".into(), camera.into());
            }
            onboarded(json_out, &id, &onvif_post(&id, m)?)
        }
        CameraCmd::Probe { id, profile } => {
            let mut m = Map::new();
            if let Some(p) = profile {
                m.insert("profile".into(), p.into());
            }
            onboarded(json_out, &id, &onvif_post(&id, m)?)
        }
        CameraCmd::Add {
            id,
            source,
            settings,
            ..
        } => {
            let mut m = Map::new();
            m.insert("id".into(), id.into());
            let source = with_stdin_password(source, settings.password_stdin)?;
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
                let s = with_stdin_password(s, settings.password_stdin)?;
                m.insert("source".into(), s.into());
            } else if settings.password_stdin {
                anyhow::bail!("--password-stdin goes with --source (the URL it completes)");
            }
            settings.into_json(&mut m)?;
            w(Write::Put(format!("/api/cameras/{id}"), m, if_version))
        }
        CameraCmd::Rm { id, if_version } => {
            w(Write::Delete(format!("/api/cameras/{id}"), if_version))
        }
        CameraCmd::Import { file, format } => w(Write::Import("/api/cameras/import", file, format)),
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

#[derive(Subcommand, Debug, Clone)]
pub enum PtzCmd {
    /// Move at these velocities (each -1…1) until stop or --timeout-ms.
    Move {
        #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
        pan: f64,
        #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
        tilt: f64,
        #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
        zoom: f64,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u32,
    },
    Stop,
    /// Go to a preset (its token, as `presets` lists them).
    Goto {
        preset: String,
    },
    /// Save the position as a preset named NAME; prints its token.
    Set {
        name: String,
    },
    /// The camera's presets.
    Presets,
}

/// `vigil ctl ptz CAMERA …`: `POST /api/cameras/{camera}/ptz`.
pub fn ptz(
    api: &str,
    token: Option<&str>,
    json_out: bool,
    camera: &str,
    cmd: &PtzCmd,
) -> anyhow::Result<()> {
    let body = match cmd {
        PtzCmd::Move {
            pan,
            tilt,
            zoom,
            timeout_ms,
        } => json!({"move": {"pan": pan, "tilt": tilt, "zoom": zoom, "timeout_ms": timeout_ms}}),
        PtzCmd::Stop => json!("stop"),
        PtzCmd::Goto { preset } => json!({"goto_preset": {"preset": preset}}),
        PtzCmd::Set { name } => json!({"set_preset": {"name": name}}),
        PtzCmd::Presets => json!("presets"),
    };
    let text = super::send(
        api,
        token,
        "POST",
        &format!("/api/cameras/{camera}/ptz"),
        Some(("application/json", body.to_string())),
        None,
    )?;
    if json_out {
        println!("{}", text.trim_end());
        return Ok(());
    }
    let v: Value = serde_json::from_str(&text).context("unexpected answer")?;
    let answer = &v["ptz"];
    if let Some(list) = answer["presets"].as_array() {
        let mut t = Table::new();
        t.load_preset(UTF8_BORDERS_ONLY);
        t.set_header(["TOKEN", "NAME"]);
        for p in list {
            t.add_row([
                p["token"].as_str().unwrap_or(""),
                p["name"].as_str().unwrap_or(""),
            ]);
        }
        println!("{t}");
    } else if let Some(token) = answer["preset"].as_str() {
        println!("preset {token}");
    } else {
        println!("done");
    }
    Ok(())
}

/// `vigil ctl discover`: the node's WS-Discovery probe, as a table.
pub fn discover(
    api: &str,
    token: Option<&str>,
    json_out: bool,
    target: Option<String>,
    timeout_ms: Option<u64>,
) -> anyhow::Result<()> {
    let mut m = Map::new();
    if let Some(t) = target {
        m.insert("target".into(), t.into());
    }
    if let Some(t) = timeout_ms {
        m.insert("timeout_ms".into(), t.into());
    }
    let body = Value::Object(m).to_string();
    let text = super::send(
        api,
        token,
        "POST",
        "/api/onvif/discover",
        Some(("application/json", body)),
        None,
    )?;
    if json_out {
        println!("{}", text.trim_end());
        return Ok(());
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        devices: Vec<crate::onvif::Found>,
    }
    let a: Answer = serde_json::from_str(&text).context("unexpected answer")?;
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY);
    table.set_header(["FROM", "MODEL", "NAME", "DEVICE SERVICE", "ENDPOINT"]);
    for found in &a.devices {
        let d = &found.device;
        table.add_row([
            found.from.clone(),
            d.model.clone().unwrap_or_default(),
            d.name.clone().unwrap_or_default(),
            d.xaddrs.join(" "),
            d.endpoint.clone(),
        ]);
    }
    println!("{table}");
    println!("{} device(s)", a.devices.len());
    Ok(())
}

pub fn user(api: &str, token: Option<&str>, json_out: bool, cmd: UserCmd) -> anyhow::Result<()> {
    let send = |method: &str, path: &str, body: Option<(&str, String)>, v: Option<u64>| {
        super::send(api, token, method, path, body, v)
    };
    let w = |op: Write| write(api, token, json_out, op);
    match cmd {
        UserCmd::Add { name, rights } => {
            let password = stdin_line()?;
            anyhow::ensure!(!password.is_empty(), "no password on stdin");
            let body = json!({
                "name": name, "password": password,
                "read": rights.read, "playback": rights.playback, "publish": rights.publish,
                "ptz": rights.ptz, "export": rights.export,
                "operate": rights.operate.unwrap_or(false), "admin": rights.admin.unwrap_or(false),
            })
            .to_string();
            done(
                json_out,
                &send("POST", "/api/users", Some(("application/json", body)), None)?,
            )
        }
        UserCmd::Set {
            name,
            password_stdin,
            rights,
            if_version,
        } => {
            let mut m = Map::new();
            if password_stdin {
                m.insert("password".into(), stdin_line()?.into());
            }
            for (k, v) in [
                ("read", rights.read),
                ("playback", rights.playback),
                ("publish", rights.publish),
                ("ptz", rights.ptz),
                ("export", rights.export),
            ] {
                if !v.is_empty() {
                    m.insert(k.into(), json!(v));
                }
            }
            for (k, v) in [("operate", rights.operate), ("admin", rights.admin)] {
                if let Some(v) = v {
                    m.insert(k.into(), v.into());
                }
            }
            w(Write::Put(format!("/api/users/{name}"), m, if_version))
        }
        UserCmd::Rm { name, if_version } => {
            w(Write::Delete(format!("/api/users/{name}"), if_version))
        }
        UserCmd::Import { file, format } => w(Write::Import("/api/users/import", file, format)),
        UserCmd::Ls => {
            let text = send("GET", "/api/users", None, None)?;
            if json_out {
                println!("{}", text.trim_end());
                return Ok(());
            }
            let rows: Vec<UserView> = serde_json::from_str(&text).context("unexpected answer")?;
            let mut t = Table::new();
            t.load_preset(UTF8_BORDERS_ONLY);
            t.set_header([
                "USER", "READ", "PLAYBACK", "PUBLISH", "PTZ", "EXPORT", "ROLES",
            ]);
            for u in rows {
                let roles: Vec<&str> = [("operate", u.rights.operate), ("admin", u.rights.admin)]
                    .into_iter()
                    .filter_map(|(n, on)| on.then_some(n))
                    .collect();
                t.add_row([
                    u.name,
                    u.rights.read.join(" "),
                    u.rights.playback.join(" "),
                    u.rights.publish.join(" "),
                    u.rights.ptz.join(" "),
                    u.rights.export.join(" "),
                    roles.join(" "),
                ]);
            }
            println!("{t}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_password_from_stdin_completes_the_url_encoded() {
        assert_eq!(
            super::set_password("rtsp://admin@10.0.0.9/ch1", "p@ss w:rd").unwrap(),
            "rtsp://admin:p%40ss%20w%3Ard@10.0.0.9/ch1"
        );
        assert!(super::set_password("rtsp://10.0.0.9/ch1", "x").is_err());
        assert!(super::set_password("push", "x").is_err());
    }
}
