//! One UDP server port pair per local address for every live UDP viewer of the node
//! (`[rtsp] udp_shared_ports`, on by default), as MediaMTX (`rtpAddress`) and GStreamer's
//! rtsp-server (a media's `multiudpsink`) do.
//!
//! A socket per viewer cost each viewer a send call per frame and the kernel a socket's
//! lookup, checks and cache footprint per call (issue 29 §3). With one pair, a stream's
//! group sends all its UDP viewers' packets in one batch (`net::udp_fanout`), and the
//! viewers' RTCP arrives on one port, told apart by its source (`net::rtcp_routes`): RTCP
//! nobody registered counts as garbage, as RTCP from a stranger to a session's own port
//! did.
//!
//! Publishers and playbacks keep a pair of their own: a publisher's RTP is told apart by
//! its port, and a playback's sender is its own task with its own pacing, nothing to batch.
//! So do SRTP viewers: their RTCP must be decrypted with their key before it says whose it
//! is.

use super::session::Activity;
use crate::net::rtcp_routes::{RouteId, RtcpRoutes};
use crate::net::udp::SendSocket;
use crate::node::Node;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::UdpSocket;

/// The node's shared pairs, by local address (bound on first use).
#[derive(Default)]
pub struct SharedPorts {
    pairs: tokio::sync::Mutex<HashMap<IpAddr, Arc<SharedPair>>>,
}

/// A pair every live UDP viewer on one local address shares.
pub struct SharedPair {
    /// Never connected; a live group batches its sends ([`SendSocket::shared`]).
    pub rtp: Arc<SendSocket>,
    /// The viewers' RTCP comes in here; the node's sender reports go out from it.
    pub rtcp: Arc<UdpSocket>,
    pub rtp_port: u16,
    routes: Mutex<RtcpRoutes<Arc<Activity>>>,
}

impl SharedPorts {
    /// The pair on `ip`, bound from the configured range on the first call (and its RTCP
    /// served until the node shuts down); None when the range has no free pair.
    pub async fn pair(node: &Arc<Node>, ip: IpAddr) -> Option<Arc<SharedPair>> {
        let ports = node
            .extensions
            .get_or_init(|| Arc::new(SharedPorts::default()));
        let mut pairs = ports.pairs.lock().await;
        if let Some(p) = pairs.get(&ip) {
            return Some(p.clone());
        }
        let pair = node.ports.bind_pair(ip).await?;
        let shared = Arc::new(SharedPair {
            rtp: Arc::new(pair.rtp.shared()),
            rtcp: Arc::new(pair.rtcp),
            rtp_port: pair.rtp_port,
            routes: Mutex::new(RtcpRoutes::default()),
        });
        tracing::info!(%ip, port = pair.rtp_port, "live UDP viewers share server ports {}-{}", pair.rtp_port, pair.rtp_port + 1);
        node.tasks.spawn(serve_rtcp(shared.clone(), node.clone()));
        pairs.insert(ip, shared.clone());
        Some(shared)
    }
}

impl SharedPair {
    fn routes(&self) -> MutexGuard<'_, RtcpRoutes<Arc<Activity>>> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// RTCP from `client_rtcp` (or about `ssrc`, the viewer's stream, from its IP) keeps
    /// `activity` alive while the registration is held.
    pub fn register(
        self: &Arc<Self>,
        client_rtcp: SocketAddr,
        ssrc: Option<u32>,
        activity: Arc<Activity>,
    ) -> Registration {
        let id = self.routes().insert(client_rtcp, ssrc, activity);
        Registration {
            pair: self.clone(),
            id,
            client_rtcp,
            ssrc,
        }
    }
}

/// A viewer's place in its pair's RTCP routes, taken out when dropped (the session ends).
pub struct Registration {
    pair: Arc<SharedPair>,
    id: RouteId,
    client_rtcp: SocketAddr,
    ssrc: Option<u32>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.pair
            .routes()
            .remove(self.id, self.client_rtcp, self.ssrc);
    }
}

/// The viewers' RTCP: each datagram counts as its viewer's activity, or as garbage.
async fn serve_rtcp(pair: Arc<SharedPair>, node: Arc<Node>) {
    let mut buf = vec![0u8; 2048];
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            r = pair.rtcp.recv_from(&mut buf) => match r {
                Ok((n, from)) => {
                    let activity = pair.routes().route(from, &buf[..n]).cloned();
                    match activity {
                        Some(a) => a.touch(),
                        None => Node::bump(&node.counters.rtp_garbage),
                    }
                }
                Err(e) => {
                    tracing::debug!("shared RTCP port: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}
