//! Which peer a datagram on the shared WebRTC socket is for. Every peer shares one UDP
//! port, so the first packets of a peer — its ICE connectivity checks, STUN binding
//! requests — are routed by the USERNAME they carry (`<our ufrag>:<their ufrag>`, RFC 8445
//! §7.2.2), and everything after by the address the check came from. An address is learnt
//! only from a check whose MESSAGE-INTEGRITY proves it knows the peer's ICE password
//! ([`integrity_ok`]): the ufrag alone is in the SDP answer, and a forger who knew it could
//! otherwise fill a peer's addresses before the real client's next one (issue 44, L6).
//! Pure: bytes in, the ufrag and the verdict out.

/// STUN's magic cookie (RFC 5389 §6): bytes 4..8 of every STUN message.
const MAGIC_COOKIE: [u8; 4] = [0x21, 0x12, 0xa4, 0x42];
const HEADER_LEN: usize = 20;
const ATTR_USERNAME: u16 = 0x0006;
const ATTR_MESSAGE_INTEGRITY: u16 = 0x0008;
/// HMAC-SHA1's length: the MESSAGE-INTEGRITY value.
const INTEGRITY_LEN: usize = 20;

/// Whether `datagram` is a STUN message (RFC 7983's demultiplexing: first byte 0–3, and
/// the magic cookie).
pub fn is_stun(datagram: &[u8]) -> bool {
    datagram.len() >= HEADER_LEN && datagram[0] < 4 && datagram[4..8] == MAGIC_COOKIE
}

/// Our side's ufrag from a STUN message's USERNAME (`ours:theirs`), or None.
pub fn local_ufrag(datagram: &[u8]) -> Option<&str> {
    if !is_stun(datagram) {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([datagram[2], datagram[3]]));
    let body = datagram.get(HEADER_LEN..HEADER_LEN + len)?;
    let mut at = 0;
    while at + 4 <= body.len() {
        let kind = u16::from_be_bytes([body[at], body[at + 1]]);
        let n = usize::from(u16::from_be_bytes([body[at + 2], body[at + 3]]));
        let value = body.get(at + 4..at + 4 + n)?;
        if kind == ATTR_USERNAME {
            let text = std::str::from_utf8(value).ok()?;
            return text.split(':').next().filter(|u| !u.is_empty());
        }
        // Attributes are padded to 4 bytes.
        at += 4 + n.div_ceil(4) * 4;
    }
    None
}

/// Whether `datagram`'s MESSAGE-INTEGRITY is the HMAC-SHA1 of the message under the
/// short-term credential `password` (RFC 5389 §15.4, RFC 8445 §7.2.2: our side's ICE
/// password). The HMAC covers the header, with its length set as if the message ended with
/// the MESSAGE-INTEGRITY attribute, and every attribute before it (a FINGERPRINT after it is
/// left out). A message without one, or cut short, is not proven.
pub fn integrity_ok(datagram: &[u8], password: &str) -> bool {
    use hmac::{Hmac, Mac};
    if !is_stun(datagram) {
        return false;
    }
    let len = usize::from(u16::from_be_bytes([datagram[2], datagram[3]]));
    let Some(body) = datagram.get(HEADER_LEN..HEADER_LEN + len) else {
        return false;
    };
    let mut at = 0;
    while at + 4 <= body.len() {
        let kind = u16::from_be_bytes([body[at], body[at + 1]]);
        let n = usize::from(u16::from_be_bytes([body[at + 2], body[at + 3]]));
        if kind == ATTR_MESSAGE_INTEGRITY {
            let Some(tag) = body.get(at + 4..at + 4 + INTEGRITY_LEN) else {
                return false;
            };
            if n != INTEGRITY_LEN {
                return false;
            }
            // The length the sender wrote into the header while computing it.
            let Ok(covered) = u16::try_from(at + 4 + INTEGRITY_LEN) else {
                return false;
            };
            let Ok(mut mac) = Hmac::<sha1::Sha1>::new_from_slice(password.as_bytes()) else {
                return false;
            };
            mac.update(&datagram[..2]);
            mac.update(&covered.to_be_bytes());
            mac.update(&datagram[4..HEADER_LEN]);
            mac.update(&body[..at]);
            return mac.verify_slice(tag).is_ok();
        }
        at += 4 + n.div_ceil(4) * 4;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding_request(attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, value) in attrs {
            body.extend_from_slice(&kind.to_be_bytes());
            body.extend_from_slice(&(value.len() as u16).to_be_bytes());
            body.extend_from_slice(value);
            body.resize(body.len().div_ceil(4) * 4, 0);
        }
        let mut m = vec![0x00, 0x01];
        m.extend_from_slice(&(body.len() as u16).to_be_bytes());
        m.extend_from_slice(&MAGIC_COOKIE);
        m.extend_from_slice(&[7; 12]);
        m.extend(body);
        m
    }

    #[test]
    fn the_username_names_our_ufrag_after_other_attributes() {
        let m = binding_request(&[(0x0024, &[0, 0, 0, 1]), (ATTR_USERNAME, b"srv1:cli")]);
        assert!(is_stun(&m));
        assert_eq!(local_ufrag(&m), Some("srv1"));
        // An odd-length attribute before it is padded.
        let m = binding_request(&[(0x8022, b"abc"), (ATTR_USERNAME, b"x:y")]);
        assert_eq!(local_ufrag(&m), Some("x"));
    }

    /// RFC 5769 §2.1's sample request: USERNAME `evtj:h6vY`, password
    /// `VOkJxbRl1RmTxUk/WvJxBt`, MESSAGE-INTEGRITY then FINGERPRINT.
    const RFC5769_REQUEST: [u8; 108] = [
        0x00, 0x01, 0x00, 0x58, 0x21, 0x12, 0xa4, 0x42, 0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6,
        0x86, 0xfa, 0x87, 0xdf, 0xae, 0x80, 0x22, 0x00, 0x10, b'S', b'T', b'U', b'N', b' ', b't',
        b'e', b's', b't', b' ', b'c', b'l', b'i', b'e', b'n', b't', 0x00, 0x24, 0x00, 0x04, 0x6e,
        0x00, 0x01, 0xff, 0x80, 0x29, 0x00, 0x08, 0x93, 0x2f, 0xf9, 0xb1, 0x51, 0x26, 0x3b, 0x36,
        0x00, 0x06, 0x00, 0x09, 0x65, 0x76, 0x74, 0x6a, 0x3a, 0x68, 0x36, 0x76, 0x59, 0x20, 0x20,
        0x20, 0x00, 0x08, 0x00, 0x14, 0x9a, 0xea, 0xa7, 0x0c, 0xbf, 0xd8, 0xcb, 0x56, 0x78, 0x1e,
        0xf2, 0xb5, 0xb2, 0xd3, 0xf2, 0x49, 0xc1, 0xb5, 0x71, 0xa2, 0x80, 0x28, 0x00, 0x04, 0xe5,
        0x7a, 0x3b, 0xcf,
    ];

    #[test]
    fn integrity_proves_the_password_and_nothing_else() {
        let m = RFC5769_REQUEST;
        assert_eq!(local_ufrag(&m), Some("evtj"));
        assert!(integrity_ok(&m, "VOkJxbRl1RmTxUk/WvJxBt"));
        // Another password, a changed attribute, a message without one, a cut one.
        assert!(!integrity_ok(&m, "VOkJxbRl1RmTxUk/WvJxBu"));
        let mut changed = m;
        changed[30] ^= 1;
        assert!(!integrity_ok(&changed, "VOkJxbRl1RmTxUk/WvJxBt"));
        let forged = binding_request(&[(ATTR_USERNAME, b"evtj:h6vY")]);
        assert!(!integrity_ok(&forged, "VOkJxbRl1RmTxUk/WvJxBt"));
        for n in 0..m.len() {
            assert!(!integrity_ok(&m[..n], "VOkJxbRl1RmTxUk/WvJxBt"), "{n}");
        }
        let mut short = m;
        short[HEADER_LEN + 59] = 0x10;
        assert!(!integrity_ok(&short, "VOkJxbRl1RmTxUk/WvJxBt"));
    }

    #[test]
    fn anything_else_names_no_peer() {
        assert_eq!(local_ufrag(&binding_request(&[(0x0024, &[0; 4])])), None);
        assert_eq!(
            local_ufrag(&binding_request(&[(ATTR_USERNAME, b":cli")])),
            None
        );
        // DTLS (20–63) and RTP (128–191) are not STUN.
        assert!(!is_stun(&[22; 40]));
        assert!(!is_stun(&[0x80; 40]));
        // A length past the datagram, or an attribute running off its end.
        let mut m = binding_request(&[(ATTR_USERNAME, b"a:b")]);
        m[3] = 200;
        assert_eq!(local_ufrag(&m), None);
        let mut m = binding_request(&[(ATTR_USERNAME, b"a:b")]);
        m[HEADER_LEN + 3] = 60;
        assert_eq!(local_ufrag(&m), None);
        for n in 0..30 {
            let _ = local_ufrag(&m[..n.min(m.len())]);
        }
    }
}
