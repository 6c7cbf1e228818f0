//! `vigil-lab chaos` (issue 25 §3): a seeded fault schedule against a cluster on a bed of
//! hosts, and a checker of what must hold through it. The schedule ([`schedule`]) and the
//! checker ([`checker`]) are pure functions, tested by hand-made cases; [`run`] is their
//! shell over real nodes (root: network namespaces, a tmpfs share), and this module prints
//! and writes the report.

pub mod checker;
pub mod run;
pub mod schedule;
mod viewers;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct ChaosArgs {
    /// Length of the run.
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Seed of the nemesis's plan and the viewers' draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Live viewers (half over TCP, half over UDP).
    #[arg(long, default_value_t = 40)]
    pub live_viewers: usize,
    /// Playback viewers (sessions of 15–30 s from random moments).
    #[arg(long, default_value_t = 12)]
    pub playback_viewers: usize,
    /// Report folder (default: a new folder under ./reports).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn main(args: ChaosArgs) -> anyhow::Result<()> {
    let duration = Duration::from_secs_f64(args.minutes.max(0.5) * 60.0);
    let opts = run::Opts {
        duration,
        seed: args.seed,
        live_viewers: args.live_viewers,
        playback_viewers: args.playback_viewers,
        params: schedule::Params::for_run(duration),
        limits: checker::Limits::default(),
        bin: vigil_testkit::serve::sibling_vigil()?,
    };
    let outcome = run::run(&opts)?;
    let report = report(&opts, &outcome);
    println!("{report}");
    let out = args.out.unwrap_or_else(|| {
        PathBuf::from("reports").join(format!(
            "chaos-seed{}-{}",
            args.seed,
            vigil_storage::now_ms()
        ))
    });
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("report.md"), &report)?;
    // What an investigation starts from: every node's log and every camera's segments.
    for (id, log) in &outcome.node_logs {
        std::fs::write(out.join(format!("{id}.log")), log)?;
    }
    let mut segs = String::new();
    for (camera, spans) in &outcome.segments {
        for (start, end) in spans {
            let _ = writeln!(segs, "{camera} {start} {end}");
        }
    }
    std::fs::write(out.join("segments.txt"), segs)?;
    let mut timeline = String::new();
    for (label, start, end) in &outcome.timeline {
        let _ = writeln!(timeline, "{start} {end} {label}");
    }
    std::fs::write(out.join("timeline.txt"), timeline)?;
    eprintln!("report written to {}", out.display());
    if !outcome.verdict.violations.is_empty() {
        anyhow::bail!(
            "{} invariants broken; repeat with --seed {}:\n{}",
            outcome.verdict.violations.len(),
            args.seed,
            outcome.verdict.violations.join("\n")
        );
    }
    Ok(())
}

/// The per-event table (Markdown) and the violations.
pub fn report(o: &run::Opts, out: &run::Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Chaos run: seed {}, {:.1} min, {} nodes, {} viewers ({} spans)\n",
        o.seed,
        o.duration.as_secs_f64() / 60.0,
        o.params.nodes,
        out.viewers,
        out.spans
    );
    let _ = writeln!(
        s,
        "| event | hit cameras: longest recording gap | other cameras' gaps | segments overlapping | hit viewers' outages (longest) | other viewers' outages | refused / to a dead node (for) | half-moved | split schedulers after heal |\n|---|---|---|---|---|---|---|---|---|"
    );
    for r in &out.verdict.rows {
        let label = match &r.not_made {
            Some(why) => format!("{} — not made: {why}", r.label),
            None => r.label.clone(),
        };
        let _ = writeln!(
            s,
            "| {label} | {} × {:.1} s | {} | {} | {} ({:.1} s) | {} ({:.1} s) | {} / {} ({:.1} s) | {} | {} |",
            r.hit_cameras,
            r.hit_recording_gap_ms as f64 / 1000.0,
            r.other_recording_gaps,
            r.recorded_twice,
            r.hit_outages,
            r.hit_longest_ms as f64 / 1000.0,
            r.other_outages,
            r.other_longest_ms as f64 / 1000.0,
            r.refused,
            r.sent_to_dead,
            r.refused_for_ms as f64 / 1000.0,
            r.half_moved,
            r.split_schedulers
        );
    }
    let _ = writeln!(s, "\n{} invariants broken", out.verdict.violations.len());
    for v in &out.verdict.violations {
        let _ = writeln!(s, "- {v}");
    }
    for r in out.verdict.rows.iter().filter(|r| !r.details.is_empty()) {
        let _ = writeln!(s, "\n{}:", r.label);
        for d in &r.details {
            let _ = writeln!(s, "- {d}");
        }
    }
    s
}
