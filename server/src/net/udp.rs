//! Batched UDP sends with `sendmmsg(2)`.
//!
//! Hand-written because neither tokio nor socket2 expose `sendmmsg`, and `quinn-udp` batches
//! only contiguous buffers (GSO) while here every packet is two buffers: the viewer's own
//! 12-byte RTP header and the payload shared by all viewers. One syscall sends a whole frame's
//! packets without copying a payload. The socket a viewer's RTP leaves by stays out of
//! tokio's reactor ([`SendSocket`]).

use crate::live::reader::OutPacket;
use socket2::SockAddr;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio_util::sync::CancellationToken;

/// Packets per `sendmmsg` call (Linux UIO_MAXIOV bounds the vector at 1024).
const BATCH: usize = 64;
/// Datagrams per GSO super-packet (the kernel's UDP_MAX_SEGMENTS is 64 or 128).
const GSO_MAX_SEGMENTS: usize = 64;
/// Payload bytes per GSO super-packet (one IP datagram, less headers).
const GSO_MAX_BYTES: usize = 65_000;
/// `UDP_SEGMENT` from linux/udp.h (not exported by the libc crate for glibc targets).
const UDP_SEGMENT: libc::c_int = 103;

/// How long a UDP stream that reached its end waits after its last RTP packet before the
/// RTCP BYE.
///
/// RTP and RTCP arrive on two sockets, with no order between them at the receiver. ffmpeg
/// reads a ready RTCP socket before a ready RTP one and ends the stream at the BYE, so a
/// viewer still reading a backlog (a busy machine) lost the packets queued behind it: the
/// last frame arrived cut (seen in CI as `error while decoding MB …` on the final frame of
/// a playback). Half a second is far more than a loaded receiver's scheduling delay and far
/// less than any client's idle timeout; a TCP viewer needs no wait (one ordered stream).
pub const BYE_AFTER_LAST_RTP: Duration = Duration::from_millis(500);

/// Waits [`BYE_AFTER_LAST_RTP`], or less if `stop` fires (a TEARDOWN, a shutdown: nobody
/// is left to read a backlog).
pub async fn linger_before_bye(stop: &CancellationToken) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = tokio::time::sleep(BYE_AFTER_LAST_RTP) => {}
    }
}

/// A UDP socket the node only sends from (a viewer's RTP port), outside tokio's reactor.
///
/// Linux wakes a UDP socket's waiters each time one of its sent datagrams is freed
/// (`sock_wfree`; unlike TCP it does not wait until the buffer was once full), and a
/// socket in epoll for writability always has a waiter: every datagram sent cost an
/// `ep_poll_callback`, and the reactor then polled the socket and set its readiness. At
/// 1000 UDP viewers that was ≈ 9 % of a node's samples (docs/BENCHMARKS.md, "A viewer's
/// RTP socket outside the reactor"). The buffer is almost never full; while it is,
/// [`SendSocket::writable`] puts a duplicate of the descriptor in the reactor, and only for
/// as long as the wait lasts.
///
/// Connected to its viewer ([`SendSocket::connected_to`]), it sends without naming the
/// destination, and the kernel reuses the route it looked up at `connect` instead of
/// looking it up again for every message.
#[derive(Debug)]
pub struct SendSocket {
    sock: std::net::UdpSocket,
    peer: Option<SocketAddr>,
    /// Every UDP viewer's media leaves by it ([`SendSocket::shared`]).
    shared: bool,
}

/// Send buffer of a socket every viewer shares: a keyframe (≈ 40 KB at 2 Mb/s) to a
/// group's 256 viewers is ≈ 10 MB in one walk's batch, which the kernel's doubled 8 MiB
/// holds; its default (≈ 200 KB) would make the walk wait for the interface dozens of
/// times per keyframe. A socket per viewer had a default buffer each.
pub const SHARED_SEND_BUFFER: usize = 8 << 20;

impl SendSocket {
    pub fn bind(addr: SocketAddr) -> std::io::Result<SendSocket> {
        let sock = std::net::UdpSocket::bind(addr)?;
        sock.set_nonblocking(true)?;
        Ok(SendSocket {
            sock,
            peer: None,
            shared: false,
        })
    }

    /// The socket as the one every UDP viewer's media leaves by (`rtsp::shared_ports`):
    /// never connected, its send buffer as large as the kernel allows up to
    /// [`SHARED_SEND_BUFFER`] (`SO_SNDBUFFORCE` when root, else capped by
    /// `net.core.wmem_max`). A live sender batches what it sends from it across viewers
    /// ([`super::udp_fanout`]).
    pub fn shared(mut self) -> SendSocket {
        if let Err(e) = large_send_buffer(&self.sock, SHARED_SEND_BUFFER) {
            tracing::debug!("the shared RTP socket's send buffer: {e}");
        }
        self.shared = true;
        self
    }

    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The socket connected to `dest`, where everything it sends goes. It then receives only
    /// from `dest`, which nothing here reads, and reports an ICMP error from it as the next
    /// send's error (logged by the sender, as any failed send). Left unconnected if the
    /// kernel refuses (a send still names `dest`).
    pub fn connected_to(mut self, dest: SocketAddr) -> SendSocket {
        match self.sock.connect(dest) {
            Ok(()) => self.peer = Some(dest),
            Err(e) => tracing::debug!("connecting the RTP socket to {dest}: {e}"),
        }
        self
    }

    /// The socket in tokio's reactor, to receive on (a publisher's RTP port).
    pub fn into_tokio(self) -> std::io::Result<tokio::net::UdpSocket> {
        tokio::net::UdpSocket::from_std(self.sock)
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Waits until the socket's buffer has room again.
    ///
    /// A descriptor of its own (`dup`) for each wait, so that two senders waiting on one
    /// socket (a handoff's old and new) never share a registration. epoll reports the
    /// socket's state at registration, so room made between the refused send and this call
    /// is not missed.
    pub(super) async fn writable(&self) -> std::io::Result<()> {
        let dup = self.sock.try_clone()?;
        // SAFETY: `dup` owns its descriptor, which stays open, and the same, until the
        // `AsyncFd` that owns `dup` is dropped at the end of this call.
        let fd = unsafe { AsyncFd::register_with_interest(dup, Interest::WRITABLE)? };
        fd.writable().await?.retain_ready();
        Ok(())
    }
}

impl AsRawFd for SendSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }
}

/// A send buffer of `bytes`, past `net.core.wmem_max` with `SO_SNDBUFFORCE` where the
/// process may (root, `CAP_NET_ADMIN`), else `SO_SNDBUF` capped by it.
pub fn large_send_buffer(sock: &std::net::UdpSocket, bytes: usize) -> std::io::Result<()> {
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt reads one c_int from a valid pointer on our live socket.
    let forced = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    } == 0;
    if forced {
        return Ok(());
    }
    socket2::SockRef::from(sock).set_send_buffer_size(bytes)
}

/// Cleared the first time the kernel refuses UDP GSO (pre-4.18 kernels, some devices);
/// then every datagram goes out on its own.
pub(super) static GSO_WORKS: AtomicBool = AtomicBool::new(true);

/// Send every packet to `dest`. Waits while the socket buffer is full; returns the number of
/// packets sent (all of them unless the socket fails).
///
/// Runs of equal-sized packets (the FU-A fragments of a frame are all MTU-sized) go out as
/// one UDP GSO message: the kernel builds and routes one large buffer and cuts it into
/// datagrams at the end, instead of doing the whole per-datagram path for each. The
/// receiver still sees separate datagrams.
pub async fn send_batch(
    sock: &SendSocket,
    dest: SocketAddr,
    packets: &[OutPacket],
) -> std::io::Result<usize> {
    // The connected peer goes unnamed (its route is the socket's); any other is named.
    let addr = (sock.peer != Some(dest)).then(|| SockAddr::from(dest));
    let addr = addr.as_ref();
    let mut sent = 0;
    while sent < packets.len() {
        let end = (sent + BATCH).min(packets.len());
        let chunk = &packets[sent..end];
        let n = loop {
            let gso = GSO_WORKS.load(Ordering::Relaxed);
            match sendmmsg(sock, addr, chunk, gso) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // epoll calls the socket writable below half its buffer, and a UDP send is
                // refused only at a full one: the retry after the wait sends something.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    sock.writable().await?;
                    continue;
                }
                Err(e)
                    if gso
                        && matches!(
                            e.raw_os_error(),
                            Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT)
                        ) =>
                {
                    tracing::info!("UDP GSO unavailable ({e}): sending datagrams one by one");
                    GSO_WORKS.store(false, Ordering::Relaxed);
                    continue;
                }
                Err(e) => return Err(e),
            }
        };
        sent += n.max(1);
    }
    Ok(sent)
}

/// Group packets into messages: with GSO, a run of equal sizes plus at most one shorter
/// packet at its end (the kernel allows only the last segment to be short).
pub(super) fn plan_messages(packets: &[OutPacket], gso: bool) -> Vec<(usize, usize)> {
    let size = |p: &OutPacket| p.header.len() + p.payload.len();
    let mut runs = Vec::new();
    let mut i = 0;
    while i < packets.len() {
        let seg = size(&packets[i]);
        let mut j = i + 1;
        let mut total = seg;
        if gso {
            while j < packets.len()
                && j - i < GSO_MAX_SEGMENTS
                && size(&packets[j]) == seg
                && total + seg <= GSO_MAX_BYTES
            {
                total += seg;
                j += 1;
            }
            if j < packets.len()
                && j - i < GSO_MAX_SEGMENTS
                && size(&packets[j]) < seg
                && total + size(&packets[j]) <= GSO_MAX_BYTES
            {
                j += 1;
            }
        }
        runs.push((i, j));
        i = j;
    }
    runs
}

/// Room for one cmsg carrying a u16, 8-byte aligned (CMSG_SPACE(2) is 24 on 64-bit Linux).
pub(super) type CmsgBuf = [u64; 4];

/// Each packet as two iovecs, its header and its payload (which all viewers share).
pub(super) fn push_iovecs(iovecs: &mut Vec<libc::iovec>, packets: &[OutPacket]) {
    for p in packets {
        iovecs.push(libc::iovec {
            iov_base: p.header.as_ptr() as *mut libc::c_void,
            iov_len: p.header.len(),
        });
        iovecs.push(libc::iovec {
            iov_base: p.payload.as_ptr() as *mut libc::c_void,
            iov_len: p.payload.len(),
        });
    }
}

/// One message of a `sendmmsg`: the packets whose iovecs are `iov` (two per packet, see
/// [`push_iovecs`]), to `addr` (None: the connected peer); more than one packet is a UDP
/// GSO run of their size, whose control message goes in `cmsg`. The message points into
/// `iov`, `addr` and `cmsg`, which must outlive the syscall.
pub(super) fn message(
    iov: &mut [libc::iovec],
    addr: Option<&SockAddr>,
    cmsg: &mut CmsgBuf,
) -> libc::mmsghdr {
    // SAFETY: an all-zero msghdr is valid (no name: the connected peer).
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    if let Some(addr) = addr {
        hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
        hdr.msg_namelen = addr.len();
    }
    let packets = iov.len() / 2;
    if packets > 1 {
        let seg = (iov[0].iov_len + iov[1].iov_len) as u16;
        // SAFETY: CMSG_* compute offsets inside `cmsg`, which is large enough and aligned
        // for one cmsghdr plus a u16 (checked by the CMSG_SPACE assertion).
        unsafe {
            let space = libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) as usize;
            debug_assert!(space <= std::mem::size_of::<CmsgBuf>());
            hdr.msg_control = cmsg.as_mut_ptr() as *mut libc::c_void;
            hdr.msg_controllen = space;
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg);
        }
    }
    hdr.msg_iov = iov.as_mut_ptr();
    hdr.msg_iovlen = iov.len();
    libc::mmsghdr {
        msg_hdr: hdr,
        msg_len: 0,
    }
}

/// Returns the number of *packets* sent.
fn sendmmsg(
    sock: &SendSocket,
    addr: Option<&SockAddr>,
    packets: &[OutPacket],
    gso: bool,
) -> std::io::Result<usize> {
    let mut iovecs: Vec<libc::iovec> = Vec::with_capacity(packets.len() * 2);
    push_iovecs(&mut iovecs, packets);
    let runs = plan_messages(packets, gso);
    let mut cmsgs: Vec<CmsgBuf> = vec![[0u64; 4]; runs.len()];
    let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(runs.len());
    for (&(start, end), cmsg) in runs.iter().zip(cmsgs.iter_mut()) {
        msgs.push(message(&mut iovecs[start * 2..end * 2], addr, cmsg));
    }
    // SAFETY: `msgs` holds initialised headers whose pointers stay valid for the duration
    // of the call; the fd is a live UDP socket.
    let n = unsafe {
        libc::sendmmsg(
            sock.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(runs[..n as usize].iter().map(|(a, b)| b - a).sum())
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_of_equal_sizes_share_a_message() {
        let p = |len: usize| OutPacket {
            track: 0,
            header: [0; 12],
            payload: Bytes::from(vec![0; len]),
        };
        let pkts = vec![p(1388), p(1388), p(1388), p(300), p(1388), p(700), p(700)];
        // 3×1388 + the shorter 300; 1388 + the shorter 700; the last 700 alone.
        assert_eq!(plan_messages(&pkts, true), vec![(0, 4), (4, 6), (6, 7)]);
        assert_eq!(plan_messages(&pkts, false).len(), 7);
    }

    use super::*;
    use bytes::Bytes;
    use tokio::net::UdpSocket;

    #[tokio::test]
    async fn batch_arrives_as_separate_datagrams() {
        let a = SendSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let pkts: Vec<OutPacket> = (0..100u8)
            .map(|i| OutPacket {
                track: 0,
                header: [i; 12],
                payload: Bytes::from(vec![i; 100]),
            })
            .collect();
        let n = send_batch(&a, b.local_addr().unwrap(), &pkts)
            .await
            .unwrap();
        assert_eq!(n, 100);
        let mut buf = [0u8; 2048];
        for i in 0..100u8 {
            let (len, _) = b.recv_from(&mut buf).await.unwrap();
            assert_eq!(len, 112);
            assert_eq!(buf[0], i);
            assert_eq!(buf[111], i);
        }
    }

    /// A connected socket sends to its peer unnamed and to anyone else named: both arrive
    /// (a sender handed another destination for the same socket is not silently sent to the
    /// peer), each from the socket's own port.
    #[tokio::test]
    async fn a_connected_socket_sends_to_its_peer_and_to_others() {
        let peer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let a = SendSocket::bind("127.0.0.1:0".parse().unwrap())
            .unwrap()
            .connected_to(peer.local_addr().unwrap());
        assert_eq!(a.peer, Some(peer.local_addr().unwrap()));
        let pkt = |i: u8| OutPacket {
            track: 0,
            header: [i; 12],
            payload: Bytes::from(vec![i; 100]),
        };
        let to_peer: Vec<OutPacket> = (0..3).map(pkt).collect();
        assert_eq!(
            send_batch(&a, peer.local_addr().unwrap(), &to_peer)
                .await
                .unwrap(),
            3
        );
        assert_eq!(
            send_batch(&a, other.local_addr().unwrap(), &[pkt(9)])
                .await
                .unwrap(),
            1
        );
        let mut buf = [0u8; 2048];
        for i in 0..3u8 {
            let (len, from) = peer.recv_from(&mut buf).await.unwrap();
            assert_eq!((len, buf[0], from), (112, i, a.local_addr().unwrap()));
        }
        let (len, from) = other.recv_from(&mut buf).await.unwrap();
        assert_eq!((len, buf[0], from), (112, 9, a.local_addr().unwrap()));
    }
}
