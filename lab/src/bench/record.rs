//! `vigil bench record`: N cameras publish to a node, which records them all; measured over
//! a steady window: the node's CPU, what it wrote (committed segment bytes from
//! `/api/recordings`, and the `write(2)` bytes of `/proc/<pid>/io`), and the recording state
//! of every camera.
//!
//! The cameras are the project's light [`Publisher`]s replaying one H.264 Annex B file
//! without B-frames in a loop over TCP interleaved RTP (`--file`; docs/BENCHMARKS.md has the
//! ffmpeg command that makes a 2 Mb/s one), all in this process: one ffmpeg per camera would
//! cost more than the node being measured.

use super::{blocking, get, machine_ticks};
use anyhow::Context;
use clap::Args;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil_server::procfs as process;
use vigil_testkit::client::{Clip, Publisher};

#[derive(Args, Debug, Clone)]
pub struct RecordArgs {
    /// Path prefix to publish to: camera i publishes to <url>-<i>, e.g.
    /// rtsp://127.0.0.1:8554/live/bench → live/bench-0, live/bench-1, …
    #[arg(long)]
    pub url: String,
    /// Number of cameras.
    #[arg(long, default_value_t = 50)]
    pub cameras: usize,
    /// H.264 Annex B file replayed by every camera (with SPS/PPS before keyframes).
    #[arg(long)]
    pub file: std::path::PathBuf,
    /// Frame rate of the file.
    #[arg(long, default_value_t = 25.0)]
    pub fps: f64,
    /// Replay speed (1 = real time).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Seconds of the steady window.
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Seconds between the last camera starting and the window (segments are being cut).
    #[arg(long, default_value_t = 6)]
    pub warmup: u64,
    /// Cameras started per second (0: all at once).
    #[arg(long, default_value_t = 100.0)]
    pub ramp_per_sec: f64,
    /// The node's admin API (pid, recording status).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub api: String,
    /// Worker threads of the load generator.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.cameras > 0, "--cameras must be at least 1");
    let data =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let clip = Clip::from_annexb(&data, args.fps)
        .context("the file is not H.264 Annex B with SPS and PPS")?;
    let runtime = super::runtime(args.threads)?;
    let report = runtime.block_on(record(&args, Arc::new(clip)))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

/// (sum of bytes_written, cameras recording, cameras in error, errors, frames dropped,
/// cameras listed) over `prefix-*`.
async fn recording_totals(api: &str, prefix: &str) -> Option<(u64, usize, usize, u64, u64, usize)> {
    let api = api.to_string();
    let body = blocking(move || get(&api, "/api/recordings")).await?.ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let mut t = (0, 0, 0, 0, 0, 0);
    for s in v.as_array()? {
        if !s["camera"].as_str().is_some_and(|c| c.starts_with(prefix)) {
            continue;
        }
        t.0 += s["bytes_written"].as_u64().unwrap_or(0);
        t.1 += usize::from(s["state"] == "recording");
        t.2 += usize::from(s["state"] == "error");
        t.3 += s["errors"].as_u64().unwrap_or(0);
        t.4 += s["frames_dropped"].as_u64().unwrap_or(0);
        t.5 += 1;
    }
    Some(t)
}

async fn record(args: &RecordArgs, clip: Arc<Clip>) -> anyhow::Result<serde_json::Value> {
    let api = args.api.trim_end_matches('/').to_string();
    let pid = {
        let api = api.clone();
        blocking(move || get(&api, "/api/node"))
            .await
            .and_then(|r| r.ok())
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
            .and_then(|v| v["process"]["pid"].as_u64())
            .map(|p| p as u32)
            .context("no pid from /api/node")?
    };
    let prefix = url::Url::parse(&args.url)
        .map(|u| u.path().trim_matches('/').to_string())
        .context("bad --url")?;
    let camera_prefix = format!("{}-", prefix.strip_prefix("live/").unwrap_or(&prefix));
    let n = args.cameras;
    let ramp = if args.ramp_per_sec > 0.0 {
        Duration::from_secs_f64(n as f64 / args.ramp_per_sec)
    } else {
        Duration::ZERO
    };
    eprintln!(
        "vigil bench record: {n} cameras × {:.2} Mbit/s ({}× speed) to {}-N, ramp {:.1} s, warm-up {} s, window {} s",
        clip.bitrate_bps() / 1e6,
        args.speed,
        args.url,
        ramp.as_secs_f64(),
        args.warmup,
        args.duration
    );
    let start = Instant::now() + Duration::from_millis(50);
    let mark = start + ramp + Duration::from_secs(args.warmup);
    let end = mark + Duration::from_secs(args.duration);
    let mut cams = Vec::with_capacity(n);
    for i in 0..n {
        let at = start + ramp.mul_f64(i as f64 / n as f64);
        let url = format!("{}-{i}", args.url);
        let clip = clip.clone();
        let speed = args.speed;
        cams.push(tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            let mut p = Publisher::announce(&url, &clip, Duration::from_secs(10)).await?;
            let r = p
                .run(&clip, speed, tokio::time::sleep_until(end.into()))
                .await;
            r.map(|_| (p.frames_sent, p.bytes_sent))
        }));
    }
    tokio::time::sleep_until(mark.into()).await;
    let rec_first = recording_totals(&api, &camera_prefix).await;
    let node_first = process::process(pid);
    let wchar_first = process::written_bytes(pid);
    let bench_first = process::current();
    let machine_first = machine_ticks();
    let mut rss_max = node_first.map_or(0, |s| s.rss_bytes);
    let mut threads_max = node_first.map_or(0, |s| s.threads);
    while Instant::now() + Duration::from_millis(1200) < end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(s) = process::process(pid) {
            rss_max = rss_max.max(s.rss_bytes);
            threads_max = threads_max.max(s.threads);
        }
    }
    tokio::time::sleep_until(end.into()).await;
    let rec_last = recording_totals(&api, &camera_prefix).await;
    let node_last = process::process(pid);
    let wchar_last = process::written_bytes(pid);
    let bench_last = process::current();
    let machine_last = machine_ticks();
    let mut failures: std::collections::BTreeMap<String, usize> = Default::default();
    let mut sent_bytes = 0u64;
    let mut ok = 0;
    for c in cams {
        match c.await {
            Ok(Ok((_, bytes))) => {
                ok += 1;
                sent_bytes += bytes;
            }
            Ok(Err(e)) => *failures.entry(e.to_string()).or_default() += 1,
            Err(e) => *failures.entry(e.to_string()).or_default() += 1,
        }
    }
    let window = args.duration as f64;
    let cpu = |a: Option<process::ProcessStats>, b: Option<process::ProcessStats>| {
        a.zip(b)
            .map(|(a, b)| (b.cpu_seconds - a.cpu_seconds) / window * 100.0)
    };
    let mb_s = |a: Option<u64>, b: Option<u64>| {
        a.zip(b)
            .map(|(a, b)| b.saturating_sub(a) as f64 / window / 1e6)
    };
    Ok(serde_json::json!({
        "url": args.url,
        "cameras": n,
        "published_ok": ok,
        "failures": failures,
        "camera_mbps": clip.bitrate_bps() * args.speed / 1e6,
        "offered_mb_per_sec": clip.bitrate_bps() * args.speed * n as f64 / 8.0 / 1e6,
        "payload_sent_mb_total": sent_bytes as f64 / 1e6,
        "window_secs": window,
        "node_cpu_pct": cpu(node_first, node_last),
        "node_rss_max_mb": rss_max as f64 / 1e6,
        "node_threads_max": threads_max,
        "frames_dropped": rec_last.map(|r| r.4),
        "cameras_listed": rec_last.map(|r| r.5),
        "segments_written_mb_per_sec": mb_s(rec_first.map(|r| r.0), rec_last.map(|r| r.0)),
        "write_syscall_mb_per_sec": mb_s(wchar_first, wchar_last),
        "recording_at_end": rec_last.map(|r| r.1),
        "error_at_end": rec_last.map(|r| r.2),
        "recording_errors": rec_last.map(|r| r.3),
        "bench_cpu_pct": cpu(bench_first, bench_last),
        "machine_busy_pct": machine_first.zip(machine_last).map(|(a, b)| (b.0 - a.0) / window * 100.0),
        "softirq_pct": machine_first.zip(machine_last).map(|(a, b)| (b.1 - a.1) / window * 100.0),
    }))
}

fn print_report(r: &serde_json::Value) {
    let f = |v: &serde_json::Value| match v.as_f64() {
        Some(x) => format!("{x:.2}"),
        None => v.to_string(),
    };
    println!(
        "cameras                 {} × {} Mbit/s ({} published to the end), failures {}",
        r["cameras"],
        f(&r["camera_mbps"]),
        r["published_ok"],
        r["failures"]
    );
    println!(
        "offered                 {} MB/s of payload",
        f(&r["offered_mb_per_sec"])
    );
    println!(
        "node CPU                {} % of one core (RSS max {} MB, threads max {})",
        f(&r["node_cpu_pct"]),
        f(&r["node_rss_max_mb"]),
        r["node_threads_max"]
    );
    println!(
        "written                 {} MB/s in committed segments, {} MB/s through write(2)",
        f(&r["segments_written_mb_per_sec"]),
        f(&r["write_syscall_mb_per_sec"])
    );
    println!(
        "recording at the end    {} of {} listed recording, {} in error, {} errors, {} frames dropped",
        r["recording_at_end"],
        r["cameras_listed"],
        r["error_at_end"],
        r["recording_errors"],
        r["frames_dropped"]
    );
    println!(
        "bench CPU {} %, machine busy {} % (softirq {} %) over the {} s window",
        f(&r["bench_cpu_pct"]),
        f(&r["machine_busy_pct"]),
        f(&r["softirq_pct"]),
        r["window_secs"]
    );
}
