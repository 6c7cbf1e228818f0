//! `vigil bench live`: a load generator that plays one live path with N of the project's
//! own light viewers ([`vigil_testkit::client`]) in this process and reports what they received
//! and what it cost the node (CPU and RSS read from /proc by the pid `/api/node` gives).
//!
//! Timeline: readers are started at `--ramp-per-sec`, then `--warmup` seconds pass so the
//! GOP bursts of the late joiners are over, then the steady window of `--duration` seconds
//! is measured: per-reader delivered bitrate, packets delivered against packets ingested by
//! the node, and the node's CPU time over exactly that window. Loss (sequence gaps) and
//! start-up latency cover the whole run.
//!
//! `vigil bench playback` (first-frame latency of playback sessions, cache hit and miss, or
//! N concurrent playbacks) and `vigil bench record` (N publishing cameras recorded by the
//! node) are in [`playback`] and [`record`].

pub mod floor;
pub mod handshake;
pub mod playback;
pub mod record;
mod report;
pub mod webrtc;

use anyhow::Context;
use clap::{Args, Subcommand};
use report::{NodeWindow, ReaderOutcome};
use std::time::{Duration, Instant};
use vigil_server::procfs::{self as process, ProcessStats};
use vigil_testkit::client::{play, ClientTransport, PlayOptions, Stats};

#[derive(Subcommand, Debug, Clone)]
pub enum Bench {
    /// Play one live path with many viewers and measure delivery and the node's cost.
    Live(LiveArgs),
    /// The floor of live fan-out: one camera's RTP relayed to N viewers with nothing but
    /// the kernel's best send calls (no hub, no session state), to put beside a node.
    Floor(floor::FloorArgs),
    /// Playback sessions of a recording: first-frame latency (cache hit or miss), or N
    /// concurrent playbacks held for a window (delivered rate, node CPU).
    Playback(playback::PlaybackArgs),
    /// Connections/s that reach an answered DESCRIBE, with a Digest login or without.
    Handshake(handshake::HandshakeArgs),
    /// N cameras publishing an H.264 file in a loop, recorded by the node: node CPU and
    /// write MB/s.
    Record(record::RecordArgs),
    /// N headless WHEP (WebRTC) viewers of one live camera: delivery and the node's cost.
    Webrtc(webrtc::WebRtcArgs),
}

#[derive(Args, Debug, Clone)]
pub struct LiveArgs {
    /// The path to play, e.g. rtsp://127.0.0.1:8554/live/bench.
    #[arg(long)]
    pub url: String,
    /// Number of concurrent viewers.
    #[arg(long, default_value_t = 100)]
    pub readers: usize,
    #[arg(long, value_enum, default_value_t = ClientTransport::Tcp)]
    pub transport: ClientTransport,
    /// Seconds of the steady measurement window (after ramp-up and warm-up).
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// The node's admin API, for its pid (CPU, RSS) and ingest counters.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub api: String,
    /// The admin APIs of the cluster's other nodes: the table adds each one's CPU over the
    /// window, and how many viewers each node served (the scheduler may redirect them).
    #[arg(long = "cluster-api")]
    pub cluster_api: Vec<String>,
    /// Viewers started per second; 0 starts them all at once.
    #[arg(long, default_value_t = 200.0)]
    pub ramp_per_sec: f64,
    /// Seconds between the last viewer starting and the steady window.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Worker threads of the load generator.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The CA (PEM) that an `rtsps://` URL's certificate is verified against.
    #[arg(long)]
    pub tls_ca: Option<std::path::PathBuf>,
    /// The serving process's pid, for a relay without vigil's admin API (`bench floor`,
    /// GStreamer's rtsp-server, live555's proxy): its CPU and RSS are read from /proc over
    /// the same window as a node's; `--api` is then not asked (no ingest counter).
    #[arg(long)]
    pub pid: Option<u32>,
}

pub fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Live(args) => live(args),
        Bench::Floor(args) => floor::run(args),
        Bench::Playback(args) => playback::run(args),
        Bench::Record(args) => record::run(args),
        Bench::Handshake(args) => handshake::run(args),
        Bench::Webrtc(args) => webrtc::run(args),
    }
}

/// The load generators' runtime. Every simulated client holds a socket (a viewer over UDP
/// three), so the fd limit is raised first.
pub(crate) fn runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    vigil_server::serve::raise_fd_limit();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn live(args: LiveArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.readers > 0, "--readers must be at least 1");
    anyhow::ensure!(args.duration > 0, "--duration must be at least 1 second");
    let runtime = runtime(args.threads)?;
    let report = runtime.block_on(run_live(&args))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        println!("{}", report.table());
    }
    Ok(())
}

/// The node as seen through its admin API.
#[derive(Clone)]
struct NodeProbe {
    /// None for a relay known only by its pid (`--pid`).
    api: Option<String>,
    path: String,
    pid: u32,
}

impl NodeProbe {
    fn connect(api: &str, url: &str) -> anyhow::Result<NodeProbe> {
        let api = api.trim_end_matches('/').to_string();
        let node: serde_json::Value = serde_json::from_str(&get(&api, "/api/node")?)
            .context("unexpected /api/node answer")?;
        let pid = node["process"]["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .context("/api/node has no process.pid")?;
        let path = url::Url::parse(url)
            .map(|u| u.path().trim_matches('/').to_string())
            .context("bad --url")?;
        Ok(NodeProbe {
            api: Some(api),
            path,
            pid,
        })
    }

    /// A relay without an admin API: CPU and RSS from /proc, no ingest counter.
    fn pid_only(pid: u32) -> NodeProbe {
        NodeProbe {
            api: None,
            path: String::new(),
            pid,
        }
    }

    /// Packets the node has ingested on the path so far.
    fn packets_in(&self) -> Option<u64> {
        let api = self.api.as_deref()?;
        let paths: serde_json::Value = serde_json::from_str(&get(api, "/api/paths").ok()?).ok()?;
        paths
            .as_array()?
            .iter()
            .find(|p| p["path"] == self.path.as_str())?["packets_in"]
            .as_u64()
    }

    /// (process stats, packets in, when) — blocking; run off the async workers.
    fn sample(&self) -> Option<(ProcessStats, Option<u64>, Instant)> {
        let packets = self.packets_in();
        let stats = process::process(self.pid)?;
        Some((stats, packets, Instant::now()))
    }
}

/// CPU seconds the whole machine (all cores) has spent busy, and in softirq. Loopback
/// traffic's receive processing runs in softirq context, which Linux may charge to no
/// process, so the per-process figures alone can flatter the node.
fn machine_ticks() -> Option<(f64, f64)> {
    vigil_server::procfs::CpuTimes::read().map(|c| c.seconds())
}

/// `GET api+path` (5 s bound): the answer's body.
pub(crate) fn get(api: &str, path: &str) -> anyhow::Result<String> {
    get_as(api, path, api_token().as_deref())
}

/// [`get`] with `token` (None: no credentials).
pub(crate) fn get_as(api: &str, path: &str, token: Option<&str>) -> anyhow::Result<String> {
    Ok(vigil_testkit::serve::api_get_as(api, path, token)?)
}

/// The admin token the load generator presents to a node's HTTP API (`VIGIL_API_TOKEN`, as
/// `vigil ctl` reads it): a node with a token or users answers nobody without credentials,
/// on loopback too.
pub(crate) fn api_token() -> Option<String> {
    std::env::var("VIGIL_API_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
}

/// A load generator's timeline: clients started over the ramp from `start`, the steady
/// window from `mark` (after the warm-up) to `end`.
pub(crate) struct Schedule {
    pub start: Instant,
    pub ramp: Duration,
    pub mark: Instant,
    pub end: Instant,
}

impl Schedule {
    /// `ramp_per_sec` clients per second (0: all at once), `warmup` and `duration` seconds.
    pub fn new(clients: usize, ramp_per_sec: f64, warmup: u64, duration: u64) -> Schedule {
        let ramp = if ramp_per_sec > 0.0 {
            Duration::from_secs_f64(clients as f64 / ramp_per_sec)
        } else {
            Duration::ZERO
        };
        let start = Instant::now() + Duration::from_millis(50);
        let mark = start + ramp + Duration::from_secs(warmup);
        Schedule {
            start,
            ramp,
            mark,
            end: mark + Duration::from_secs(duration),
        }
    }

    /// When client `i` of `n` starts.
    pub fn start_of(&self, i: usize, n: usize) -> Instant {
        self.start + self.ramp.mul_f64(i as f64 / n as f64)
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

async fn run_live(args: &LiveArgs) -> anyhow::Result<report::Report> {
    let probe = if let Some(pid) = args.pid {
        Some(NodeProbe::pid_only(pid))
    } else {
        let (api, url) = (args.api.clone(), args.url.clone());
        match blocking(move || NodeProbe::connect(&api, &url)).await {
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                eprintln!("vigil bench: no node metrics ({e:#}); measuring the viewers only");
                None
            }
            None => None,
        }
    };
    let n = args.readers;
    let schedule = Schedule::new(n, args.ramp_per_sec, args.warmup, args.duration);
    let Schedule {
        ramp, mark, end, ..
    } = schedule;
    eprintln!(
        "vigil bench: {n} {:?} readers of {} (ramp {:.1} s, warm-up {} s, window {} s)",
        args.transport,
        args.url,
        ramp.as_secs_f64(),
        args.warmup,
        args.duration
    );

    let tls = match &args.tls_ca {
        Some(ca) => Some(vigil_testkit::client::tls_client_config(ca)?),
        None => None,
    };
    let mut readers = Vec::with_capacity(n);
    for i in 0..n {
        let at = schedule.start_of(i, n);
        let url = args.url.clone();
        let mut opts = PlayOptions::new(args.transport);
        opts.tls = tls.clone();
        readers.push(tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            match play(&url, opts).await {
                Ok(player) => {
                    // The node serving it: where its SETUP went (after any redirect).
                    let node = player
                        .tracks()
                        .first()
                        .and_then(|t| url::Url::parse(&t.url).ok())
                        .map(|u| {
                            format!(
                                "{}:{}",
                                u.host_str().unwrap_or("?"),
                                u.port().unwrap_or(554)
                            )
                        })
                        .unwrap_or_default();
                    let stats: Stats = player
                        .collect_stats(tokio::time::sleep_until(end.into()), Some(mark))
                        .await;
                    ReaderOutcome::Played(Box::new(stats), node)
                }
                Err(e) => ReaderOutcome::Failed(e.to_string()),
            }
        }));
    }

    // The cluster's other nodes: their CPU over the same window.
    let others = {
        let (apis, url) = (args.cluster_api.clone(), args.url.clone());
        blocking(move || {
            apis.iter()
                .map(|api| NodeProbe::connect(api, &url).map(|p| (api.clone(), p.pid)))
                .collect::<anyhow::Result<Vec<_>>>()
        })
        .await
        .transpose()?
        .unwrap_or_default()
    };
    let cluster_cpu = tokio::spawn(async move {
        tokio::time::sleep_until(mark.into()).await;
        let first: Vec<_> = others
            .iter()
            .map(|(_, pid)| process::process(*pid))
            .collect();
        tokio::time::sleep_until(end.into()).await;
        let secs = end.duration_since(mark).as_secs_f64();
        others
            .iter()
            .zip(first)
            .map(|((api, pid), a)| {
                let cpu = a
                    .zip(process::process(*pid))
                    .map(|(a, b)| (b.cpu_seconds - a.cpu_seconds) / secs * 100.0);
                (api.clone(), cpu)
            })
            .collect::<Vec<_>>()
    });
    let monitor = probe.clone().map(|probe| {
        tokio::spawn(async move {
            tokio::time::sleep_until(mark.into()).await;
            let p = probe.clone();
            let first = blocking(move || p.sample()).await.flatten();
            let bench_first = process::current();
            let machine_first = machine_ticks();
            let mut rss_max = first.map_or(0, |f| f.0.rss_bytes);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while Instant::now() + Duration::from_millis(500) < end {
                tick.tick().await;
                if let Some(s) = process::process(probe.pid) {
                    rss_max = rss_max.max(s.rss_bytes);
                }
            }
            tokio::time::sleep_until(end.into()).await;
            let p = probe.clone();
            let last = blocking(move || p.sample()).await.flatten();
            let bench_last = process::current();
            let machine = machine_ticks()
                .zip(machine_first)
                .map(|(b, a)| (b.0 - a.0, b.1 - a.1));
            NodeWindow::new(first, last, rss_max, (bench_first, bench_last), machine)
        })
    });

    let mut outcomes = Vec::with_capacity(n);
    for r in readers {
        outcomes.push(
            r.await
                .unwrap_or_else(|e| ReaderOutcome::Failed(format!("task: {e}"))),
        );
    }
    let node = match monitor {
        Some(m) => m.await.ok().flatten(),
        None => None,
    };
    let mut report = report::Report::new(args, outcomes, node, mark, end);
    report.cluster_cpu = cluster_cpu.await.unwrap_or_default();
    Ok(report)
}
