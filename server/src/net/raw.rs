//! The `preserve` source-address mode's sender: the node continuing a migrated session sends its UDP
//! datagrams with the *original* node's address and ports as the source, so clients that
//! filter by source (GStreamer rtspsrc, `ffmpeg -rtsp_flags filter_src`) keep accepting
//! them (ALGORITHMS.md §D.1 step 3, done in software instead of an OpenFlow switch).
//!
//! Hand-written over a raw IPv4 socket (`IPPROTO_RAW`, which implies `IP_HDRINCL`): no crate
//! sends UDP with a foreign source address. It needs CAP_NET_RAW, and the packets reach the
//! client only where the network does not filter spoofed sources (one L2 segment, or one
//! machine's 127.0.0.0/8 as in the tests). Linux fills in the IP checksum and total length;
//! the UDP checksum is left 0 ("none"), which IPv4 allows.

use crate::live::reader::OutPacket;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{SocketAddr, SocketAddrV4};

/// A raw socket that sends UDP datagrams with any IPv4 source.
pub struct RawSender {
    sock: Socket,
}

#[derive(Debug, thiserror::Error)]
pub enum PreserveError {
    #[error(
        "preserve mode needs CAP_NET_RAW (a raw socket to send with the original node's \
         address): {0}; use --mode own"
    )]
    NoCapability(std::io::Error),
    #[error("preserve mode supports IPv4 addresses only ({0})")]
    NotIpv4(SocketAddr),
    /// The original node's address is behind a router from here: a router would carry (or
    /// drop, by reverse-path filtering) packets whose source is not this node's.
    #[error(
        "preserve mode needs the nodes on one L2 segment: {src} is reached through gateway \
         {gateway} from this node, so packets sent with it as their source would cross a \
         router; use --mode own"
    )]
    NotOnLink {
        src: std::net::Ipv4Addr,
        gateway: std::net::Ipv4Addr,
    },
}

impl RawSender {
    /// Opens the raw socket; fails with [`PreserveError::NoCapability`] without CAP_NET_RAW.
    pub fn open() -> Result<RawSender, PreserveError> {
        let sock = Socket::new(
            Domain::IPV4,
            Type::RAW,
            Some(Protocol::from(libc::IPPROTO_RAW)),
        )
        .map_err(PreserveError::NoCapability)?;
        let _ = sock.set_send_buffer_size(4 << 20);
        Ok(RawSender { sock })
    }

    /// Sends one datagram from `src` to `dest`.
    pub fn send(
        &self,
        src: SocketAddr,
        dest: SocketAddr,
        payload: &[u8],
    ) -> std::io::Result<usize> {
        self.send_parts(src, dest, &[], payload)
    }

    /// Sends RTP packets (own header + shared payload each) from `src` to `dest`.
    pub fn send_packets(
        &self,
        src: SocketAddr,
        dest: SocketAddr,
        packets: &[OutPacket],
    ) -> std::io::Result<usize> {
        for p in packets {
            self.send_parts(src, dest, &p.header, &p.payload)?;
        }
        Ok(packets.len())
    }

    fn send_parts(
        &self,
        src: SocketAddr,
        dest: SocketAddr,
        head: &[u8],
        body: &[u8],
    ) -> std::io::Result<usize> {
        let (SocketAddr::V4(s), SocketAddr::V4(d)) = (src, dest) else {
            return Err(std::io::Error::other(PreserveError::NotIpv4(dest)));
        };
        let datagram = udp_datagram(s, d, head, body)
            .ok_or_else(|| std::io::Error::other("datagram too large"))?;
        self.sock.send_to(
            &datagram,
            &SockAddr::from(SocketAddr::V4(SocketAddrV4::new(*d.ip(), 0))),
        )
    }
}

/// IPv4 header + UDP header + `head` + `body`; None when it exceeds 65 535 bytes.
pub fn udp_datagram(
    src: SocketAddrV4,
    dest: SocketAddrV4,
    head: &[u8],
    body: &[u8],
) -> Option<Vec<u8>> {
    let udp_len = u16::try_from(8 + head.len() + body.len()).ok()?;
    let total = u16::try_from(20 + usize::from(udp_len)).ok()?;
    let mut d = Vec::with_capacity(usize::from(total));
    d.extend_from_slice(&[0x45, 0]); // version 4, IHL 5; DSCP 0
    d.extend_from_slice(&total.to_be_bytes());
    d.extend_from_slice(&[0, 0, 0x40, 0]); // id (kernel fills), DF
    d.extend_from_slice(&[64, libc::IPPROTO_UDP as u8, 0, 0]); // TTL, protocol, checksum (kernel)
    d.extend_from_slice(&src.ip().octets());
    d.extend_from_slice(&dest.ip().octets());
    d.extend_from_slice(&src.port().to_be_bytes());
    d.extend_from_slice(&dest.port().to_be_bytes());
    d.extend_from_slice(&udp_len.to_be_bytes());
    d.extend_from_slice(&[0, 0]); // no UDP checksum (IPv4)
    d.extend_from_slice(head);
    d.extend_from_slice(body);
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagram_layout() {
        let s: SocketAddrV4 = "127.0.0.2:5000".parse().unwrap();
        let d: SocketAddrV4 = "127.0.0.1:6000".parse().unwrap();
        let dg = udp_datagram(s, d, &[1, 2], &[3]).unwrap();
        assert_eq!(dg.len(), 20 + 8 + 3);
        assert_eq!(dg[0], 0x45);
        assert_eq!(u16::from_be_bytes([dg[2], dg[3]]), 31);
        assert_eq!(dg[9], 17);
        assert_eq!(&dg[12..16], &[127, 0, 0, 2]);
        assert_eq!(&dg[16..20], &[127, 0, 0, 1]);
        assert_eq!(u16::from_be_bytes([dg[20], dg[21]]), 5000);
        assert_eq!(u16::from_be_bytes([dg[22], dg[23]]), 6000);
        assert_eq!(u16::from_be_bytes([dg[24], dg[25]]), 11);
        assert_eq!(&dg[28..], &[1, 2, 3]);
        assert!(udp_datagram(s, d, &[], &vec![0; 70_000]).is_none());
    }
}
