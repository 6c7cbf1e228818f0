//! `vigil bench playback`: sessions of the project's client against a recording.
//!
//! Latency mode (default): `--requests` sessions, `--concurrency` at a time, each one
//! connect, DESCRIBE, SETUP, PLAY, then wait for the first RTP packet of a keyframe and
//! close. The figure is PLAY sent → that packet received. With `--seek S --step D` the PLAY
//! of session i carries `Range: npt=<S + i·D>-`: a step of more than the read-ahead window
//! (in segments) makes every PLAY load a segment nobody asked for yet (a cache miss at PLAY
//! time; DESCRIBE and SETUP only touch the URL's start), a step of 0 asks for the same one
//! every time (a hit after the first). The node's cache counters before and after tell
//! which it was.
//!
//! Hold mode (`--hold SECS`): `--concurrency` sessions play at once (session i from
//! `S + i·D` when `--seek` is given) for a steady window of `--hold` seconds after a
//! warm-up; reported: the delivered rate per session and in total, loss, and the node's CPU.

use super::{blocking, get, machine_ticks};
use anyhow::Context;
use clap::Args;
use std::time::{Duration, Instant};
use vigil_server::procfs as process;
use vigil_testkit::client::{play, ClientTransport, PlayOptions, PlayRequest, Stats};

#[derive(Args, Debug, Clone)]
pub struct PlaybackArgs {
    /// A playback URL, rtsp://HOST:PORT/playback/<camera>?start=<RFC 3339>[&end=…].
    #[arg(long)]
    pub url: String,
    /// Sessions to measure (latency mode).
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// Sessions in flight at once (hold mode: the number of concurrent playbacks).
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// PLAY with `Range: npt=<seek + i·step>-` (seconds from the URL's start); without it
    /// the PLAY has no Range and starts at the URL's start.
    #[arg(long)]
    pub seek: Option<f64>,
    /// Seconds between the seeks of consecutive sessions.
    #[arg(long, default_value_t = 0.0)]
    pub step: f64,
    /// Hold mode: play this many seconds (steady window) instead of measuring start-up.
    #[arg(long)]
    pub hold: Option<u64>,
    /// Hold mode: seconds between the last session starting and the steady window.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    #[arg(long, value_enum, default_value_t = ClientTransport::Tcp)]
    pub transport: ClientTransport,
    /// The node's admin API: cache counters, and (hold mode) its pid for CPU.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub api: String,
    /// Worker threads of the load generator.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: PlaybackArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.requests > 0, "--requests must be at least 1");
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    let runtime = super::runtime(args.threads)?;
    let report = match args.hold {
        None => runtime.block_on(latency(&args))?,
        Some(secs) => runtime.block_on(hold(&args, secs))?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

fn options(args: &PlaybackArgs, i: usize) -> PlayOptions {
    let mut opts = PlayOptions::new(args.transport);
    opts.play = match args.seek {
        Some(s) => PlayRequest::new().npt(s + i as f64 * args.step),
        None => PlayRequest::new(),
    };
    opts
}

/// The cache counters of `/api/cache` (None without an API).
async fn cache_stats(api: &str) -> Option<serde_json::Value> {
    let api = api.trim_end_matches('/').to_string();
    let body = blocking(move || get(&api, "/api/cache")).await?.ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(v["stats"].clone())
}

fn cache_delta(
    before: &Option<serde_json::Value>,
    after: &Option<serde_json::Value>,
) -> serde_json::Value {
    let (Some(a), Some(b)) = (before, after) else {
        return serde_json::Value::Null;
    };
    let d = |k: &str| {
        b[k].as_u64()
            .unwrap_or(0)
            .saturating_sub(a[k].as_u64().unwrap_or(0))
    };
    serde_json::json!({
        "hits": d("hits"),
        "misses": d("misses"),
        "coalesced": d("coalesced"),
        "loads": d("loads"),
        "prefetches": d("prefetches"),
        "load_p50_us": b["load_p50_us"],
        "load_p99_us": b["load_p99_us"],
    })
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(|a, b| a.total_cmp(b));
    serde_json::json!({
        "n": v.len(),
        "min": v.first().copied().unwrap_or(f64::NAN),
        "p50": pct(&v, 50.0),
        "p90": pct(&v, 90.0),
        "p99": pct(&v, 99.0),
        "max": v.last().copied().unwrap_or(f64::NAN),
    })
}

/// One session's start-up.
struct Start {
    /// PLAY sent → first RTP packet of a keyframe received.
    play: Duration,
    /// PLAY sent → its answer received.
    answer: Duration,
    /// Connect → first RTP packet of a keyframe received (OPTIONS, DESCRIBE, SETUP, PLAY).
    session: Duration,
    /// Whether the very first packet began a keyframe.
    keyframe_first: bool,
}

async fn one(url: &str, opts: PlayOptions) -> anyhow::Result<Start> {
    let started = Instant::now();
    let mut p = play(url, opts).await?;
    let (pkt, keyframe_first) = p
        .next_keyframe(Duration::from_secs(10))
        .await?
        .context("the stream ended before a keyframe")?;
    let a = p.answer();
    Ok(Start {
        play: pkt.at - a.sent,
        answer: a.received - a.sent,
        session: pkt.at - started,
        keyframe_first,
    })
}

async fn latency(args: &PlaybackArgs) -> anyhow::Result<serde_json::Value> {
    let before = cache_stats(&args.api).await;
    eprintln!(
        "vigil bench playback: {} sessions of {} ({} at a time, seek {:?} step {} s)",
        args.requests, args.url, args.concurrency, args.seek, args.step
    );
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    let wall = Instant::now();
    for _ in 0..args.concurrency.min(args.requests) {
        let next = next.clone();
        let args = args.clone();
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= args.requests {
                    return out;
                }
                out.push(
                    one(&args.url, options(&args, i))
                        .await
                        .map_err(|e| format!("{e:#}")),
                );
            }
        }));
    }
    let mut play_ms = Vec::new();
    let mut answer_ms = Vec::new();
    let mut session_ms = Vec::new();
    let mut keyframe_first = 0;
    let mut failures: std::collections::BTreeMap<String, usize> = Default::default();
    for w in workers {
        for r in w.await.unwrap_or_default() {
            match r {
                Ok(s) => {
                    play_ms.push(s.play.as_secs_f64() * 1000.0);
                    answer_ms.push(s.answer.as_secs_f64() * 1000.0);
                    session_ms.push(s.session.as_secs_f64() * 1000.0);
                    keyframe_first += usize::from(s.keyframe_first);
                }
                Err(e) => *failures.entry(e).or_default() += 1,
            }
        }
    }
    let secs = wall.elapsed().as_secs_f64();
    let after = cache_stats(&args.api).await;
    Ok(serde_json::json!({
        "mode": "latency",
        "url": args.url,
        "requests": args.requests,
        "concurrency": args.concurrency,
        "ok": play_ms.len(),
        "failures": failures,
        "first_packet_keyframe": keyframe_first,
        "play_to_first_keyframe_ms": summary(play_ms),
        "play_to_answer_ms": summary(answer_ms),
        "connect_to_first_keyframe_ms": summary(session_ms),
        "sessions_per_sec": args.requests as f64 / secs,
        "cache": cache_delta(&before, &after),
    }))
}

async fn hold(args: &PlaybackArgs, secs: u64) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(secs > 0, "--hold must be at least 1 second");
    let pid = {
        let api = args.api.trim_end_matches('/').to_string();
        blocking(move || get(&api, "/api/node"))
            .await
            .and_then(|r| r.ok())
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
            .and_then(|v| v["process"]["pid"].as_u64())
            .map(|p| p as u32)
    };
    let n = args.concurrency;
    eprintln!(
        "vigil bench playback: {n} concurrent sessions of {} for {secs} s (seek {:?} step {} s)",
        args.url, args.seek, args.step
    );
    let before = cache_stats(&args.api).await;
    let mut players = Vec::with_capacity(n);
    let mut failures: std::collections::BTreeMap<String, usize> = Default::default();
    let connecting: Vec<_> = (0..n)
        .map(|i| {
            let url = args.url.clone();
            let opts = options(args, i);
            tokio::spawn(async move { play(&url, opts).await })
        })
        .collect();
    for c in connecting {
        match c.await {
            Ok(Ok(p)) => players.push(p),
            Ok(Err(e)) => *failures.entry(e.to_string()).or_default() += 1,
            Err(e) => *failures.entry(e.to_string()).or_default() += 1,
        }
    }
    let mark = Instant::now() + Duration::from_secs(args.warmup);
    let end = mark + Duration::from_secs(secs);
    let running: Vec<_> = players
        .into_iter()
        .map(|p| tokio::spawn(p.collect_stats(tokio::time::sleep_until(end.into()), Some(mark))))
        .collect();
    tokio::time::sleep_until(mark.into()).await;
    let node_first = pid.and_then(process::process);
    let bench_first = process::current();
    let machine_first = machine_ticks();
    tokio::time::sleep_until(end.into()).await;
    let node_last = pid.and_then(process::process);
    let bench_last = process::current();
    let machine_last = machine_ticks();
    let mut stats: Vec<Stats> = Vec::new();
    for r in running {
        if let Ok(s) = r.await {
            stats.push(s);
        }
    }
    let after = cache_stats(&args.api).await;
    let window = secs as f64;
    let mut kbps: Vec<f64> = Vec::new();
    let mut lost = 0;
    let mut ended = 0;
    let mut errors = 0;
    for s in &stats {
        lost += s.lost();
        ended += usize::from(s.ended);
        errors += usize::from(s.error.is_some());
        if let Some(m) = s.at_mark {
            // Bytes after the mark, up to the end of the window.
            kbps.push((s.bytes() - m.bytes) as f64 * 8.0 / window / 1000.0);
        }
    }
    let total_mbps: f64 = kbps.iter().sum::<f64>() / 1000.0;
    let cpu = |a: Option<process::ProcessStats>, b: Option<process::ProcessStats>| {
        a.zip(b)
            .map(|(a, b)| (b.cpu_seconds - a.cpu_seconds) / window * 100.0)
    };
    Ok(serde_json::json!({
        "mode": "hold",
        "url": args.url,
        "sessions": n,
        "playing": stats.len(),
        "failures": failures,
        "window_secs": window,
        "delivered_kbps_per_session": summary(kbps),
        "delivered_mbps_total": total_mbps,
        "lost_packets": lost,
        "ended_early": ended,
        "errors": errors,
        "node_cpu_pct": cpu(node_first, node_last),
        "node_rss_mb": node_last.map(|s| s.rss_bytes as f64 / 1e6),
        "bench_cpu_pct": cpu(bench_first, bench_last),
        "machine_busy_pct": machine_first.zip(machine_last).map(|(a, b)| (b.0 - a.0) / window * 100.0),
        "cache": cache_delta(&before, &after),
    }))
}

fn print_report(r: &serde_json::Value) {
    let f = |v: &serde_json::Value| match v.as_f64() {
        Some(x) => format!("{x:.3}"),
        None => v.to_string(),
    };
    if r["mode"] == "latency" {
        println!(
            "url                     {}",
            r["url"].as_str().unwrap_or("")
        );
        println!(
            "sessions                {} ok of {} ({} at a time), failures {}",
            r["ok"], r["requests"], r["concurrency"], r["failures"]
        );
        println!("first packet a keyframe {}", r["first_packet_keyframe"]);
        for key in [
            "play_to_first_keyframe_ms",
            "play_to_answer_ms",
            "connect_to_first_keyframe_ms",
        ] {
            let s = &r[key];
            println!(
                "{key:<34} p50 {}  p90 {}  p99 {}  max {}",
                f(&s["p50"]),
                f(&s["p90"]),
                f(&s["p99"]),
                f(&s["max"])
            );
        }
        println!("sessions per second     {}", f(&r["sessions_per_sec"]));
    } else {
        println!(
            "url                     {}",
            r["url"].as_str().unwrap_or("")
        );
        println!(
            "sessions                {} playing of {}, failures {}",
            r["playing"], r["sessions"], r["failures"]
        );
        let s = &r["delivered_kbps_per_session"];
        println!(
            "kbit/s per session      min {}  p50 {}  max {}  total {} Mbit/s",
            f(&s["min"]),
            f(&s["p50"]),
            f(&s["max"]),
            f(&r["delivered_mbps_total"])
        );
        println!(
            "lost packets {}  ended early {}  errors {}",
            r["lost_packets"], r["ended_early"], r["errors"]
        );
        println!(
            "node CPU {} %  RSS {} MB  bench CPU {} %  machine busy {} %",
            f(&r["node_cpu_pct"]),
            f(&r["node_rss_mb"]),
            f(&r["bench_cpu_pct"]),
            f(&r["machine_busy_pct"])
        );
    }
    println!("cache (delta)           {}", r["cache"]);
}
