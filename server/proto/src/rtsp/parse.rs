//! Framing of an RTSP TCP byte stream.
//!
//! One connection carries RTSP requests, RTSP responses (when we are the client, or a
//! client answers a server-sent request) and RTP/RTCP packets interleaved as
//! `$ channel len payload` (RFC 2326 §10.12). [`parse_frame`] tells the three apart and cuts
//! one off the front of a buffer; the caller owns the buffer and the socket.

use bytes::Bytes;

use super::error::{truncate, truncate_bytes};
use super::message::{Headers, Method, Request, Response};
use super::status::StatusCode;

/// One unit cut from the stream.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    Request(Request),
    Response(Response),
    Interleaved { channel: u8, payload: Bytes },
}

/// Bounds on what a peer may make us buffer.
///
/// Without them a client that never sends the blank line ending its headers, or announces
/// a 4 GiB body, would make the server buffer without end.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Maximum size of the start line plus header fields (including any blank keepalive
    /// lines before them).
    pub max_header_bytes: usize,
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 8192,
            max_body_bytes: 64 * 1024,
        }
    }
}

/// Why the stream could not be framed. Messages quote what the peer sent.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ParseError {
    #[error("bad RTSP request line {line:?}")]
    BadRequestLine {
        line: String,
        cseq: Option<u32>,
        resync: Option<usize>,
    },
    #[error("bad RTSP status line {line:?}")]
    BadStatusLine {
        line: String,
        cseq: Option<u32>,
        resync: Option<usize>,
    },
    #[error("unsupported protocol version {version:?}; only RTSP/1.0 is spoken")]
    UnsupportedVersion {
        version: String,
        cseq: Option<u32>,
        resync: Option<usize>,
    },
    #[error("bad header line {line:?}")]
    BadHeader {
        line: String,
        cseq: Option<u32>,
        resync: Option<usize>,
    },
    #[error("message header section is longer than {limit} bytes")]
    HeaderTooLarge { limit: usize, cseq: Option<u32> },
    #[error("bad Content-Length {value:?}")]
    BadContentLength { value: String, cseq: Option<u32> },
    #[error("body of {len} bytes exceeds the {limit}-byte limit")]
    BodyTooLarge {
        len: usize,
        limit: usize,
        cseq: Option<u32>,
    },
    #[error("message header is not UTF-8: {line:?}")]
    NotUtf8 {
        line: String,
        cseq: Option<u32>,
        resync: Option<usize>,
    },
    #[error("unexpected byte 0x{byte:02x} where an RTSP message or '$' frame should start")]
    UnexpectedByte { byte: u8 },
}

impl ParseError {
    pub fn status(&self) -> StatusCode {
        match self {
            ParseError::UnsupportedVersion { .. } => StatusCode::RTSP_VERSION_NOT_SUPPORTED,
            ParseError::BodyTooLarge { .. } => StatusCode::REQUEST_ENTITY_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    pub fn cseq(&self) -> Option<u32> {
        match self {
            ParseError::BadRequestLine { cseq, .. }
            | ParseError::BadStatusLine { cseq, .. }
            | ParseError::UnsupportedVersion { cseq, .. }
            | ParseError::BadHeader { cseq, .. }
            | ParseError::HeaderTooLarge { cseq, .. }
            | ParseError::BadContentLength { cseq, .. }
            | ParseError::BodyTooLarge { cseq, .. }
            | ParseError::NotUtf8 { cseq, .. } => *cseq,
            ParseError::UnexpectedByte { .. } => None,
        }
    }

    /// When `Some(n)`, `n` never exceeds the buffer that produced the error: the parser
    /// waits for the broken message's body to arrive before reporting, so the caller can
    /// simply drop `n` bytes.
    pub fn resync(&self) -> Option<usize> {
        match self {
            ParseError::BadRequestLine { resync, .. }
            | ParseError::BadStatusLine { resync, .. }
            | ParseError::UnsupportedVersion { resync, .. }
            | ParseError::BadHeader { resync, .. }
            | ParseError::NotUtf8 { resync, .. } => *resync,
            _ => None,
        }
    }
}

/// Length of the blank lines (CRLF keepalives) at the front of `buf`.
///
/// [`parse_frame`] skips these itself, but only reports them once a frame follows; a
/// connection that sends nothing but keepalives would otherwise pile them up until the
/// header limit trips, so callers may discard them eagerly with this.
pub fn skip_blank_lines(buf: &[u8]) -> usize {
    buf.iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count()
}

/// token characters of RFC 2616 §2.2, which RTSP reuses for methods and header names.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_graphic()
        && !matches!(
            b,
            b'(' | b')'
                | b'<'
                | b'>'
                | b'@'
                | b','
                | b';'
                | b':'
                | b'\\'
                | b'"'
                | b'/'
                | b'['
                | b']'
                | b'?'
                | b'='
                | b'{'
                | b'}'
        )
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_token_byte)
}

/// Lines of `head` without their terminators, accepting bare LF as well as CRLF because
/// hand-written clients and some cameras send it.
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    head.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

/// Index just past the blank line that ends the header section starting at `start`.
fn find_header_end(buf: &[u8], start: usize) -> Option<usize> {
    let mut pos = start;
    loop {
        let nl = pos + buf.get(pos..)?.iter().position(|&b| b == b'\n')?;
        let line = &buf[pos..nl];
        if (line.is_empty() || line == b"\r") && pos != start {
            return Some(nl + 1);
        }
        pos = nl + 1;
    }
}

/// Values of header `name` found by a lenient byte scan, usable even when the message is
/// otherwise broken.
fn sniff<'a>(head: &'a [u8], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    lines(head).skip(1).filter_map(move |line| {
        let colon = line.iter().position(|&b| b == b':')?;
        let n = line[..colon].trim_ascii();
        n.eq_ignore_ascii_case(name.as_bytes())
            .then(|| line[colon + 1..].trim_ascii())
    })
}

/// Recovers the CSeq so that even the error response can be matched to its request.
fn sniff_cseq(head: &[u8]) -> Option<u32> {
    let v = sniff(head, "CSeq").next()?;
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn parse_decimal(v: &str) -> Option<usize> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// Body length implied by the head, when it is unambiguous and acceptable; this is what
/// tells us where a malformed message ends.
fn sniff_body_len(head: &[u8], limits: &Limits) -> Option<usize> {
    let mut len = None;
    for v in sniff(head, "Content-Length") {
        let n = parse_decimal(std::str::from_utf8(v).ok()?)?;
        if len.is_some_and(|l| l != n) {
            return None;
        }
        len = Some(n);
    }
    let n = len.unwrap_or(0);
    (n <= limits.max_body_bytes).then_some(n)
}

/// Cuts one frame off the front of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, or the frame and the number of bytes it
/// occupied (including any blank lines skipped before it).
pub fn parse_frame(buf: &[u8], limits: &Limits) -> Result<Option<(Frame, usize)>, ParseError> {
    let skip = skip_blank_lines(buf);
    if skip > limits.max_header_bytes {
        return Err(ParseError::HeaderTooLarge {
            limit: limits.max_header_bytes,
            cseq: None,
        });
    }
    let rest = &buf[skip..];
    let Some(&first) = rest.first() else {
        return Ok(None);
    };
    if first == b'$' {
        let Some(hdr) = rest.get(..4) else {
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
        let Some(payload) = rest.get(4..4 + len) else {
            return Ok(None);
        };
        let frame = Frame::Interleaved {
            channel: hdr[1],
            payload: Bytes::copy_from_slice(payload),
        };
        return Ok(Some((frame, skip + 4 + len)));
    }
    if !is_token_byte(first) {
        return Err(ParseError::UnexpectedByte { byte: first });
    }

    let window = &buf[..buf.len().min(limits.max_header_bytes)];
    let Some(header_end) = find_header_end(window, skip) else {
        if buf.len() > limits.max_header_bytes {
            return Err(ParseError::HeaderTooLarge {
                limit: limits.max_header_bytes,
                cseq: sniff_cseq(&buf[skip..window.len()]),
            });
        }
        return Ok(None);
    };
    let head = &buf[skip..header_end];
    let cseq = sniff_cseq(head);

    let (start, headers) = match parse_head(head) {
        Ok(parsed) => parsed,
        Err(e) => {
            let end = sniff_body_len(head, limits).map(|n| header_end + n);
            if end.is_some_and(|e| e > buf.len()) {
                return Ok(None);
            }
            return Err(e.finish(cseq, end));
        }
    };
    let (headers, body_len) = take_content_length(headers, limits, cseq)?;
    let Some(body) = buf.get(header_end..header_end + body_len) else {
        return Ok(None);
    };
    let body = Bytes::copy_from_slice(body);
    let frame = match start {
        StartLine::Request { method, uri } => Frame::Request(Request {
            method,
            uri,
            headers,
            body,
        }),
        StartLine::Response { status, reason } => Frame::Response(Response {
            status,
            reason,
            headers,
            body,
        }),
    };
    Ok(Some((frame, header_end + body_len)))
}

enum StartLine {
    Request { method: Method, uri: String },
    Response { status: StatusCode, reason: String },
}

/// A head error still missing its CSeq and resync point, which are known only once the
/// whole head has been scanned.
enum HeadError {
    NotUtf8(String),
    BadRequestLine(String),
    BadStatusLine(String),
    Version(String),
    BadHeader(String),
}

impl HeadError {
    fn finish(self, cseq: Option<u32>, resync: Option<usize>) -> ParseError {
        match self {
            HeadError::NotUtf8(line) => ParseError::NotUtf8 { line, cseq, resync },
            HeadError::BadRequestLine(line) => ParseError::BadRequestLine { line, cseq, resync },
            HeadError::BadStatusLine(line) => ParseError::BadStatusLine { line, cseq, resync },
            HeadError::Version(version) => ParseError::UnsupportedVersion {
                version,
                cseq,
                resync,
            },
            HeadError::BadHeader(line) => ParseError::BadHeader { line, cseq, resync },
        }
    }
}

fn parse_head(head: &[u8]) -> Result<(StartLine, Headers), HeadError> {
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => {
            let bad = e.valid_up_to();
            let line_start = head[..bad]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let line_end = head[bad..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(head.len(), |i| bad + i);
            return Err(HeadError::NotUtf8(truncate_bytes(
                &head[line_start..line_end],
            )));
        }
    };
    let mut lines = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .take_while(|l| !l.is_empty());
    let start = parse_start_line(lines.next().unwrap_or(""))?;

    let mut fields: Vec<(String, String)> = Vec::new();
    for line in lines {
        let bad_header = || HeadError::BadHeader(truncate(line));
        if line.starts_with([' ', '\t']) {
            // obs-fold (RFC 2326 §4.2 via RFC 822): a continuation of the previous value.
            let Some((_, value)) = fields.last_mut() else {
                return Err(bad_header());
            };
            let more = line.trim_matches([' ', '\t']);
            if !more.is_empty() {
                if !value.is_empty() {
                    value.push(' ');
                }
                value.push_str(more);
            }
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(bad_header());
        };
        if !is_token(name) {
            return Err(bad_header());
        }
        fields.push((name.to_owned(), value.trim_matches([' ', '\t']).to_owned()));
    }
    Ok((start, fields.into_iter().collect()))
}

/// Whether `v` has the shape `NAME/digits.digits`, i.e. is a protocol version at all; a
/// version we do not speak deserves 505, a garbled line 400.
fn looks_like_version(v: &str) -> bool {
    let Some((name, num)) = v.split_once('/') else {
        return false;
    };
    let Some((major, minor)) = num.split_once('.') else {
        return false;
    };
    is_token(name)
        && [major, minor]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn check_version(version: &str, bad: impl FnOnce() -> HeadError) -> Result<(), HeadError> {
    if version == "RTSP/1.0" {
        Ok(())
    } else if looks_like_version(version) {
        Err(HeadError::Version(truncate(version)))
    } else {
        Err(bad())
    }
}

fn parse_start_line(line: &str) -> Result<StartLine, HeadError> {
    if line.starts_with("RTSP/") {
        let bad = || HeadError::BadStatusLine(truncate(line));
        let (version, rest) = line.split_once(' ').unwrap_or((line, ""));
        check_version(version, bad)?;
        let rest = rest.trim_start_matches(' ');
        let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
        if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let code: u16 = code.parse().map_err(|_| bad())?;
        if code < 100 {
            return Err(bad());
        }
        return Ok(StartLine::Response {
            status: StatusCode(code),
            reason: reason.trim().to_owned(),
        });
    }
    let bad = || HeadError::BadRequestLine(truncate(line));
    let parts: Vec<&str> = line.split_ascii_whitespace().collect();
    let [method, uri, version] = parts[..] else {
        return Err(bad());
    };
    if !is_token(method) {
        return Err(bad());
    }
    check_version(version, bad)?;
    Ok(StartLine::Request {
        method: Method::parse(method),
        uri: uri.to_owned(),
    })
}

/// Moves Content-Length out of the headers into a length, refusing values that would let
/// two parsers disagree about where the message ends (garbage, signs, conflicting copies).
fn take_content_length(
    mut headers: Headers,
    limits: &Limits,
    cseq: Option<u32>,
) -> Result<(Headers, usize), ParseError> {
    let mut len: Option<usize> = None;
    for v in headers.get_all("Content-Length") {
        let bad = || ParseError::BadContentLength {
            value: truncate(v),
            cseq,
        };
        let n = parse_decimal(v).ok_or_else(bad)?;
        if len.is_some_and(|l| l != n) {
            return Err(bad());
        }
        len = Some(n);
    }
    let len = len.unwrap_or(0);
    if len > limits.max_body_bytes {
        return Err(ParseError::BodyTooLarge {
            len,
            limit: limits.max_body_bytes,
            cseq,
        });
    }
    headers.remove("Content-Length");
    Ok((headers, len))
}
