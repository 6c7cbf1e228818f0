//! `vigil bench webrtc`: N headless WHEP viewers in this process (str0m as the client: full
//! ICE, DTLS, SRTP; RTP counted, not decoded) and what they cost the node. Beside
//! `vigil bench live --transport udp` on the same camera it gives the node's CPU per
//! WebRTC viewer against per RTSP/UDP viewer (docs/BENCHMARKS.md "WebRTC").

use super::{blocking, runtime, NodeProbe, Schedule};
use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use str0m::change::SdpAnswer;
use str0m::media::{Direction, MediaKind};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, Input, Output, Rtc};
use tokio::net::UdpSocket;
use vigil_server::procfs;

#[derive(Args, Debug, Clone)]
pub struct WebRtcArgs {
    /// The WHEP URL, e.g. http://127.0.0.1:8080/whep/live/bench.
    #[arg(long)]
    pub url: String,
    /// Concurrent WebRTC viewers.
    #[arg(long, default_value_t = 100)]
    pub peers: usize,
    /// Seconds of the steady window (after ramp-up and warm-up).
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// The node's admin API, for its pid.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub api: String,
    /// Viewers started per second; 0 starts them all at once.
    #[arg(long, default_value_t = 50.0)]
    pub ramp_per_sec: f64,
    /// Seconds between the last viewer starting and the window.
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

/// What one viewer saw.
#[derive(Default)]
struct Seen {
    connected: bool,
    first_packet: Option<Duration>,
    /// RTP packets and bytes received inside the window.
    packets: u64,
    bytes: u64,
    /// Lowest and highest extended sequence number inside the window.
    seq: Option<(u64, u64)>,
    error: Option<String>,
}

pub fn run(args: WebRtcArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.peers > 0, "--peers must be at least 1");
    str0m::crypto::from_feature_flags().install_process_default();
    let rt = runtime(args.threads)?;
    rt.block_on(bench(args))
}

async fn bench(args: WebRtcArgs) -> anyhow::Result<()> {
    let (api, url) = (args.api.clone(), args.url.clone());
    let pid = blocking(move || NodeProbe::connect(&api, &url))
        .await
        .context("the node's API")??
        .pid;
    let schedule = Schedule::new(args.peers, args.ramp_per_sec, args.warmup, args.duration);
    let Schedule {
        ramp, mark, end, ..
    } = schedule;
    eprintln!(
        "vigil bench webrtc: {} viewers of {} (ramp {:.1} s, warm-up {} s, window {} s)",
        args.peers,
        args.url,
        ramp.as_secs_f64(),
        args.warmup,
        args.duration
    );
    let mut peers = Vec::new();
    for i in 0..args.peers {
        let at = schedule.start_of(i, args.peers);
        let url = args.url.clone();
        peers.push(tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            let mut seen = Seen::default();
            if let Err(e) = viewer(&url, mark, end, &mut seen).await {
                seen.error = Some(format!("{e:#}"));
            }
            seen
        }));
    }
    tokio::time::sleep_until(mark.into()).await;
    let first = procfs::process(pid);
    let bench_first = procfs::current();
    tokio::time::sleep_until(end.into()).await;
    let last = procfs::process(pid);
    let bench_last = procfs::current();
    let mut all = Vec::new();
    for p in peers {
        all.push(p.await.unwrap_or_default());
    }
    let secs = end.duration_since(mark).as_secs_f64();
    let cpu = |a: Option<procfs::ProcessStats>, b: Option<procfs::ProcessStats>| {
        a.zip(b)
            .map(|(a, b)| (b.cpu_seconds - a.cpu_seconds) / secs * 100.0)
    };
    let node_cpu = cpu(first, last);
    let connected = all.iter().filter(|s| s.connected).count();
    let mut firsts: Vec<f64> = all
        .iter()
        .filter_map(|s| s.first_packet.map(|d| d.as_secs_f64() * 1000.0))
        .collect();
    firsts.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        firsts
            .get(((firsts.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    let (packets, bytes): (u64, u64) = all
        .iter()
        .fold((0, 0), |(p, b), s| (p + s.packets, b + s.bytes));
    let lost: u64 = all
        .iter()
        .filter_map(|s| {
            s.seq
                .map(|(lo, hi)| (hi - lo + 1).saturating_sub(s.packets))
        })
        .sum();
    let errors: Vec<&String> = all.iter().filter_map(|s| s.error.as_ref()).collect();
    println!("| viewers | connected | first packet p50 / p95 | kbit/s per viewer | lost | node CPU | per viewer | node RSS | load generator CPU |");
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {connected} | {:.0} / {:.0} ms | {:.0} | {lost} of {} | {:.1} % | {:.3} % | {:.1} MiB | {:.1} % |",
        args.peers,
        pct(0.5),
        pct(0.95),
        bytes as f64 * 8.0 / 1000.0 / secs / connected.max(1) as f64,
        packets + lost,
        node_cpu.unwrap_or(f64::NAN),
        node_cpu.unwrap_or(f64::NAN) / connected.max(1) as f64,
        last.map_or(f64::NAN, |s| s.rss_bytes as f64 / 1048576.0),
        cpu(bench_first, bench_last).unwrap_or(f64::NAN),
    );
    if let Some(e) = errors.first() {
        eprintln!("{} viewers failed; the first: {e}", errors.len());
    }
    Ok(())
}

/// One WHEP viewer from now until `end`, counting what arrives between `mark` and `end`.
async fn viewer(url: &str, mark: Instant, end: Instant, seen: &mut Seen) -> anyhow::Result<()> {
    let began = Instant::now();
    let sock = UdpSocket::bind("127.0.0.1:0").await?;
    let local = sock.local_addr()?;
    let mut rtc = Rtc::builder()
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_h264(true)
        .build(Instant::now());
    rtc.add_local_candidate(Candidate::host(local, "udp")?);
    let mut change = rtc.sdp_api();
    change.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    let (offer, pending) = change.apply().context("no offer to make")?;
    let (offer, target) = (offer.to_sdp_string(), url.to_string());
    let (answer, resource) = blocking(move || post_offer(&target, &offer))
        .await
        .context("the offer's task")??;
    rtc.sdp_api()
        .accept_answer(pending, SdpAnswer::from_sdp_string(&answer)?)?;
    let mut buf = vec![0u8; 2048];
    loop {
        let wake = loop {
            match rtc.poll_output()? {
                Output::Timeout(t) => break t,
                Output::Transmit(t) => {
                    let _ = sock.send_to(&t.contents, t.destination).await;
                }
                Output::Event(Event::Connected) => seen.connected = true,
                Output::Event(Event::RtpPacket(p)) => {
                    seen.first_packet.get_or_insert_with(|| began.elapsed());
                    let now = Instant::now();
                    if now >= mark && now < end {
                        seen.packets += 1;
                        seen.bytes += p.payload.len() as u64 + 12;
                        let s = *p.seq_no;
                        seen.seq = Some(match seen.seq {
                            None => (s, s),
                            Some((lo, hi)) => (lo.min(s), hi.max(s)),
                        });
                    }
                }
                Output::Event(_) => {}
            }
        };
        if Instant::now() >= end {
            break;
        }
        let wake = wake.min(end);
        tokio::select! {
            r = sock.recv_from(&mut buf) => {
                let (n, from): (usize, SocketAddr) = r?;
                if let Ok(recv) = Receive::new(Protocol::Udp, from, local, &buf[..n]) {
                    rtc.handle_input(Input::Receive(Instant::now(), recv))?;
                }
            }
            _ = tokio::time::sleep_until(wake.into()) => {
                rtc.handle_input(Input::Timeout(Instant::now()))?;
            }
        }
    }
    let _ = blocking(move || {
        let mut req = ureq::delete(&resource);
        if let Some(t) = super::api_token() {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        req.config()
            .timeout_global(Some(Duration::from_secs(5)))
            .http_status_as_error(false)
            .build()
            .call()
    })
    .await;
    Ok(())
}

/// POSTs the offer: the answer and the resource's absolute URL.
fn post_offer(url: &str, offer: &str) -> anyhow::Result<(String, String)> {
    let mut req = ureq::post(url);
    if let Some(t) = super::api_token() {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req
        .config()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .header("Content-Type", "application/sdp")
        .send(offer)?;
    let status = resp.status().as_u16();
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = resp.body_mut().read_to_string()?;
    anyhow::ensure!(status == 201, "WHEP answered {status}: {}", body.trim());
    let base = url::Url::parse(url)?;
    Ok((body, base.join(&location)?.to_string()))
}
