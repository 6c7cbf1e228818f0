//! RTSP status codes.

use std::fmt;

/// An RTSP status code.
///
/// A newtype rather than an enum because peers (cameras especially) answer with codes we
/// have never heard of, and those must survive parsing and re-serialisation unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StatusCode(pub u16);

impl StatusCode {
    pub const CONTINUE: StatusCode = StatusCode(100);
    pub const OK: StatusCode = StatusCode(200);
    pub const CREATED: StatusCode = StatusCode(201);
    pub const LOW_ON_STORAGE_SPACE: StatusCode = StatusCode(250);
    pub const MULTIPLE_CHOICES: StatusCode = StatusCode(300);
    pub const MOVED_PERMANENTLY: StatusCode = StatusCode(301);
    pub const FOUND: StatusCode = StatusCode(302);
    pub const SEE_OTHER: StatusCode = StatusCode(303);
    pub const NOT_MODIFIED: StatusCode = StatusCode(304);
    pub const USE_PROXY: StatusCode = StatusCode(305);
    pub const BAD_REQUEST: StatusCode = StatusCode(400);
    pub const UNAUTHORIZED: StatusCode = StatusCode(401);
    pub const PAYMENT_REQUIRED: StatusCode = StatusCode(402);
    pub const FORBIDDEN: StatusCode = StatusCode(403);
    pub const NOT_FOUND: StatusCode = StatusCode(404);
    pub const METHOD_NOT_ALLOWED: StatusCode = StatusCode(405);
    pub const NOT_ACCEPTABLE: StatusCode = StatusCode(406);
    pub const PROXY_AUTHENTICATION_REQUIRED: StatusCode = StatusCode(407);
    pub const REQUEST_TIMEOUT: StatusCode = StatusCode(408);
    pub const GONE: StatusCode = StatusCode(410);
    pub const LENGTH_REQUIRED: StatusCode = StatusCode(411);
    pub const PRECONDITION_FAILED: StatusCode = StatusCode(412);
    pub const REQUEST_ENTITY_TOO_LARGE: StatusCode = StatusCode(413);
    pub const REQUEST_URI_TOO_LARGE: StatusCode = StatusCode(414);
    pub const UNSUPPORTED_MEDIA_TYPE: StatusCode = StatusCode(415);
    pub const PARAMETER_NOT_UNDERSTOOD: StatusCode = StatusCode(451);
    pub const CONFERENCE_NOT_FOUND: StatusCode = StatusCode(452);
    pub const NOT_ENOUGH_BANDWIDTH: StatusCode = StatusCode(453);
    pub const SESSION_NOT_FOUND: StatusCode = StatusCode(454);
    pub const METHOD_NOT_VALID_IN_THIS_STATE: StatusCode = StatusCode(455);
    pub const HEADER_FIELD_NOT_VALID: StatusCode = StatusCode(456);
    pub const INVALID_RANGE: StatusCode = StatusCode(457);
    pub const PARAMETER_IS_READ_ONLY: StatusCode = StatusCode(458);
    pub const AGGREGATE_OPERATION_NOT_ALLOWED: StatusCode = StatusCode(459);
    pub const ONLY_AGGREGATE_OPERATION_ALLOWED: StatusCode = StatusCode(460);
    pub const UNSUPPORTED_TRANSPORT: StatusCode = StatusCode(461);
    pub const DESTINATION_UNREACHABLE: StatusCode = StatusCode(462);
    /// RFC 4567 §3.2: the client's `KeyMgmt` could not be used.
    pub const KEY_MANAGEMENT_FAILURE: StatusCode = StatusCode(463);
    pub const INTERNAL_SERVER_ERROR: StatusCode = StatusCode(500);
    pub const NOT_IMPLEMENTED: StatusCode = StatusCode(501);
    pub const BAD_GATEWAY: StatusCode = StatusCode(502);
    pub const SERVICE_UNAVAILABLE: StatusCode = StatusCode(503);
    pub const GATEWAY_TIMEOUT: StatusCode = StatusCode(504);
    pub const RTSP_VERSION_NOT_SUPPORTED: StatusCode = StatusCode(505);
    pub const OPTION_NOT_SUPPORTED: StatusCode = StatusCode(551);

    /// The reason phrase RFC 2326 §7.1.1 pairs with this code.
    ///
    /// Clients never interpret the phrase, but humans reading packet captures do, so we use
    /// the RFC's wording; unknown codes fall back to a phrase naming their class.
    pub fn reason(self) -> &'static str {
        self.known_reason().unwrap_or(match self.0 / 100 {
            1 => "Informational",
            2 => "Success",
            3 => "Redirection",
            4 => "Client Error",
            5 => "Server Error",
            _ => "Unknown",
        })
    }

    fn known_reason(self) -> Option<&'static str> {
        Some(match self.0 {
            100 => "Continue",
            200 => "OK",
            201 => "Created",
            250 => "Low on Storage Space",
            300 => "Multiple Choices",
            301 => "Moved Permanently",
            302 => "Moved Temporarily",
            303 => "See Other",
            304 => "Not Modified",
            305 => "Use Proxy",
            400 => "Bad Request",
            401 => "Unauthorized",
            402 => "Payment Required",
            403 => "Forbidden",
            404 => "Not Found",
            405 => "Method Not Allowed",
            406 => "Not Acceptable",
            407 => "Proxy Authentication Required",
            408 => "Request Time-out",
            410 => "Gone",
            411 => "Length Required",
            412 => "Precondition Failed",
            413 => "Request Entity Too Large",
            414 => "Request-URI Too Large",
            415 => "Unsupported Media Type",
            451 => "Parameter Not Understood",
            452 => "Conference Not Found",
            453 => "Not Enough Bandwidth",
            454 => "Session Not Found",
            455 => "Method Not Valid in This State",
            456 => "Header Field Not Valid for Resource",
            457 => "Invalid Range",
            458 => "Parameter Is Read-Only",
            459 => "Aggregate operation not allowed",
            460 => "Only aggregate operation allowed",
            461 => "Unsupported transport",
            462 => "Destination unreachable",
            463 => "Key Management Failure",
            500 => "Internal Server Error",
            501 => "Not Implemented",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Time-out",
            505 => "RTSP Version not supported",
            551 => "Option not supported",
            _ => return None,
        })
    }

    /// 2xx: the request was carried out, so session state may advance.
    pub fn is_success(self) -> bool {
        (200..300).contains(&self.0)
    }

    /// 4xx/5xx: lets callers treat any failure uniformly without listing codes.
    pub fn is_error(self) -> bool {
        self.0 >= 400
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, self.reason())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons() {
        assert_eq!(StatusCode::OK.reason(), "OK");
        assert_eq!(StatusCode::FOUND.reason(), "Moved Temporarily");
        assert_eq!(
            StatusCode::METHOD_NOT_VALID_IN_THIS_STATE.reason(),
            "Method Not Valid in This State"
        );
        assert_eq!(
            StatusCode::RTSP_VERSION_NOT_SUPPORTED.reason(),
            "RTSP Version not supported"
        );
        assert_eq!(StatusCode(499).reason(), "Client Error");
        assert_eq!(StatusCode(999).reason(), "Unknown");
        assert_eq!(StatusCode::NOT_FOUND.to_string(), "404 Not Found");
        assert!(StatusCode::OK.is_success() && !StatusCode::OK.is_error());
        assert!(StatusCode::SESSION_NOT_FOUND.is_error());
    }
}
