//! Local RTP/RTCP port pairs of a UDP viewer.

use super::ClientError;
use std::net::{IpAddr, SocketAddr, UdpSocket as StdUdpSocket};
use std::task::Poll;
use tokio::net::UdpSocket;

/// A bound (even RTP, odd RTCP) pair, not yet registered with tokio.
pub(crate) struct Pair {
    pub rtp: StdUdpSocket,
    pub rtcp: StdUdpSocket,
    pub rtp_port: u16,
}

/// Attempts before giving up: each one asks the OS for an ephemeral port and tries its
/// even/odd partner, which another socket may hold.
const ATTEMPTS: usize = 128;

/// Bind an even/odd pair on `ip` (RFC 3550 §11: RTP even, RTCP the next port) with
/// `recv_buffer` bytes of SO_RCVBUF each. The OS picks ports from its ephemeral range, so a
/// thousand viewers in one process never need a configured range.
pub(crate) fn bind_pair(ip: IpAddr, recv_buffer: u32) -> Result<Pair, ClientError> {
    let mut last = std::io::Error::from(std::io::ErrorKind::AddrInUse);
    for _ in 0..ATTEMPTS {
        let first = StdUdpSocket::bind(SocketAddr::new(ip, 0)).map_err(ClientError::NoUdpPorts)?;
        let port = first.local_addr()?.port();
        let (even, partner) = if port % 2 == 0 {
            (port, port.checked_add(1))
        } else {
            (port - 1, Some(port - 1))
        };
        let Some(partner) = partner else { continue };
        let other = match StdUdpSocket::bind(SocketAddr::new(ip, partner)) {
            Ok(s) => s,
            Err(e) => {
                last = e;
                continue;
            }
        };
        let (rtp, rtcp) = if port == even {
            (first, other)
        } else {
            (other, first)
        };
        for s in [&rtp, &rtcp] {
            s.set_nonblocking(true)?;
            // Best effort: the kernel caps it at net.core.rmem_max.
            let _ = socket2::SockRef::from(s).set_recv_buffer_size(recv_buffer as usize);
        }
        return Ok(Pair {
            rtp,
            rtcp,
            rtp_port: even,
        });
    }
    Err(ClientError::NoUdpPorts(last))
}

/// Register a socket with the running tokio reactor.
pub(crate) fn register(s: StdUdpSocket) -> Result<UdpSocket, ClientError> {
    Ok(UdpSocket::from_std(s)?)
}

/// A set-up track's sockets once playing.
pub(crate) struct UdpTrack {
    pub track: usize,
    pub rtp: UdpSocket,
    pub rtcp: UdpSocket,
    pub server_rtcp: Option<SocketAddr>,
}

/// Resolves with (index, is RTP) of a UDP socket that has a datagram; never for TCP.
pub(crate) async fn udp_ready(udp: &[UdpTrack]) -> (usize, bool) {
    std::future::poll_fn(|cx| {
        for (i, t) in udp.iter().enumerate() {
            if t.rtp.poll_recv_ready(cx).is_ready() {
                return Poll::Ready((i, true));
            }
            if t.rtcp.poll_recv_ready(cx).is_ready() {
                return Poll::Ready((i, false));
            }
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_even_and_adjacent() {
        let ip: IpAddr = [127, 0, 0, 1].into();
        let a = bind_pair(ip, 65536).unwrap();
        let b = bind_pair(ip, 65536).unwrap();
        assert_eq!(a.rtp_port % 2, 0);
        assert_eq!(a.rtcp.local_addr().unwrap().port(), a.rtp_port + 1);
        assert_ne!(a.rtp_port, b.rtp_port);
    }
}
