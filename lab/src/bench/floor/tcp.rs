//! The floor's TCP viewers: the frame's interleaved records (framed once by
//! [`Frame::new`](super::fanout::Frame::new)) written with one `send` per viewer. A viewer
//! whose socket buffer is full keeps the rest as a backlog, retried before its next frame
//! and while no frame comes; one whose backlog passes [`MAX_BACKLOG`] is dropped.

use super::fanout::Frame;
use std::io::{ErrorKind, Write};
use std::net::TcpStream;

/// A viewer this far behind is dropped (about 2 s of a 2 Mb/s camera).
const MAX_BACKLOG: usize = 512 * 1024;
/// The same send buffer a node gives its RTSP connections (`rtsp/conn.rs`).
const SEND_BUFFER: usize = 256 * 1024;

struct Viewer {
    stream: TcpStream,
    started: bool,
    backlog: Vec<u8>,
}

#[derive(Default)]
pub struct Fanout {
    viewers: Vec<Viewer>,
}

/// What a write left.
enum Sent {
    All,
    Part(usize),
    Failed,
}

fn write(stream: &mut TcpStream, bytes: &[u8]) -> Sent {
    let mut done = 0;
    while done < bytes.len() {
        // std's write is send(2) with MSG_NOSIGNAL.
        match stream.write(&bytes[done..]) {
            Ok(0) => return Sent::Failed,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Sent::Part(done),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Sent::Failed,
        }
    }
    Sent::All
}

impl Viewer {
    /// Write what is backed up; false if the connection failed.
    fn flush(&mut self) -> bool {
        match write(&mut self.stream, &self.backlog) {
            Sent::All => {
                self.backlog.clear();
                true
            }
            Sent::Part(n) => {
                self.backlog.drain(..n);
                true
            }
            Sent::Failed => false,
        }
    }

    /// Send `bytes` after any backlog; false if the viewer is to be dropped.
    fn send(&mut self, bytes: &[u8]) -> bool {
        if !self.backlog.is_empty() && !self.flush() {
            return false;
        }
        if !self.backlog.is_empty() {
            self.backlog.extend_from_slice(bytes);
            return self.backlog.len() <= MAX_BACKLOG;
        }
        match write(&mut self.stream, bytes) {
            Sent::All => true,
            Sent::Part(n) => {
                self.backlog.extend_from_slice(&bytes[n..]);
                true
            }
            Sent::Failed => false,
        }
    }
}

impl Fanout {
    pub fn add(&mut self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let _ = stream.set_nonblocking(true);
        let _ = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER);
        self.viewers.push(Viewer {
            stream,
            started: false,
            backlog: Vec::new(),
        });
    }

    pub fn has_backlog(&self) -> bool {
        self.viewers.iter().any(|v| !v.backlog.is_empty())
    }

    pub fn retry_backlogs(&mut self) {
        self.viewers
            .retain_mut(|v| v.backlog.is_empty() || v.flush());
    }

    /// Send `frame` to every started viewer; a waiting one starts at its keyframe.
    pub fn send(&mut self, frame: &Frame) {
        self.viewers.retain_mut(|v| {
            if v.started {
                return v.send(&frame.interleaved);
            }
            match frame.key_at {
                Some((_, offset)) => {
                    v.started = true;
                    v.send(&frame.interleaved[offset..])
                }
                None => true,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::io::Read;
    use std::net::TcpListener;

    #[test]
    fn a_viewer_starts_at_the_keyframe_and_gets_whole_records() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut fanout = Fanout::default();
        fanout.add(server);
        let p = |i: u8| Bytes::from(vec![i; 20]);
        fanout.send(&Frame::new(vec![p(1)], None));
        fanout.send(&Frame::new(vec![p(2), p(3)], Some(1)));
        fanout.send(&Frame::new(vec![p(4)], None));
        drop(fanout);
        let mut got = Vec::new();
        (&client).read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), 2 * 24);
        assert_eq!(&got[..5], &[b'$', 0, 0, 20, 3]);
        assert_eq!(&got[24..29], &[b'$', 0, 0, 20, 4]);
    }
}
