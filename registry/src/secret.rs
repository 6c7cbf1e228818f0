//! Camera passwords, sealed in the registry files with XChaCha20-Poly1305 under the key of
//! `[registry] secret_key` (or one derived from the cluster key), the camera id as
//! associated data: a sealed password copied onto another camera does not open. The share
//! holds ciphertext only for camera passwords; users' Digest HA1s are stored as they are
//! (an HA1 answers Digest for its realm: protect reads of the share). The same key, under
//! another label, signs every registry version (`format::MacKey`).

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use sha2::{Digest, Sha256};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("the sealed password is not base64 of nonce and ciphertext")]
    Malformed,
    #[error("the sealed password does not open with this key")]
    WrongKey,
}

const NONCE: usize = 24;

/// The key passwords are sealed with. No `Debug` of its bytes.
#[derive(Clone)]
pub struct SecretKey(chacha20poly1305::Key);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

impl SecretKey {
    pub fn from_bytes(bytes: [u8; 32]) -> SecretKey {
        SecretKey(bytes.into())
    }

    /// The key of `[registry] secret_key`, else one derived from the cluster key (SHA-256
    /// of a fixed label and the key: the gossip's HMAC key is never used as is for a
    /// second purpose), else none.
    pub fn from_source(source: &vigil_conf::SecretKeySource) -> Option<SecretKey> {
        match source {
            vigil_conf::SecretKeySource::Key(k) => Some(SecretKey::from_bytes(*k)),
            vigil_conf::SecretKeySource::ClusterKey(k) => {
                let mut h = Sha256::new();
                h.update(b"vigil registry secrets v1\0");
                h.update(k.as_bytes());
                Some(SecretKey::from_bytes(h.finalize().into()))
            }
            vigil_conf::SecretKeySource::None => None,
        }
    }

    /// The key registry versions are signed with: derived from this one under its own label
    /// (one key, two purposes, never the same bytes).
    pub fn mac_key(&self) -> crate::format::MacKey {
        let mut h = Sha256::new();
        h.update(b"vigil registry mac v1\0");
        h.update(self.0.as_slice());
        crate::format::MacKey(h.finalize().into())
    }

    /// `password` sealed for camera `id`: base64 of a random nonce and the ciphertext.
    pub fn seal(&self, id: &str, password: &str) -> String {
        let mut nonce = [0u8; NONCE];
        rand::thread_rng().fill_bytes(&mut nonce);
        let cipher = XChaCha20Poly1305::new(&self.0);
        let payload = Payload {
            msg: password.as_bytes(),
            aad: id.as_bytes(),
        };
        // Encryption into a Vec fails only past the cipher's length limit (GiBs).
        let ct = cipher
            .encrypt(XNonce::from_slice(&nonce), payload)
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        base64::engine::general_purpose::STANDARD.encode(out)
    }

    pub fn open(&self, id: &str, sealed: &str) -> Result<String, SecretError> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .map_err(|_| SecretError::Malformed)?;
        if raw.len() < NONCE + 16 {
            return Err(SecretError::Malformed);
        }
        let (nonce, ct) = raw.split_at(NONCE);
        let cipher = XChaCha20Poly1305::new(&self.0);
        let plain = cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: id.as_bytes(),
                },
            )
            .map_err(|_| SecretError::WrongKey)?;
        String::from_utf8(plain).map_err(|_| SecretError::Malformed)
    }
}

/// `url` without its password, and the password (as the URL spells it, percent-encoded).
/// An unparsable URL is returned as it is (the checks refuse it elsewhere).
pub fn split_password(url: &str) -> (String, Option<String>) {
    let Ok(mut u) = url::Url::parse(url) else {
        return (url.to_string(), None);
    };
    let password = u.password().filter(|p| !p.is_empty()).map(str::to_string);
    if password.is_some() {
        let _ = u.set_password(None);
        return (u.to_string(), password);
    }
    (url.to_string(), None)
}

/// `url` with `password` (percent-encoded, as [`split_password`] gave it) put back.
pub fn join_password(url: &str, password: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_password(Some(password));
            u.to_string()
        }
        Err(_) => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_opens_with_its_key_and_camera_only() {
        let k = SecretKey::from_bytes([1; 32]);
        let sealed = k.seal("gate", "hunter2");
        assert!(!sealed.contains("hunter2"));
        assert_ne!(sealed, k.seal("gate", "hunter2"), "a fresh nonce each time");
        assert_eq!(k.open("gate", &sealed).unwrap(), "hunter2");
        assert_eq!(k.open("door", &sealed), Err(SecretError::WrongKey));
        assert_eq!(
            SecretKey::from_bytes([2; 32]).open("gate", &sealed),
            Err(SecretError::WrongKey)
        );
        assert_eq!(k.open("gate", "!!"), Err(SecretError::Malformed));
        assert_eq!(k.open("gate", "AAAA"), Err(SecretError::Malformed));
        assert_eq!(format!("{k:?}"), "SecretKey(..)");
    }

    #[test]
    fn the_cluster_key_gives_every_node_the_same_derived_key() {
        let src = vigil_conf::SecretKeySource::ClusterKey("shared".into());
        let (a, b) = (
            SecretKey::from_source(&src).unwrap(),
            SecretKey::from_source(&src).unwrap(),
        );
        assert_eq!(b.open("c", &a.seal("c", "pw")).unwrap(), "pw");
        assert!(SecretKey::from_source(&vigil_conf::SecretKeySource::None).is_none());
    }

    #[test]
    fn passwords_come_out_of_urls_and_go_back() {
        let (bare, pw) = split_password("rtsp://admin:p%40ss@10.1.2.3:554/Streaming/101");
        assert_eq!(bare, "rtsp://admin@10.1.2.3:554/Streaming/101");
        assert_eq!(pw.as_deref(), Some("p%40ss"));
        assert_eq!(
            join_password(&bare, "p%40ss"),
            "rtsp://admin:p%40ss@10.1.2.3:554/Streaming/101"
        );
        assert_eq!(split_password("rtsp://h/x"), ("rtsp://h/x".into(), None));
        assert_eq!(split_password("push"), ("push".into(), None));
    }
}
