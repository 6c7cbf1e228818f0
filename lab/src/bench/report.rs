//! Aggregation of the viewers' counters and the node samples into the printed report.

use super::LiveArgs;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Instant;
use vigil_server::procfs::ProcessStats;
use vigil_testkit::client::{ClientTransport, Stats};

pub enum ReaderOutcome {
    /// With the node that served it (`host:port` of its SETUP).
    Played(Box<Stats>, String),
    Failed(String),
}

/// The node over the steady window.
pub struct NodeWindow {
    pub secs: f64,
    /// CPU time of the node over the window, in % of one core.
    pub cpu_pct: f64,
    /// Of that, user space (the rest is the kernel's, including the loopback receivers'
    /// softirq work charged to the sender).
    pub user_pct: f64,
    pub rss_max_bytes: u64,
    /// Packets the node ingested on the path during the window.
    pub ingest_packets: Option<u64>,
    /// The load generator's own CPU over the same window (it shares the machine).
    pub bench_cpu_pct: Option<f64>,
    /// The whole machine over the window, in % of one core: busy, and of that softirq.
    pub machine_busy_pct: Option<f64>,
    pub softirq_pct: Option<f64>,
}

type Sample = (ProcessStats, Option<u64>, Instant);

impl NodeWindow {
    pub fn new(
        first: Option<Sample>,
        last: Option<Sample>,
        rss_max: u64,
        (bench_first, bench_last): (Option<ProcessStats>, Option<ProcessStats>),
        machine: Option<(f64, f64)>,
    ) -> Option<NodeWindow> {
        let (a, b) = (first?, last?);
        let secs = b.2.duration_since(a.2).as_secs_f64().max(0.001);
        let bench_cpu_pct = match (bench_first, bench_last) {
            (Some(x), Some(y)) => Some((y.cpu_seconds - x.cpu_seconds) / secs * 100.0),
            _ => None,
        };
        Some(NodeWindow {
            secs,
            cpu_pct: (b.0.cpu_seconds - a.0.cpu_seconds) / secs * 100.0,
            user_pct: (b.0.user_seconds - a.0.user_seconds) / secs * 100.0,
            rss_max_bytes: rss_max.max(b.0.rss_bytes),
            ingest_packets: match (a.1, b.1) {
                (Some(x), Some(y)) => Some(y.saturating_sub(x)),
                _ => None,
            },
            bench_cpu_pct,
            machine_busy_pct: machine.map(|m| m.0 / secs * 100.0),
            softirq_pct: machine.map(|m| m.1 / secs * 100.0),
        })
    }
}

pub struct Report {
    url: String,
    transport: ClientTransport,
    requested: usize,
    connected: usize,
    failures: BTreeMap<String, usize>,
    window_secs: f64,
    /// Readers that were playing across the whole steady window.
    steady: usize,
    kbps: Vec<f64>,
    /// Per steady reader: packets delivered in the window / packets ingested in the window.
    delivered: Vec<f64>,
    total_packets: u64,
    lost: u64,
    first_packet_ms: Vec<f64>,
    keyframe_first: usize,
    with_video: usize,
    /// Readers that saw their timestamps jump ahead by more than a second (skipped).
    jumped: usize,
    stopped_early: BTreeMap<String, usize>,
    node: Option<NodeWindow>,
    /// Viewers per serving node (`host:port`).
    served_by: BTreeMap<String, usize>,
    /// The cluster's other nodes (`--cluster-api`): CPU over the window, % of one core.
    pub cluster_cpu: Vec<(String, Option<f64>)>,
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn min(v: &[f64]) -> Option<f64> {
    v.iter().copied().reduce(f64::min)
}

impl Report {
    pub fn new(
        args: &LiveArgs,
        outcomes: Vec<ReaderOutcome>,
        node: Option<NodeWindow>,
        mark: Instant,
        end: Instant,
    ) -> Report {
        let window_secs = end.duration_since(mark).as_secs_f64();
        let mut r = Report {
            url: args.url.clone(),
            transport: args.transport,
            requested: args.readers,
            connected: 0,
            failures: BTreeMap::new(),
            window_secs,
            steady: 0,
            kbps: Vec::new(),
            delivered: Vec::new(),
            total_packets: 0,
            lost: 0,
            first_packet_ms: Vec::new(),
            keyframe_first: 0,
            with_video: 0,
            jumped: 0,
            stopped_early: BTreeMap::new(),
            node,
            served_by: BTreeMap::new(),
            cluster_cpu: Vec::new(),
        };
        let ingest = r.node.as_ref().and_then(|n| {
            // Scale the node's sampling interval to the readers' window.
            n.ingest_packets.map(|p| p as f64 * window_secs / n.secs)
        });
        for o in outcomes {
            let s = match o {
                ReaderOutcome::Failed(e) => {
                    *r.failures.entry(e).or_default() += 1;
                    continue;
                }
                ReaderOutcome::Played(s, node) => {
                    *r.served_by.entry(node).or_default() += 1;
                    s
                }
            };
            r.connected += 1;
            r.total_packets += s.packets();
            r.lost += s.lost();
            if let Some(d) = s.first_packet() {
                r.first_packet_ms.push(d.as_secs_f64() * 1000.0);
            }
            if let Some(k) = s.first_video_keyframe() {
                r.with_video += 1;
                r.keyframe_first += usize::from(k);
            }
            if s.tracks.iter().any(|t| t.max_timestamp_step > t.clock_rate) {
                r.jumped += 1;
            }
            if let Some(e) = &s.error {
                *r.stopped_early.entry(e.to_string()).or_default() += 1;
            } else if s.ended {
                *r.stopped_early.entry("stream ended".into()).or_default() += 1;
            }
            let Some(m) = s.at_mark.filter(|_| s.error.is_none() && !s.ended) else {
                continue;
            };
            r.steady += 1;
            let bytes = s.bytes() - m.bytes;
            r.kbps.push(bytes as f64 * 8.0 / window_secs / 1000.0);
            if let Some(ingest) = ingest.filter(|i| *i > 0.0) {
                r.delivered
                    .push((s.packets() - m.packets) as f64 / ingest * 100.0);
            }
        }
        r.first_packet_ms.sort_by(f64::total_cmp);
        r
    }

    fn loss_pct(&self) -> f64 {
        let expected = self.total_packets + self.lost;
        if expected == 0 {
            0.0
        } else {
            self.lost as f64 / expected as f64 * 100.0
        }
    }

    fn per_reader_cpu(&self) -> Option<f64> {
        let n = self.node.as_ref()?;
        (self.steady > 0).then(|| n.cpu_pct / self.steady as f64)
    }

    pub fn table(&self) -> String {
        let opt = |v: Option<f64>, unit: &str, prec: usize| match v {
            Some(v) => format!("{v:.prec$}{unit}"),
            None => "n/a".into(),
        };
        let mut t = Table::new();
        t.load_preset(UTF8_BORDERS_ONLY);
        t.set_header(["", "value"]);
        let mut row = |k: &str, v: String| {
            t.add_row([k.to_string(), v]);
        };
        row("url", self.url.clone());
        row("transport", format!("{:?}", self.transport).to_uppercase());
        row(
            "readers connected / failed",
            format!(
                "{} / {} (of {})",
                self.connected,
                self.requested - self.connected,
                self.requested
            ),
        );
        row(
            "steady window",
            format!("{:.0} s, {} readers", self.window_secs, self.steady),
        );
        row(
            "bitrate per reader mean / min",
            format!(
                "{} / {}",
                opt(mean(&self.kbps), " kbit/s", 0),
                opt(min(&self.kbps), " kbit/s", 0)
            ),
        );
        row(
            "delivered / ingested packets mean / min",
            format!(
                "{} / {}",
                opt(mean(&self.delivered), " %", 2),
                opt(min(&self.delivered), " %", 2)
            ),
        );
        row("total packets received", self.total_packets.to_string());
        row(
            "loss (sequence gaps)",
            format!("{:.3} % ({} packets)", self.loss_pct(), self.lost),
        );
        row(
            "readers with timestamp jumps > 1 s",
            self.jumped.to_string(),
        );
        row(
            "first packet p50 / p99",
            format!(
                "{} / {}",
                opt(percentile(&self.first_packet_ms, 50.0), " ms", 1),
                opt(percentile(&self.first_packet_ms, 99.0), " ms", 1)
            ),
        );
        row(
            "first video packet a keyframe",
            format!("{} of {}", self.keyframe_first, self.with_video),
        );
        let n = self.node.as_ref();
        row(
            "node CPU (% of one core)",
            opt(n.map(|n| n.cpu_pct), " %", 1),
        );
        row("node CPU per reader", opt(self.per_reader_cpu(), " %", 4));
        for (api, cpu) in &self.cluster_cpu {
            row(&format!("node {api} CPU"), opt(*cpu, " %", 1));
        }
        if self.served_by.len() > 1 {
            for (node, n) in &self.served_by {
                row(&format!("viewers served by {node}"), n.to_string());
            }
        }
        row(
            "node RSS max",
            opt(n.map(|n| n.rss_max_bytes as f64 / 1048576.0), " MiB", 1),
        );
        row(
            "bench client CPU (same machine)",
            opt(n.and_then(|n| n.bench_cpu_pct), " %", 1),
        );
        row(
            "machine busy, all cores (of it softirq)",
            format!(
                "{} ({})",
                opt(n.and_then(|n| n.machine_busy_pct), " %", 1),
                opt(n.and_then(|n| n.softirq_pct), " %", 1)
            ),
        );
        for (e, c) in &self.failures {
            row("failed", format!("{c} × {e}"));
        }
        for (e, c) in &self.stopped_early {
            row("stopped early", format!("{c} × {e}"));
        }
        t.to_string()
    }

    pub fn to_json(&self) -> serde_json::Value {
        let n = self.node.as_ref();
        json!({
            "url": self.url,
            "transport": format!("{:?}", self.transport).to_lowercase(),
            "readers": self.requested,
            "connected": self.connected,
            "failed": self.requested - self.connected,
            "failures": self.failures,
            "window_secs": self.window_secs,
            "steady_readers": self.steady,
            "bitrate_kbps_mean": mean(&self.kbps),
            "bitrate_kbps_min": min(&self.kbps),
            "delivered_pct_mean": mean(&self.delivered),
            "delivered_pct_min": min(&self.delivered),
            "total_packets": self.total_packets,
            "lost_packets": self.lost,
            "loss_pct": self.loss_pct(),
            "readers_with_timestamp_jumps": self.jumped,
            "first_packet_ms_p50": percentile(&self.first_packet_ms, 50.0),
            "first_packet_ms_p99": percentile(&self.first_packet_ms, 99.0),
            "first_video_packet_keyframe": self.keyframe_first,
            "readers_with_video": self.with_video,
            "node_cpu_pct": n.map(|n| n.cpu_pct),
            "node_user_cpu_pct": n.map(|n| n.user_pct),
            "node_cpu_pct_per_reader": self.per_reader_cpu(),
            "node_rss_max_bytes": n.map(|n| n.rss_max_bytes),
            "bench_cpu_pct": n.and_then(|n| n.bench_cpu_pct),
            "machine_busy_pct": n.and_then(|n| n.machine_busy_pct),
            "softirq_pct": n.and_then(|n| n.softirq_pct),
            "stopped_early": self.stopped_early,
            "served_by": self.served_by,
            "cluster_cpu_pct": self.cluster_cpu.iter().map(|(api, c)| json!({"api": api, "cpu_pct": c})).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_ranks() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
