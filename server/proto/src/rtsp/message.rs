//! RTSP requests and responses as plain values, and their serialisation.

use std::fmt;

use bytes::Bytes;

use super::status::StatusCode;

/// An RTSP method.
///
/// Methods are case-sensitive tokens (RFC 2326 §6.1), so `options` is not OPTIONS; anything
/// unrecognised is kept verbatim in [`Method::Other`] so the server can answer 501 naming
/// what the client actually asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    Options,
    Describe,
    Announce,
    Setup,
    Play,
    Pause,
    Record,
    Teardown,
    GetParameter,
    SetParameter,
    Redirect,
    Other(String),
}

impl Method {
    pub fn as_str(&self) -> &str {
        match self {
            Method::Options => "OPTIONS",
            Method::Describe => "DESCRIBE",
            Method::Announce => "ANNOUNCE",
            Method::Setup => "SETUP",
            Method::Play => "PLAY",
            Method::Pause => "PAUSE",
            Method::Record => "RECORD",
            Method::Teardown => "TEARDOWN",
            Method::GetParameter => "GET_PARAMETER",
            Method::SetParameter => "SET_PARAMETER",
            Method::Redirect => "REDIRECT",
            Method::Other(s) => s,
        }
    }

    /// Never fails: an unknown token is a valid request for an unimplemented method, which
    /// deserves a 501, not a 400.
    pub fn parse(token: &str) -> Method {
        match token {
            "OPTIONS" => Method::Options,
            "DESCRIBE" => Method::Describe,
            "ANNOUNCE" => Method::Announce,
            "SETUP" => Method::Setup,
            "PLAY" => Method::Play,
            "PAUSE" => Method::Pause,
            "RECORD" => Method::Record,
            "TEARDOWN" => Method::Teardown,
            "GET_PARAMETER" => Method::GetParameter,
            "SET_PARAMETER" => Method::SetParameter,
            "REDIRECT" => Method::Redirect,
            other => Method::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Header fields in the order they were sent or added.
///
/// A list rather than a map: order matters to some picky clients and to byte-exact tests,
/// repeated fields (e.g. several `WWW-Authenticate` challenges) must all survive, and RTSP
/// messages carry so few headers that a linear scan beats hashing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    pub fn new() -> Self {
        Self::default()
    }

    /// First value of `name`, compared case-insensitively as RFC 2326 §4.2 requires.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a repeatable header, in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Appends, keeping any existing field of the same name.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    /// Replaces every existing field of that name with one field, in the position of the
    /// first, so replacing does not reorder the message.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        let name = name.into();
        let value = value.into();
        match self
            .0
            .iter()
            .position(|(n, _)| n.eq_ignore_ascii_case(&name))
        {
            Some(i) => {
                self.0[i] = (name, value);
                let mut j = i + 1;
                while j < self.0.len() {
                    if self.0[j].0.eq_ignore_ascii_case(&self.0[i].0) {
                        self.0.remove(j);
                    } else {
                        j += 1;
                    }
                }
            }
            None => self.0.push((name, value)),
        }
    }

    /// Removes every field of that name; returns whether any was present.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.0.len() != before
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CSeq is what ties a response to its request; a value that is not a number is
    /// treated as absent because it cannot be echoed meaningfully.
    fn cseq(&self) -> Option<u32> {
        self.get("CSeq")?.trim().parse().ok()
    }

    /// Writes the fields, skipping Content-Length (the serialiser derives it from the body
    /// so the two can never disagree) and neutralising CR/LF so a value echoed from a peer
    /// cannot smuggle extra header lines into our output.
    fn write_to(&self, out: &mut Vec<u8>, body: &[u8]) {
        for (name, value) in self.iter() {
            if name.eq_ignore_ascii_case("Content-Length") {
                continue;
            }
            push_sanitised(out, name);
            out.extend_from_slice(b": ");
            push_sanitised(out, value);
            out.extend_from_slice(b"\r\n");
        }
        if !body.is_empty() {
            out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
    }
}

fn push_sanitised(out: &mut Vec<u8>, s: &str) {
    out.extend(
        s.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
}

impl<N: Into<String>, V: Into<String>> FromIterator<(N, V)> for Headers {
    fn from_iter<T: IntoIterator<Item = (N, V)>>(iter: T) -> Self {
        Headers(
            iter.into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        )
    }
}

/// Value of a Session header without its parameters (`;timeout=...`), which is what
/// identifies the session in lookups.
fn session_id_of(headers: &Headers) -> Option<&str> {
    let v = headers.get("Session")?;
    let id = v.split(';').next().unwrap_or("").trim();
    (!id.is_empty()).then_some(id)
}

/// An RTSP request.
///
/// `headers` never contains Content-Length after parsing: that field is framing, already
/// expressed by `body.len()`, and [`Request::to_bytes`] regenerates it.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub method: Method,
    pub uri: String,
    pub headers: Headers,
    pub body: Bytes,
}

impl Request {
    pub fn new(method: Method, uri: impl Into<String>) -> Self {
        Request {
            method,
            uri: uri.into(),
            headers: Headers::default(),
            body: Bytes::new(),
        }
    }

    /// Builder-style append, so tests and clients can write a request as one expression.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Sets the body and its Content-Type together, since one without the other is useless.
    pub fn body(mut self, content_type: &str, body: impl Into<Bytes>) -> Self {
        self.headers.set("Content-Type", content_type);
        self.body = body.into();
        self
    }

    pub fn cseq(&self) -> Option<u32> {
        self.headers.cseq()
    }

    pub fn session_id(&self) -> Option<&str> {
        session_id_of(&self.headers)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.body.len());
        push_sanitised(&mut out, self.method.as_str());
        out.push(b' ');
        // A URI with spaces would split the request line; encode them rather than corrupt it.
        for b in self.uri.bytes() {
            match b {
                b' ' => out.extend_from_slice(b"%20"),
                b'\r' | b'\n' => {}
                _ => out.push(b),
            }
        }
        out.extend_from_slice(b" RTSP/1.0\r\n");
        self.headers.write_to(&mut out, &self.body);
        out
    }
}

/// An RTSP response.
///
/// As with [`Request`], `headers` holds no Content-Length after parsing.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub status: StatusCode,
    /// Kept separately from `status` because peers send their own phrases and a faithful
    /// copy helps when debugging them.
    pub reason: String,
    pub headers: Headers,
    pub body: Bytes,
}

impl Response {
    pub fn new(status: StatusCode) -> Self {
        Response {
            status,
            reason: status.reason().to_owned(),
            headers: Headers::default(),
            body: Bytes::new(),
        }
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name, value);
        self
    }

    pub fn body(mut self, content_type: &str, body: impl Into<Bytes>) -> Self {
        self.headers.set("Content-Type", content_type);
        self.body = body.into();
        self
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.body.len());
        out.extend_from_slice(format!("RTSP/1.0 {:03} ", self.status.0).as_bytes());
        push_sanitised(&mut out, &self.reason);
        out.extend_from_slice(b"\r\n");
        self.headers.write_to(&mut out, &self.body);
        out
    }

    pub fn cseq(&self) -> Option<u32> {
        self.headers.cseq()
    }

    pub fn session_id(&self) -> Option<&str> {
        session_id_of(&self.headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_round_trip() {
        for m in [
            Method::Options,
            Method::Describe,
            Method::Announce,
            Method::Setup,
            Method::Play,
            Method::Pause,
            Method::Record,
            Method::Teardown,
            Method::GetParameter,
            Method::SetParameter,
            Method::Redirect,
        ] {
            assert_eq!(Method::parse(m.as_str()), m);
        }
        assert_eq!(Method::parse("options"), Method::Other("options".into()));
        assert_eq!(Method::parse("FLY").as_str(), "FLY");
        assert_eq!(Method::GetParameter.to_string(), "GET_PARAMETER");
    }

    #[test]
    fn headers_case_insensitive_and_ordered() {
        let mut h = Headers::new();
        h.insert("CSeq", "1");
        h.insert("WWW-Authenticate", "Digest a");
        h.insert("www-authenticate", "Basic b");
        assert_eq!(h.get("cseq"), Some("1"));
        assert_eq!(h.get("WWW-AUTHENTICATE"), Some("Digest a"));
        assert_eq!(h.get_all("www-authenticate").count(), 2);
        assert_eq!(h.len(), 3);
        h.set("Www-Authenticate", "None");
        assert_eq!(h.len(), 2);
        assert_eq!(
            h.iter().collect::<Vec<_>>(),
            vec![("CSeq", "1"), ("Www-Authenticate", "None")]
        );
        h.set("Session", "x");
        assert_eq!(h.get("session"), Some("x"));
        assert!(h.remove("SESSION"));
        assert!(!h.remove("SESSION"));
        assert!(!h.is_empty());
        assert!(Headers::default().is_empty());
    }

    #[test]
    fn request_accessors() {
        let r = Request::new(Method::Play, "rtsp://h/s")
            .header("CSeq", " 42 ")
            .header("Session", "abc123;timeout=60");
        assert_eq!(r.cseq(), Some(42));
        assert_eq!(r.session_id(), Some("abc123"));
        let r = Request::new(Method::Play, "rtsp://h/s").header("CSeq", "x");
        assert_eq!(r.cseq(), None);
        assert_eq!(r.session_id(), None);
        let r = r.header("Session", " ;timeout=5");
        assert_eq!(r.session_id(), None);
    }

    #[test]
    fn response_serialisation() {
        let r = Response::new(StatusCode::OK)
            .header("CSeq", "2")
            .header("Public", "OPTIONS, DESCRIBE");
        assert_eq!(
            r.to_bytes(),
            b"RTSP/1.0 200 OK\r\nCSeq: 2\r\nPublic: OPTIONS, DESCRIBE\r\n\r\n"
        );
        assert_eq!(r.cseq(), Some(2));
        let r = Response::new(StatusCode::OK)
            .header("CSeq", "3")
            .header("Content-Length", "999")
            .body("application/sdp", &b"v=0\r\n"[..]);
        assert_eq!(
            String::from_utf8(r.to_bytes()).unwrap(),
            "RTSP/1.0 200 OK\r\nCSeq: 3\r\nContent-Type: application/sdp\r\nContent-Length: 5\r\n\r\nv=0\r\n"
        );
    }

    #[test]
    fn request_serialisation_and_injection() {
        let r = Request::new(Method::Options, "rtsp://h/a b")
            .header("CSeq", "1\r\nEvil: yes")
            .body("text/parameters", "x");
        assert_eq!(
            String::from_utf8(r.to_bytes()).unwrap(),
            "OPTIONS rtsp://h/a%20b RTSP/1.0\r\nCSeq: 1  Evil: yes\r\nContent-Type: text/parameters\r\nContent-Length: 1\r\n\r\nx"
        );
        assert_eq!(
            Response::new(StatusCode(299)).to_bytes(),
            b"RTSP/1.0 299 Success\r\n\r\n"
        );
    }
}
