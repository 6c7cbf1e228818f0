//! WS-Discovery (2005/04, what ONVIF devices answer): the Probe a node multicasts to
//! 239.255.255.250:3702, and the ProbeMatches that come back, each naming the device's
//! endpoint, its service addresses (`XAddrs`), scopes, and the model and name its scopes
//! carry (`onvif://www.onvif.org/hardware/<model>`, `…/name/<name>`).

use crate::xml::{self, Element};
use crate::{printable, Error};
use serde::{Deserialize, Serialize};

pub const MULTICAST: std::net::SocketAddrV4 =
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(239, 255, 255, 250), 3702);

/// At most this many addresses and scopes are kept of one match.
const MAX_LIST: usize = 32;

/// `urn:uuid:` of 16 random bytes (RFC 4122 version 4).
pub fn message_id(random: [u8; 16]) -> String {
    let mut b = random;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A Probe for ONVIF video transmitters, with `message_id` (see [`message_id`]).
pub fn probe(message_id: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <s:Envelope xmlns:s=\"http://www.w3.org/2003/05/soap-envelope\" \
         xmlns:a=\"http://schemas.xmlsoap.org/ws/2004/08/addressing\" \
         xmlns:d=\"http://schemas.xmlsoap.org/ws/2005/04/discovery\" \
         xmlns:dn=\"http://www.onvif.org/ver10/network/wsdl\"><s:Header>\
         <a:Action s:mustUnderstand=\"1\">http://schemas.xmlsoap.org/ws/2005/04/discovery/Probe</a:Action>\
         <a:MessageID>{}</a:MessageID>\
         <a:ReplyTo><a:Address>http://schemas.xmlsoap.org/ws/2004/08/addressing/role/anonymous</a:Address></a:ReplyTo>\
         <a:To s:mustUnderstand=\"1\">urn:schemas-xmlsoap-org:ws:2005:04:discovery</a:To>\
         </s:Header><s:Body><d:Probe><d:Types>dn:NetworkVideoTransmitter</d:Types></d:Probe></s:Body></s:Envelope>",
        quick_xml::escape::escape(message_id)
    )
    .into_bytes()
}

/// One device that answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeMatch {
    /// Its endpoint reference (`urn:uuid:…`): the same device across addresses.
    pub endpoint: String,
    /// Its device service URLs (http or https only).
    pub xaddrs: Vec<String>,
    pub scopes: Vec<String>,
    pub types: Vec<String>,
    pub model: Option<String>,
    pub name: Option<String>,
}

fn words(e: Option<&Element>) -> Vec<String> {
    e.map(|e| {
        e.text()
            .split_whitespace()
            .take(MAX_LIST)
            .map(printable)
            .collect()
    })
    .unwrap_or_default()
}

fn scope(scopes: &[String], kind: &str) -> Option<String> {
    let prefix = format!("onvif://www.onvif.org/{kind}/");
    scopes.iter().find_map(|s| {
        let v = s.strip_prefix(&prefix)?;
        let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy();
        Some(printable(&v)).filter(|v| !v.is_empty())
    })
}

/// The matches in one datagram. With `relates_to`, a datagram answering another probe
/// (its `RelatesTo` differs) gives none; one without `RelatesTo` is kept.
pub fn parse_matches(bytes: &[u8], relates_to: Option<&str>) -> Result<Vec<ProbeMatch>, Error> {
    let root = xml::parse(bytes)?;
    if root.name != "Envelope" {
        return Err(Error::NotSoap(printable(&root.name)));
    }
    if let (Some(want), Some(got)) = (
        relates_to,
        root.path(&["Header", "RelatesTo"]).map(Element::text),
    ) {
        if want != got {
            return Ok(Vec::new());
        }
    }
    let body = root
        .child("Body")
        .ok_or_else(|| Error::NotSoap("Envelope".into()))?;
    let mut found = Vec::new();
    body.find_all("ProbeMatch", &mut found);
    let mut out = Vec::new();
    for m in found {
        let endpoint = m
            .path(&["EndpointReference", "Address"])
            .map_or("", Element::text);
        let xaddrs: Vec<String> = words(m.child("XAddrs"))
            .into_iter()
            .filter_map(|x| crate::soap::xaddr(&x, "ProbeMatch").ok())
            .collect();
        if xaddrs.is_empty() {
            continue;
        }
        let scopes = words(m.child("Scopes"));
        out.push(ProbeMatch {
            endpoint: printable(endpoint),
            model: scope(&scopes, "hardware"),
            name: scope(&scopes, "name"),
            types: words(m.child("Types")),
            xaddrs,
            scopes,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_is_well_formed_and_ids_are_uuids() {
        let id = message_id([0xab; 16]);
        assert_eq!(id, "urn:uuid:abababab-abab-4bab-abab-abababababab");
        let p = probe(&id);
        let root = xml::parse(&p).unwrap();
        assert_eq!(root.path(&["Header", "MessageID"]).unwrap().text(), id);
        assert_eq!(
            root.path(&["Body", "Probe", "Types"]).unwrap().text(),
            "dn:NetworkVideoTransmitter"
        );
    }

    /// A ProbeMatches of a common vendor's camera (addresses changed).
    const MATCHES: &[u8] = br#"<?xml version="1.0" encoding="UTF-8"?>
<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope" xmlns:wsa="http://schemas.xmlsoap.org/ws/2004/08/addressing" xmlns:d="http://schemas.xmlsoap.org/ws/2005/04/discovery"><env:Header><wsa:MessageID>urn:uuid:1</wsa:MessageID><wsa:RelatesTo>urn:uuid:probe-1</wsa:RelatesTo></env:Header><env:Body><d:ProbeMatches><d:ProbeMatch><wsa:EndpointReference><wsa:Address>urn:uuid:5f5a69c2-e0ae-504f-829b-00c4cb6b3b6b</wsa:Address></wsa:EndpointReference><d:Types>dn:NetworkVideoTransmitter tds:Device</d:Types><d:Scopes>onvif://www.onvif.org/type/video_encoder onvif://www.onvif.org/Profile/Streaming onvif://www.onvif.org/hardware/DS-2CD2143G2-I onvif://www.onvif.org/name/Gate%20North onvif://www.onvif.org/location/city/hangzhou</d:Scopes><d:XAddrs>http://192.0.2.14/onvif/device_service http://[fe80::1]/onvif/device_service ftp://nope/</d:XAddrs><d:MetadataVersion>10</d:MetadataVersion></d:ProbeMatch></d:ProbeMatches></env:Body></env:Envelope>"#;

    #[test]
    fn reads_a_match_with_model_and_name_from_its_scopes() {
        let m = parse_matches(MATCHES, Some("urn:uuid:probe-1")).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(
            m[0].endpoint,
            "urn:uuid:5f5a69c2-e0ae-504f-829b-00c4cb6b3b6b"
        );
        assert_eq!(
            m[0].xaddrs,
            vec![
                "http://192.0.2.14/onvif/device_service",
                "http://[fe80::1]/onvif/device_service"
            ]
        );
        assert_eq!(m[0].model.as_deref(), Some("DS-2CD2143G2-I"));
        assert_eq!(m[0].name.as_deref(), Some("Gate North"));
        assert_eq!(m[0].scopes.len(), 5);
        assert!(parse_matches(MATCHES, Some("urn:uuid:other"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_match_without_addresses_or_a_probe_gives_nothing() {
        let no_addr = String::from_utf8_lossy(MATCHES).replace("http://", "gopher://");
        assert!(parse_matches(no_addr.as_bytes(), None).unwrap().is_empty());
        assert!(parse_matches(&probe("urn:uuid:x"), None)
            .unwrap()
            .is_empty());
        assert!(matches!(
            parse_matches(b"<html/>", None),
            Err(Error::NotSoap(_))
        ));
    }
}
