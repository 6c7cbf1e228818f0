//! A deadline on every request body (issue 44, finding M1): hyper's header read timeout
//! covers only a request's head, so a client that sent a head with `Content-Length: 2000000`
//! and then a byte every few seconds held its connection slot and a growing buffer for as
//! long as it liked — 64 such connections per address filled the listener.
//!
//! The body is read here, whole, within `[http] body_read_timeout_ms` of the head and up to
//! `BODY_MAX` bytes, before any route sees it; a late body is answered 408 and the
//! connection closed, an oversized one 413. A deadline per read (nginx's
//! `client_body_timeout`) would still let one byte per period through for ever, and a read
//! timeout on the socket would also fire while hyper watches an idle connection during a
//! long export, so the deadline is on the body as a whole. Only requests that carry a body
//! are touched: GETs stream as before.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// The most a request body may hold: axum's own default limit for the extractors, so no
/// route that accepted a body before refuses it now.
pub const BODY_MAX: usize = 2 * 1024 * 1024;

/// How long a body may take.
#[derive(Clone, Copy)]
pub struct BodyDeadline(pub Duration);

/// Whether a request announces a body: a non-zero `Content-Length` or any
/// `Transfer-Encoding` (chunked).
fn has_body(req: &Request) -> bool {
    let h = req.headers();
    h.contains_key(header::TRANSFER_ENCODING)
        || h.get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
}

pub async fn layer(State(deadline): State<BodyDeadline>, req: Request, next: Next) -> Response {
    if !has_body(&req) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(deadline.0, axum::body::to_bytes(body, BODY_MAX)).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(e)) => {
            // Past the limit, or the client's stream broke: either way nothing to route.
            let mut r = (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body refused: {e}\n"),
            )
                .into_response();
            close(&mut r);
            r
        }
        Err(_) => {
            let mut r = (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ms\n",
                    deadline.0.as_millis()
                ),
            )
                .into_response();
            close(&mut r);
            r
        }
    }
}

/// The connection ends with this answer: the rest of the body is not waited for.
fn close(r: &mut Response) {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}
