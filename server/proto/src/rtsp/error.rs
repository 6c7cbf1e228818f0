//! Header-value errors shared by the typed header parsers.

use super::status::StatusCode;

/// Longest piece of peer text kept inside an error.
///
/// Errors end up in logs and sometimes in response bodies; a hostile peer must not be able
/// to make us copy megabytes of its garbage around, so whatever it sent is cut here.
pub const MAX_ERROR_TEXT: usize = 200;

/// Copies at most [`MAX_ERROR_TEXT`] characters of `s`, marking the cut so a reader of the
/// log can tell a truncated value from a short one.
pub(crate) fn truncate(s: &str) -> String {
    match s.char_indices().nth(MAX_ERROR_TEXT) {
        None => s.to_owned(),
        Some((idx, _)) => format!("{}...", &s[..idx]),
    }
}

/// Lossy, truncated rendering of raw bytes that were not valid text.
pub(crate) fn truncate_bytes(b: &[u8]) -> String {
    let end = b.len().min(MAX_ERROR_TEXT * 4);
    truncate(&String::from_utf8_lossy(&b[..end]))
}

/// A header was present but its value could not be understood.
///
/// Carries the header name and (truncated) value exactly as the peer sent it, so a log line
/// is enough to tell which client is misbehaving and how.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// The value breaks the header's grammar.
    #[error("malformed {header} header {value:?}: {reason}")]
    Malformed {
        header: &'static str,
        value: String,
        reason: &'static str,
    },
    /// The value is well-formed but asks for something we do not implement (e.g. a SMPTE
    /// range, or only non-RTP transports).
    #[error("unsupported {header} header {value:?}: {reason}")]
    Unsupported {
        header: &'static str,
        value: String,
        reason: &'static str,
    },
}

impl HeaderError {
    pub(crate) fn malformed(header: &'static str, value: &str, reason: &'static str) -> Self {
        HeaderError::Malformed {
            header,
            value: truncate(value),
            reason,
        }
    }

    pub(crate) fn unsupported(header: &'static str, value: &str, reason: &'static str) -> Self {
        HeaderError::Unsupported {
            header,
            value: truncate(value),
            reason,
        }
    }

    /// Name of the header the peer got wrong.
    pub fn header(&self) -> &'static str {
        match self {
            HeaderError::Malformed { header, .. } | HeaderError::Unsupported { header, .. } => {
                header
            }
        }
    }

    /// The status RFC 2326 prescribes for this failure, so handlers need not repeat the
    /// mapping: a Transport nobody can serve is 461, a Range we cannot honour is 457, and
    /// everything else is the client's syntax error (400).
    pub fn status(&self) -> StatusCode {
        match (self, self.header()) {
            (HeaderError::Unsupported { .. }, "Transport") => StatusCode::UNSUPPORTED_TRANSPORT,
            (_, "Range") => StatusCode::INVALID_RANGE,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_long_text() {
        let long = "x".repeat(1000);
        let t = truncate(&long);
        assert_eq!(t.len(), MAX_ERROR_TEXT + 3);
        assert!(t.ends_with("..."));
        assert_eq!(truncate("short"), "short");
        // Multi-byte characters are never split.
        let wide = "é".repeat(300);
        assert_eq!(truncate(&wide).chars().count(), MAX_ERROR_TEXT + 3);
    }

    #[test]
    fn status_mapping() {
        assert_eq!(
            HeaderError::unsupported("Transport", "RAW/RAW/UDP", "x").status(),
            StatusCode::UNSUPPORTED_TRANSPORT
        );
        assert_eq!(
            HeaderError::malformed("Range", "npt=x", "x").status(),
            StatusCode::INVALID_RANGE
        );
        assert_eq!(
            HeaderError::malformed("Session", "", "x").status(),
            StatusCode::BAD_REQUEST
        );
        let msg = HeaderError::malformed("Session", "a b", "bad id").to_string();
        assert!(msg.contains("Session") && msg.contains("\"a b\""), "{msg}");
    }
}
