//! TCP: the accept step every listener shares, and RTP over the RTSP TCP connection
//! (RFC 2326 §10.12), written with vectored writes.

use crate::live::reader::OutPacket;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The next connection `listener` accepts; None once `shutdown` fires. An accept error
/// (EMFILE and friends) is logged and retried after 100 ms instead of spinning.
pub async fn accept(
    listener: &TcpListener,
    shutdown: &CancellationToken,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return None,
            a = listener.accept() => a,
        };
        match accepted {
            Ok(a) => return Some(a),
            Err(e) => {
                let at = listener.local_addr().ok();
                tracing::warn!(?at, "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Upper bound of iovecs per `writev` (Linux IOV_MAX is 1024).
const MAX_IOV: usize = 1024;

/// Reusable buffers for [`write_interleaved`], so a steady stream allocates nothing.
#[derive(Default)]
pub struct InterleavedWriter {
    headers: Vec<[u8; 16]>,
}

impl InterleavedWriter {
    /// Write the packets as `$ channel length` frames, the per-viewer 16 header bytes and the
    /// shared payload as separate iovecs: the payload is never copied.
    /// `channels[track]` is the RTP channel of a track.
    pub async fn write<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        packets: &[OutPacket],
        channels: &[Option<u8>],
    ) -> std::io::Result<()> {
        interleaved_headers(&mut self.headers, packets, channels);
        for (hs, ps) in self
            .headers
            .chunks(MAX_IOV / 2)
            .zip(packets.chunks(MAX_IOV / 2))
        {
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(hs.len() * 2);
            for (h, p) in hs.iter().zip(ps) {
                slices.push(IoSlice::new(h));
                slices.push(IoSlice::new(interleaved_payload(p)));
            }
            write_all_vectored(w, &mut slices).await?;
        }
        Ok(())
    }
}

/// The [`interleaved_header`] of each packet into `headers` (cleared first), each on its
/// track's RTP channel (`channels[track]`; 0 for a track set up without one).
pub fn interleaved_headers(
    headers: &mut Vec<[u8; 16]>,
    packets: &[OutPacket],
    channels: &[Option<u8>],
) {
    headers.clear();
    headers.extend(packets.iter().map(|p| {
        let channel = channels.get(p.track).copied().flatten().unwrap_or(0);
        interleaved_header(channel, p)
    }));
}

/// A packet's interleaved frame header (`$`, channel, length) followed by its RTP header:
/// the 16 bytes written before its payload.
fn interleaved_header(channel: u8, p: &OutPacket) -> [u8; 16] {
    let len = (12 + interleaved_payload(p).len()) as u16;
    let mut h = [0u8; 16];
    h[0] = b'$';
    h[1] = channel;
    h[2..4].copy_from_slice(&len.to_be_bytes());
    h[4..].copy_from_slice(&p.header);
    h
}

/// The packet's payload as a frame carries it: a frame's length is 16 bits, so a payload
/// longer than a frame can hold (no camera sends one) is cut, never sent with a wrong length.
pub fn interleaved_payload(p: &OutPacket) -> &[u8] {
    let room = usize::from(u16::MAX) - 12;
    &p.payload[..p.payload.len().min(room)]
}

/// One whole interleaved frame (`$`, channel, 16-bit length, data): an RTCP packet of ours.
pub fn interleaved_frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let len = u16::try_from(data.len()).unwrap_or(u16::MAX);
    let mut frame = Vec::with_capacity(4 + usize::from(len));
    frame.extend_from_slice(&[b'$', channel]);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&data[..usize::from(len)]);
    frame
}

/// A connected pair on loopback for tests of a writer facing a slow reader: the accepted
/// (writing) side with a send buffer of `send_buffer` bytes, the connecting (reading) side
/// with a 4 KiB receive buffer, so a reader that does not read fills the writer's socket
/// after a few tens of KiB.
#[cfg(test)]
pub(crate) async fn slow_reader_pair(send_buffer: usize) -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let reader = tokio::net::TcpSocket::new_v4().unwrap();
    reader.set_recv_buffer_size(4096).unwrap();
    let (reader, accepted) = tokio::join!(
        reader.connect(listener.local_addr().unwrap()),
        listener.accept()
    );
    let (writer, _) = accepted.unwrap();
    socket2::SockRef::from(&writer)
        .set_send_buffer_size(send_buffer)
        .unwrap();
    (writer, reader.unwrap())
}

/// `write_all` for iovecs; tokio has no such helper.
pub async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut slices: &mut [IoSlice<'_>],
) -> std::io::Result<()> {
    while !slices.is_empty() {
        let n = w.write_vectored(slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn frames_are_interleaved_with_lengths() {
        let pkts = vec![
            OutPacket {
                track: 0,
                header: [0x80; 12],
                payload: Bytes::from_static(b"abc"),
            },
            OutPacket {
                track: 1,
                header: [0x81; 12],
                payload: Bytes::from_static(b"de"),
            },
        ];
        let mut out = Vec::new();
        InterleavedWriter::default()
            .write(&mut out, &pkts, &[Some(0), Some(2)])
            .await
            .unwrap();
        assert_eq!(&out[..4], &[b'$', 0, 0, 15]);
        assert_eq!(&out[16..19], b"abc");
        assert_eq!(&out[19..23], &[b'$', 2, 0, 14]);
        assert_eq!(out.len(), 19 + 18);
    }
}
