//! Which peer a datagram on the shared WebRTC socket is for. Every peer shares one UDP
//! port, so the first packets of a peer — its ICE connectivity checks, STUN binding
//! requests — are routed by the USERNAME they carry (`<our ufrag>:<their ufrag>`, RFC 8445
//! §7.2.2), and everything after by the address the check came from. Pure: bytes in, the
//! ufrag out.

/// STUN's magic cookie (RFC 5389 §6): bytes 4..8 of every STUN message.
const MAGIC_COOKIE: [u8; 4] = [0x21, 0x12, 0xa4, 0x42];
const HEADER_LEN: usize = 20;
const ATTR_USERNAME: u16 = 0x0006;

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
