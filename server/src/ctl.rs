//! `vigil ctl`: the admin API as tables (or JSON for scripts).

use crate::admin::views::{PathView, SessionView};
use anyhow::Context;
use clap::Subcommand;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};

#[derive(Subcommand, Debug, Clone, Copy)]
pub enum What {
    /// Paths: source, codecs, ingest bitrate, readers.
    Paths,
    /// Sessions: client, transport, bytes, duration.
    Sessions,
}

fn get(api: &str, path: &str) -> anyhow::Result<String> {
    let url = format!("{}{path}", api.trim_end_matches('/'));
    let mut resp = ureq::get(&url)
        .call()
        .with_context(|| format!("cannot reach the admin API at {url} (is the node running?)"))?;
    Ok(resp.body_mut().read_to_string()?)
}

pub fn run(api: &str, json: bool, what: What) -> anyhow::Result<()> {
    let body = match what {
        What::Paths => get(api, "/api/paths")?,
        What::Sessions => get(api, "/api/sessions")?,
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
        What::Sessions => {
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
            ]);
            for s in rows {
                table.add_row([
                    s.id,
                    s.path,
                    s.kind,
                    s.client,
                    s.transport,
                    s.bytes.to_string(),
                    format!("{:.1}", s.duration_secs),
                    s.bitrate_kbps.to_string(),
                ]);
            }
        }
    }
    println!("{table}");
    Ok(())
}
