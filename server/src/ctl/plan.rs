//! `vigil ctl plan`: the scheduler's last §D.2 plan (and the last one that moved sessions)
//! with its prediction, method, objective, solve time and each move's result.

use anyhow::Context;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};

use crate::cluster::{PlanRecord, PlanView};

pub fn show(api: &str, token: Option<&str>, json: bool) -> anyhow::Result<()> {
    let body = super::get(api, token, "/api/cluster/plan")?;
    if json {
        println!("{}", body.trim_end());
        return Ok(());
    }
    let v: PlanView = serde_json::from_str(&body).context("unexpected answer")?;
    println!(
        "planner {} on the scheduler {}",
        if v.enabled { "enabled" } else { "disabled" },
        v.scheduler.as_deref().unwrap_or("-")
    );
    match &v.last {
        None => println!("no plan yet (this node has not planned as the scheduler)"),
        Some(p) => print_plan("last plan", p),
    }
    if let Some(p) = &v.last_moves {
        if v.last.as_ref().map(|l| l.at_ms) != Some(p.at_ms) {
            print_plan("last plan that moved sessions", p);
        }
    }
    Ok(())
}

fn print_plan(title: &str, p: &PlanRecord) {
    let at = vigil_proto::rtsp::rfc3339(p.at_ms);
    println!(
        "{title} at {at} by {}: {:?}, objective {} moved (greedy {}), unmet {} before, {} after, \
         solved in {:.2} ms{}",
        p.scheduler,
        p.method,
        p.objective,
        p.greedy_moved.map_or("-".into(), |g| g.to_string()),
        p.unmet_before,
        p.unmet,
        p.solve_ms,
        p.note
            .as_deref()
            .map_or(String::new(), |n| format!(" ({n})"))
    );
    let pr = &p.prediction;
    println!(
        "prediction: {} arrivals in {} s (λ {:.3}/s), {} requests in the next {} s, Zipf s {:.2}: {}",
        pr.arrivals,
        p.window_ms / 1000,
        pr.rate_per_s,
        pr.total,
        p.horizon_ms / 1000,
        pr.zipf_s,
        pr.requests
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if p.moves.is_empty() {
        return;
    }
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header(["CONTENT", "SESSION", "FROM", "TO", "RESULT", "MS"]);
    for m in &p.moves {
        t.add_row([
            m.content.clone(),
            m.session.clone().unwrap_or_default(),
            m.from.clone(),
            m.to.clone(),
            m.result.clone(),
            m.took_ms.map_or("-".into(), |x| format!("{x:.0}")),
        ]);
    }
    println!("{t}");
}
