//! Where MIKEY messages travel in RTSP (RFC 4567): the SDP attribute
//! `a=key-mgmt:mikey <base64>` of the server's description, and the client's
//! `KeyMgmt: prot=mikey; uri="…"; data="<base64>"` header on SETUP.

use super::mikey::{self, MikeyError, Offer};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// Why a `KeyMgmt` header was not used.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum KeyMgmtError {
    #[error("KeyMgmt names no MIKEY message (prot={0:?})")]
    NotMikey(String),
    #[error("KeyMgmt has no data parameter")]
    NoData,
    #[error("KeyMgmt data is not base64")]
    Base64,
    #[error("KeyMgmt: {0}")]
    Mikey(#[from] MikeyError),
}

/// The SDP attribute value (after `a=key-mgmt:`) carrying `message`.
pub fn sdp_attribute(message: &[u8]) -> String {
    format!("mikey {}", STANDARD.encode(message))
}

/// Reads the MIKEY offer of a client's `KeyMgmt` header. Of several specs (a client may
/// offer more than one protocol) the first MIKEY one is taken.
pub fn parse_header(value: &str) -> Result<Offer, KeyMgmtError> {
    let mut first_prot = None;
    for spec in split_unquoted(value, ',') {
        let mut prot = None;
        let mut data = None;
        for param in split_unquoted(spec, ';') {
            let Some((k, v)) = param.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "prot" => prot = Some(v.to_string()),
                "data" => data = Some(v.to_string()),
                _ => {}
            }
        }
        let prot = prot.unwrap_or_default();
        if !prot.eq_ignore_ascii_case("mikey") {
            first_prot.get_or_insert(prot);
            continue;
        }
        let data = data.ok_or(KeyMgmtError::NoData)?;
        let bytes = STANDARD
            .decode(data.trim())
            .map_err(|_| KeyMgmtError::Base64)?;
        return Ok(mikey::parse(&bytes)?);
    }
    Err(KeyMgmtError::NotMikey(first_prot.unwrap_or_default()))
}

/// Reads the MIKEY offer of an SDP `a=key-mgmt:` value (what a client does with ours).
pub fn parse_sdp_attribute(value: &str) -> Result<Offer, KeyMgmtError> {
    let (prot, data) = value.trim().split_once(' ').ok_or(KeyMgmtError::NoData)?;
    if !prot.eq_ignore_ascii_case("mikey") {
        return Err(KeyMgmtError::NotMikey(prot.to_string()));
    }
    let bytes = STANDARD
        .decode(data.trim())
        .map_err(|_| KeyMgmtError::Base64)?;
    Ok(mikey::parse(&bytes)?)
}

/// Splits on `sep` outside double quotes (a quoted URI may hold `;` or `,`), trimmed,
/// empty parts dropped.
fn split_unquoted(s: &str, sep: char) -> impl Iterator<Item = &str> {
    crate::rtsp::split_unquoted(s, sep)
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
}
