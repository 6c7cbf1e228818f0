//! RTP/RTCP UDP port pairs from the configured range.

use crate::net::udp::SendSocket;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::net::UdpSocket;

/// Hands out (even RTP, odd RTCP) socket pairs, round-robin over the configured range so a
/// just-closed pair is not reused at once (late packets of an old session would land in
/// a new one). A pair whose ports are taken by another process is skipped.
pub struct PortAllocator {
    min: u16,
    pairs: u32,
    next: AtomicU32,
}

/// A bound RTP/RTCP socket pair.
pub struct UdpPair {
    /// Outside the reactor ([`SendSocket`]): a viewer's media leaves by it, and a
    /// publisher's receiver registers it when it starts.
    pub rtp: SendSocket,
    pub rtcp: UdpSocket,
    pub rtp_port: u16,
}

impl PortAllocator {
    pub fn new(min: u16, max: u16) -> PortAllocator {
        let min = min + (min % 2);
        let pairs = u32::from(max.saturating_sub(min)).div_ceil(2);
        PortAllocator {
            min,
            pairs: pairs.max(1),
            next: AtomicU32::new(0),
        }
    }

    /// Bind a pair on `ip`; None when every pair in the range is busy.
    pub async fn bind_pair(&self, ip: IpAddr) -> Option<UdpPair> {
        for _ in 0..self.pairs {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.pairs;
            let Ok(port) = u16::try_from(u32::from(self.min) + 2 * i) else {
                continue;
            };
            let Ok(rtp) = SendSocket::bind(SocketAddr::new(ip, port)) else {
                continue;
            };
            let Ok(rtcp) = UdpSocket::bind(SocketAddr::new(ip, port + 1)).await else {
                continue;
            };
            return Some(UdpPair {
                rtp,
                rtcp,
                rtp_port: port,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pairs_are_even_odd_and_distinct() {
        let a = PortAllocator::new(41000, 41011);
        let ip: IpAddr = [127, 0, 0, 1].into();
        let p1 = a.bind_pair(ip).await.unwrap();
        let p2 = a.bind_pair(ip).await.unwrap();
        assert_eq!(p1.rtp_port % 2, 0);
        assert_ne!(p1.rtp_port, p2.rtp_port);
        assert_eq!(p1.rtcp.local_addr().unwrap().port(), p1.rtp_port + 1);
    }
}
