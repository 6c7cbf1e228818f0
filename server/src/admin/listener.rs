//! The admin API's accept loop: hyper with a timer and the `[http]` connection limits, over
//! plain TCP (`[http] listen`) or TLS (`[http] tls_listen`).
//!
//! Written out because `axum::serve` gives hyper no timer, so hyper's header read timeout
//! never applies, and caps no connections: anyone who reached the port could open sockets
//! and send nothing (or half a header) and hold a task, a socket and a read buffer each,
//! forever, until the process ran out of descriptors for RTSP, storage and UDP as well.
//! Here every connection takes a slot of the listener's limits (refused at once past them,
//! counted), and a request head must arrive within `header_read_timeout_ms`, on a new
//! connection and between the requests of a kept-alive one. A response the client takes
//! nothing of for `write_timeout_ms` ends the connection (hyper has no write deadline of its
//! own), and with it the work behind the response: an export stops reading segments. The
//! token check stays in the router (`token::layer`), after a whole request head; it learns
//! where the connection came in from the `token::Arrival` set here.

use crate::net::tls::Acceptor;
use crate::node::Node;
use axum::http::HeaderValue;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::{debug, warn};

/// How long a connection being closed at shutdown may finish the response it is writing.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// Serve `app` on `listener` until the node shuts down; over TLS when `tls` is given
/// (`[http] tls_listen`: the handshake in the connection's task, after the address's
/// handshake budget admitted it; every answer carries HSTS).
pub async fn serve(node: Arc<Node>, listener: TcpListener, app: Router, tls: Option<Acceptor>) {
    let conf = &node.config.http;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(conf.header_read_timeout_ms));
    let http = Arc::new(http);
    let write_timeout = Duration::from_millis(conf.write_timeout_ms);
    // Whether a request may be local (`token::Arrival`) is a property of this listener:
    // never the HTTPS one, never one beyond loopback.
    let plain_loopback_listener =
        tls.is_none() && listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    let app = match (&tls, conf.hsts_max_age_secs) {
        (Some(_), age) if age > 0 => with_hsts(app, age),
        _ => app,
    };
    while let Some((stream, peer)) = crate::net::tcp::accept(&listener, &node.shutdown).await {
        let s = &node.limit_stats;
        let Some(slot) = node.http_connections.admit(
            peer,
            conf.max_connections,
            conf.max_connections_per_address,
            [&s.http_connections, &s.http_connections_per_address],
        ) else {
            continue;
        };
        if let Some(Err(e)) = tls.as_ref().map(|t| t.admit(peer, &node.limit_stats)) {
            debug!(%peer, "HTTPS connection refused: {e}");
            continue;
        }
        let arrival = super::token::Arrival {
            peer,
            plain_loopback_listener,
            tls: tls.is_some(),
        };
        let (http, app, node, tls) = (http.clone(), app.clone(), node.clone(), tls.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let ended = match tls {
                None => connection(&node, &http, app, stream, arrival, write_timeout).await,
                Some(tls) => match tls.handshake(stream).await {
                    Ok(stream) => {
                        connection(&node, &http, app, stream, arrival, write_timeout).await
                    }
                    Err(e) => {
                        debug!(%peer, "HTTPS: {e}");
                        return;
                    }
                },
            };
            if let Err(e) = ended {
                if write_stalled(&e) {
                    Node::bump(&node.counters.slow_readers_dropped);
                    warn!(%peer, "HTTP client took nothing for {write_timeout:?}: disconnected");
                } else {
                    debug!(%peer, "admin API connection ended: {e}");
                }
            }
        });
    }
}

/// One connection's requests, plain or TLS, until it closes or the node shuts down.
async fn connection<S>(
    node: &Node,
    http: &hyper::server::conn::http1::Builder,
    app: Router,
    stream: S,
    arrival: super::token::Arrival,
    write_timeout: Duration,
) -> Result<(), hyper::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    // The client's address for the routes that limit per address (WHEP offers), and where
    // the connection came in for the token layer.
    let app = app
        .layer(axum::Extension(axum::extract::ConnectInfo(arrival.peer)))
        .layer(axum::Extension(arrival));
    let service = TowerToHyperService::new(app);
    let mut stream = tokio_io_timeout::TimeoutStream::new(stream);
    stream.set_write_timeout(Some(write_timeout));
    let conn = http.serve_connection(TokioIo::new(Box::pin(stream)), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => r,
        _ = node.shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            tokio::time::timeout(SHUTDOWN_GRACE, conn.as_mut())
                .await
                .unwrap_or(Ok(()))
        }
    }
}

/// Every answer of the HTTPS listener tells the browser to use HTTPS for this host from now
/// on (`Strict-Transport-Security`), so a console bookmarked once is never opened in clear.
fn with_hsts(app: Router, max_age_secs: u64) -> Router {
    let value = HeaderValue::from_str(&format!("max-age={max_age_secs}"))
        .unwrap_or_else(|_| HeaderValue::from_static("max-age=31536000"));
    app.layer(axum::middleware::map_response(
        move |mut r: axum::response::Response| {
            let value = value.clone();
            async move {
                r.headers_mut()
                    .insert(axum::http::header::STRICT_TRANSPORT_SECURITY, value);
                r
            }
        },
    ))
}

/// Whether a connection ended because the client took nothing for the write timeout (the
/// only timeout the stream wrapper has; hyper's own header timeout is not an I/O error).
fn write_stalled(e: &hyper::Error) -> bool {
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::TimedOut;
        }
        source = s.source();
    }
    false
}
