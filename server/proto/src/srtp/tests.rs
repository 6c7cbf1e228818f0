use super::keymgmt::{parse_header, parse_sdp_attribute, sdp_attribute, KeyMgmtError};
use super::mikey::{parse, psk_init, Init, MikeyError};
use super::*;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn key(seed: u8) -> MasterKey {
    let mut b = [0u8; KEY_AND_SALT_LEN];
    for (i, x) in b.iter_mut().enumerate() {
        *x = seed.wrapping_add(i as u8);
    }
    MasterKey::from_bytes(&b)
}

fn rfc_master() -> MasterKey {
    let mut b = [0u8; KEY_AND_SALT_LEN];
    b[..16].copy_from_slice(&hex("E1F97A0D3E018BE0D64FA32C06DE4139"));
    b[16..].copy_from_slice(&hex("0EC675AD498AFEEBB6960B3AABE6"));
    MasterKey::from_bytes(&b)
}

#[test]
fn key_derivation_matches_rfc_3711_b3() {
    let m = rfc_master();
    let mut enc = [0u8; 16];
    let mut salt = [0u8; 14];
    let mut auth = [0u8; 20];
    prf(&m, 0, &mut enc);
    prf(&m, 2, &mut salt);
    prf(&m, 1, &mut auth);
    assert_eq!(enc.to_vec(), hex("C61E7A93744F39EE10734AFE3FF7A087"));
    assert_eq!(salt.to_vec(), hex("30CBBC08863D8C85D49DB34A9AE1"));
    assert_eq!(
        auth.to_vec(),
        hex("CEBE321F6FF7716B6FD4AB49AF256A156D38BAA4")
    );
    let keys = SessionKeys::derive(&m, 0);
    assert_eq!(keys.enc.to_vec(), hex("C61E7A93744F39EE10734AFE3FF7A087"));
    assert_eq!(keys.salt.to_vec(), hex("30CBBC08863D8C85D49DB34A9AE1"));
}

#[test]
fn keystream_matches_rfc_3711_b2() {
    let mut enc = [0u8; 16];
    enc.copy_from_slice(&hex("2B7E151628AED2A6ABF7158809CF4F3C"));
    let mut salt = [0u8; 14];
    salt.copy_from_slice(&hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD"));
    let keys = SessionKeys {
        enc,
        salt,
        auth: <HmacSha1 as Mac>::new_from_slice(&[0; 20]).unwrap(),
    };
    let mut zeros = vec![0u8; 48];
    keys.xor_keystream(0, 0, &mut zeros);
    assert_eq!(
        zeros[..16].to_vec(),
        hex("E03EAD0935C95E80E166B16DD92B4EB4")
    );
    assert_eq!(
        zeros[16..32].to_vec(),
        hex("D23513162B02D0F72A43A2FE4A5F97AB")
    );
    assert_eq!(
        zeros[32..].to_vec(),
        hex("41E95B3BB0A2E8DD477901E4FCA894C0")
    );
}

fn rtp(seq: u16, ssrc: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, 96];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq) * 3000).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

#[test]
fn a_packet_protected_by_one_side_is_read_by_the_other() {
    let k = key(7);
    let mut tx = Context::new(&k, Profile::AesCm128HmacSha1_80);
    let mut rx = Context::new(&k, Profile::AesCm128HmacSha1_80);
    let plain = rtp(100, 0xdead_beef, b"a frame's worth of payload");
    let sealed = tx.protect_rtp(&plain).unwrap();
    assert_eq!(sealed.len(), plain.len() + 10);
    assert_eq!(sealed[..12], plain[..12], "the header is sent as it was");
    assert_ne!(
        sealed[12..plain.len()],
        plain[12..],
        "the payload is encrypted"
    );
    assert_eq!(rx.unprotect_rtp(&sealed).unwrap(), plain);
    // The same packet again is a replay; a changed bit fails the tag.
    assert_eq!(
        rx.unprotect_rtp(&sealed),
        Err(SrtpError::Replay { index: 100 })
    );
    let mut forged = tx.protect_rtp(&rtp(101, 0xdead_beef, b"x")).unwrap();
    forged[13] ^= 1;
    assert_eq!(rx.unprotect_rtp(&forged), Err(SrtpError::BadTag));
    // Another key reads nothing.
    let mut other = Context::new(&key(8), Profile::AesCm128HmacSha1_80);
    let next = tx.protect_rtp(&rtp(102, 0xdead_beef, b"y")).unwrap();
    assert_eq!(other.unprotect_rtp(&next), Err(SrtpError::BadTag));
}

#[test]
fn the_parts_form_equals_the_whole_packet_form() {
    let k = key(1);
    let mut a = Context::new(&k, Profile::AesCm128HmacSha1_32);
    let mut b = Context::new(&k, Profile::AesCm128HmacSha1_32);
    let plain = rtp(5, 42, b"payload");
    let whole = a.protect_rtp(&plain).unwrap();
    let body = b.protect_parts(&plain[..12], &plain[12..]).unwrap();
    assert_eq!(whole[12..], body[..]);
    assert_eq!(body.len(), 7 + 4, "a 32-bit tag");
}

#[test]
fn the_rollover_counter_follows_the_sequence_number_across_its_wrap() {
    let k = key(3);
    let mut tx = Context::new(&k, Profile::AesCm128HmacSha1_80);
    let mut rx = Context::new(&k, Profile::AesCm128HmacSha1_80);
    for seq in (65_530u16..=65_535).chain(0..6) {
        let plain = rtp(seq, 9, &[seq as u8; 20]);
        let sealed = tx.protect_rtp(&plain).unwrap();
        assert_eq!(rx.unprotect_rtp(&sealed).unwrap(), plain, "seq {seq}");
    }
    let s = tx.streams[0];
    assert_eq!((s.roc, s.s_l), (1, 5), "the sender counted one rollover");
    // Hand-computed: index 1·2^16 + 5 goes into the IV, so the keystream differs from the
    // one of index 5 with no rollover.
    let mut fresh = Context::new(&k, Profile::AesCm128HmacSha1_80);
    let first = fresh.protect_rtp(&rtp(5, 9, &[5; 20])).unwrap();
    let mut again = Context::new(&k, Profile::AesCm128HmacSha1_80);
    again.streams.push(Rollover {
        ssrc: 9,
        s_l: 4,
        roc: 1,
        window: 0,
    });
    let wrapped = again.protect_rtp(&rtp(5, 9, &[5; 20])).unwrap();
    assert_ne!(first[12..32], wrapped[12..32]);
}

#[test]
fn forged_packets_leave_no_state_behind() {
    let mut rx = Context::new(&key(5), Profile::AesCm128HmacSha1_80);
    let mut forger = Context::new(&key(6), Profile::AesCm128HmacSha1_80);
    for ssrc in 0..100u32 {
        let p = forger.protect_rtp(&rtp(1, ssrc, b"x")).unwrap();
        assert_eq!(rx.unprotect_rtp(&p), Err(SrtpError::BadTag));
    }
    assert!(rx.streams.is_empty(), "{} SSRCs kept", rx.streams.len());
    // And a genuine packet after them is read as if they never came.
    let mut tx = Context::new(&key(5), Profile::AesCm128HmacSha1_80);
    let plain = rtp(40_000, 7, b"genuine");
    assert_eq!(
        rx.unprotect_rtp(&tx.protect_rtp(&plain).unwrap()).unwrap(),
        plain
    );
}

#[test]
fn an_old_packet_inside_the_window_is_accepted_once() {
    let k = key(4);
    let mut tx = Context::new(&k, Profile::AesCm128HmacSha1_80);
    let mut rx = Context::new(&k, Profile::AesCm128HmacSha1_80);
    let p10 = tx.protect_rtp(&rtp(10, 1, b"ten")).unwrap();
    let p11 = tx.protect_rtp(&rtp(11, 1, b"eleven")).unwrap();
    let p12 = tx.protect_rtp(&rtp(12, 1, b"twelve")).unwrap();
    rx.unprotect_rtp(&p10).unwrap();
    rx.unprotect_rtp(&p12).unwrap();
    assert_eq!(rx.unprotect_rtp(&p11).unwrap(), rtp(11, 1, b"eleven"));
    assert_eq!(rx.unprotect_rtp(&p11), Err(SrtpError::Replay { index: 11 }));
}

#[test]
fn srtcp_round_trips_with_index_and_e_flag() {
    let k = key(9);
    let mut tx = Context::new(&k, Profile::AesCm128HmacSha1_80);
    let mut rx = Context::new(&k, Profile::AesCm128HmacSha1_80);
    // A receiver report with one block (8 + 24 bytes).
    let mut rr = vec![0x81, 201, 0, 7];
    rr.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    rr.extend_from_slice(&[0xab; 24]);
    let first = tx.protect_rtcp(&rr).unwrap();
    let second = tx.protect_rtcp(&rr).unwrap();
    assert_eq!(first.len(), rr.len() + 4 + 10);
    assert_eq!(first[..8], rr[..8]);
    assert_ne!(first[8..rr.len()], rr[8..]);
    assert_eq!(first[rr.len()..rr.len() + 4], [0x80, 0, 0, 0]);
    assert_eq!(second[rr.len()..rr.len() + 4], [0x80, 0, 0, 1]);
    assert_eq!(rx.unprotect_rtcp(&first).unwrap(), rr);
    assert_eq!(rx.unprotect_rtcp(&second).unwrap(), rr);
    assert_eq!(
        rx.unprotect_rtcp(&second),
        Err(SrtpError::Replay { index: 1 })
    );
    assert!(matches!(
        rx.unprotect_rtcp(&rr),
        Err(SrtpError::TooShort { .. } | SrtpError::BadTag)
    ));
}

#[test]
fn short_and_foreign_input_is_refused_not_panicked_on() {
    let mut c = Context::new(&key(0), Profile::AesCm128HmacSha1_80);
    for input in [
        &[][..],
        &[0x80; 5],
        &[0x40; 40],
        &[0x90, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    ] {
        assert!(c.protect_rtp(input).is_err());
        assert!(c.unprotect_rtp(input).is_err());
        assert!(c.unprotect_rtcp(input).is_err());
    }
}

#[test]
fn our_mikey_message_reads_back_with_its_key() {
    let k = key(20);
    let msg = psk_init(&Init {
        key: &k,
        csb_id: 0x0102_0304,
        ntp: 0xe000_0000_0000_0001,
        rand: [7; 16],
        streams: &[(0xdead_beef, 0)],
    });
    // Header (10) + one CS (9) + T (10) + RAND (18) + SP (5 + 27) + KEMAC (4 + 34 + 1).
    assert_eq!(msg.len(), 10 + 9 + 10 + 18 + 32 + 39);
    assert_eq!(
        msg[..4],
        [1, 0, 5, 0],
        "version 1, PSK init, T first, MIKEY-1"
    );
    let offer = parse(&msg).unwrap();
    assert_eq!(offer.key, k);
    assert_eq!(offer.profile, Profile::AesCm128HmacSha1_80);
    assert_eq!(offer.streams, vec![(0xdead_beef, 0)]);
    let attr = sdp_attribute(&msg);
    assert!(attr.starts_with("mikey "));
    assert_eq!(parse_sdp_attribute(&attr).unwrap().key, k);
}

/// A KeyMgmt header as GStreamer's rtspsrc writes it in SETUP, byte by byte as
/// `gst_mikey_message_new_from_caps` builds it: its quirk of writing the tag length as the
/// authentication key length (10), no salt length, and a crypto session for its SSRC.
fn gstreamer_keymgmt() -> String {
    let key = key(0x40);
    let mut m = vec![1, 0, 5, 0, 0x11, 0x22, 0x33, 0x44, 1, 0];
    m.extend_from_slice(&[0, 0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 0]);
    m.extend_from_slice(&[11, 0, 1, 2, 3, 4, 5, 6, 7, 8]); // T, NTP-UTC
    m.extend_from_slice(&[10, 16]); // RAND
    m.extend_from_slice(&[0x5a; 16]);
    m.extend_from_slice(&[1, 0, 0, 0, 21]); // SP: 7 params, 21 bytes
    for (t, v) in [
        (0u8, 1u8),
        (1, 16),
        (2, 1),
        (3, 10),
        (7, 1),
        (8, 1),
        (10, 1),
    ] {
        m.extend_from_slice(&[t, 1, v]);
    }
    m.extend_from_slice(&[0, 0, 0, 34]); // KEMAC, clear
    m.extend_from_slice(&[0, 0x20, 0, 30]);
    m.extend_from_slice(&key.to_bytes());
    m.push(0);
    format!(
        "prot=mikey; uri=\"rtsps://127.0.0.1:8322/live/demo/trackID=0\"; data=\"{}\"",
        STANDARD.encode(&m)
    )
}

#[test]
fn a_gstreamer_keymgmt_header_gives_its_key_and_ssrc() {
    let offer = parse_header(&gstreamer_keymgmt()).unwrap();
    assert_eq!(offer.key, key(0x40));
    assert_eq!(offer.profile, Profile::AesCm128HmacSha1_80);
    assert_eq!(offer.streams, vec![(0xcafe_babe, 0)]);
}

#[test]
fn keymgmt_headers_that_cannot_be_served_say_why() {
    assert_eq!(
        parse_header("prot=sdes; data=\"abc\""),
        Err(KeyMgmtError::NotMikey("sdes".into()))
    );
    assert_eq!(parse_header("prot=mikey"), Err(KeyMgmtError::NoData));
    assert_eq!(
        parse_header("prot=mikey; data=\"***\""),
        Err(KeyMgmtError::Base64)
    );
    let b64 = |m: &[u8]| format!("prot=mikey; data=\"{}\"", STANDARD.encode(m));
    assert_eq!(
        parse_header(&b64(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0])),
        Err(KeyMgmtError::Mikey(MikeyError::Version(2)))
    );
    assert_eq!(
        parse_header(&b64(&[1, 4, 0, 0, 0, 0, 0, 0, 0, 0])),
        Err(KeyMgmtError::Mikey(MikeyError::DataType(4)))
    );
    assert_eq!(
        parse_header(&b64(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0])),
        Err(KeyMgmtError::Mikey(MikeyError::NoKey))
    );
    // An encrypted KEMAC (AES-CM, 1): only the clear form inside TLS is served.
    assert_eq!(
        parse_header(&b64(&[1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0])),
        Err(KeyMgmtError::Mikey(MikeyError::ProtectedKey {
            enc: 1,
            mac: 0
        }))
    );
    // A null cipher in the policy.
    assert_eq!(
        parse_header(&b64(&[
            1, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 1, 0
        ])),
        Err(KeyMgmtError::Mikey(MikeyError::Policy {
            what: "encryption algorithm",
            value: 0
        }))
    );
}

#[test]
fn every_truncation_of_a_valid_message_is_an_error_never_a_panic() {
    let msg = psk_init(&Init {
        key: &key(1),
        csb_id: 1,
        ntp: 2,
        rand: [3; 16],
        streams: &[(4, 5), (6, 7)],
    });
    for n in 0..msg.len() {
        assert!(parse(&msg[..n]).is_err(), "{n} bytes");
    }
    // And every single-byte change either parses or fails cleanly.
    for i in 0..msg.len() {
        for v in [0u8, 1, 0x7f, 0xff] {
            let mut m = msg.clone();
            m[i] = v;
            let _ = parse(&m);
        }
    }
}

#[test]
fn a_master_key_never_prints() {
    assert_eq!(format!("{:?}", key(1)), "MasterKey(..)");
}
