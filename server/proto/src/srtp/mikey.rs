//! MIKEY (RFC 3830) as RTSP uses it for SRTP: a pre-shared-key initiation message whose
//! key transport (KEMAC) is neither encrypted nor MACed, because it travels only inside
//! the TLS connection of an RTSPS session (what GStreamer's rtsp-server and rtspsrc and
//! live555 do). The server's message goes in the SDP (`a=key-mgmt:mikey`), the client's in
//! SETUP's `KeyMgmt` header.
//!
//! Only what that needs is read: the header, the crypto-session map (SSRC and rollover
//! counter), the SRTP security policy (cipher, tag length) and the traffic key. Anything
//! else — public-key or Diffie-Hellman modes, encrypted key transport, other ciphers — is
//! refused with what it was, never half-understood.

use super::{MasterKey, Profile, KEY_AND_SALT_LEN, MASTER_KEY_LEN, MASTER_SALT_LEN};

const VERSION: u8 = 1;
/// Data types (RFC 3830 §6.1).
const TYPE_PSK_INIT: u8 = 0;
/// CS ID map type SRTP-ID.
const MAP_SRTP: u8 = 0;
/// PRF MIKEY-1.
const PRF_MIKEY_1: u8 = 0;

/// Payload types (RFC 3830 §6.1, Table 6.1.c).
const PT_LAST: u8 = 0;
const PT_KEMAC: u8 = 1;
const PT_T: u8 = 5;
const PT_SP: u8 = 10;
const PT_RAND: u8 = 11;

/// Security policy parameters of SRTP (RFC 3830 §6.10.1).
const SP_ENC_ALG: u8 = 0;
const SP_ENC_KEY_LEN: u8 = 1;
const SP_AUTH_ALG: u8 = 2;
const SP_AUTH_KEY_LEN: u8 = 3;
const SP_SALT_KEY_LEN: u8 = 4;
const SP_SRTP_ENC: u8 = 7;
const SP_SRTCP_ENC: u8 = 8;
const SP_SRTP_AUTH: u8 = 10;
const SP_AUTH_TAG_LEN: u8 = 11;

const ENC_NULL: u8 = 0;
const ENC_AES_CM_128: u8 = 1;
const MAC_NULL: u8 = 0;
const AUTH_HMAC_SHA1: u8 = 1;

/// Key data types: the low bit says a salt follows the key.
const KD_TEK: u8 = 2;

/// The timestamp types and their value lengths.
fn ts_len(ts_type: u8) -> Option<usize> {
    match ts_type {
        0 | 1 => Some(8), // NTP-UTC, NTP
        2 => Some(4),     // COUNTER
        _ => None,
    }
}

/// Why a peer's MIKEY message was not used.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum MikeyError {
    #[error("MIKEY message ends inside {0}")]
    Truncated(&'static str),
    #[error("MIKEY version {0} (only 1 exists)")]
    Version(u8),
    #[error("MIKEY data type {0}: only pre-shared-key initiation (0) is served")]
    DataType(u8),
    #[error("MIKEY CS ID map type {0}: only SRTP-ID (0) is served")]
    MapType(u8),
    #[error("MIKEY payload type {0} is not served")]
    Payload(u8),
    #[error("MIKEY timestamp type {0} is unknown")]
    Timestamp(u8),
    #[error("MIKEY key transport is encrypted (algorithm {enc}) or MACed ({mac}): only the clear form inside TLS is served")]
    ProtectedKey { enc: u8, mac: u8 },
    #[error("MIKEY key data of type {0}: a traffic-encrypting key is needed")]
    KeyType(u8),
    #[error("MIKEY key of {0} bytes: AES-128 needs 16 bytes of key and 14 of salt")]
    KeyLength(usize),
    #[error("MIKEY security policy {what} = {value} is not served (AES-CM-128 with HMAC-SHA1)")]
    Policy { what: &'static str, value: u8 },
    #[error("MIKEY message carries no key")]
    NoKey,
}

/// What a peer's message gives: its key, the profile it protects with, and the rollover
/// counters of the SSRCs it named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub key: MasterKey,
    pub profile: Profile,
    /// (SSRC, rollover counter) per crypto session.
    pub streams: Vec<(u32, u32)>,
}

/// The values of a message this node sends, chosen by the caller (time and randomness are
/// the shell's).
pub struct Init<'a> {
    pub key: &'a MasterKey,
    pub csb_id: u32,
    /// NTP time (RFC 3830's NTP-UTC timestamp), 32.32 fixed point.
    pub ntp: u64,
    pub rand: [u8; 16],
    /// (SSRC, rollover counter) per crypto session; empty when the SSRC is not chosen yet.
    pub streams: &'a [(u32, u32)],
}

/// A pre-shared-key initiation with a timestamp, randomness, the SRTP policy
/// (AES-CM-128, HMAC-SHA1, 80-bit tag, RTP and RTCP encrypted and authenticated) and the
/// key (16 bytes) and salt (14) as one traffic key in a clear KEMAC.
pub fn psk_init(m: &Init<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(&[VERSION, TYPE_PSK_INIT, PT_T, PRF_MIKEY_1]);
    out.extend_from_slice(&m.csb_id.to_be_bytes());
    out.push(u8::try_from(m.streams.len()).unwrap_or(u8::MAX));
    out.push(MAP_SRTP);
    for (ssrc, roc) in m.streams.iter().take(255) {
        // Policy 0 for every stream (the one SP payload below).
        out.push(0);
        out.extend_from_slice(&ssrc.to_be_bytes());
        out.extend_from_slice(&roc.to_be_bytes());
    }
    // T: NTP-UTC.
    out.extend_from_slice(&[PT_RAND, 0]);
    out.extend_from_slice(&m.ntp.to_be_bytes());
    // RAND.
    out.extend_from_slice(&[PT_SP, 16]);
    out.extend_from_slice(&m.rand);
    // SP: policy 0, protocol SRTP.
    let params: [(u8, u8); 9] = [
        (SP_ENC_ALG, ENC_AES_CM_128),
        (SP_ENC_KEY_LEN, MASTER_KEY_LEN as u8),
        (SP_AUTH_ALG, AUTH_HMAC_SHA1),
        (SP_AUTH_KEY_LEN, 20),
        (SP_SALT_KEY_LEN, MASTER_SALT_LEN as u8),
        (SP_SRTP_ENC, 1),
        (SP_SRTCP_ENC, 1),
        (SP_SRTP_AUTH, 1),
        (SP_AUTH_TAG_LEN, 10),
    ];
    out.extend_from_slice(&[PT_KEMAC, 0, 0]);
    out.extend_from_slice(&((params.len() * 3) as u16).to_be_bytes());
    for (t, v) in params {
        out.extend_from_slice(&[t, 1, v]);
    }
    // KEMAC with one key data sub-payload: TEK, no salt field (libsrtp's 30-byte form).
    let mut key_data = vec![PT_LAST, KD_TEK << 4];
    key_data.extend_from_slice(&(KEY_AND_SALT_LEN as u16).to_be_bytes());
    key_data.extend_from_slice(&m.key.to_bytes());
    out.extend_from_slice(&[PT_LAST, ENC_NULL]);
    out.extend_from_slice(&(key_data.len() as u16).to_be_bytes());
    out.extend_from_slice(&key_data);
    out.push(MAC_NULL);
    out
}

/// A cursor that fails with what it was reading.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], MikeyError> {
        if self.0.len() < n {
            return Err(MikeyError::Truncated(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, MikeyError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, MikeyError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, MikeyError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Reads a peer's pre-shared-key initiation (the client's `KeyMgmt`, or a server's SDP).
pub fn parse(data: &[u8]) -> Result<Offer, MikeyError> {
    let mut r = Reader(data);
    let version = r.u8("the header")?;
    if version != VERSION {
        return Err(MikeyError::Version(version));
    }
    let data_type = r.u8("the header")?;
    if data_type != TYPE_PSK_INIT {
        return Err(MikeyError::DataType(data_type));
    }
    let mut next = r.u8("the header")?;
    let _v_prf = r.u8("the header")?;
    let _csb_id = r.u32("the header")?;
    let n_cs = r.u8("the header")?;
    let map_type = r.u8("the header")?;
    if map_type != MAP_SRTP {
        return Err(MikeyError::MapType(map_type));
    }
    let mut streams = Vec::with_capacity(usize::from(n_cs));
    for _ in 0..n_cs {
        let _policy = r.u8("the crypto-session map")?;
        let ssrc = r.u32("the crypto-session map")?;
        let roc = r.u32("the crypto-session map")?;
        streams.push((ssrc, roc));
    }
    let mut profile = Profile::AesCm128HmacSha1_80;
    let mut key = None;
    while next != PT_LAST {
        let this = next;
        next = r.u8("a payload header")?;
        match this {
            PT_T => {
                let ts_type = r.u8("the timestamp")?;
                let n = ts_len(ts_type).ok_or(MikeyError::Timestamp(ts_type))?;
                r.take(n, "the timestamp")?;
            }
            PT_RAND => {
                let n = r.u8("RAND")?;
                r.take(usize::from(n), "RAND")?;
            }
            PT_SP => {
                let _policy = r.u8("the security policy")?;
                let _proto = r.u8("the security policy")?;
                let len = r.u16("the security policy")?;
                let mut params = Reader(r.take(usize::from(len), "the security policy")?);
                while !params.0.is_empty() {
                    let t = params.u8("a policy parameter")?;
                    let n = params.u8("a policy parameter")?;
                    let v = params.take(usize::from(n), "a policy parameter")?;
                    profile = policy(t, v, profile)?;
                }
            }
            PT_KEMAC => {
                let enc = r.u8("the key transport")?;
                let len = r.u16("the key transport")?;
                let sub = r.take(usize::from(len), "the key transport")?;
                let mac = r.u8("the key transport")?;
                if enc != ENC_NULL || mac != MAC_NULL {
                    return Err(MikeyError::ProtectedKey { enc, mac });
                }
                key = Some(key_data(sub)?);
            }
            other => return Err(MikeyError::Payload(other)),
        }
    }
    Ok(Offer {
        key: key.ok_or(MikeyError::NoKey)?,
        profile,
        streams,
    })
}

/// One SRTP policy parameter: refuses what this node cannot do, reads the tag length.
///
/// GStreamer writes an 80- or 32-bit tag as the *authentication key length* 10 or 4
/// (`gst_mikey_message_new_from_caps`), RFC 3830 as the tag length (11); both are read.
fn policy(t: u8, v: &[u8], profile: Profile) -> Result<Profile, MikeyError> {
    let Some(&b) = v.first() else {
        return Ok(profile);
    };
    let bad = |what| Err(MikeyError::Policy { what, value: b });
    match t {
        SP_ENC_ALG if b != ENC_AES_CM_128 => bad("encryption algorithm"),
        SP_ENC_KEY_LEN if usize::from(b) != MASTER_KEY_LEN => bad("encryption key length"),
        SP_AUTH_ALG if b != AUTH_HMAC_SHA1 => bad("authentication algorithm"),
        SP_SALT_KEY_LEN if usize::from(b) != MASTER_SALT_LEN => bad("salt length"),
        SP_AUTH_KEY_LEN | SP_AUTH_TAG_LEN => match b {
            4 => Ok(Profile::AesCm128HmacSha1_32),
            10 | 20 => Ok(Profile::AesCm128HmacSha1_80),
            _ => bad("authentication key or tag length"),
        },
        SP_SRTP_ENC | SP_SRTCP_ENC | SP_SRTP_AUTH if b != 1 => {
            bad("encryption or authentication switched off")
        }
        _ => Ok(profile),
    }
}

/// The key data sub-payload inside a clear KEMAC: a TEK of key and salt in one value
/// (libsrtp's form) or a key with a separate salt.
fn key_data(sub: &[u8]) -> Result<MasterKey, MikeyError> {
    let mut r = Reader(sub);
    let _next = r.u8("the key data")?;
    let type_kv = r.u8("the key data")?;
    let kd_type = type_kv >> 4;
    if kd_type & !1 != KD_TEK {
        return Err(MikeyError::KeyType(kd_type));
    }
    let len = r.u16("the key data")?;
    let key = r.take(usize::from(len), "the key data")?;
    let mut all = key.to_vec();
    if kd_type & 1 != 0 {
        let salt_len = r.u16("the salt")?;
        all.extend_from_slice(r.take(usize::from(salt_len), "the salt")?);
    }
    let bytes: &[u8; KEY_AND_SALT_LEN] = all
        .as_slice()
        .try_into()
        .map_err(|_| MikeyError::KeyLength(all.len()))?;
    Ok(MasterKey::from_bytes(bytes))
}
