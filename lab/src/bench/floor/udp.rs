//! The floor's UDP viewers: one frame to all of them from one socket in as few `sendmmsg`
//! calls as the kernel allows (1024 messages each), every message one viewer's run of
//! equal-sized packets as a UDP GSO super-packet. The iovecs and the GSO control message
//! of a run are built once per frame and shared by every viewer's message: per viewer
//! there is only a message header naming its address.
//!
//! [`Options`] turn parts of that off, one at a time, to measure what each is worth beside
//! the way a node sends today (a socket per session, one `sendmmsg` per viewer per frame,
//! the viewer's own RTP header as an iovec of its own before the shared payload).

use super::fanout::Frame;
use socket2::SockAddr;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// Messages per `sendmmsg` (Linux's UIO_MAXIOV bounds the vector at 1024).
const BATCH: usize = 1024;
/// Datagrams per GSO super-packet (the kernel's UDP_MAX_SEGMENTS is 64 or 128).
const GSO_MAX_SEGMENTS: usize = 64;
/// Bytes per GSO super-packet (one IP datagram, less headers).
const GSO_MAX_BYTES: usize = 65_000;
/// `UDP_SEGMENT` from linux/udp.h (not exported by the libc crate for glibc targets).
const UDP_SEGMENT: libc::c_int = 103;
/// Room for one cmsg carrying a u16, 8-byte aligned (CMSG_SPACE(2) is 24 on 64-bit Linux).
type CmsgBuf = [u64; 4];

/// How the floor sends; the default is the cheapest.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Runs of equal-sized packets as one UDP GSO message.
    pub gso: bool,
    /// Each viewer its own socket and its own `sendmmsg` per frame, as a node's sessions.
    pub socket_per_viewer: bool,
    /// Each packet as two iovecs, the 12-byte RTP header and the rest, as a node sends a
    /// viewer's rewritten header beside the payload all viewers share.
    pub split_header: bool,
}

struct Viewer {
    addr: SockAddr,
    /// False until its first keyframe went out.
    started: bool,
    /// Its own socket ([`Options::socket_per_viewer`]).
    sock: Option<UdpSocket>,
}

pub struct Fanout {
    sock: UdpSocket,
    opts: Options,
    viewers: Vec<Viewer>,
    /// The message headers of the frame being sent, kept to reuse the allocation.
    msgs: Vec<libc::mmsghdr>,
}

/// Send buffer of the shared socket: a keyframe (≈ 40 KB) to a thousand viewers is queued
/// by one call, and a full buffer puts the sender to sleep until the receivers' softirq
/// frees it (on loopback, inside the same calls).
const SHARED_SEND_BUFFER: usize = 64 << 20;

impl Fanout {
    pub fn new(sock: UdpSocket, opts: Options) -> Fanout {
        // Best effort: a smaller buffer only makes the sender wait for room more often.
        let _ = vigil_server::net::udp::large_send_buffer(&sock, SHARED_SEND_BUFFER);
        Fanout {
            sock,
            opts,
            viewers: Vec::new(),
            msgs: Vec::new(),
        }
    }

    pub fn add(&mut self, addr: SocketAddr) {
        let sock = if self.opts.socket_per_viewer {
            let own = self
                .sock
                .local_addr()
                .and_then(|a| UdpSocket::bind(SocketAddr::new(a.ip(), 0)));
            match own {
                // The default send buffer, as a node's session sockets have.
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!("vigil bench floor: no socket for viewer {addr}: {e}");
                    return;
                }
            }
        } else {
            None
        };
        self.viewers.push(Viewer {
            addr: SockAddr::from(addr),
            started: false,
            sock,
        });
    }

    pub fn remove(&mut self, addr: SocketAddr) {
        self.viewers.retain(|v| v.addr.as_socket() != Some(addr));
    }

    /// Send `frame` to every viewer that started, and start those waiting when it holds a
    /// keyframe (from that packet on, one datagram per message: it happens once per viewer).
    pub fn send(&mut self, frame: &Frame) {
        if self.viewers.is_empty() {
            return;
        }
        // Iovecs per packet: 1, or 2 with the header apart.
        let per = if self.opts.split_header { 2 } else { 1 };
        let mut iovecs: Vec<libc::iovec> = Vec::with_capacity(frame.packets.len() * per);
        for p in &frame.packets {
            let cut = if per == 2 { p.len().min(12) } else { p.len() };
            for part in [&p[..cut], &p[cut..]].into_iter().take(per) {
                iovecs.push(libc::iovec {
                    iov_base: part.as_ptr() as *mut libc::c_void,
                    iov_len: part.len(),
                });
            }
        }
        let sizes: Vec<usize> = frame.packets.iter().map(|p| p.len()).collect();
        let runs = plan_messages(&sizes, self.opts.gso);
        let mut cmsgs: Vec<CmsgBuf> = vec![[0u64; 4]; runs.len()];
        // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic.
        let (space, cmsg_len) = unsafe {
            (
                libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) as usize,
                libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as usize,
            )
        };
        debug_assert!(space <= std::mem::size_of::<CmsgBuf>());
        for (k, &(start, end)) in runs.iter().enumerate() {
            if end - start > 1 {
                // The segment size fits: GSO runs are only of packets under GSO_MAX_BYTES.
                let seg = sizes[start] as u16;
                // SAFETY: an all-zero msghdr is valid; CMSG_FIRSTHDR/CMSG_DATA point inside
                // `cmsgs[k]`, which is large enough and aligned for one cmsghdr and a u16.
                unsafe {
                    let mut hdr: libc::msghdr = std::mem::zeroed();
                    hdr.msg_control = cmsgs[k].as_mut_ptr() as *mut libc::c_void;
                    hdr.msg_controllen = space;
                    let cmsg = libc::CMSG_FIRSTHDR(&hdr);
                    (*cmsg).cmsg_level = libc::SOL_UDP;
                    (*cmsg).cmsg_type = UDP_SEGMENT;
                    (*cmsg).cmsg_len = cmsg_len;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, seg);
                }
            }
        }
        let iov = iovecs.as_mut_ptr();
        let msgs = &mut self.msgs;
        msgs.clear();
        let message =
            |addr: &SockAddr, first: usize, count: usize, control: Option<*mut CmsgBuf>| {
                // SAFETY: an all-zero msghdr is valid; the pointers set here point into
                // `iovecs`, `cmsgs` and the viewer's address, which outlive the syscalls below.
                let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
                hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
                hdr.msg_namelen = addr.len();
                // SAFETY: (first + count) * per <= iovecs.len() (runs and key_at index the
                // frame's packets).
                hdr.msg_iov = unsafe { iov.add(first * per) };
                hdr.msg_iovlen = count * per;
                if let Some(c) = control {
                    hdr.msg_control = c as *mut libc::c_void;
                    hdr.msg_controllen = space;
                }
                libc::mmsghdr {
                    msg_hdr: hdr,
                    msg_len: 0,
                }
            };
        let cmsg_ptr = cmsgs.as_mut_ptr();
        let shared = self.sock.as_raw_fd();
        for v in &mut self.viewers {
            if v.started {
                for (k, &(start, end)) in runs.iter().enumerate() {
                    // SAFETY: k < cmsgs.len().
                    let control = (end - start > 1).then(|| unsafe { cmsg_ptr.add(k) });
                    msgs.push(message(&v.addr, start, end - start, control));
                }
            } else if let Some((key, _)) = frame.key_at {
                v.started = true;
                for i in key..frame.packets.len() {
                    msgs.push(message(&v.addr, i, 1, None));
                }
            }
            if let Some(own) = &v.sock {
                self.opts.gso &= send_all(own.as_raw_fd(), msgs, self.opts.gso);
                msgs.clear();
            }
        }
        self.opts.gso &= send_all(shared, msgs, self.opts.gso);
        drop(iovecs);
        drop(cmsgs);
    }
}

/// `sendmmsg` of every message on `fd` (a blocking UDP socket), up to 1024 a call; false if
/// the kernel refused GSO (the caller sends without it from then on).
fn send_all(fd: std::os::fd::RawFd, msgs: &mut [libc::mmsghdr], gso: bool) -> bool {
    let mut gso_ok = true;
    let mut off = 0;
    while off < msgs.len() {
        let n = (msgs.len() - off).min(BATCH);
        // SAFETY: msgs[off..off + n] are initialised headers whose pointers the caller keeps
        // valid for the call; the fd is a live UDP socket.
        let sent = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr().add(off), n as libc::c_uint, 0) };
        if sent < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if gso
                && gso_ok
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT)
                )
            {
                eprintln!("vigil bench floor: UDP GSO refused ({e}): datagrams one by one");
                gso_ok = false;
            }
            // The failed message is skipped, not retried: the floor never queues.
            off += 1;
            continue;
        }
        off += sent as usize;
    }
    gso_ok
}

/// Group packets into messages: with GSO, a run of equal sizes plus at most one shorter
/// packet at its end (the kernel allows only the last segment to be short). Returns
/// (first, end) packet indexes.
fn plan_messages(sizes: &[usize], gso: bool) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < sizes.len() {
        let seg = sizes[i];
        let mut j = i + 1;
        let mut total = seg;
        if gso {
            while j < sizes.len()
                && j - i < GSO_MAX_SEGMENTS
                && sizes[j] == seg
                && total + seg <= GSO_MAX_BYTES
            {
                total += seg;
                j += 1;
            }
            if j < sizes.len()
                && j - i < GSO_MAX_SEGMENTS
                && sizes[j] < seg
                && total + sizes[j] <= GSO_MAX_BYTES
            {
                j += 1;
            }
        }
        runs.push((i, j));
        i = j;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    #[test]
    fn runs_of_equal_sizes_share_a_message() {
        let sizes = [1400, 1400, 1400, 300, 1400, 700, 700];
        assert_eq!(plan_messages(&sizes, true), vec![(0, 4), (4, 6), (6, 7)]);
        assert_eq!(plan_messages(&sizes, false).len(), 7);
    }

    /// Two viewers: the second joins at a frame whose keyframe starts at its second packet
    /// and gets it from there; both receive separate datagrams (GSO cut them), whichever
    /// way the floor sends.
    #[test]
    fn every_viewer_gets_every_datagram_and_joins_on_a_keyframe() {
        for (gso, socket_per_viewer, split_header) in [
            (true, false, false),
            (false, false, false),
            (true, true, false),
            (true, true, true),
        ] {
            let opts = Options {
                gso,
                socket_per_viewer,
                split_header,
            };
            one_run(opts);
        }
    }

    fn one_run(opts: Options) {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let mut fanout = Fanout::new(sock, opts);
        let packet = |i: u8, len: usize| Bytes::from(vec![i; len]);
        let frame = |key| {
            Frame::new(
                vec![
                    packet(1, 1000),
                    packet(2, 1000),
                    packet(3, 1000),
                    packet(4, 10),
                ],
                key,
            )
        };
        fanout.add(a.local_addr().unwrap());
        fanout.send(&frame(Some(0)));
        fanout.add(b.local_addr().unwrap());
        fanout.send(&frame(None));
        fanout.send(&frame(Some(1)));
        let mut buf = [0u8; 2048];
        let mut got = |s: &UdpSocket| {
            let (n, _) = s.recv_from(&mut buf).unwrap();
            (buf[0], buf[n - 1], n)
        };
        let frame_seen = [(1, 1, 1000), (2, 2, 1000), (3, 3, 1000), (4, 4, 10)];
        for _ in 0..3 {
            for want in frame_seen {
                assert_eq!(got(&a), want, "{opts:?}");
            }
        }
        for want in &frame_seen[1..] {
            assert_eq!(got(&b), *want, "{opts:?}");
        }
        fanout.remove(a.local_addr().unwrap());
        assert_eq!(fanout.viewers.len(), 1);
    }
}
