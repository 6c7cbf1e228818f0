//! A request the session refuses: the status code and the reason the client will print.

use vigil_proto::rtsp::{Response, StatusCode};

/// Why a request is refused; `Response::from` turns it into the answer (`reason` appended
/// to the status text, as `RTSP/1.0 457 Invalid Range (the range ends before it starts)`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} {}: {reason}", status.0, status.reason())]
pub struct Refusal {
    pub status: StatusCode,
    pub reason: String,
}

impl Refusal {
    pub fn new(status: StatusCode, reason: impl std::fmt::Display) -> Refusal {
        Refusal {
            status,
            reason: reason.to_string(),
        }
    }
}

impl From<Refusal> for Response {
    fn from(r: Refusal) -> Response {
        let mut resp = Response::new(r.status);
        resp.reason = format!("{} ({})", r.status.reason(), r.reason);
        resp
    }
}
