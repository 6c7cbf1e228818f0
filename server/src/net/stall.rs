//! A TCP write half whose writes fail with `TimedOut` once the peer has taken nothing for a
//! while: how an RTSP connection notices a viewer that stopped reading.
//!
//! Written by hand because a timer on writability (`tokio-io-timeout`'s `TimeoutWriter`,
//! used by the admin listener) measures the wrong thing here. Linux wakes a blocked writer
//! only once a third of a full send buffer has drained (`sk_stream_min_wspace`), so on a
//! link slower than the camera a viewer's 512 KiB buffer stays unwritable for seconds while
//! the viewer reads all along (9 s at 150 kb/s), and a writability timer drops a viewer that
//! should have been skipped to keyframes. Here the timer's expiry looks at the socket's send
//! queue (`SIOCOUTQ`: bytes not yet acknowledged): if it shrank, the peer read, and the wait
//! starts again; only a queue that did not move for the whole timeout is a stall.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWrite;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::time::{Instant, Sleep};

/// See the module doc. `W`: the connection's write half, plain TCP or TLS over it (the
/// send queue measured is the TCP socket's either way: TLS records are bytes on it).
pub struct StallWriter<W = OwnedWriteHalf> {
    inner: W,
    /// The TCP socket under `inner`, open for as long as `inner` is.
    fd: RawFd,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    /// While a write waits: the send queue when the wait (re)started.
    waiting: Option<usize>,
}

impl StallWriter<OwnedWriteHalf> {
    /// `timeout`: how long the peer may take no byte before a write fails.
    pub fn new(inner: OwnedWriteHalf, timeout: Duration) -> Self {
        let fd = inner.as_ref().as_raw_fd();
        StallWriter::over(inner, fd, timeout)
    }
}

impl<W: AsyncWrite + Unpin> StallWriter<W> {
    /// A writer over any write half of the TCP socket `fd` (TLS: the stream's write half,
    /// `fd` the socket under it, which must stay open as long as `inner` does).
    pub fn over(inner: W, fd: RawFd, timeout: Duration) -> Self {
        StallWriter {
            inner,
            fd,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            waiting: None,
        }
    }

    /// The socket under the writer.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// How long the peer may take no byte.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Bytes in the socket's send queue (unsent plus unacknowledged); None if the kernel
    /// will not say, which counts as no progress.
    fn send_queue(&self) -> Option<usize> {
        let fd = self.fd;
        let mut queued: libc::c_int = 0;
        // SAFETY: TIOCOUTQ writes one int through the pointer, which outlives the call; the
        // descriptor is the socket under `inner`, open for as long as `self` is.
        let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut queued) };
        (r == 0).then(|| usize::try_from(queued).unwrap_or(0))
    }

    /// Passes a ready result through; on a pending one, arms the stall timer or, when it
    /// expired, fails with `TimedOut` unless the send queue shrank meanwhile.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        if self.waiting.is_none() {
            self.waiting = Some(self.send_queue().unwrap_or(0));
            self.deadline.as_mut().reset(Instant::now() + self.timeout);
        }
        while self.deadline.as_mut().poll(cx).is_ready() {
            match (self.send_queue(), self.waiting) {
                (Some(now), Some(before)) if now < before => {
                    self.waiting = Some(now);
                    self.deadline.as_mut().reset(Instant::now() + self.timeout);
                }
                _ => {
                    self.waiting = None;
                    return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
                }
            }
        }
        Poll::Pending
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for StallWriter<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// A connected pair on loopback: the writer's send buffer and the reader's receive
    /// buffer small, so a slow reader keeps the writer's socket unwritable.
    async fn pair() -> (OwnedWriteHalf, TcpStream) {
        let (writer, reader) = crate::net::tcp::slow_reader_pair(128 * 1024).await;
        (writer.into_split().1, reader)
    }

    const TIMEOUT: Duration = Duration::from_millis(200);

    #[tokio::test]
    async fn a_peer_that_reads_nothing_fails_the_write_after_the_timeout() {
        let (writer, _reader) = pair().await;
        let mut w = StallWriter::new(writer, TIMEOUT);
        let started = std::time::Instant::now();
        let err = w.write_all(&vec![0u8; 1 << 20]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= TIMEOUT);
    }

    /// The case a writability timer gets wrong: the reader drains ≈ 100 KB/s, so the
    /// writer's socket stays unwritable ≈ 0.8 s at a time (the kernel waits for a third of
    /// its 256 KiB buffer to drain), longer than the timeout, yet the peer acknowledges
    /// data every few tens of milliseconds and the write completes.
    #[tokio::test]
    async fn a_peer_that_reads_slowly_is_not_a_stall() {
        let (writer, mut reader) = pair().await;
        const TOTAL: usize = 320 * 1024;
        let read = tokio::spawn(async move {
            let (mut got, mut buf) = (0, [0u8; 1024]);
            while got < TOTAL {
                let n = reader.read(&mut buf).await.unwrap();
                assert!(n > 0, "the writer closed after {got} bytes");
                got += n;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            got
        });
        let mut w = StallWriter::new(writer, TIMEOUT);
        let started = std::time::Instant::now();
        w.write_all(&vec![7u8; TOTAL]).await.unwrap();
        assert_eq!(read.await.unwrap(), TOTAL);
        // The write outlasted the timeout several times over: a whole-write or
        // writability bound would have failed it.
        assert!(started.elapsed() > TIMEOUT * 2, "{:?}", started.elapsed());
    }
}
