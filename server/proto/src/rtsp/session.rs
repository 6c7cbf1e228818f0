//! Session header, RTP-Info header and the server session state machine.

use std::fmt;

use super::error::HeaderError;
use super::message::Method;
use super::status::StatusCode;

/// The Session header (RFC 2326 §12.37).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionHeader {
    pub id: String,
    /// Seconds of inactivity after which the server may drop the session; clients use it
    /// to schedule keepalives.
    pub timeout: Option<u32>,
}

impl SessionHeader {
    pub fn parse(value: &str) -> Result<Self, HeaderError> {
        let bad = |reason| HeaderError::malformed("Session", value, reason);
        let mut parts = value.split(';');
        let id = parts.next().unwrap_or("").trim();
        // RFC 2326 allows only ALPHA / DIGIT / "$-_.+"; real servers also use other
        // printable characters, so we only reject what would break the header syntax.
        if id.is_empty()
            || !id
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b',' && b != b'"')
        {
            return Err(bad("bad session id"));
        }
        let mut timeout = None;
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            if k.trim().eq_ignore_ascii_case("timeout") {
                let v = v.trim();
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad("bad timeout"));
                }
                timeout = Some(v.parse().map_err(|_| bad("timeout out of range"))?);
            }
        }
        Ok(SessionHeader {
            id: id.to_owned(),
            timeout,
        })
    }
}

impl fmt::Display for SessionHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)?;
        if let Some(t) = self.timeout {
            write!(f, ";timeout={t}")?;
        }
        Ok(())
    }
}

/// One stream's entry in an RTP-Info header (RFC 2326 §12.33): which RTP sequence number
/// and timestamp correspond to the start of the PLAY range, so the client can map RTP time
/// to play time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtpInfo {
    pub url: String,
    pub seq: Option<u16>,
    pub rtptime: Option<u32>,
}

pub fn format_rtp_info(entries: &[RtpInfo]) -> String {
    let mut out = String::new();
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("url=");
        out.push_str(&e.url);
        if let Some(s) = e.seq {
            out.push_str(&format!(";seq={s}"));
        }
        if let Some(t) = e.rtptime {
            out.push_str(&format!(";rtptime={t}"));
        }
    }
    out
}

/// Parses RTP-Info.
///
/// URLs may themselves contain `,` and `;` (the RFC's grammar is ambiguous here), so an
/// entry only ends at a comma followed by `url=`, and only `;seq=`, `;rtptime=` and `;ssrc=`
/// are taken as parameters; any other `;...` stays part of the URL.
pub fn parse_rtp_info(value: &str) -> Result<Vec<RtpInfo>, HeaderError> {
    let bad = |reason| HeaderError::malformed("RTP-Info", value, reason);
    let mut starts = Vec::new();
    for (i, _) in value.match_indices(',') {
        let rest = value[i + 1..].trim_start();
        if rest
            .get(..4)
            .is_some_and(|k| k.eq_ignore_ascii_case("url="))
        {
            starts.push(i);
        }
    }
    let mut entries = Vec::new();
    let mut from = 0;
    for end in starts.into_iter().chain([value.len()]) {
        let entry = value[from..end].trim();
        from = end + 1;
        if entry.is_empty() {
            continue;
        }
        let mut parts = entry.split(';');
        let first = parts.next().unwrap_or("").trim();
        let url = match first.get(..4) {
            Some(k) if k.eq_ignore_ascii_case("url=") => &first[4..],
            _ => return Err(bad("entry does not start with url=")),
        };
        let mut info = RtpInfo {
            url: url.to_owned(),
            seq: None,
            rtptime: None,
        };
        for p in parts {
            let kv = p
                .split_once('=')
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim()));
            match kv.as_ref().map(|(k, v)| (k.as_str(), *v)) {
                Some(("seq", v)) => info.seq = Some(v.parse().map_err(|_| bad("bad seq"))?),
                Some(("rtptime", v)) => {
                    info.rtptime = Some(v.parse().map_err(|_| bad("bad rtptime"))?)
                }
                Some(("ssrc", _)) => {}
                _ => {
                    info.url.push(';');
                    info.url.push_str(p);
                }
            }
        }
        if info.url.is_empty() {
            return Err(bad("empty url"));
        }
        entries.push(info);
    }
    if entries.is_empty() {
        return Err(bad("no entries"));
    }
    Ok(entries)
}

/// Server-side session states of RFC 2326 Appendix A.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionState {
    Init,
    Ready,
    Playing,
    Recording,
}

/// Whether a session sends media to the client or receives it; fixed at the first SETUP
/// (by the Transport mode or whether the path was ANNOUNCEd), and it decides which of PLAY
/// or RECORD is legal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionKind {
    Play,
    Record,
}

/// Applies `method` to a session, as a pure function so the rules are tested apart from
/// any networking.
///
/// Methods that never touch session state (DESCRIBE, OPTIONS, GET/SET_PARAMETER) leave it
/// unchanged. ANNOUNCE and REDIRECT are not valid on an existing session (455), and an
/// unknown method yields 501 rather than 455 because no state would make it valid.
pub fn next_state(
    state: SessionState,
    kind: SessionKind,
    method: &Method,
) -> Result<SessionState, StatusCode> {
    use SessionState::*;
    let invalid = Err(StatusCode::METHOD_NOT_VALID_IN_THIS_STATE);
    match method {
        Method::Setup => Ok(match state {
            Init => Ready,
            s => s,
        }),
        Method::Play => match (kind, state) {
            (SessionKind::Play, Ready | Playing) => Ok(Playing),
            _ => invalid,
        },
        Method::Record => match (kind, state) {
            (SessionKind::Record, Ready | Recording) => Ok(Recording),
            _ => invalid,
        },
        Method::Pause => match state {
            Init => invalid,
            _ => Ok(Ready),
        },
        Method::Teardown => Ok(Init),
        Method::Options | Method::Describe | Method::GetParameter | Method::SetParameter => {
            Ok(state)
        }
        Method::Announce | Method::Redirect => invalid,
        Method::Other(_) => Err(StatusCode::NOT_IMPLEMENTED),
    }
}
