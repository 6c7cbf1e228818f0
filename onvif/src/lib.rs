//! ONVIF onboarding (issue 26 §3, Profile S), sans-IO: the SOAP requests a node sends to a
//! camera's device service and the parsing of what comes back, the WS-Security
//! UsernameToken (PasswordDigest) with the device's clock offset, and WS-Discovery's Probe
//! and ProbeMatch. Bytes in, bytes out: the node's `onvif` module does the HTTP POSTs and
//! the UDP probe, and every step here is tested with recorded documents and no socket.
//!
//! Why hand-written SOAP rather than an ONVIF crate: crates.io's `onvif` (lumeohq) is
//! generated from the WSDLs with `yaserde` and brings `reqwest` and an async runtime of its
//! own into the client; it does I/O inside, so its flows cannot be driven from recorded
//! documents, and its XML reading is not ours to harden. Onboarding needs six operations
//! (GetSystemDateAndTime, GetCapabilities, GetServices, GetProfiles, GetStreamUri, and
//! PTZ's few), whose requests are a dozen lines of XML each and whose answers are read by
//! local element names, so the vendor's namespace prefixes do not matter.
//!
//! Every answer is read by [`xml::parse`], which refuses DTDs (so XXE and entity
//! expansion) by name and bounds size, depth and element count. Errors name what the
//! device sent, SOAP Fault reasons included, made printable and cut short.

pub mod discovery;
pub mod media;
pub mod onboard;
pub mod ptz;
pub mod soap;
pub mod xml;

pub use discovery::ProbeMatch;
pub use media::Profile;
pub use onboard::{Known, Next, Onboard, Resolved};
pub use soap::{Credentials, HttpRequest};

/// What went wrong talking to a device, naming what it sent.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("the device's answer is {len} bytes, over the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("the device's answer declares a DTD (<!DOCTYPE …>): refused, no entity is expanded")]
    Dtd,
    #[error("the device's answer names the entity &{0}; (no DTD is read: only XML's five exist)")]
    UnknownEntity(String),
    #[error("the device's answer nests elements deeper than {0}")]
    TooDeep(usize),
    #[error("the device's answer has more than {0} elements")]
    TooManyElements(usize),
    #[error("the device's answer is not well-formed XML: {0}")]
    Xml(String),
    #[error("the device's answer is not a SOAP envelope with a body (root <{0}>)")]
    NotSoap(String),
    #[error("the device answered {action} with a SOAP fault {code}: {reason}")]
    Fault {
        action: &'static str,
        code: String,
        reason: String,
    },
    #[error("the device refused the user's credentials for {action} (HTTP {status}{})",
        if reason.is_empty() { String::new() } else { format!(": {reason}") })]
    Unauthorized {
        action: &'static str,
        status: u16,
        reason: String,
    },
    #[error("the device answered {action} with HTTP {status}: {body}")]
    Http {
        action: &'static str,
        status: u16,
        body: String,
    },
    #[error("the device's {action} answer has no {what}")]
    Missing {
        action: &'static str,
        what: &'static str,
    },
    #[error("the device's {action} answer has {what} {value:?}: {why}")]
    Invalid {
        action: &'static str,
        what: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("the device has no media profile")]
    NoProfiles,
    #[error("the device has no profile {wanted:?} (it has {have})")]
    NoSuchProfile { wanted: String, have: String },
    #[error(
        "the device URL {0:?} is not an http:// or https:// URL with a host and no credentials"
    )]
    DeviceUrl(String),
}

/// Text from a device made safe for a log line or an API answer: control characters
/// replaced, at most 200 characters.
pub fn printable(s: &str) -> String {
    const MAX: usize = 200;
    let mut out: String = s
        .trim()
        .chars()
        .take(MAX)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.trim().chars().count() > MAX {
        out.push('…');
    }
    out
}

/// Runs every parser over `bytes`: the fuzz target's contract is that each returns a value
/// or an error, never a panic.
pub fn fuzz_parsers(bytes: &[u8]) {
    let _ = soap::body(bytes, "fuzz");
    let _ = soap::parse_system_time(bytes);
    let _ = soap::parse_capabilities(bytes);
    let _ = soap::parse_services(bytes);
    let _ = media::parse_profiles(bytes);
    let _ = media::parse_stream_uri(bytes);
    let _ = discovery::parse_matches(bytes, None);
    let _ = ptz::parse_presets(bytes);
    let _ = ptz::parse_set_preset(bytes);
}
