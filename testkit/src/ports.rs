//! Ports for nodes and clients under test or in the lab: each handed out once per process,
//! so a port names one node in a run's logs.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

/// A free TCP port on `ip` (bound then released), never one this process was given before
/// on any address: the OS may hand a just-released ephemeral port out again at once (a
/// node's RTSP and API ports once came out equal), and gives the same port on 127.0.0.1 and
/// 127.0.0.3 (two nodes' logs then named the same port).
pub fn try_free_port(ip: &str) -> std::io::Result<u16> {
    fresh_port("tcp", || {
        Ok(TcpListener::bind((ip, 0))?.local_addr()?.port())
    })
}

/// A free UDP port on `ip` (bound then released), e.g. for a node's gossip socket; never
/// one this process was given before.
pub fn try_free_udp(ip: &str) -> std::io::Result<u16> {
    fresh_port("udp", || {
        Ok(std::net::UdpSocket::bind((ip, 0))?.local_addr()?.port())
    })
}

/// [`try_free_port`] for a test: panics when loopback cannot be bound.
pub fn free_port(ip: &str) -> u16 {
    try_free_port(ip).expect("bind an ephemeral TCP port")
}

/// [`try_free_udp`] for a test: panics when loopback cannot be bound.
pub fn free_udp(ip: &str) -> u16 {
    try_free_udp(ip).expect("bind an ephemeral UDP port")
}

/// A port from `bind` that this process has not handed out before for `proto`, on any
/// address.
fn fresh_port(
    proto: &'static str,
    bind: impl Fn() -> std::io::Result<u16>,
) -> std::io::Result<u16> {
    static GIVEN: std::sync::Mutex<Vec<(&'static str, u16)>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = bind()?;
        if !given.iter().any(|(k, p)| *k == proto && *p == port) {
            given.push((proto, port));
            return Ok(port);
        }
    }
}

/// Disjoint UDP port ranges for nodes started by this test process.
pub fn udp_range() -> (u16, u16) {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let slot = NEXT.fetch_add(1, Ordering::Relaxed);
    // Spread test processes (one per test file) by pid; 200 ports per node.
    let base = 30000 + ((std::process::id() as u16 % 50) * 600) % 24000 + (slot % 3) * 200;
    (base, base + 199)
}

/// An even/odd pair of UDP sockets on 127.0.0.1 for a `client_port=` (RTP, RTCP, RTP port).
pub fn udp_port_pair() -> (std::net::UdpSocket, std::net::UdpSocket, u16) {
    for _ in 0..100 {
        let rtp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind UDP");
        let port = rtp.local_addr().expect("addr").port();
        if !port.is_multiple_of(2) || port == u16::MAX {
            continue;
        }
        if let Ok(rtcp) = std::net::UdpSocket::bind(("127.0.0.1", port + 1)) {
            return (rtp, rtcp, port);
        }
    }
    panic!("no free even/odd UDP port pair");
}
