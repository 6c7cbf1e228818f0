//! chitchat's gossip over UDP with every datagram authenticated by the cluster key.
//!
//! Datagram: `b"VG1"` · timestamp (u64 ms since the epoch, big endian) · HMAC-SHA256(key,
//! timestamp ‖ payload) · payload (a serialized `ChitchatEnvelope`). A datagram with a bad
//! tag, a timestamp outside ±[`WINDOW_MS`] or a malformed payload is dropped and counted, so a
//! process without the key can neither join nor inject state. (Replays of a captured datagram
//! within the window are possible; chitchat's versioned state makes them harmless no-ops.)
//!
//! Fault injection for tests and drills: when the node was started with
//! `VIGIL_FAULT_GOSSIP_PARTITION=<file>`, every datagram in and out is dropped while that
//! file exists — the node is cut off from the gossip (its QUIC calls still work), as a
//! network partition would do. Only whoever starts the process can set it; nothing on the
//! network can turn it on.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use chitchat::transport::{Socket, Transport};
use chitchat::{ChitchatMessage, Deserializable, Serializable};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use vigil_storage::now_ms;

type HmacSha256 = Hmac<Sha256>;

const MAGIC: &[u8; 3] = b"VG1";
const TAG_LEN: usize = 32;
/// Bytes added to every chitchat datagram.
pub const OVERHEAD: usize = MAGIC.len() + 8 + TAG_LEN;
/// Largest accepted clock difference between sender and receiver.
pub const WINDOW_MS: i64 = 30_000;
const MAX_DATAGRAM: usize = 65_507;

/// Counters of the gossip transport (shown by the admin API, used by the benchmark).
#[derive(Debug, Default)]
pub struct GossipStats {
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub datagrams_sent: AtomicU64,
    pub datagrams_received: AtomicU64,
    /// Datagrams dropped for a missing or wrong tag, a stale timestamp or a bad payload.
    pub rejected: AtomicU64,
    /// Datagrams dropped by the partition fault injection (see the module's doc).
    pub partitioned: AtomicU64,
}

/// The environment variable naming the partition fault file.
pub const PARTITION_ENV: &str = "VIGIL_FAULT_GOSSIP_PARTITION";

/// The partition fault: whether its file exists, looked up at most every 100 ms.
struct Partition {
    file: Option<PathBuf>,
    checked: Option<Instant>,
    on: bool,
}

impl Partition {
    fn from_env() -> Partition {
        let file = std::env::var_os(PARTITION_ENV).map(PathBuf::from);
        if let Some(f) = &file {
            tracing::warn!(file = %f.display(), "gossip partition fault injection armed");
        }
        Partition {
            file,
            checked: None,
            on: false,
        }
    }

    fn active(&mut self) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        if self
            .checked
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(100))
        {
            let on = file.exists();
            if on != self.on {
                tracing::warn!(partitioned = on, "gossip partition fault");
            }
            self.on = on;
            self.checked = Some(Instant::now());
        }
        self.on
    }
}

/// The transport: opens [`AuthSocket`]s that share the key and the counters.
pub struct AuthTransport {
    key: Arc<[u8]>,
    pub stats: Arc<GossipStats>,
}

impl AuthTransport {
    pub fn new(key: &[u8], stats: Arc<GossipStats>) -> Self {
        Self {
            key: key.into(),
            stats,
        }
    }
}

#[async_trait]
impl Transport for AuthTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let socket = tokio::net::UdpSocket::bind(listen_addr)
            .await
            .with_context(|| format!("cannot bind the gossip socket {listen_addr}/udp"))?;
        Ok(Box::new(AuthSocket {
            socket,
            key: self.key.clone(),
            stats: self.stats.clone(),
            buf: vec![0; MAX_DATAGRAM].into_boxed_slice(),
            partition: Partition::from_env(),
        }))
    }
}

pub struct AuthSocket {
    socket: tokio::net::UdpSocket,
    key: Arc<[u8]>,
    stats: Arc<GossipStats>,
    buf: Box<[u8]>,
    partition: Partition,
}

fn mac(key: &[u8], ts: &[u8; 8], payload: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length.
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(ts);
    m.update(payload);
    m
}

/// Frames `payload` (a serialized envelope) for sending at `ts_ms`.
pub fn seal(key: &[u8], ts_ms: i64, payload: &[u8]) -> Vec<u8> {
    let ts = (ts_ms as u64).to_be_bytes();
    let tag = mac(key, &ts, payload).finalize().into_bytes();
    let mut out = Vec::with_capacity(OVERHEAD + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&ts);
    out.extend_from_slice(&tag);
    out.extend_from_slice(payload);
    out
}

/// The payload of an authentic datagram received at `now_ms`, or None.
pub fn open<'a>(key: &[u8], now_ms: i64, datagram: &'a [u8]) -> Option<&'a [u8]> {
    if datagram.len() < OVERHEAD || &datagram[..3] != MAGIC {
        return None;
    }
    let ts: [u8; 8] = datagram[3..11].try_into().ok()?;
    let tag = &datagram[11..OVERHEAD];
    let payload = &datagram[OVERHEAD..];
    // Constant-time comparison.
    mac(key, &ts, payload).verify_slice(tag).ok()?;
    let sent = u64::from_be_bytes(ts) as i64;
    ((now_ms - sent).abs() <= WINDOW_MS).then_some(payload)
}

#[async_trait]
impl Socket for AuthSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        if self.partition.active() {
            self.stats.partitioned.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let payload = msg.serialize_to_vec();
        let datagram = seal(&self.key, now_ms(), &payload);
        if datagram.len() > MAX_DATAGRAM {
            tracing::warn!(len = datagram.len(), "gossip datagram too large, not sent");
            return Ok(());
        }
        // A send error to one peer (unreachable, refused) must not stop the gossip.
        match self.socket.send_to(&datagram, to).await {
            Ok(n) => {
                self.stats.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
                self.stats.datagrams_sent.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                tracing::debug!(%to, "gossip send failed: {e}");
                Ok(())
            }
        }
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        loop {
            let (n, from_addr) = match self.socket.recv_from(&mut self.buf).await {
                Ok(x) => x,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e).context("gossip socket failed"),
            };
            if self.partition.active() {
                self.stats.partitioned.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.stats
                .bytes_received
                .fetch_add(n as u64, Ordering::Relaxed);
            self.stats
                .datagrams_received
                .fetch_add(1, Ordering::Relaxed);
            let msg = open(&self.key, now_ms(), &self.buf[..n])
                .and_then(|mut p| ChitchatMessage::deserialize(&mut p).ok());
            match msg {
                Some(msg) => return Ok((from_addr, msg)),
                None => {
                    let total = self.stats.rejected.fetch_add(1, Ordering::Relaxed) + 1;
                    if total.is_power_of_two() {
                        tracing::warn!(from = %from_addr, total, "unauthenticated gossip datagram dropped");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_and_rejections() {
        let key = b"0123456789abcdef";
        let d = seal(key, 1_000_000, b"hello");
        assert_eq!(d.len(), OVERHEAD + 5);
        assert_eq!(open(key, 1_000_000, &d), Some(&b"hello"[..]));
        // Wrong key.
        assert_eq!(open(b"0123456789abcdeX", 1_000_000, &d), None);
        // Tampered payload, tag, timestamp.
        for i in [OVERHEAD, OVERHEAD - 1, 5] {
            let mut t = d.clone();
            t[i] ^= 1;
            assert_eq!(open(key, 1_000_000, &t), None, "flipped byte {i}");
        }
        // Outside the window either way; inside at its edge.
        assert_eq!(open(key, 1_000_000 + WINDOW_MS + 1, &d), None);
        assert_eq!(open(key, 1_000_000 - WINDOW_MS - 1, &d), None);
        assert!(open(key, 1_000_000 + WINDOW_MS, &d).is_some());
        // Too short, bad magic, a bare chitchat payload.
        assert_eq!(open(key, 1_000_000, &d[..OVERHEAD - 1]), None);
        let mut m = d.clone();
        m[0] = b'X';
        assert_eq!(open(key, 1_000_000, &m), None);
        assert_eq!(open(key, 1_000_000, b"junk"), None);
    }

    #[tokio::test]
    async fn sockets_with_the_key_talk_and_others_are_dropped() {
        use chitchat::transport::Transport as _;
        let stats = Arc::new(GossipStats::default());
        let good = AuthTransport::new(b"0123456789abcdef", stats.clone());
        let bad = AuthTransport::new(b"another-key-entirely", Arc::default());
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        // Bind explicit ports: the Socket trait of chitchat 0.10 has no local_addr().
        let port = |s: std::net::UdpSocket| s.local_addr().unwrap();
        let a_addr = port(std::net::UdpSocket::bind(any).unwrap());
        let b_addr = port(std::net::UdpSocket::bind(any).unwrap());
        let mut a = good.open(a_addr).await.unwrap();
        let mut b = good.open(b_addr).await.unwrap();
        let mut intruder = bad.open(any).await.unwrap();
        let env = || ChitchatMessage::BadCluster;
        // The intruder's datagram first, then a genuine one: only the genuine one comes out.
        intruder.send(b_addr, env()).await.unwrap();
        let raw = tokio::net::UdpSocket::bind(any).await.unwrap();
        raw.send_to(&env().serialize_to_vec(), b_addr)
            .await
            .unwrap();
        a.send(b_addr, env()).await.unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), b.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.1, env());
        assert_eq!(got.0, a_addr);
        assert_eq!(stats.rejected.load(Ordering::Relaxed), 2);
    }
}
