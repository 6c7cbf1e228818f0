//! Server side of RTSP authentication, sans-IO: Digest (RFC 2617 with MD5, RFC 7616 with
//! SHA-256) and Basic (RFC 7617) — parsing `Authorization`, writing `WWW-Authenticate`
//! challenges, verifying a Digest response against a stored HA1, and connection-bound nonces.
//!
//! Hand-written because the crates on crates.io (`digest_auth`, `http-auth`) are client
//! sides: they answer a challenge but neither issue nonces nor verify a response. The hashes
//! come from `md-5`/`sha2`, the nonce MAC from `hmac`.
//!
//! Nonces are stateless: `<issued ms, hex>.<HMAC(key, binding | issued)>`, where the binding
//! names one connection. A nonce replayed on another connection fails the MAC; one older than
//! its lifetime is answered `stale=true` (the client retries with a new one, no password
//! prompt). Time is passed in, so every decision is testable without a clock.

use hmac::{Hmac, Mac};
use md5::Md5;
use sha2::{Digest as _, Sha256};
use thiserror::Error;

/// A Digest hash algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Md5,
    Sha256,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Md5 => "MD5",
            Algorithm::Sha256 => "SHA-256",
        }
    }

    /// The `algorithm=` token (case-insensitive; absent means MD5, RFC 2617 §3.2.1).
    pub fn parse(token: &str) -> Option<Algorithm> {
        if token.eq_ignore_ascii_case("MD5") {
            Some(Algorithm::Md5)
        } else if token.eq_ignore_ascii_case("SHA-256") {
            Some(Algorithm::Sha256)
        } else {
            None
        }
    }

    /// Lower-case hex of the hash of `data`.
    pub fn hex(self, data: &[u8]) -> String {
        match self {
            Algorithm::Md5 => hex_lower(&Md5::digest(data)),
            Algorithm::Sha256 => hex_lower(&Sha256::digest(data)),
        }
    }
}

/// HA1 = H(user:realm:password): what the server stores instead of the password.
pub fn ha1(alg: Algorithm, user: &str, realm: &str, password: &str) -> String {
    alg.hex(format!("{user}:{realm}:{password}").as_bytes())
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("unsupported authentication scheme")]
    Scheme,
    #[error("malformed Authorization header")]
    Malformed,
    #[error("Authorization lacks {0}")]
    Missing(&'static str),
    #[error("unsupported digest algorithm")]
    Algorithm,
}

/// What a client sent in `Authorization`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    Basic { user: String, password: String },
    Digest(DigestResponse),
}

/// The fields of a Digest `Authorization` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigestResponse {
    pub username: String,
    pub realm: String,
    pub nonce: String,
    pub uri: String,
    pub response: String,
    pub algorithm: Algorithm,
    /// `auth` when the client uses RFC 2617 qop (then `nc` and `cnonce` are set); None for
    /// the RFC 2069 form that GStreamer sends.
    pub qop: Option<String>,
    pub nc: Option<u32>,
    pub cnonce: Option<String>,
}

/// Parse an `Authorization` header value.
pub fn parse_authorization(value: &str) -> Result<Credentials, AuthError> {
    let value = value.trim();
    let (scheme, rest) = value.split_once(' ').ok_or(AuthError::Malformed)?;
    if scheme.eq_ignore_ascii_case("Basic") {
        use base64::Engine;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .map_err(|_| AuthError::Malformed)?;
        let text = String::from_utf8(raw).map_err(|_| AuthError::Malformed)?;
        let (user, password) = text.split_once(':').ok_or(AuthError::Malformed)?;
        return Ok(Credentials::Basic {
            user: user.to_string(),
            password: password.to_string(),
        });
    }
    if !scheme.eq_ignore_ascii_case("Digest") {
        return Err(AuthError::Scheme);
    }
    let params = parse_params(rest)?;
    let get = |k: &str| param(&params, k).map(str::to_string);
    let need = |k: &'static str| get(k).ok_or(AuthError::Missing(k));
    let algorithm = match get("algorithm") {
        None => Algorithm::Md5,
        Some(a) => Algorithm::parse(&a).ok_or(AuthError::Algorithm)?,
    };
    let qop = get("qop");
    let (nc, cnonce) = match &qop {
        Some(_) => {
            let nc = u32::from_str_radix(&need("nc")?, 16).map_err(|_| AuthError::Malformed)?;
            (Some(nc), Some(need("cnonce")?))
        }
        None => (None, None),
    };
    Ok(Credentials::Digest(DigestResponse {
        username: need("username")?,
        realm: need("realm")?,
        nonce: need("nonce")?,
        uri: need("uri")?,
        response: need("response")?,
        algorithm,
        qop,
        nc,
        cnonce,
    }))
}

/// The value of parameter `name` (names are case-insensitive).
fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `name=value` pairs separated by commas; values are tokens or quoted strings with `\`
/// escapes (RFC 7235 §2.1).
fn parse_params(s: &str) -> Result<Vec<(String, String)>, AuthError> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            name.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') || name.is_empty() {
            return Err(AuthError::Malformed);
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(AuthError::Malformed),
                    Some('"') => break,
                    Some('\\') => value.push(chars.next().ok_or(AuthError::Malformed)?),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        if out.len() >= 32 {
            return Err(AuthError::Malformed);
        }
        out.push((name, value));
    }
}

/// A Digest `WWW-Authenticate` value. `qop="auth"` is offered; clients that ignore it
/// (GStreamer) answer in the RFC 2069 form, which [`DigestResponse::verify`] also accepts.
pub fn digest_challenge(realm: &str, nonce: &str, alg: Algorithm, stale: bool) -> String {
    let mut s = format!(
        "Digest realm=\"{}\", nonce=\"{nonce}\", algorithm={}, qop=\"auth\"",
        quote_safe(realm),
        alg.name()
    );
    if stale {
        s.push_str(", stale=true");
    }
    s
}

/// A Basic `WWW-Authenticate` value.
pub fn basic_challenge(realm: &str) -> String {
    format!("Basic realm=\"{}\"", quote_safe(realm))
}

fn quote_safe(s: &str) -> String {
    s.chars().filter(|c| *c != '"' && *c != '\\').collect()
}

impl DigestResponse {
    /// The response a client knowing the password computes for `method`.
    pub fn expected(&self, ha1_hex: &str, method: &str) -> String {
        let alg = self.algorithm;
        let ha2 = alg.hex(format!("{method}:{}", self.uri).as_bytes());
        let data = match (&self.qop, self.nc, &self.cnonce) {
            (Some(qop), Some(nc), Some(cnonce)) => {
                format!("{ha1_hex}:{}:{nc:08x}:{cnonce}:{qop}:{ha2}", self.nonce)
            }
            _ => format!("{ha1_hex}:{}:{ha2}", self.nonce),
        };
        alg.hex(data.as_bytes())
    }

    /// Whether the response proves knowledge of the password behind `ha1_hex`.
    pub fn verify(&self, ha1_hex: &str, method: &str) -> bool {
        if self.qop.as_deref().is_some_and(|q| q != "auth") {
            return false;
        }
        let expected = self.expected(ha1_hex, method);
        constant_time_eq(
            expected.as_bytes(),
            self.response.to_ascii_lowercase().as_bytes(),
        )
    }
}

/// Client side: the `Authorization` value answering a Digest `challenge` (one
/// `WWW-Authenticate` value), with qop=auth when offered. For the project's own client and
/// benchmarks. None: not a Digest challenge this module can answer.
pub fn answer_challenge(
    challenge: &str,
    (user, password): (&str, &str),
    method: &str,
    uri: &str,
    (cnonce, nc): (&str, u32),
) -> Option<String> {
    let (scheme, rest) = challenge.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("Digest") {
        return None;
    }
    let params = parse_params(rest).ok()?;
    let get = |k: &str| param(&params, k);
    let realm = get("realm")?;
    let nonce = get("nonce")?;
    let algorithm = Algorithm::parse(get("algorithm").unwrap_or("MD5"))?;
    let qop = get("qop")
        .is_some_and(|q| q.split(',').any(|t| t.trim() == "auth"))
        .then(|| "auth".to_string());
    let mut d = DigestResponse {
        username: user.to_string(),
        realm: realm.to_string(),
        nonce: nonce.to_string(),
        uri: uri.to_string(),
        response: String::new(),
        algorithm,
        nc: qop.as_ref().map(|_| nc),
        cnonce: qop.as_ref().map(|_| cnonce.to_string()),
        qop,
    };
    d.response = d.expected(&ha1(algorithm, user, realm, password), method);
    let qop_part = match (&d.qop, d.nc, &d.cnonce) {
        (Some(q), Some(nc), Some(c)) => format!(", qop={q}, nc={nc:08x}, cnonce=\"{c}\""),
        _ => String::new(),
    };
    Some(format!(
        "Digest username=\"{}\", realm=\"{}\", nonce=\"{}\", uri=\"{}\", response=\"{}\", algorithm={}{qop_part}",
        d.username, d.realm, d.nonce, d.uri, d.response, algorithm.name()
    ))
}

/// Compare without an early exit, so the time taken does not reveal how much matched.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

type HmacSha256 = Hmac<Sha256>;

fn nonce_mac(key: &[u8], binding: &[u8], issued_ms: u64) -> String {
    // HMAC accepts keys of any length: new_from_slice cannot fail.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(&(binding.len() as u64).to_be_bytes());
    mac.update(binding);
    mac.update(&issued_ms.to_be_bytes());
    hex_lower(&mac.finalize().into_bytes()[..16])
}

/// A nonce for the connection named by `binding`, issued at `now_ms`.
pub fn make_nonce(key: &[u8], binding: &[u8], now_ms: u64) -> String {
    format!("{now_ms:x}.{}", nonce_mac(key, binding, now_ms))
}

/// What a nonce presented by a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonceCheck {
    /// Issued by us for this connection, within its lifetime.
    Fresh,
    /// Ours for this connection, but older than its lifetime (answer `stale=true`).
    Stale,
    /// Not ours, or issued for another connection.
    Invalid,
}

pub fn check_nonce(
    key: &[u8],
    binding: &[u8],
    nonce: &str,
    now_ms: u64,
    lifetime_ms: u64,
) -> NonceCheck {
    let Some((issued, mac)) = nonce.split_once('.') else {
        return NonceCheck::Invalid;
    };
    let Ok(issued_ms) = u64::from_str_radix(issued, 16) else {
        return NonceCheck::Invalid;
    };
    if !constant_time_eq(
        nonce_mac(key, binding, issued_ms).as_bytes(),
        mac.as_bytes(),
    ) {
        return NonceCheck::Invalid;
    }
    // A nonce from the future (clock stepped back) is treated as stale, not trusted.
    if issued_ms > now_ms || now_ms - issued_ms > lifetime_ms {
        NonceCheck::Stale
    } else {
        NonceCheck::Fresh
    }
}

fn hex_lower(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc2617_example_verifies() {
        // RFC 2617 §3.5 (the example's HA1 is MD5("Mufasa:testrealm@host.com:Circle Of Life")).
        let h = r#"Digest username="Mufasa", realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", uri="/dir/index.html", qop=auth, nc=00000001, cnonce="0a4f113b", response="6629fae49393a05397450978507c4ef1", opaque="5ccc069c403ebaf9f0171e9517f40e41""#;
        let Credentials::Digest(d) = parse_authorization(h).unwrap() else {
            panic!("not digest")
        };
        assert_eq!(d.nc, Some(1));
        let ha1 = ha1(
            Algorithm::Md5,
            "Mufasa",
            "testrealm@host.com",
            "Circle Of Life",
        );
        assert!(d.verify(&ha1, "GET"));
        assert!(!d.verify(&ha1, "POST"));
        let wrong = ha1_wrong();
        assert!(!d.verify(&wrong, "GET"));
    }

    fn ha1_wrong() -> String {
        ha1(
            Algorithm::Md5,
            "Mufasa",
            "testrealm@host.com",
            "circle of life",
        )
    }

    #[test]
    fn rfc7616_sha256_example_verifies() {
        // RFC 7616 §3.9.1, SHA-256 response.
        let h = r#"Digest username="Mufasa", realm="http-auth@example.org", uri="/dir/index.html", algorithm=SHA-256, nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", nc=00000001, cnonce="f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", qop=auth, response="753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#;
        let Credentials::Digest(d) = parse_authorization(h).unwrap() else {
            panic!("not digest")
        };
        assert_eq!(d.algorithm, Algorithm::Sha256);
        let ha1 = ha1(
            Algorithm::Sha256,
            "Mufasa",
            "http-auth@example.org",
            "Circle of Life",
        );
        assert!(d.verify(&ha1, "GET"));
    }

    #[test]
    fn rfc2069_form_without_qop_verifies() {
        let ha1 = ha1(Algorithm::Md5, "u", "vigil", "p");
        let mut d = DigestResponse {
            username: "u".into(),
            realm: "vigil".into(),
            nonce: "n".into(),
            uri: "rtsp://h/live/a".into(),
            response: String::new(),
            algorithm: Algorithm::Md5,
            qop: None,
            nc: None,
            cnonce: None,
        };
        d.response = d.expected(&ha1, "DESCRIBE").to_uppercase();
        assert!(d.verify(&ha1, "DESCRIBE"));
        d.qop = Some("auth-int".into());
        assert!(!d.verify(&ha1, "DESCRIBE"));
    }

    #[test]
    fn basic_and_bad_headers() {
        assert_eq!(
            parse_authorization("Basic dTpwOnE=").unwrap(),
            Credentials::Basic {
                user: "u".into(),
                password: "p:q".into()
            }
        );
        assert_eq!(parse_authorization("Bearer x"), Err(AuthError::Scheme));
        assert_eq!(parse_authorization("Basic !!!"), Err(AuthError::Malformed));
        assert_eq!(
            parse_authorization("Digest username=\"a"),
            Err(AuthError::Malformed)
        );
        assert_eq!(
            parse_authorization("Digest username=a, realm=b, nonce=c, uri=d"),
            Err(AuthError::Missing("response"))
        );
        assert_eq!(
            parse_authorization(
                "Digest username=a, realm=b, nonce=c, uri=d, response=e, algorithm=SHA-512"
            ),
            Err(AuthError::Algorithm)
        );
        assert_eq!(
            parse_authorization("Digest username=a, realm=b, nonce=c, uri=d, response=e, qop=auth"),
            Err(AuthError::Missing("nc"))
        );
        assert!(parse_authorization("Digest").is_err());
        let many = format!("Digest {}", "a=b,".repeat(40));
        assert_eq!(parse_authorization(&many), Err(AuthError::Malformed));
    }

    #[test]
    fn answers_verify() {
        for alg in [Algorithm::Md5, Algorithm::Sha256] {
            let c = digest_challenge("vigil", "n1", alg, false);
            let a = answer_challenge(&c, ("u", "p"), "DESCRIBE", "rtsp://h/x", ("cn", 7)).unwrap();
            let Credentials::Digest(d) = parse_authorization(&a).unwrap() else {
                panic!("{a}")
            };
            assert_eq!((d.nc, d.algorithm), (Some(7), alg));
            assert!(d.verify(&ha1(alg, "u", "vigil", "p"), "DESCRIBE"));
        }
        assert!(answer_challenge("Basic realm=\"x\"", ("u", "p"), "M", "u", ("c", 1)).is_none());
    }

    #[test]
    fn quoted_escapes_and_challenge() {
        let p = parse_params(r#"a="x\"y", b = tok ,c="""#).unwrap();
        assert_eq!(
            p,
            vec![
                ("a".into(), "x\"y".into()),
                ("b".into(), "tok".into()),
                ("c".into(), String::new())
            ]
        );
        let c = digest_challenge("vi\"gil", "n1", Algorithm::Sha256, true);
        assert_eq!(
            c,
            "Digest realm=\"vigil\", nonce=\"n1\", algorithm=SHA-256, qop=\"auth\", stale=true"
        );
        assert_eq!(basic_challenge("r"), "Basic realm=\"r\"");
    }

    #[test]
    fn nonces_are_bound_to_the_connection_and_expire() {
        let key = b"secret";
        let n = make_nonce(key, b"conn-1", 10_000);
        assert_eq!(
            check_nonce(key, b"conn-1", &n, 10_500, 1000),
            NonceCheck::Fresh
        );
        assert_eq!(
            check_nonce(key, b"conn-1", &n, 11_001, 1000),
            NonceCheck::Stale
        );
        assert_eq!(
            check_nonce(key, b"conn-1", &n, 9_000, 1000),
            NonceCheck::Stale
        );
        assert_eq!(
            check_nonce(key, b"conn-2", &n, 10_500, 1000),
            NonceCheck::Invalid
        );
        assert_eq!(
            check_nonce(b"other", b"conn-1", &n, 10_500, 1000),
            NonceCheck::Invalid
        );
        // Hand-made: a later issue time with the old MAC.
        let (_, mac) = n.split_once('.').unwrap();
        let forged = format!("{:x}.{mac}", 10_400);
        assert_eq!(
            check_nonce(key, b"conn-1", &forged, 10_500, 1000),
            NonceCheck::Invalid
        );
        for junk in ["", ".", "zz.zz", "1", "ffffffffffffffffffff.0"] {
            assert_eq!(
                check_nonce(key, b"conn-1", junk, 10_500, 1000),
                NonceCheck::Invalid
            );
        }
    }

    proptest::proptest! {
        /// Whatever a client sends, parsing and checking return a value, never panic.
        #[test]
        fn arbitrary_headers_and_nonces_never_panic(h in ".{0,300}", n in "[0-9a-f.]{0,40}") {
            let _ = parse_authorization(&h);
            let _ = parse_authorization(&format!("Digest {h}"));
            let _ = check_nonce(b"k", b"c", &n, 1_000, 10);
            let _ = check_nonce(b"k", b"c", &h, 1_000, 10);
        }
    }
}
