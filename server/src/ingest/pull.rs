//! Pulled cameras: the node is the RTSP client (via `retina`), with its own reconnect loop.
//!
//! Readers of a pulled path stay attached across upstream reconnects: each reconnect
//! attaches a new producer epoch to the same hub, and every reader splices the new input
//! onto its own RTP identity (same SSRC, continuous sequence numbers and timestamps),
//! resuming at the first keyframe.

use super::Producer;
use crate::cluster::Cluster;
use crate::live::stream::StreamInfo;
use crate::node::{Node, PathEntry};
use futures::StreamExt;
use retina::client::{
    Credentials, PacketItem, PlayOptions, SessionOptions, SetupOptions, TcpTransportOptions,
    Transport, UdpTransportOptions,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};
use vigil_conf::{PullTransport, Source};
use vigil_proto::rtp::RtpHeader;

/// Start the pull task of a path if it is not running. Called at start-up for always-on
/// cameras and by DESCRIBE for on-demand ones. `cluster`: the node's cluster shell when on.
pub fn ensure_running(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>, path: &Arc<PathEntry>) {
    let Source::Pull { url } = path.source() else {
        return;
    };
    // Cluster: only the node the scheduler bound the camera to pulls it (and, during a
    // camera move, the destination beside it).
    if let Some(cluster) = cluster {
        let camera = path.name.strip_prefix("live/").unwrap_or(&path.name);
        if !cluster.holds(camera) && !cluster.is_incoming(camera) {
            return;
        }
    }
    *path.last_demand.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
    // An asleep camera stays asleep until a viewer asks for it (`wake`).
    if puller.is_some() || path.asleep.load(Ordering::Acquire) {
        return;
    }
    let cancel = node.shutdown.child_token();
    *puller = Some(cancel.clone());
    spawn(node, path, &url, cancel, None);
}

fn spawn(
    node: &Arc<Node>,
    path: &Arc<PathEntry>,
    url: &str,
    cancel: CancellationToken,
    handover: Option<CancellationToken>,
) {
    let transport = path
        .name
        .strip_prefix("live/")
        .and_then(|id| node.camera(id))
        .map_or(PullTransport::Tcp, |c| c.pull_transport);
    let span = info_span!("pull", path = %path.name);
    node.spawn_ingest(
        run(
            node.clone(),
            path.clone(),
            url.to_string(),
            transport,
            cancel,
            handover,
        )
        .instrument(span),
    );
}

/// The camera got bound to this node while this node relays it as an edge (a drain or a
/// death re-bound it to one of the nodes its viewers were on): the pull starts beside the
/// relay, which stops once the pull's producer has attached, so the viewers splice onto
/// the camera's own stream and the recorder, which never records a relay, starts. Without
/// it the bound node kept relaying from the old holder, which — no longer bound — relayed
/// from it in turn: a loop with no source, the camera unrecorded until it was re-bound
/// (38 s in the chaos run's drain). The mirror of `relay::let_go`.
pub fn take_over(node: &Arc<Node>, path: &Arc<PathEntry>) {
    let Source::Pull { url } = path.source() else {
        return;
    };
    let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
    if path.relay_from().is_none() {
        return;
    }
    let relay = puller.take();
    path.set_relay_from(None);
    let cancel = node.shutdown.child_token();
    *puller = Some(cancel.clone());
    drop(puller);
    info!(path = %path.name, "bound here while relaying it: pulling it, the relay ends once the pull plays");
    spawn(node, path, &url, cancel, relay);
}

/// The registry re-pointed the camera (`path`'s source is the new one already): a running
/// pull of this node's starts again on the new URL beside the old one, which ends once the
/// new producer has attached, so the viewers splice onto it at its first keyframe (until
/// then they keep the old picture). Not running: an always-on camera starts, an on-demand
/// one takes the URL at its next viewer. A relay of this node as an edge is left alone
/// (it follows the holder).
pub fn repoint(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>, path: &Arc<PathEntry>) {
    let Source::Pull { url } = path.source() else {
        return;
    };
    let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
    if path.relay_from().is_some() {
        return;
    }
    let Some(previous) = puller.take() else {
        drop(puller);
        if !path.on_demand() {
            ensure_running(node, cluster, path);
        }
        return;
    };
    let cancel = node.shutdown.child_token();
    *puller = Some(cancel.clone());
    drop(puller);
    info!(
        path = %path.name,
        url = %crate::auth::redact_url(&url),
        "re-pointed: reconnecting, viewers go on at the new source's first keyframe"
    );
    spawn(node, path, &url, cancel, Some(previous));
}

/// A viewer asks for `path`: wake it if it sleeps (§B.1), then make sure it pulls.
pub fn wake(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>, path: &Arc<PathEntry>) {
    let was = {
        let _puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
        path.asleep.swap(false, Ordering::AcqRel)
    };
    if was {
        info!(path = %path.name, "waking: a viewer asked for it");
    }
    ensure_running(node, cluster, path);
}

/// Puts an always-on pull camera to sleep (§B.1): marks it asleep and disconnects upstream
/// (its stream ends). False when it was not pulling.
pub fn sleep(path: &PathEntry) -> bool {
    let cancel = {
        let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
        let Some(c) = puller.take() else {
            return false;
        };
        path.asleep.store(true, Ordering::Release);
        c
    };
    cancel.cancel();
    true
}

/// Stop the pull task of a path if one runs (cluster: the camera is bound elsewhere); its
/// stream ends, so readers and the recorder see it go.
pub fn stop(path: &PathEntry) {
    let cancel = {
        let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
        // Not this node's camera any more: nor its sleep.
        path.asleep.store(false, Ordering::Release);
        puller.take()
    };
    if let Some(cancel) = cancel {
        info!(path = %path.name, "pull stopped: the camera is bound to another node");
        cancel.cancel();
    }
}

pub(super) enum Ended {
    Cancelled,
    Idle,
}

async fn run(
    node: Arc<Node>,
    path: Arc<PathEntry>,
    url: String,
    transport: PullTransport,
    cancel: CancellationToken,
    mut handover: Option<CancellationToken>,
) {
    let mut backoff = Backoff::new(&node.config.live);
    let idle_after = path
        .on_demand()
        .then(|| Duration::from_millis(node.config.live.on_demand_grace_ms));
    loop {
        let mut connected = false;
        let attempt = pull_once(
            &node,
            &path,
            Upstream {
                url: &url,
                transport,
                idle_after,
            },
            &cancel,
            &mut connected,
            &mut handover,
        );
        match attempt.await {
            Ok(Ended::Cancelled) => return,
            Ok(Ended::Idle) => {
                info!("no readers for the grace period: disconnected");
                return;
            }
            Err(e) => {
                warn!(url = %crate::auth::redact_url(&url), "upstream failed: {e:#}; retry in {:?}", backoff.next)
            }
        }
        // Between attempts the stream is still live to its readers (they wait for the
        // reconnect); stopped here (the slot emptied by `stop`), it ends, as a stop during
        // a session ends it. A relay that took the slot over (`relay::let_go`) owns the
        // stream now and is left alone.
        if !backoff.wait(connected, &cancel).await {
            let puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
            if puller.is_none() {
                path.stream.finish(path.stream.current_epoch());
            }
            return;
        }
        if idle_after.is_some_and(|grace| idle_for(&path, grace)) {
            *path.puller.lock().unwrap_or_else(|p| p.into_inner()) = None;
            path.stream.finish(path.stream.current_epoch());
            return;
        }
    }
}

/// The capped exponential wait between upstream attempts (`[live] reconnect_min_ms` …
/// `reconnect_max_ms`), shared by pulled cameras and edge relays.
pub(super) struct Backoff {
    min: Duration,
    max: Duration,
    /// The wait before the next attempt.
    pub(super) next: Duration,
}

impl Backoff {
    pub(super) fn new(live: &vigil_conf::LiveConfig) -> Backoff {
        let min = Duration::from_millis(live.reconnect_min_ms);
        Backoff {
            min,
            max: Duration::from_millis(live.reconnect_max_ms).max(min),
            next: min,
        }
    }

    /// Waits before the next attempt (from the minimum again after a session that got as far
    /// as playing: it was healthy); false if `cancel` fired meanwhile.
    pub(super) async fn wait(&mut self, connected: bool, cancel: &CancellationToken) -> bool {
        if connected {
            self.next = self.min;
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(self.next) => {}
        }
        self.next = (self.next * 2).min(self.max);
        true
    }
}

/// A path with no reader and no DESCRIBE for `grace`.
pub(super) fn idle_for(path: &PathEntry, grace: Duration) -> bool {
    path.stream.readers.load(Ordering::Acquire) == 0
        && path
            .last_demand
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
            > grace
}

fn split_credentials(url: &str) -> anyhow::Result<(url::Url, Option<Credentials>)> {
    let mut url = url::Url::parse(url)?;
    let creds = (!url.username().is_empty()).then(|| Credentials {
        username: percent_encoding::percent_decode_str(url.username())
            .decode_utf8_lossy()
            .into_owned(),
        password: percent_encoding::percent_decode_str(url.password().unwrap_or(""))
            .decode_utf8_lossy()
            .into_owned(),
    });
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Ok((url, creds))
}

/// What one upstream session connects to: the source's URL (credentials in it), RTP over
/// TCP or UDP, and how long it may go unread before it is released (on-demand sources).
pub(super) struct Upstream<'a> {
    pub url: &'a str,
    pub transport: PullTransport,
    pub idle_after: Option<Duration>,
}

/// One upstream session: connect, then feed the path's hub until the upstream fails, the
/// task is cancelled, or (with `idle_after`) nobody reads the path for that long.
/// `handover`, the previous source of the path, is cancelled once this one's producer has
/// attached (its readers then splice onto this one, and its end finishes nothing).
pub(super) async fn pull_once(
    node: &Node,
    path: &Arc<PathEntry>,
    upstream: Upstream<'_>,
    cancel: &CancellationToken,
    connected: &mut bool,
    handover: &mut Option<CancellationToken>,
) -> anyhow::Result<Ended> {
    let Upstream {
        url,
        transport,
        idle_after,
    } = upstream;
    let (url, creds) = split_credentials(url)?;
    // rtsps://: retina talks to a loopback end of a TLS connection this node made (and
    // verified); media stays inside it, so over TCP whatever the camera's setting.
    let (bridge, transport) = if url.scheme() == "rtsps" {
        let tls = node.tls_client()?;
        let bridge = tokio::select! {
            _ = cancel.cancelled() => return Ok(Ended::Cancelled),
            b = crate::net::tls_client::Bridge::open(tls, &url, Duration::from_secs(10)) => b?,
        };
        (Some(bridge), PullTransport::Tcp)
    } else {
        (None, transport)
    };
    let retina_url = bridge
        .as_ref()
        .map_or_else(|| url.clone(), |b| b.url.clone());
    let options = SessionOptions::default()
        .creds(creds)
        .user_agent(format!("vigil/{}", env!("CARGO_PKG_VERSION")));
    let connect = async {
        let mut session = retina::client::Session::describe(retina_url, options).await?;
        let text = String::from_utf8_lossy(session.sdp()).into_owned();
        let sdp = vigil_proto::sdp::parse(&text)?;
        let n = session.streams().len();
        anyhow::ensure!(
            sdp.media.len() == n,
            "upstream SDP has {} usable media, retina sees {n} streams",
            sdp.media.len()
        );
        for i in 0..n {
            let t = match transport {
                PullTransport::Tcp => Transport::Tcp(TcpTransportOptions::default()),
                PullTransport::Udp => Transport::Udp(UdpTransportOptions::default()),
            };
            session
                .setup(i, SetupOptions::default().transport(t))
                .await?;
        }
        let playing = session.play(PlayOptions::default()).await?;
        anyhow::Ok((playing, sdp))
    };
    let (mut playing, sdp) = tokio::select! {
        _ = cancel.cancelled() => return Ok(Ended::Cancelled),
        r = tokio::time::timeout(Duration::from_secs(10), connect) => r??,
    };
    info!(url = %crate::cluster::strip_marker(url.as_str()), tracks = sdp.media.len(), "upstream connected");
    *connected = true;
    let mut producer = Producer::attach(path.stream.clone(), StreamInfo::from_sdp(sdp));
    if let Some(previous) = handover.take() {
        previous.cancel();
    }
    let mut idle_check = tokio::time::interval(Duration::from_secs(1));
    // Upstream silence: retina has no read timeout of its own.
    let silence = Duration::from_secs(5);
    let mut last_packet = Instant::now();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => {
                producer.finish();
                return Ok(Ended::Cancelled);
            }
            _ = idle_check.tick() => {
                if let Some(grace) = idle_after {
                    let mut puller = path.puller.lock().unwrap_or_else(|p| p.into_inner());
                    if idle_for(path, grace) {
                        *puller = None;
                        producer.finish();
                        return Ok(Ended::Idle);
                    }
                }
                anyhow::ensure!(last_packet.elapsed() < silence, "no media for {silence:?}");
            }
            item = playing.next() => match item {
                None => anyhow::bail!("upstream closed the session"),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(PacketItem::Rtp(pkt))) => {
                    last_packet = Instant::now();
                    let raw = pkt.header();
                    let header = RtpHeader {
                        marker: pkt.mark(),
                        payload_type: raw.payload_type(),
                        sequence: pkt.sequence_number(),
                        timestamp: raw.timestamp(),
                        ssrc: pkt.ssrc(),
                    };
                    let track = pkt.stream_id();
                    producer.push(track, header, pkt.into_payload_bytes());
                }
                Some(Ok(_)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_taken_out_of_the_url() {
        let (url, creds) = split_credentials("rtsp://admin:se%20cret@127.0.0.1:554/ch1").unwrap();
        assert_eq!(url.as_str(), "rtsp://127.0.0.1:554/ch1");
        let c = creds.unwrap();
        assert_eq!(c.username, "admin");
        assert_eq!(c.password, "se cret");
        assert!(split_credentials("rtsp://127.0.0.1/x").unwrap().1.is_none());
    }
}
