//! What a live group sends its UDP viewers from the socket they share, in as few
//! `sendmmsg(2)` calls as the kernel allows (issue 29 §3).
//!
//! With a socket per viewer, each viewer cost a call per frame, and each call the
//! descriptor's lookup, the socket's checks and the first touch of that socket's kernel
//! memory: at 1000 viewers the floor sending the same frames that way spent ≈ 1.25 × the
//! CPU of one socket (docs/BENCHMARKS.md, "One server port pair for every UDP viewer").
//! Here a walk of the group queues each viewer's packets (its own headers, the payloads all
//! viewers share) and sends them at the end of the walk, up to 1024 messages a call, each
//! message one viewer's run of equal-sized packets as a UDP GSO super-packet
//! ([`super::udp`]).
//!
//! The socket is never connected, so each message names its viewer. One viewer whose
//! address the kernel refuses (no route, a firewall's EPERM) costs that message only: the
//! call is made again from the next one.

use super::udp::{message, plan_messages, push_iovecs, send_batch, CmsgBuf, SendSocket, GSO_WORKS};
use crate::live::reader::OutPacket;
use socket2::SockAddr;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Messages per `sendmmsg` (Linux's UIO_MAXIOV bounds the vector at 1024).
const CALL_MAX: usize = 1024;

/// Packets for many viewers from one shared socket, queued until [`Fanout::flush`].
#[derive(Default)]
pub struct Fanout {
    sock: Option<Arc<SendSocket>>,
    packets: Vec<OutPacket>,
    /// Per viewer: its address and its packets' range in `packets`.
    dests: Vec<(SocketAddr, usize, usize)>,
}

/// Why a pass of `send_from` stopped.
enum Stop {
    Done,
    /// The socket's buffer is full: wait, then go on from message `.0`.
    Full(usize),
    /// GSO refused at message `.0`: what is left goes without it.
    NoGso(usize),
}

impl Fanout {
    pub fn is_empty(&self) -> bool {
        self.dests.is_empty()
    }

    /// Queues `packets` for `dest` on `sock`. The batch holds one socket's packets: those
    /// of another (a node with viewers on two local addresses) are sent first.
    pub async fn push(
        &mut self,
        sock: &Arc<SendSocket>,
        dest: SocketAddr,
        packets: impl Iterator<Item = OutPacket>,
    ) {
        if self.sock.as_ref().is_some_and(|s| !Arc::ptr_eq(s, sock)) {
            self.flush().await;
        }
        if self.sock.is_none() {
            self.sock = Some(sock.clone());
        }
        let start = self.packets.len();
        self.packets.extend(packets);
        if self.packets.len() > start {
            self.dests.push((dest, start, self.packets.len()));
        }
    }

    /// Sends everything queued, waiting while the socket's buffer is full; returns the
    /// packets sent. The batch is empty afterwards.
    pub async fn flush(&mut self) -> usize {
        let Some(sock) = self.sock.take() else {
            return 0;
        };
        let mut from = 0;
        let mut sent = 0;
        // Read once: the plan, and so a message's index, must not change across a wait
        // (another group may clear the flag meanwhile; a refusal here is `NoGso`).
        let gso = GSO_WORKS.load(Ordering::Relaxed);
        loop {
            let (stop, n) = self.send_from(&sock, from, gso);
            sent += n;
            match stop {
                Stop::Done => break,
                Stop::Full(at) => {
                    from = at;
                    if let Err(e) = sock.writable().await {
                        tracing::debug!("waiting on the shared RTP socket: {e}");
                        break;
                    }
                }
                Stop::NoGso(at) => {
                    // Message `at` and the rest, one datagram each: the per-viewer path
                    // knows how (GSO_WORKS is cleared).
                    tracing::info!("UDP GSO unavailable: sending datagrams one by one");
                    GSO_WORKS.store(false, Ordering::Relaxed);
                    let plan = self.plan(gso);
                    let Some(&(v, first, _)) = plan.get(at) else {
                        break;
                    };
                    for (d, &(dest, start, end)) in self.dests.iter().enumerate().skip(v) {
                        let start = if d == v { first } else { start };
                        if let Ok(n) = send_batch(&sock, dest, &self.packets[start..end]).await {
                            sent += n;
                        }
                    }
                    break;
                }
            }
        }
        self.packets.clear();
        self.dests.clear();
        sent
    }

    /// The messages, in order: (viewer, first packet, end).
    fn plan(&self, gso: bool) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::with_capacity(self.dests.len() * 2);
        for (d, &(_, start, end)) in self.dests.iter().enumerate() {
            for (a, b) in plan_messages(&self.packets[start..end], gso) {
                out.push((d, start + a, start + b));
            }
        }
        out
    }

    /// Sends messages `from..` until done or the socket pushes back; the messages are the
    /// same on every call (the same packets, the same plan), so an index stays valid
    /// across a wait. Built anew per call: the pointers must not live across an await.
    fn send_from(&self, sock: &SendSocket, from: usize, gso: bool) -> (Stop, usize) {
        let plan = self.plan(gso);
        let mut iovecs: Vec<libc::iovec> = Vec::with_capacity(self.packets.len() * 2);
        push_iovecs(&mut iovecs, &self.packets);
        let addrs: Vec<SockAddr> = self.dests.iter().map(|d| SockAddr::from(d.0)).collect();
        let mut cmsgs: Vec<CmsgBuf> = vec![[0u64; 4]; plan.len()];
        let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(plan.len());
        for (&(d, a, b), cmsg) in plan.iter().zip(cmsgs.iter_mut()) {
            msgs.push(message(&mut iovecs[a * 2..b * 2], Some(&addrs[d]), cmsg));
        }
        let packets_in = |range: std::ops::Range<usize>| -> usize {
            plan[range].iter().map(|(_, a, b)| b - a).sum()
        };
        let mut at = from;
        let mut sent = 0;
        while at < msgs.len() {
            let n = (msgs.len() - at).min(CALL_MAX);
            // SAFETY: `msgs[at..at + n]` are initialised headers whose pointers (into
            // `iovecs`, `addrs`, `cmsgs` and the packets) stay valid for the call; the fd
            // is a live UDP socket.
            let r = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    msgs.as_mut_ptr().add(at),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                let r = r as usize;
                sent += packets_in(at..at + r);
                at += r;
                continue;
            }
            if r == 0 {
                // Not for a non-empty vector; never loop on it.
                break;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => return (Stop::Full(at), sent),
                // Only a GSO message's failure can be GSO's: a lone datagram's is its
                // destination's.
                Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT)
                    if gso && plan[at].2 - plan[at].1 > 1 =>
                {
                    return (Stop::NoGso(at), sent)
                }
                _ => {
                    // This viewer's message only: the next ones go on.
                    let dest = addrs[plan[at].0].as_socket();
                    tracing::debug!("udp send to {dest:?}: {e}");
                    at += 1;
                }
            }
        }
        (Stop::Done, sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;
    use tokio::net::UdpSocket;

    fn shared_socket() -> Arc<SendSocket> {
        let sock = SendSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        Arc::new(sock.shared())
    }

    fn packet(viewer: u8, i: u8, len: usize) -> OutPacket {
        OutPacket {
            track: 0,
            header: [viewer; 12],
            payload: Bytes::from(vec![i; len]),
        }
    }

    /// Three viewers' frames (equal-sized fragments and a shorter last one, the shape GSO
    /// runs take) from one socket: each viewer gets its own datagrams, whole and in order,
    /// from the shared port.
    #[tokio::test]
    async fn each_viewer_gets_its_own_packets_in_order_from_the_shared_socket() {
        let sock = shared_socket();
        assert!(sock.is_shared());
        let mut viewers = Vec::new();
        for _ in 0..3 {
            viewers.push(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        }
        let mut fanout = Fanout::default();
        let sizes = [1200, 1200, 1200, 300, 1200, 700];
        for (v, r) in viewers.iter().enumerate() {
            let pkts = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| packet(v as u8, i as u8, len));
            fanout
                .push(
                    &sock,
                    r.local_addr().unwrap(),
                    pkts.collect::<Vec<_>>().into_iter(),
                )
                .await;
        }
        assert_eq!(fanout.flush().await, 18);
        assert!(fanout.is_empty());
        let mut buf = [0u8; 2048];
        for (v, r) in viewers.iter().enumerate() {
            for (i, &len) in sizes.iter().enumerate() {
                let (n, from) = r.recv_from(&mut buf).await.unwrap();
                assert_eq!(from, sock.local_addr().unwrap());
                assert_eq!(n, 12 + len, "viewer {v} packet {i}");
                assert_eq!((buf[0], buf[12], buf[n - 1]), (v as u8, i as u8, i as u8));
            }
        }
    }

    /// A destination the kernel refuses (an IPv6 address for an IPv4 socket) costs its own
    /// message only: the viewers after it still get theirs.
    #[tokio::test]
    async fn a_refused_destination_does_not_stop_the_others() {
        let sock = shared_socket();
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut fanout = Fanout::default();
        let one = |v| vec![packet(v, v, 100)].into_iter();
        fanout.push(&sock, a.local_addr().unwrap(), one(1)).await;
        fanout.push(&sock, "[::1]:9".parse().unwrap(), one(2)).await;
        fanout.push(&sock, b.local_addr().unwrap(), one(3)).await;
        assert_eq!(fanout.flush().await, 2);
        let mut buf = [0u8; 2048];
        assert_eq!(a.recv_from(&mut buf).await.unwrap().0, 112);
        assert_eq!(buf[0], 1);
        assert_eq!(b.recv_from(&mut buf).await.unwrap().0, 112);
        assert_eq!(buf[0], 3);
    }

    /// A lone datagram the kernel refuses with EINVAL (port 0) is its destination's fault,
    /// not GSO's: GSO stays on for the node, and the viewers around it get their runs.
    #[tokio::test]
    async fn a_refused_lone_datagram_does_not_turn_gso_off() {
        let sock = shared_socket();
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let run = |v| (0..3).map(move |i| packet(v, i, 1000));
        let gso_before = GSO_WORKS.load(Ordering::Relaxed);
        let mut fanout = Fanout::default();
        fanout.push(&sock, a.local_addr().unwrap(), run(1)).await;
        let zero = "127.0.0.1:0".parse().unwrap();
        fanout
            .push(&sock, zero, std::iter::once(packet(2, 0, 100)))
            .await;
        fanout.push(&sock, b.local_addr().unwrap(), run(3)).await;
        assert_eq!(fanout.flush().await, 6);
        if gso_before {
            assert!(
                GSO_WORKS.load(Ordering::Relaxed),
                "GSO turned off by port 0"
            );
        }
        let mut buf = [0u8; 2048];
        for (r, v) in [(&a, 1), (&b, 3)] {
            for i in 0..3 {
                assert_eq!(r.recv_from(&mut buf).await.unwrap().0, 1012);
                assert_eq!((buf[0], buf[12]), (v, i));
            }
        }
    }

    /// More messages than one call takes (1024): everything arrives, in order per viewer.
    #[tokio::test]
    async fn a_batch_past_one_call_arrives_whole() {
        let sock = shared_socket();
        // Eight receivers, so that none holds more small datagrams than a default receive
        // buffer takes (nobody reads until the batch is out).
        let mut viewers = Vec::new();
        for _ in 0..8 {
            viewers.push(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        }
        let mut fanout = Fanout::default();
        for i in 0..1500usize {
            let v = &viewers[i % 8];
            let p = packet((i / 8) as u8, 0, 16);
            fanout
                .push(&sock, v.local_addr().unwrap(), std::iter::once(p))
                .await;
        }
        assert_eq!(fanout.flush().await, 1500);
        let mut buf = [0u8; 2048];
        for i in 0..1500usize {
            let r = &viewers[i % 8];
            let (n, _) = tokio::time::timeout(Duration::from_secs(5), r.recv_from(&mut buf))
                .await
                .expect("a datagram within 5 s")
                .unwrap();
            assert_eq!((n, buf[0]), (28, (i / 8) as u8), "datagram {i}");
        }
    }
}
