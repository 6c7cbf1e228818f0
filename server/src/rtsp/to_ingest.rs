//! A publisher's connection handed to the node's ingest runtime after its RECORD
//! (`[rtsp] ingest_runtime`).
//!
//! Why: every camera's connection is woken per packet burst and its recorder per frame; a
//! thousand of them on the runtime that answers requests kept hundreds of ready tasks in its
//! queue, and a viewer's DESCRIBE or PLAY waited behind them (20–60 ms per wake, a playback's
//! first keyframe 0.3–1 s at 1000 × 2 Mb/s: docs/BENCHMARKS.md). On a runtime of their own
//! they queue only behind each other, and the request runtime stays idle enough for the
//! kernel's scheduler to run it as soon as a request arrives.
//!
//! How: the connection's loop stops after the RECORD answer (nothing is queued for the peer
//! then), its socket is put back together from its halves and deregistered, and a task on
//! the ingest runtime registers it there and runs the same loop over the same state. Bytes
//! already read stay in the loop's buffer; the kernel keeps the rest. RTSPS connections stay
//! (their TLS state is not split apart), as does a connection whose sink still holds bytes.

use super::conn::{run, Conn, Exit, LoopState, Writer};
use crate::net::tcp_sink::TcpSink;
use crate::node::Node;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use tokio::io::AsyncRead;
use tokio::net::TcpStream;
use tracing::{debug, Instrument};

/// The read half, kept by its type so that a plain connection's socket can be put back
/// together and handed to the ingest runtime ([`Conn::detach`]).
pub(super) enum ConnRead {
    Plain(tokio::net::tcp::OwnedReadHalf),
    Tls(tokio::io::ReadHalf<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for ConnRead {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            ConnRead::Plain(r) => std::pin::Pin::new(r).poll_read(cx, buf),
            ConnRead::Tls(r) => std::pin::Pin::new(r).poll_read(cx, buf),
        }
    }
}

/// Whether a connection is to move to the ingest runtime.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum IngestMove {
    No,
    Due,
    /// Moved, or found unable to: never again.
    Done,
}

/// The rest of a publisher's connection, on the ingest runtime: the same loop over the
/// same state, its socket registered there.
pub(super) fn go_on<S: Send + 'static>(
    mut conn: Conn,
    socket: std::net::TcpStream,
    mut st: LoopState,
    slot: S,
) {
    let node = conn.node.clone();
    let span = tracing::Span::current();
    node.spawn_ingest(
        async move {
            let _slot = slot;
            let result = match conn.attach(socket) {
                Ok(mut rd) => {
                    Node::bump(&conn.node.counters.connections_to_ingest);
                    loop {
                        // Moved already: `run` does not ask again.
                        match run(&mut conn, &mut rd, &mut st).await {
                            Ok(Exit::ToIngest) => continue,
                            Ok(Exit::Closed) => break Ok(()),
                            Err(e) => break Err(e),
                        }
                    }
                }
                Err(e) => Err(e),
            };
            conn.close().await;
            if let Err(e) = result {
                debug!("connection ended: {e}");
            }
        }
        .instrument(span),
    );
}

impl Conn {
    /// Takes a plain connection's socket back out of its halves to hand it to the ingest
    /// runtime; the read half back if it cannot move (RTSPS, or bytes still queued for
    /// the peer), and the connection goes on here; None if the socket was lost on the way.
    pub(super) fn detach(&mut self, rd: ConnRead) -> Result<std::net::TcpStream, Option<ConnRead>> {
        self.to_ingest = IngestMove::Done;
        let ConnRead::Plain(r) = rd else {
            return Err(Some(rd));
        };
        let Some(sink) = self.sink.take_if(|s| s.idle()) else {
            return Err(Some(ConnRead::Plain(r)));
        };
        let fd = self.writer.fd();
        let timeout = self.writer.timeout();
        // The writer holds the sink's other reference.
        drop(std::mem::replace(
            &mut self.writer,
            Writer::over(Box::new(tokio::io::sink()), fd, timeout),
        ));
        let w = match Arc::try_unwrap(sink) {
            Ok(sink) => sink.into_write_half(),
            Err(sink) => {
                self.write_through(sink, fd, timeout);
                return Err(Some(ConnRead::Plain(r)));
            }
        };
        let stream = match r.reunite(w) {
            Ok(s) => s,
            // Halves of one stream always reunite; were they not, nothing is lost.
            Err(e) => {
                self.write_through(TcpSink::new(e.1), fd, timeout);
                return Err(Some(ConnRead::Plain(e.0)));
            }
        };
        stream.into_std().map_err(|e| {
            debug!("cannot move the connection: {e}");
            None
        })
    }

    /// The socket taken by [`Conn::detach`], registered with the runtime of the caller.
    fn attach(&mut self, socket: std::net::TcpStream) -> std::io::Result<ConnRead> {
        let stream = TcpStream::from_std(socket)?;
        let fd = stream.as_raw_fd();
        let (r, w) = stream.into_split();
        let timeout = self.writer.timeout();
        self.write_through(TcpSink::new(w), fd, timeout);
        Ok(ConnRead::Plain(r))
    }

    /// Makes `sink` (over socket `fd`) the connection's writer, behind the slow-reader
    /// `timeout`.
    fn write_through(
        &mut self,
        sink: Arc<TcpSink>,
        fd: std::os::fd::RawFd,
        timeout: std::time::Duration,
    ) {
        self.writer = Writer::over(Box::new(sink.writer()), fd, timeout);
        self.sink = Some(sink);
    }
}
