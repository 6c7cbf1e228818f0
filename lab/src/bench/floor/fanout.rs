//! The floor's sender thread: the viewers, and each frame sent to all of them. One plain
//! thread woken once per frame (no async runtime, no per-viewer task), because the wake-ups
//! per frame are part of what a relay pays and the floor pays the fewest: one.

use super::{tcp, udp};
use bytes::Bytes;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

/// How often a TCP viewer with a backlog (its socket buffer was full) is retried while no
/// frame comes.
const RETRY_BACKLOG: Duration = Duration::from_millis(1);

/// One frame of the camera, framed once for every viewer.
pub struct Frame {
    /// Whole RTP packets, in order.
    pub packets: Vec<Bytes>,
    /// The same packets as RTSP interleaved records on channel 0, back to back.
    pub interleaved: Vec<u8>,
    /// Where a new viewer starts: the first packet that begins a keyframe, and its offset
    /// in `interleaved`. None: a new viewer waits for a later frame.
    pub key_at: Option<(usize, usize)>,
}

impl Frame {
    pub fn new(packets: Vec<Bytes>, key_packet: Option<usize>) -> Frame {
        let mut interleaved = Vec::with_capacity(packets.iter().map(|p| p.len() + 4).sum());
        let mut key_at = None;
        for (i, p) in packets.iter().enumerate() {
            if key_packet == Some(i) {
                key_at = Some((i, interleaved.len()));
            }
            // An RTP packet off an RTSP interleaved or UDP input fits 16 bits.
            let len = u16::try_from(p.len()).unwrap_or(u16::MAX);
            interleaved.extend_from_slice(&[b'$', 0]);
            interleaved.extend_from_slice(&len.to_be_bytes());
            interleaved.extend_from_slice(&p[..usize::from(len)]);
        }
        Frame {
            packets,
            interleaved,
            key_at,
        }
    }
}

/// What the sender thread is told.
pub enum Event {
    Frame(Arc<Frame>),
    /// A UDP viewer played: RTP goes to this address.
    UdpPlay(SocketAddr),
    /// Its RTSP connection closed: stop sending.
    UdpGone(SocketAddr),
    /// A TCP viewer played: its connection, past the PLAY answer, is the sender's.
    TcpPlay(TcpStream),
}

/// Runs until every sender of events is gone.
pub fn run(rx: Receiver<Event>, rtp: UdpSocket, opts: udp::Options) {
    let mut udp = udp::Fanout::new(rtp, opts);
    let mut tcp = tcp::Fanout::default();
    loop {
        let event = if tcp.has_backlog() {
            match rx.recv_timeout(RETRY_BACKLOG) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => {
                    tcp.retry_backlogs();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match rx.recv() {
                Ok(e) => e,
                Err(_) => return,
            }
        };
        match event {
            Event::Frame(frame) => {
                udp.send(&frame);
                tcp.send(&frame);
            }
            Event::UdpPlay(addr) => udp.add(addr),
            Event::UdpGone(addr) => udp.remove(addr),
            Event::TcpPlay(stream) => tcp.add(stream),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_framed_once_with_the_keyframe_offset() {
        let a = Bytes::from_static(&[0x80, 96, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 6]);
        let b = Bytes::from_static(&[0x80, 96, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 7, 1]);
        let f = Frame::new(vec![a, b], Some(1));
        assert_eq!(&f.interleaved[..4], &[b'$', 0, 0, 13]);
        assert_eq!(&f.interleaved[17..21], &[b'$', 0, 0, 14]);
        assert_eq!(f.interleaved.len(), 17 + 18);
        assert_eq!(f.key_at, Some((1, 17)));
    }
}
