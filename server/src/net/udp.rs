//! Batched UDP sends with `sendmmsg(2)`.
//!
//! Hand-written because neither tokio nor socket2 expose `sendmmsg`, and `quinn-udp` batches
//! only contiguous buffers (GSO) while here every packet is two buffers: the viewer's own
//! 12-byte RTP header and the payload shared by all viewers. One syscall sends a whole frame's
//! packets without copying a payload.

use crate::live::reader::OutPacket;
use socket2::SockAddr;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Packets per `sendmmsg` call (Linux UIO_MAXIOV bounds the vector at 1024).
const BATCH: usize = 64;

/// Send every packet to `dest`. Waits while the socket buffer is full; returns the number of
/// packets sent (all of them unless the socket fails).
pub async fn send_batch(
    sock: &UdpSocket,
    dest: SocketAddr,
    packets: &[OutPacket],
) -> std::io::Result<usize> {
    let addr = SockAddr::from(dest);
    let mut sent = 0;
    while sent < packets.len() {
        let end = (sent + BATCH).min(packets.len());
        let chunk = &packets[sent..end];
        let n = loop {
            sock.writable().await?;
            match sock.try_io(Interest::WRITABLE, || sendmmsg(sock, &addr, chunk)) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        sent += n.max(1);
    }
    Ok(sent)
}

fn sendmmsg(sock: &UdpSocket, addr: &SockAddr, packets: &[OutPacket]) -> std::io::Result<usize> {
    let mut iovecs: Vec<[libc::iovec; 2]> = packets
        .iter()
        .map(|p| {
            [
                libc::iovec {
                    iov_base: p.header.as_ptr() as *mut libc::c_void,
                    iov_len: p.header.len(),
                },
                libc::iovec {
                    iov_base: p.payload.as_ptr() as *mut libc::c_void,
                    iov_len: p.payload.len(),
                },
            ]
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iovecs
        .iter_mut()
        .map(|iov| {
            // SAFETY: an all-zero msghdr is valid; the fields set below point into `iovecs`
            // and `addr`, which outlive the syscall.
            let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
            hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
            hdr.msg_namelen = addr.len();
            hdr.msg_iov = iov.as_mut_ptr();
            hdr.msg_iovlen = 2;
            libc::mmsghdr {
                msg_hdr: hdr,
                msg_len: 0,
            }
        })
        .collect();
    // SAFETY: `msgs` holds `msgs.len()` initialised headers whose pointers stay valid for the
    // duration of the call; the fd is a live UDP socket.
    let n = unsafe {
        libc::sendmmsg(
            sock.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn batch_arrives_as_separate_datagrams() {
        let a = UdpSocket::bind("127.0.0.1:0").await.unwrap();
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
}
