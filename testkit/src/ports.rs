//! Ports for nodes and clients under test or in the lab: each handed out once per process,
//! so a port names one node in a run's logs.
//!
//! They come from below the kernel's ephemeral range (`ip_local_port_range`, from 32768 by
//! default), not from binding port 0: a port is free when it is handed out, but the node
//! that will use it binds it a moment later, and a port from the ephemeral range could be
//! taken in between by any outgoing connection on the machine (its source port is drawn
//! from that range; a fresh-clone CI run lost a test to it). Below the range only an
//! explicit bind takes a port. Each process starts at its own place in the window (by pid),
//! so test processes running side by side rarely try the same ports.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

/// The lowest port handed out.
const WINDOW_LOW: u16 = 10_000;
/// Above this the node's UDP ranges start ([`udp_range`]).
const WINDOW_HIGH: u16 = 30_000;

/// `[WINDOW_LOW, end)`: up to the ephemeral range's start; `None` when that starts too low
/// for a window (a machine configured so; then port 0 is bound as before).
fn window() -> Option<(u16, u16)> {
    let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let end = start.min(WINDOW_HIGH);
    (end > WINDOW_LOW + 1000).then_some((WINDOW_LOW, end))
}

/// The next port of the window to try, walking it from a place that depends on the pid.
fn next_in(low: u16, end: u16) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(end - low);
    let start = std::process::id().wrapping_mul(7919) % span;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    low + (n % span) as u16
}

/// A port free on `ip` for `bind` (bound then released): from the window when there is one.
fn pick(bind: impl Fn(u16) -> std::io::Result<u16>) -> std::io::Result<u16> {
    let Some((low, end)) = window() else {
        return bind(0);
    };
    let mut last = None;
    for _ in 0..(end - low) {
        match bind(next_in(low, end)) {
            Ok(port) => return Ok(port),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free port below the ephemeral range")))
}

/// A free TCP port on `ip` (bound then released), never one this process was given before
/// on any address (a node's RTSP and API ports must differ; two nodes' logs must not name
/// the same port on 127.0.0.1 and 127.0.0.3).
pub fn try_free_port(ip: &str) -> std::io::Result<u16> {
    fresh_port("tcp", || {
        pick(|p| Ok(TcpListener::bind((ip, p))?.local_addr()?.port()))
    })
}

/// A free UDP port on `ip` (bound then released), e.g. for a node's gossip socket; never
/// one this process was given before.
pub fn try_free_udp(ip: &str) -> std::io::Result<u16> {
    fresh_port("udp", || {
        pick(|p| Ok(std::net::UdpSocket::bind((ip, p))?.local_addr()?.port()))
    })
}

/// [`try_free_port`] for a test: panics when loopback cannot be bound.
pub fn free_port(ip: &str) -> u16 {
    try_free_port(ip).expect("bind a free TCP port")
}

/// [`try_free_udp`] for a test: panics when loopback cannot be bound.
pub fn free_udp(ip: &str) -> u16 {
    try_free_udp(ip).expect("bind a free UDP port")
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports come from the window below the ephemeral range, TCP and UDP alike, and none
    /// twice; a port taken by someone else is passed over.
    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_never_twice() {
        let Some((low, end)) = window() else {
            eprintln!("this machine's ephemeral range leaves no window: port 0 is used");
            return;
        };
        let tcp: Vec<u16> = (0..40).map(|_| free_port("127.0.0.1")).collect();
        let udp: Vec<u16> = (0..40).map(|_| free_udp("127.0.0.1")).collect();
        for p in tcp.iter().chain(&udp) {
            assert!((low..end).contains(p), "{p} outside {low}..{end}");
        }
        let mut all = tcp.clone();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), tcp.len(), "a TCP port handed out twice: {tcp:?}");
    }

    /// A port in use is passed over (the next one of the walk is tried); any other error
    /// ends the search.
    #[test]
    fn a_port_in_use_is_passed_over() {
        if window().is_none() {
            return;
        }
        let tries = std::cell::Cell::new(0);
        let got = pick(|p| {
            tries.set(tries.get() + 1);
            if tries.get() <= 3 {
                Err(std::io::ErrorKind::AddrInUse.into())
            } else {
                Ok(p)
            }
        });
        assert!(got.is_ok());
        assert_eq!(tries.get(), 4);
        let tries = std::cell::Cell::new(0);
        let got = pick(|_| {
            tries.set(tries.get() + 1);
            Err(std::io::ErrorKind::AddrNotAvailable.into())
        });
        assert!(got.is_err());
        assert_eq!(tries.get(), 1);
    }
}
