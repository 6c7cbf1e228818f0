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
    pub fn all(&self) -> [(&'static str, &AtomicU64); 10] {
        [
            ("connections", &self.connections),
            ("connections_per_address", &self.connections_per_address),
            ("sessions_per_address", &self.sessions_per_address),
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
