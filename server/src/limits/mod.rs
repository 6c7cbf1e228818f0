//! What one client can take from a node: connections (in total and per address), sessions
//! per address, DESCRIBEs per address, requests per connection, and how long a request may
//! take to arrive (slowloris). Each refusal is counted (`vigil_limit_refusals_total`).

mod rate;

pub use rate::{RateLimiter, TokenBucket};

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Refusals per limit, exported to `/metrics`.
#[derive(Debug, Default)]
pub struct LimitStats {
    pub connections: AtomicU64,
    pub connections_per_address: AtomicU64,
    pub sessions_per_address: AtomicU64,
    /// Sessions refused past `[limits] max_sessions_per_user`.
    pub sessions_per_user: AtomicU64,
    pub describe_rate: AtomicU64,
    pub request_rate: AtomicU64,
    pub request_deadline: AtomicU64,
    /// ANNOUNCEs that held a camera past `[limits] announce_timeout_ms` without RECORD.
    pub announce_timeout: AtomicU64,
    /// The admin API's connection limits (`[http]`).
    pub http_connections: AtomicU64,
    pub http_connections_per_address: AtomicU64,
    /// TLS handshakes past `[tls] handshakes_per_sec` from one address (RTSPS and HTTPS).
    pub tls_handshakes: AtomicU64,
}

impl LimitStats {
    pub fn all(&self) -> [(&'static str, &AtomicU64); 11] {
        [
            ("connections", &self.connections),
            ("connections_per_address", &self.connections_per_address),
            ("sessions_per_address", &self.sessions_per_address),
            ("sessions_per_user", &self.sessions_per_user),
            ("describe_rate", &self.describe_rate),
            ("request_rate", &self.request_rate),
            ("request_deadline", &self.request_deadline),
            ("announce_timeout", &self.announce_timeout),
            ("http_connections", &self.http_connections),
            (
                "http_connections_per_address",
                &self.http_connections_per_address,
            ),
            ("tls_handshakes", &self.tls_handshakes),
        ]
    }

    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Open connections of one listener (RTSP, the admin API), in total and per client address.
#[derive(Debug, Default)]
pub struct Connections {
    inner: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// The key a client address is counted under by every per-address limit (connections,
/// sessions, request rates, failed logins): IPv4 as it is (an IPv4-mapped IPv6 address as
/// its IPv4), IPv6 by its /64 — the block one subscriber is handed, so rotating addresses
/// inside it buys nothing (issue 44, M10).
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Which connection limit refused a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Total,
    PerAddress,
}

/// One open connection; dropping it releases its place.
#[derive(Debug)]
pub struct ConnectionSlot {
    owner: Arc<Connections>,
    ip: IpAddr,
}

impl Connections {
    /// Take a place for a connection from `ip`, within `max_total` and `max_per_address`.
    pub fn open(
        self: &Arc<Self>,
        ip: IpAddr,
        max_total: usize,
        max_per_address: usize,
    ) -> Result<ConnectionSlot, Refused> {
        let ip = client_key(ip);
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 >= max_total {
            return Err(Refused::Total);
        }
        let n = g.1.entry(ip).or_insert(0);
        if *n >= max_per_address {
            return Err(Refused::PerAddress);
        }
        *n += 1;
        g.0 += 1;
        Ok(ConnectionSlot {
            owner: self.clone(),
            ip,
        })
    }

    /// [`Connections::open`] for a connection just accepted from `peer`; a refusal is
    /// counted in `refusals` (total, per address), and the connection is to be closed.
    pub fn admit(
        self: &Arc<Self>,
        peer: std::net::SocketAddr,
        max_total: usize,
        max_per_address: usize,
        refusals: [&AtomicU64; 2],
    ) -> Option<ConnectionSlot> {
        match self.open(peer.ip(), max_total, max_per_address) {
            Ok(slot) => Some(slot),
            Err(refused) => {
                let [total, per_address] = refusals;
                LimitStats::bump(match refused {
                    Refused::Total => total,
                    Refused::PerAddress => per_address,
                });
                tracing::debug!(%peer, ?refused, "connection refused by a limit");
                None
            }
        }
    }

    pub fn open_count(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut g = self.owner.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = g.0.saturating_sub(1);
        if let Some(n) = g.1.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                g.1.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 44, M10: addresses rotated inside one IPv6 /64 are one client to every
    /// per-address limit; the next /64 is another.
    #[test]
    fn an_ipv6_slash_64_is_one_client() {
        let c = Arc::new(Connections::default());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let _a = c.open(ip("2001:db8:0:1::1"), 10, 2).unwrap();
        let _b = c.open(ip("2001:db8:0:1::ffff:2"), 10, 2).unwrap();
        assert_eq!(
            c.open(ip("2001:db8:0:1:abcd::3"), 10, 2).unwrap_err(),
            Refused::PerAddress
        );
        assert!(c.open(ip("2001:db8:0:2::1"), 10, 2).is_ok());
        assert_eq!(client_key(ip("::ffff:198.18.0.7")), ip("198.18.0.7"));
        let t0 = std::time::Instant::now();
        let mut r = rate::RateLimiter::new(1.0, 1);
        assert!(r.take(ip("2001:db8:0:1::1"), t0).is_ok());
        assert!(r.take(ip("2001:db8:0:1::2"), t0).is_err());
    }

    #[test]
    fn total_and_per_address_places_are_released_on_drop() {
        let c = Arc::new(Connections::default());
        let a: IpAddr = "127.0.0.5".parse().unwrap();
        let b: IpAddr = "127.0.0.6".parse().unwrap();
        let s1 = c.open(a, 3, 2).unwrap();
        let _s2 = c.open(a, 3, 2).unwrap();
        assert_eq!(c.open(a, 3, 2).unwrap_err(), Refused::PerAddress);
        let _s3 = c.open(b, 3, 2).unwrap();
        assert_eq!(c.open(b, 3, 2).unwrap_err(), Refused::Total);
        drop(s1);
        let _s4 = c.open(a, 3, 2).unwrap();
        assert_eq!(c.open_count(), 3);
    }
}
