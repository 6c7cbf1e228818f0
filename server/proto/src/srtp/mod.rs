//! SRTP and SRTCP (RFC 3711) with the default transform, AES-128 in counter mode and
//! HMAC-SHA1 (`AES_CM_128_HMAC_SHA1_80`, and `_32` for a peer that asks for it), and the
//! MIKEY key exchange RTSP carries it with (`mikey`, `keymgmt`).
//!
//! Why by hand over RustCrypto's AES and HMAC rather than an SRTP crate: `webrtc-srtp`
//! runs on tokio (this crate does no I/O), `rtc-srtp` parses every packet into its own RTP
//! types (the node's packets are a 12-byte header and a payload shared by every viewer,
//! see `vigil_server::live::reader::OutPacket`, and protecting must not copy the header),
//! `libsrtp` (Rust) is an experimental 0.1, and the C libsrtp would add a C build to the
//! node. The transform itself is small: a key derivation, a keystream XOR and a truncated
//! HMAC, checked here against RFC 3711's test vectors and in `tests/srtp.rs` against
//! GStreamer's srtpdec (libsrtp).
//!
//! A [`Context`] is one direction of one RTP stream pair (a track): the sender keeps the
//! rollover counter of each SSRC it protects and the SRTCP index, the receiver the highest
//! index seen and a replay window. No clock, no socket: bytes in, bytes out.

pub mod keymgmt;
pub mod mikey;

use aes::cipher::{BlockEncrypt, KeyInit, KeyIvInit, StreamCipher};
use hmac::{Hmac, Mac};
use sha1::Sha1;
use subtle::ConstantTimeEq;

/// Master key and master salt lengths of the AES-128 transforms (RFC 3711 §8.2).
pub const MASTER_KEY_LEN: usize = 16;
pub const MASTER_SALT_LEN: usize = 14;
/// What MIKEY and libsrtp carry as one value: the key followed by the salt.
pub const KEY_AND_SALT_LEN: usize = MASTER_KEY_LEN + MASTER_SALT_LEN;

/// The protection profile: AES-128-CM encryption with an HMAC-SHA1 tag of 80 or 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    AesCm128HmacSha1_80,
    AesCm128HmacSha1_32,
}

impl Profile {
    /// Bytes of the authentication tag on RTP packets (SRTCP always carries 80 bits).
    pub fn rtp_tag_len(self) -> usize {
        match self {
            Profile::AesCm128HmacSha1_80 => 10,
            Profile::AesCm128HmacSha1_32 => 4,
        }
    }
}

/// A master key and salt, as MIKEY delivers them.
#[derive(Clone, PartialEq, Eq)]
pub struct MasterKey {
    pub key: [u8; MASTER_KEY_LEN],
    pub salt: [u8; MASTER_SALT_LEN],
}

impl std::fmt::Debug for MasterKey {
    /// Never prints the key: a `{:?}` in a log line must not leak it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// From 30 bytes of key then salt (the caller's RNG fills them).
    pub fn from_bytes(bytes: &[u8; KEY_AND_SALT_LEN]) -> MasterKey {
        let mut key = [0; MASTER_KEY_LEN];
        let mut salt = [0; MASTER_SALT_LEN];
        key.copy_from_slice(&bytes[..MASTER_KEY_LEN]);
        salt.copy_from_slice(&bytes[MASTER_KEY_LEN..]);
        MasterKey { key, salt }
    }

    pub fn to_bytes(&self) -> [u8; KEY_AND_SALT_LEN] {
        let mut out = [0; KEY_AND_SALT_LEN];
        out[..MASTER_KEY_LEN].copy_from_slice(&self.key);
        out[MASTER_KEY_LEN..].copy_from_slice(&self.salt);
        out
    }
}

/// Why a packet was not protected or not accepted.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SrtpError {
    #[error("packet of {len} bytes is too short for {what}")]
    TooShort { len: usize, what: &'static str },
    #[error("not an RTP/RTCP version 2 packet")]
    BadVersion,
    #[error("authentication tag does not match")]
    BadTag,
    #[error("packet index {index} was seen already (replay)")]
    Replay { index: u64 },
}

type Aes128Ctr = ctr::Ctr128BE<aes::Aes128>;
type HmacSha1 = Hmac<Sha1>;

/// Session keys of one direction (RFC 3711 §4.3), derived once from the master key.
#[derive(Clone)]
struct SessionKeys {
    enc: [u8; 16],
    salt: [u8; 14],
    /// HMAC keyed once; each packet clones it (cheaper than re-keying).
    auth: HmacSha1,
}

impl SessionKeys {
    /// Labels 0/1/2 (SRTP) or 3/4/5 (SRTCP), key derivation rate 0.
    fn derive(master: &MasterKey, first_label: u8) -> SessionKeys {
        let mut enc = [0; 16];
        let mut auth_key = [0; 20];
        let mut salt = [0; 14];
        prf(master, first_label, &mut enc);
        prf(master, first_label + 1, &mut auth_key);
        prf(master, first_label + 2, &mut salt);
        // A 20-byte key is always valid for HMAC.
        let auth = <HmacSha1 as Mac>::new_from_slice(&auth_key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        SessionKeys { enc, salt, auth }
    }

    /// The keystream IV: the session salt XOR the SSRC (bytes 4..8) XOR the index
    /// shifted by 16 bits (RFC 3711 §4.1.1).
    fn iv(&self, ssrc: u32, index: u64) -> [u8; 16] {
        let mut iv = [0u8; 16];
        iv[..14].copy_from_slice(&self.salt);
        for (b, s) in iv[4..8].iter_mut().zip(ssrc.to_be_bytes()) {
            *b ^= s;
        }
        for (b, s) in iv[8..14].iter_mut().zip(&index.to_be_bytes()[2..]) {
            *b ^= s;
        }
        iv
    }

    fn xor_keystream(&self, ssrc: u32, index: u64, data: &mut [u8]) {
        let mut c = Aes128Ctr::new(&self.enc.into(), &self.iv(ssrc, index).into());
        c.apply_keystream(data);
    }

    fn tag(&self, parts: &[&[u8]]) -> [u8; 20] {
        let mut mac = self.auth.clone();
        for p in parts {
            mac.update(p);
        }
        mac.finalize().into_bytes().into()
    }
}

/// The key derivation PRF: AES-CM keyed with the master key over
/// IV = (master salt XOR label·2^48) · 2^16 (RFC 3711 §4.3.1, §4.3.3).
fn prf(master: &MasterKey, label: u8, out: &mut [u8]) {
    let mut iv = [0u8; 16];
    iv[..14].copy_from_slice(&master.salt);
    iv[7] ^= label;
    let cipher = aes::Aes128::new(&master.key.into());
    for (i, chunk) in out.chunks_mut(16).enumerate() {
        let mut block = iv;
        let ctr = u16::try_from(i).unwrap_or(u16::MAX).to_be_bytes();
        block[14] = ctr[0];
        block[15] = ctr[1];
        let mut b = block.into();
        cipher.encrypt_block(&mut b);
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Rollover state of one SSRC: the highest sequence number and its rollover counter.
#[derive(Clone, Copy, Debug)]
struct Rollover {
    ssrc: u32,
    s_l: u16,
    roc: u32,
    /// Received side: which of the 64 indexes up to the highest were seen.
    window: u64,
}

impl Rollover {
    /// The packet index of sequence number `seq` (RFC 3711 Appendix A), without updating.
    fn estimate(&self, seq: u16) -> u64 {
        let (s_l, roc) = (i64::from(self.s_l), i64::from(self.roc));
        let seq = i64::from(seq);
        let v = if s_l < 0x8000 {
            if seq - s_l > 0x8000 {
                roc - 1
            } else {
                roc
            }
        } else if s_l - 0x8000 > seq {
            roc + 1
        } else {
            roc
        };
        ((v.max(0) as u64) << 16) | seq as u64
    }

    fn highest(&self) -> u64 {
        (u64::from(self.roc) << 16) | u64::from(self.s_l)
    }

    fn advance(&mut self, index: u64) {
        let highest = self.highest();
        if index > highest {
            let shift = index - highest;
            self.window = if shift >= 64 {
                1
            } else {
                (self.window << shift) | 1
            };
            self.roc = (index >> 16) as u32;
            self.s_l = index as u16;
        } else {
            self.window |= 1 << (highest - index);
        }
    }

    fn seen(&self, index: u64) -> bool {
        let highest = self.highest();
        index <= highest && (highest - index >= 64 || self.window & (1 << (highest - index)) != 0)
    }
}

/// One direction of SRTP and SRTCP for one track.
#[derive(Clone)]
pub struct Context {
    profile: Profile,
    rtp: SessionKeys,
    rtcp: SessionKeys,
    streams: Vec<Rollover>,
    /// Next SRTCP index to send.
    srtcp_index: u32,
    /// Received SRTCP: highest index and window, per SSRC (a `Rollover` with roc = index >> 16).
    srtcp_in: Vec<Rollover>,
}

/// The E flag of SRTCP: this packet's payload is encrypted.
const SRTCP_E: u32 = 0x8000_0000;
/// SRTCP always carries an 80-bit tag (RFC 3711 §3.4 with the default transform).
const SRTCP_TAG_LEN: usize = 10;

impl Context {
    pub fn new(master: &MasterKey, profile: Profile) -> Context {
        Context {
            profile,
            rtp: SessionKeys::derive(master, 0),
            rtcp: SessionKeys::derive(master, 3),
            streams: Vec::new(),
            srtcp_index: 0,
            srtcp_in: Vec::new(),
        }
    }

    /// The state of `ssrc`, or a fresh one starting at `first` (not yet kept).
    fn rollover(list: &[Rollover], ssrc: u32, first: u16) -> Rollover {
        list.iter()
            .find(|s| s.ssrc == ssrc)
            .copied()
            .unwrap_or(Rollover {
                ssrc,
                s_l: first,
                roc: 0,
                window: 0,
            })
    }

    /// The state of `ssrc`, kept from now on. A receiver calls it only for a packet that
    /// authenticated: a forger cannot make it keep state for SSRCs of its choosing.
    fn stream(list: &mut Vec<Rollover>, ssrc: u32, first: u16) -> &mut Rollover {
        let at = match list.iter().position(|s| s.ssrc == ssrc) {
            Some(i) => i,
            None => {
                list.push(Self::rollover(list, ssrc, first));
                list.len() - 1
            }
        };
        &mut list[at]
    }

    /// Protects one RTP packet given as its header and payload (the node's packets are
    /// two buffers): returns the encrypted payload followed by the tag, to be sent after
    /// the unchanged header.
    pub fn protect_parts(&mut self, header: &[u8], payload: &[u8]) -> Result<Vec<u8>, SrtpError> {
        let (ssrc, seq) = rtp_ids(header)?;
        let rollover = Self::stream(&mut self.streams, ssrc, seq);
        let index = rollover.estimate(seq);
        rollover.advance(index);
        let roc = (index >> 16) as u32;
        let tag_len = self.profile.rtp_tag_len();
        let mut out = Vec::with_capacity(payload.len() + tag_len);
        out.extend_from_slice(payload);
        self.rtp.xor_keystream(ssrc, index, &mut out);
        let tag = self.rtp.tag(&[header, &out, &roc.to_be_bytes()]);
        out.extend_from_slice(&tag[..tag_len]);
        Ok(out)
    }

    /// Protects a whole RTP packet (header with any CSRCs and extension, then payload).
    pub fn protect_rtp(&mut self, packet: &[u8]) -> Result<Vec<u8>, SrtpError> {
        let header_len = rtp_header_len(packet)?;
        let (header, payload) = packet.split_at(header_len);
        let mut out = header.to_vec();
        out.extend(self.protect_parts(header, payload)?);
        Ok(out)
    }

    /// Checks and decrypts one SRTP packet; returns the plain RTP packet.
    pub fn unprotect_rtp(&mut self, packet: &[u8]) -> Result<Vec<u8>, SrtpError> {
        let tag_len = self.profile.rtp_tag_len();
        let header_len = rtp_header_len(packet)?;
        if packet.len() < header_len + tag_len {
            return Err(SrtpError::TooShort {
                len: packet.len(),
                what: "an SRTP packet",
            });
        }
        let (ssrc, seq) = rtp_ids(packet)?;
        let (body, tag) = packet.split_at(packet.len() - tag_len);
        let rollover = Self::rollover(&self.streams, ssrc, seq);
        let index = rollover.estimate(seq);
        if rollover.window != 0 && rollover.seen(index) {
            return Err(SrtpError::Replay { index });
        }
        let roc = (index >> 16) as u32;
        let want = self.rtp.tag(&[body, &roc.to_be_bytes()]);
        if !bool::from(want[..tag_len].ct_eq(tag)) {
            return Err(SrtpError::BadTag);
        }
        Self::stream(&mut self.streams, ssrc, seq).advance(index);
        let mut out = body.to_vec();
        self.rtp.xor_keystream(ssrc, index, &mut out[header_len..]);
        Ok(out)
    }

    /// Protects one RTCP compound packet: everything after the first 8 bytes encrypted,
    /// then E flag and index, then the tag.
    pub fn protect_rtcp(&mut self, packet: &[u8]) -> Result<Vec<u8>, SrtpError> {
        let ssrc = rtcp_ssrc(packet)?;
        let index = self.srtcp_index;
        self.srtcp_index = (self.srtcp_index + 1) & !SRTCP_E;
        let mut out = Vec::with_capacity(packet.len() + 4 + SRTCP_TAG_LEN);
        out.extend_from_slice(packet);
        self.rtcp
            .xor_keystream(ssrc, u64::from(index), &mut out[8..]);
        out.extend_from_slice(&(SRTCP_E | index).to_be_bytes());
        let tag = self.rtcp.tag(&[&out]);
        out.extend_from_slice(&tag[..SRTCP_TAG_LEN]);
        Ok(out)
    }

    /// Checks and decrypts one SRTCP packet; returns the plain RTCP compound packet.
    pub fn unprotect_rtcp(&mut self, packet: &[u8]) -> Result<Vec<u8>, SrtpError> {
        if packet.len() < 8 + 4 + SRTCP_TAG_LEN {
            return Err(SrtpError::TooShort {
                len: packet.len(),
                what: "an SRTCP packet",
            });
        }
        let ssrc = rtcp_ssrc(packet)?;
        let (body, tag) = packet.split_at(packet.len() - SRTCP_TAG_LEN);
        let want = self.rtcp.tag(&[body]);
        if !bool::from(want[..SRTCP_TAG_LEN].ct_eq(tag)) {
            return Err(SrtpError::BadTag);
        }
        let (rtcp, e_index) = body.split_at(body.len() - 4);
        let e_index = u32::from_be_bytes([e_index[0], e_index[1], e_index[2], e_index[3]]);
        let index = u64::from(e_index & !SRTCP_E);
        let seen = Self::stream(&mut self.srtcp_in, ssrc, 0);
        if seen.window != 0 && seen.seen(index) {
            return Err(SrtpError::Replay { index });
        }
        seen.advance(index);
        let mut out = rtcp.to_vec();
        if e_index & SRTCP_E != 0 {
            self.rtcp.xor_keystream(ssrc, index, &mut out[8..]);
        }
        Ok(out)
    }
}

/// SSRC and sequence number of an RTP header.
fn rtp_ids(header: &[u8]) -> Result<(u32, u16), SrtpError> {
    if header.len() < 12 {
        return Err(SrtpError::TooShort {
            len: header.len(),
            what: "an RTP header",
        });
    }
    if header[0] >> 6 != 2 {
        return Err(SrtpError::BadVersion);
    }
    let seq = u16::from_be_bytes([header[2], header[3]]);
    let ssrc = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    Ok((ssrc, seq))
}

/// Length of an RTP header with its CSRCs and extension.
fn rtp_header_len(packet: &[u8]) -> Result<usize, SrtpError> {
    rtp_ids(packet)?;
    let mut len = 12 + 4 * usize::from(packet[0] & 0x0f);
    if packet[0] & 0x10 != 0 {
        let ext = packet.get(len + 2..len + 4).ok_or(SrtpError::TooShort {
            len: packet.len(),
            what: "its RTP header extension",
        })?;
        len += 4 + 4 * usize::from(u16::from_be_bytes([ext[0], ext[1]]));
    }
    if packet.len() < len {
        return Err(SrtpError::TooShort {
            len: packet.len(),
            what: "its RTP header",
        });
    }
    Ok(len)
}

/// The sender SSRC of the first packet of an RTCP compound packet.
fn rtcp_ssrc(packet: &[u8]) -> Result<u32, SrtpError> {
    if packet.len() < 8 {
        return Err(SrtpError::TooShort {
            len: packet.len(),
            what: "an RTCP packet",
        });
    }
    if packet[0] >> 6 != 2 {
        return Err(SrtpError::BadVersion);
    }
    Ok(u32::from_be_bytes([
        packet[4], packet[5], packet[6], packet[7],
    ]))
}

#[cfg(test)]
mod tests;
