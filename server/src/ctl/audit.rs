//! `vigil ctl audit`: the trail of the whole cluster through a node's API (`ls`), and its
//! proof read straight from the shared storage root (`verify`: with `--config`, for the
//! root and the key).

use crate::admin::audit_api::AuditPage;
use crate::audit::{chain, store};
use anyhow::Context;
use clap::Subcommand;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};

#[derive(Subcommand, Debug, Clone)]
pub enum AuditCmd {
    /// Records of every node (oldest first): who watched, played back, exported, steered or
    /// changed what, from where.
    Ls {
        #[arg(long)]
        camera: Option<String>,
        #[arg(long)]
        user: Option<String>,
        /// live, playback, export, ptz, signin, change, operate (or a full kind such as
        /// live.start).
        #[arg(long)]
        kind: Option<String>,
        /// RFC 3339, e.g. 2026-12-05T14:00:00Z
        #[arg(long)]
        from: Option<String>,
        #[arg(long)]
        to: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Where a previous page ended (its `next`).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Check every node's trail on the storage root (or --node's): names the first record
    /// that was edited, removed or reordered, and how much is not yet under a signed
    /// checkpoint. Reads the files itself: needs --config (the root and the audit key).
    /// Exits non-zero on any failure.
    Verify {
        #[arg(long)]
        node: Option<String>,
    },
}

pub fn ls(api: &str, token: Option<&str>, json: bool, cmd: &AuditCmd) -> anyhow::Result<()> {
    let AuditCmd::Ls {
        camera,
        user,
        kind,
        from,
        to,
        limit,
        cursor,
    } = cmd
    else {
        anyhow::bail!("vigil ctl audit verify reads the storage root itself (cli.rs)");
    };
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in [
        ("camera", camera),
        ("user", user),
        ("kind", kind),
        ("from", from),
        ("to", to),
        ("cursor", cursor),
    ] {
        if let Some(v) = v {
            q.append_pair(k, v);
        }
    }
    q.append_pair("limit", &limit.to_string());
    let text = super::get(api, token, &format!("/api/audit?{}", q.finish()))?;
    if json {
        println!("{}", text.trim_end());
        return Ok(());
    }
    let page: AuditPage = serde_json::from_str(&text).context("unexpected answer")?;
    let iso = |ms: i64| {
        jiff::Timestamp::from_millisecond(ms)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header([
        "TIME", "NODE", "KIND", "USER", "CLIENT", "CAMERA", "VIA", "RANGE", "DETAIL",
    ]);
    for r in &page.records {
        let range = match (r.from_ms, r.to_ms) {
            (None, None) => String::new(),
            (a, b) => format!(
                "{} – {}",
                a.map(iso).unwrap_or_default(),
                b.map(iso).unwrap_or_default()
            ),
        };
        t.add_row([
            iso(r.at_ms),
            r.node.clone(),
            r.kind.clone(),
            r.user.clone(),
            r.client.clone(),
            r.camera.clone().unwrap_or_default(),
            r.protocol.clone().unwrap_or_default(),
            range,
            if r.detail.is_empty() {
                String::new()
            } else {
                serde_json::Value::Object(r.detail.clone()).to_string()
            },
        ]);
    }
    println!("{t}");
    match &page.next {
        Some(n) => println!("{} record(s); more with --cursor {n}", page.records.len()),
        None => println!("{} record(s)", page.records.len()),
    }
    Ok(())
}

/// `vigil ctl audit verify`: true when every trail checked holds.
pub fn verify(config: Option<&std::path::Path>, node: Option<&str>) -> anyhow::Result<()> {
    let path = config
        .context("vigil ctl audit verify needs --config (the storage root and the audit key)")?;
    let config = vigil_conf::Config::load(path)?;
    let dir = store::audit_dir(&config.storage.root);
    let secret = crate::audit::key_secret(&config);
    if secret.is_none() {
        println!("WARN no audit key in the config: checkpoints cannot be proven, only the chain");
    }
    let mut dirs = store::node_dirs(&dir).with_context(|| format!("reading {}", dir.display()))?;
    if let Some(n) = node {
        let name = store::node_dir_name(n);
        dirs.retain(|d| d.file_name().is_some_and(|f| f == name.as_str()));
        anyhow::ensure!(
            !dirs.is_empty(),
            "no audit trail of node {n:?} under {}",
            dir.display()
        );
    }
    let mut failed = 0;
    for d in &dirs {
        let files = store::day_files(d)?;
        let mut lines = Vec::new();
        let mut origin = Vec::new();
        for f in &files {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            for (i, l) in text.lines().enumerate() {
                lines.push(l.to_string());
                origin.push((f.clone(), i + 1));
            }
        }
        // The node's id is in its records (the directory name is escaped).
        let id = lines
            .iter()
            .find_map(|l| serde_json::from_str::<chain::Record>(l).ok())
            .map(|r| r.node)
            .unwrap_or_else(|| d.display().to_string());
        let key = secret.as_deref().map(|s| chain::node_key(s, &id));
        match chain::verify(
            lines.iter().map(String::as_str),
            key.as_ref().map(|k| &k[..]),
        ) {
            Ok(v) => println!(
                "OK   {id}: {} record(s), {} signed checkpoint(s), {} after the last{}",
                v.records,
                v.signed_checkpoints,
                v.unsigned_tail,
                if v.starts_after_retention {
                    " (older days removed by retention)"
                } else {
                    ""
                }
            ),
            Err(e) => {
                failed += 1;
                let at = match &e {
                    chain::VerifyError::Unreadable { line, .. }
                    | chain::VerifyError::Broken { line, .. }
                    | chain::VerifyError::Sequence { line, .. }
                    | chain::VerifyError::BadSignature { line, .. } => origin.get(line - 1),
                };
                let place = at
                    .map(|(f, l)| format!("{}:{l}", f.display()))
                    .unwrap_or_default();
                println!("FAIL {id}: {place}: {e}");
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} trail(s) fail their proof");
    if dirs.is_empty() {
        println!("no audit trail under {}", dir.display());
    }
    Ok(())
}
