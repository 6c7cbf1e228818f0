//! `vigil ctl migrate | drain | undrain`: the write side of the admin API.

use crate::handoff::DrainStatus;
use crate::node::command::MoveReport;
use anyhow::Context;
use std::time::{Duration, Instant};

/// POST `body` (JSON) to the API; 4xx/5xx answers come back as errors with the node's reason.
pub fn post(
    api: &str,
    token: Option<&str>,
    path: &str,
    body: &serde_json::Value,
) -> anyhow::Result<String> {
    super::send(
        api,
        token,
        "POST",
        path,
        Some(("application/json", body.to_string())),
        None,
    )
}

pub fn migrate(
    api: &str,
    token: Option<&str>,
    json: bool,
    session: &str,
    node: &str,
    mode: Option<&str>,
) -> anyhow::Result<()> {
    let body = serde_json::json!({ "to": node, "mode": mode });
    let text = post(
        api,
        token,
        &format!("/api/sessions/{session}/migrate"),
        &body,
    )?;
    if json {
        println!("{}", text.trim_end());
        return Ok(());
    }
    let m: MoveReport = serde_json::from_str(&text).context("unexpected answer")?;
    let gap = m
        .gap_ms
        .map_or("paused, no media in flight".to_string(), |g| {
            format!("{g:.1} ms")
        });
    println!(
        "session {} moved from {} to {} ({} source): gap {gap} (prepare {:.1} ms, total {:.1} ms)",
        m.session, m.from, m.to, m.mode, m.prepare_ms, m.total_ms
    );
    Ok(())
}

fn print_status(s: &DrainStatus) {
    println!(
        "{}: {} of {} sessions moved, {} could not move{}",
        s.node,
        s.moved,
        s.total,
        s.failed.len(),
        if s.done { "" } else { " …" }
    );
}

pub fn drain(api: &str, token: Option<&str>, json: bool, node: &str) -> anyhow::Result<()> {
    let path = format!("/api/cluster/nodes/{node}/drain");
    post(api, token, &path, &serde_json::json!({}))?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last = None;
    let status = loop {
        let text = super::get(api, token, &path)?;
        let s: DrainStatus = serde_json::from_str(&text).context("unexpected answer")?;
        if !json && last.as_ref() != Some(&(s.moved, s.failed.len())) {
            print_status(&s);
            last = Some((s.moved, s.failed.len()));
        }
        if s.done || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if json {
        println!("{}", serde_json::to_string(&status)?);
        return Ok(());
    }
    print_status(&status);
    for (session, why) in &status.failed {
        println!("  {session}: {why}");
    }
    println!("{node} takes no placements until `vigil ctl undrain {node}`");
    Ok(())
}

pub fn undrain(api: &str, token: Option<&str>, json: bool, node: &str) -> anyhow::Result<()> {
    let text = post(
        api,
        token,
        &format!("/api/cluster/nodes/{node}/undrain"),
        &serde_json::json!({}),
    )?;
    if json {
        println!("{}", text.trim_end());
    } else {
        println!("{node} takes placements again");
    }
    Ok(())
}

/// `vigil ctl move-camera`.
pub fn move_camera(
    api: &str,
    token: Option<&str>,
    json: bool,
    camera: &str,
    node: &str,
) -> anyhow::Result<()> {
    let path = format!("/api/cluster/cameras/{camera}/move");
    let text = post(api, token, &path, &serde_json::json!({ "to": node }))?;
    if json {
        println!("{}", text.trim_end());
        return Ok(());
    }
    let r: crate::cluster::CameraMoveRecord =
        serde_json::from_str(&text).context("unexpected answer")?;
    let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0} ms"));
    println!(
        "camera {camera} moved from {} to {}: keyframe at the destination after {}, re-bound {} after the decision",
        r.from,
        r.to.unwrap_or_default(),
        ms(r.keyframe_ms),
        ms(r.took_ms)
    );
    Ok(())
}
