//! A plain RTSP connection's socket shared by its connection task (answers, RTCP, playback)
//! and its stream's live sender (`live_sender::group`), which must never wait on one viewer.
//!
//! Written by hand because what it guarantees is specific to an interleaved RTSP connection:
//! every message put in is on the wire whole and in order, whichever side put it (a
//! response cut by a `$` frame, or a frame cut by another, would corrupt the byte stream
//! for the client), and the side that cannot wait never does. Whatever the socket does not
//! take at once stays here, queued in order (the shared payloads by reference, not copied),
//! and the connection task drains it under its slow-reader bound
//! ([`super::stall::StallWriter`] over [`SinkWriter`]). The live sender only adds a batch
//! while nothing is queued ([`TcpSink::busy_or_arm`]): a slow viewer is skipped, its reader
//! falls behind and resumes from a keyframe, as it did when its own task blocked on the
//! socket; the queue stays at one batch.

use bytes::Bytes;
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWrite;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

/// iovecs per `writev` (Linux IOV_MAX is 1024).
const MAX_IOV: usize = 1024;

/// A piece of a message: bytes to copy if they must wait, or a shared payload kept by
/// reference.
#[derive(Clone, Copy)]
pub enum Piece<'a> {
    Copy(&'a [u8]),
    Shared(&'a Bytes),
}

impl Piece<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Copy(b) => b,
            Piece::Shared(b) => b,
        }
    }

    /// What is left of the piece from `at`, owned.
    fn keep(&self, at: usize) -> Bytes {
        match self {
            Piece::Copy(b) => Bytes::copy_from_slice(&b[at..]),
            Piece::Shared(b) => b.slice(at..),
        }
    }
}

/// What happened to a message handed to [`TcpSink::send`].
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    /// On the socket.
    Written,
    /// Part or all of it waits behind what the socket has not taken.
    Queued,
    /// The socket failed (the peer is gone); nothing more will be written.
    Closed,
}

/// See the module doc.
pub struct TcpSink {
    state: Mutex<State>,
    /// Woken when bytes were queued: the connection task drains them.
    queued: Notify,
}

struct State {
    /// The socket's descriptor, for the live sender's writes (see [`TcpSink::send`]); open
    /// as long as `w` is.
    fd: RawFd,
    pending: VecDeque<Bytes>,
    w: OwnedWriteHalf,
    failed: bool,
    /// A sender skipped a batch while bytes were queued: it is told when they are gone.
    armed: bool,
    drained: Option<Box<dyn Fn() + Send + Sync>>,
}

impl TcpSink {
    pub fn new(w: OwnedWriteHalf) -> Arc<TcpSink> {
        Arc::new(TcpSink {
            state: Mutex::new(State {
                fd: w.as_ref().as_raw_fd(),
                w,
                pending: VecDeque::new(),
                failed: false,
                armed: false,
                drained: None,
            }),
            queued: Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection task's writer: `AsyncWrite` over the same queue.
    pub fn writer(self: &Arc<Self>) -> SinkWriter {
        SinkWriter(self.clone())
    }

    /// Resolves when bytes were queued since the last call (the connection task then
    /// flushes its writer).
    pub async fn queued(&self) {
        self.queued.notified().await
    }

    /// Who to tell when the queue empties after [`busy_or_arm`](Self::busy_or_arm) said
    /// busy (the live sender's group, to send the viewer its next batch at once).
    pub fn on_drained(&self, f: Box<dyn Fn() + Send + Sync>) {
        self.state().drained = Some(f);
    }

    /// Whether bytes are still queued; if so, the `on_drained` callback runs once they are
    /// gone. Checked and armed under one lock, so a drain in between cannot be missed.
    pub fn busy_or_arm(&self) -> bool {
        let mut st = self.state();
        let busy = !st.pending.is_empty();
        st.armed |= busy;
        busy
    }

    /// Nothing queued, the socket sound, no sender waiting on a drain: the sink can be taken
    /// apart ([`TcpSink::into_write_half`]) without losing a byte or a wake.
    pub fn idle(&self) -> bool {
        let st = self.state();
        st.pending.is_empty() && !st.failed && st.drained.is_none()
    }

    /// The socket's write half back (to move the connection to another runtime); call it
    /// when [`TcpSink::idle`].
    pub fn into_write_half(self) -> OwnedWriteHalf {
        self.state.into_inner().unwrap_or_else(|e| e.into_inner()).w
    }

    /// Puts one message on the socket without waiting: after whatever is queued, and what
    /// the socket does not take now is queued whole.
    ///
    /// The write goes to the descriptor directly, not through tokio's `try_write_vectored`:
    /// at a thousand viewers per frame, loading the readiness word tokio keeps for each
    /// socket (a cache miss per viewer, ≈ 3 % of a node's samples at 1000 TCP viewers,
    /// docs/BENCHMARKS.md) cost more than the write's own user-space work, and the sender
    /// never waits on readiness anyway. tokio's view stays sound: a readiness it still
    /// believes in after the socket filled costs the connection task's drain one attempt
    /// that returns `WouldBlock`, which clears it.
    pub fn send(&self, pieces: &[Piece<'_>]) -> Sent {
        let mut st = self.state();
        if st.failed {
            return Sent::Closed;
        }
        let mut written = 0usize;
        if st.pending.is_empty() {
            match write_pieces(st.fd, pieces) {
                Ok(n) => written = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    st.failed = true;
                    return Sent::Closed;
                }
            }
        }
        let queued = st.queue_rest(pieces.iter().copied(), written);
        drop(st);
        if queued {
            self.queued.notify_one();
            Sent::Queued
        } else {
            Sent::Written
        }
    }
}

/// One non-blocking `sendmsg` of up to [`MAX_IOV`] pieces; `MSG_NOSIGNAL`, so a peer that
/// is gone is an `EPIPE` and not a signal.
fn write_pieces(fd: RawFd, pieces: &[Piece<'_>]) -> io::Result<usize> {
    // A frame is a few dozen pieces: those need no allocation.
    const ON_STACK: usize = 64;
    let pieces = &pieces[..pieces.len().min(MAX_IOV)];
    let mut stack = [IoSlice::new(&[]); ON_STACK];
    let mut heap = Vec::new();
    let slices: &mut [IoSlice<'_>] = if pieces.len() <= ON_STACK {
        &mut stack[..pieces.len()]
    } else {
        heap.resize(pieces.len(), IoSlice::new(&[]));
        &mut heap
    };
    for (s, p) in slices.iter_mut().zip(pieces) {
        *s = IoSlice::new(p.bytes());
    }
    // SAFETY: an all-zero msghdr is valid; `IoSlice` is ABI-compatible with `iovec` on
    // Unix, and the slices borrow `pieces` for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = slices.as_mut_ptr().cast::<libc::iovec>();
    msg.msg_iovlen = slices.len();
    // SAFETY: `fd` is the open socket the sink's write half owns (the caller holds the
    // state's lock, so the half is not taken apart meanwhile).
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

impl State {
    /// Writes the queue out; Ready once it is empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let was_queued = !self.pending.is_empty();
        while !self.pending.is_empty() {
            let slices: Vec<IoSlice<'_>> = self
                .pending
                .iter()
                .take(MAX_IOV)
                .map(|b| IoSlice::new(b))
                .collect();
            let r = Pin::new(&mut self.w).poll_write_vectored(cx, &slices);
            let mut n = match ready!(r) {
                Ok(0) => return self.fail(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) => return self.fail(e),
            };
            while let Some(front) = self.pending.front_mut() {
                if n < front.len() {
                    bytes::Buf::advance(front, n);
                    break;
                }
                n -= front.len();
                self.pending.pop_front();
            }
        }
        if was_queued && std::mem::take(&mut self.armed) {
            if let Some(f) = &self.drained {
                f();
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Queues what is left of a message of which the socket took `written` bytes; whether
    /// anything was.
    fn queue_rest<'a>(&mut self, pieces: impl Iterator<Item = Piece<'a>>, written: usize) -> bool {
        let mut skip = written;
        let mut queued = false;
        for p in pieces {
            let len = p.bytes().len();
            if skip >= len {
                skip -= len;
                continue;
            }
            self.pending.push_back(p.keep(skip));
            skip = 0;
            queued = true;
        }
        queued
    }

    fn fail(&mut self, e: io::Error) -> Poll<io::Result<()>> {
        self.failed = true;
        self.pending.clear();
        Poll::Ready(Err(e))
    }

    /// One message from the connection task: after the queue; what the socket does not
    /// take is queued, so the message is whole on the wire whatever is written after it.
    fn poll_put(&mut self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if self.failed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        ready!(self.poll_drain(cx))?;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let written = match ready!(Pin::new(&mut self.w).poll_write_vectored(cx, bufs)) {
            Ok(n) => n,
            Err(e) => {
                self.failed = true;
                return Poll::Ready(Err(e));
            }
        };
        self.queue_rest(bufs.iter().map(|b| Piece::Copy(b)), written);
        Poll::Ready(Ok(total))
    }
}

/// The connection task's side of a [`TcpSink`]. A write is taken whole once the queue is
/// empty (what the socket does not take joins the queue, which the connection task's
/// `flush` drains when [`TcpSink::queued`] wakes it); it waits only while the queue is not
/// empty, which is where the slow-reader bound applies.
pub struct SinkWriter(Arc<TcpSink>);

impl AsyncWrite for SinkWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let sink = &self.0;
        let mut st = sink.state();
        let r = st.poll_put(cx, bufs);
        let queued = !st.pending.is_empty();
        drop(st);
        if r.is_ready() && queued {
            sink.queued.notify_one();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.0.state();
        ready!(st.poll_drain(cx))?;
        Pin::new(&mut st.w).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.0.state();
        if !st.failed {
            ready!(st.poll_drain(cx))?;
        }
        Pin::new(&mut st.w).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
