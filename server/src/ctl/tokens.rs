//! `vigil ctl token`: API tokens for programs, kept cluster-wide in the registry through a
//! node's API (`admin::tokens_api`). `add` prints the new secret alone on stdout (so
//! `vigil ctl token add prometheus --scope metrics > /etc/prometheus/vigil.token` stores
//! it) and what it made on stderr; the secret is shown this once and never again.

use crate::admin::tokens_api::{Made, TokenView};
use anyhow::Context;
use clap::Subcommand;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use serde_json::json;

#[derive(Subcommand, Debug, Clone)]
pub enum TokenCmd {
    /// Make a token: prints its secret (shown once) on stdout.
    Add {
        name: String,
        /// metrics (`/metrics` only), read (every camera live and recorded, and the
        /// lists), operate, admin; comma-separated.
        #[arg(long, value_delimiter = ',')]
        scope: Vec<String>,
        /// Camera-id patterns the token may watch live, comma-separated.
        #[arg(long, value_delimiter = ',')]
        read: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        playback: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        export: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        ptz: Vec<String>,
        /// Refused after this many days (0: never).
        #[arg(long, default_value_t = 0)]
        expires_days: u64,
    },
    /// Every token: name, rights, expiry, where it is kept (never a secret).
    Ls,
    /// Revoke a token on every node (within a registry poll).
    Rm { name: String },
}

pub fn run(api: &str, token: Option<&str>, json_out: bool, cmd: TokenCmd) -> anyhow::Result<()> {
    let send = |method: &str, path: &str, body: Option<(&str, String)>| {
        super::send(api, token, method, path, body, None)
    };
    match cmd {
        TokenCmd::Add {
            name,
            scope,
            read,
            playback,
            export,
            ptz,
            expires_days,
        } => {
            let body = json!({
                "name": name, "scope": scope, "read": read, "playback": playback,
                "export": export, "ptz": ptz, "expires_days": expires_days,
            })
            .to_string();
            let text = send("POST", "/api/tokens", Some(("application/json", body)))?;
            if json_out {
                println!("{}", text.trim_end());
                return Ok(());
            }
            let made: Made = serde_json::from_str(&text).context("unexpected answer")?;
            let until = made.expires.map_or("never expires".to_string(), |t| {
                format!("expires {}", iso(t))
            });
            eprintln!(
                "token {} made (registry version {}, {until}); its secret is shown once:",
                made.name, made.version
            );
            println!("{}", made.token);
            Ok(())
        }
        TokenCmd::Ls => {
            let text = send("GET", "/api/tokens", None)?;
            if json_out {
                println!("{}", text.trim_end());
                return Ok(());
            }
            let rows: Vec<TokenView> = serde_json::from_str(&text).context("unexpected answer")?;
            let mut t = Table::new();
            t.load_preset(UTF8_BORDERS_ONLY);
            t.set_header(["TOKEN", "RIGHTS", "EXPIRES", "CREATED", "FROM"]);
            for v in rows {
                t.add_row([
                    v.name,
                    rights_text(&v.rights),
                    v.expires.map_or_else(|| "never".into(), iso),
                    v.created.map_or_else(|| "-".into(), iso),
                    v.from,
                ]);
            }
            println!("{t}");
            Ok(())
        }
        TokenCmd::Rm { name } => {
            let seg =
                percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC);
            let path = format!("/api/tokens/{seg}");
            let text = send("DELETE", &path, None)?;
            if json_out {
                println!("{}", text.trim_end());
            } else {
                println!("token {name} revoked");
            }
            Ok(())
        }
    }
}

fn iso(unix: u64) -> String {
    i64::try_from(unix)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(|| unix.to_string(), |t| t.to_string())
}

/// A token's rights in one cell: `metrics read=gate-* operate`.
fn rights_text(r: &vigil_conf::Rights) -> String {
    let mut out: Vec<String> = Vec::new();
    for (k, on) in [
        ("metrics", r.metrics),
        ("operate", r.operate),
        ("admin", r.admin),
    ] {
        if on {
            out.push(k.into());
        }
    }
    for (k, v) in [
        ("read", &r.read),
        ("playback", &r.playback),
        ("export", &r.export),
        ("ptz", &r.ptz),
        ("publish", &r.publish),
    ] {
        if !v.is_empty() {
            out.push(format!("{k}={}", v.join(",")));
        }
    }
    out.join(" ")
}
