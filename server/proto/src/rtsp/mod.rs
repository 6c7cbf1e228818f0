//! RTSP 1.0 (RFC 2326), sans-IO: message framing and serialisation, typed header values,
//! and the session state machine.
//!
//! Everything takes bytes or strings and returns values; the server decides what to do with
//! them. Peer input is never trusted: every parser returns a typed error quoting (a bounded
//! slice of) what the peer sent rather than panicking.

pub mod auth;
mod error;
mod message;
mod parse;
mod range;
mod session;
mod status;
mod transport;
pub mod url;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod header_tests;
#[cfg(test)]
mod parse_tests;

pub use error::{HeaderError, MAX_ERROR_TEXT};
pub use message::{Headers, Method, Request, Response};
pub use parse::{parse_frame, skip_blank_lines, Frame, Limits, ParseError};
pub use range::{
    parse_scale, parse_speed, rfc3339, NptTime, Range, TimeSpan, TimeSpanError, UtcTime,
};
pub use session::{
    format_rtp_info, next_state, parse_rtp_info, RtpInfo, SessionHeader, SessionKind, SessionState,
};
pub use status::StatusCode;
pub(crate) use transport::split_unquoted;
pub use transport::{parse_transports, LowerTransport, Transport, TransportMode};
