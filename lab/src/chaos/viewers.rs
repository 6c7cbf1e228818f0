//! The chaos run's viewers: light clients on the viewers' host, each asking a node drawn
//! from its own seeded RNG, playing until the session fails, then asking again. Each one
//! logs what the checker needs: its spans (node, first and last packet, silences) and the
//! requests that did not end in media.

use super::checker::{Refusal, Span};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vigil_testkit::client::{play, ClientError, ClientTransport, PlayOptions};

/// What every viewer reads: the nodes (id, RTSP base `rtsp://ip:port`), which are down
/// now (the nemesis writes it), when the run ends, and the cameras.
pub struct Shared {
    pub nodes: Vec<(String, String)>,
    pub down: Mutex<BTreeMap<String, bool>>,
    pub cameras: Vec<String>,
    pub end: Instant,
    /// Wall clock at `epoch` (ms), to write times as the checker's ms.
    pub epoch: Instant,
    pub epoch_ms: i64,
    /// Recordings exist from here (ms): playback viewers start after it.
    pub recorded_from_ms: i64,
}

impl Shared {
    fn ms(&self, t: Instant) -> i64 {
        self.epoch_ms + t.saturating_duration_since(self.epoch).as_millis() as i64
    }

    pub(super) fn is_down(&self, node: &str) -> bool {
        self.down
            .lock()
            .map(|d| d.get(node).copied().unwrap_or(false))
            .unwrap_or(false)
    }

    fn node_of_url(&self, url: &str) -> Option<String> {
        self.nodes
            .iter()
            .find(|(_, base)| url.starts_with(base.as_str()))
            .map(|(id, _)| id.clone())
    }
}

#[derive(Default)]
pub struct Log {
    pub spans: Vec<Span>,
    pub refusals: Vec<Refusal>,
}

/// A silence longer than this inside a span is logged (the checker decides what counts).
const SILENCE: Duration = Duration::from_millis(500);

/// Viewer `id`: live when `live`, else playback sessions of 15–30 s each.
pub async fn viewer(id: usize, live: bool, tcp: bool, seed: u64, s: Arc<Shared>) -> Log {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9E37));
    let mut log = Log::default();
    let transport = if tcp {
        ClientTransport::Tcp
    } else {
        ClientTransport::Udp
    };
    while Instant::now() < s.end {
        let (asked, base) = s.nodes[rng.gen_range(0..s.nodes.len())].clone();
        let camera = s.cameras[rng.gen_range(0..s.cameras.len())].clone();
        let path = if live {
            format!("live/{camera}")
        } else {
            let now = s.ms(Instant::now());
            let latest = (now - 30_000).max(s.recorded_from_ms);
            let at = rng.gen_range(s.recorded_from_ms..=latest);
            format!("playback/{camera}?start={}", vigil_proto::rtsp::rfc3339(at))
        };
        let mut opts = PlayOptions::new(transport);
        opts.read_timeout = Duration::from_secs(3);
        if !live {
            opts.play = vigil_testkit::client::PlayRequest::new();
        }
        let asked_at = s.ms(Instant::now());
        let mut player = match play(&format!("{base}/{path}"), opts).await {
            Ok(p) => p,
            Err(e) => {
                let sent_to = match &e {
                    ClientError::Connect { addr, .. } => s
                        .node_of_url(&format!("rtsp://{addr}"))
                        .filter(|n| *n != asked),
                    _ => None,
                };
                let dead = s.is_down(sent_to.as_deref().unwrap_or(&asked));
                log.refusals.push(Refusal {
                    at_ms: asked_at,
                    asked,
                    sent_to,
                    dead,
                    reason: e.to_string(),
                });
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        let node = s.node_of_url(player.url()).unwrap_or(asked);
        let until = if live {
            s.end
        } else {
            (Instant::now() + Duration::from_secs(rng.gen_range(15..=30))).min(s.end)
        };
        let (mut first, mut last, mut gaps) = (None, None::<Instant>, Vec::new());
        let mut voluntary = false;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                voluntary = true;
                break;
            }
            match tokio::time::timeout(left, player.next_packet()).await {
                Err(_) => {
                    voluntary = true;
                    break;
                }
                Ok(Ok(Some(pkt))) => {
                    if let Some(prev) = last {
                        if pkt.at.duration_since(prev) > SILENCE {
                            gaps.push((s.ms(prev), s.ms(pkt.at)));
                        }
                    }
                    first.get_or_insert(pkt.at);
                    last = Some(pkt.at);
                }
                Ok(_) => break,
            }
        }
        if voluntary {
            let _ = tokio::time::timeout(Duration::from_secs(2), player.teardown()).await;
        }
        if let (Some(first), Some(last)) = (first, last) {
            log.spans.push(Span {
                viewer: id,
                path: path.split('?').next().unwrap_or(&path).to_string(),
                node,
                first_ms: s.ms(first),
                last_ms: s.ms(last),
                gaps,
                voluntary: voluntary || (!live && Instant::now() >= s.end),
            });
        }
    }
    log
}
