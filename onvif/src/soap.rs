//! SOAP 1.2 envelopes, the WS-Security UsernameToken, faults, and the device service's
//! answers (GetSystemDateAndTime, GetCapabilities, GetServices).

use crate::xml::{self, Element};
use crate::{printable, Error};
use base64::Engine;
use jiff::Timestamp;
use quick_xml::escape::escape;
use sha1::{Digest, Sha1};

pub const NS_DEVICE: &str = "http://www.onvif.org/ver10/device/wsdl";
pub const NS_MEDIA: &str = "http://www.onvif.org/ver10/media/wsdl";
pub const NS_PTZ: &str = "http://www.onvif.org/ver20/ptz/wsdl";
pub const NS_SCHEMA: &str = "http://www.onvif.org/ver10/schema";
const NS_ENV: &str = "http://www.w3.org/2003/05/soap-envelope";
const NS_WSSE: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";
const NS_WSU: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd";
const DIGEST_TYPE: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0#PasswordDigest";
const NONCE_TYPE: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary";

/// The ONVIF user (never logged: `Debug` leaves the password out).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// One SOAP call for the shell to POST: `body` to `url` with [`HttpRequest::content_type`].
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    pub url: String,
    /// The operation's name (for errors and logs) and its SOAP action URI.
    pub operation: &'static str,
    pub action: String,
    pub body: Vec<u8>,
}

impl HttpRequest {
    /// SOAP 1.2 carries the action in the content type.
    pub fn content_type(&self) -> String {
        format!(
            "application/soap+xml; charset=utf-8; action=\"{}\"",
            self.action
        )
    }
}

/// `Base64(SHA-1(nonce + created + password))`, WS-Security's PasswordDigest.
pub fn password_digest(nonce: &[u8], created: &str, password: &str) -> String {
    let mut h = Sha1::new();
    h.update(nonce);
    h.update(created.as_bytes());
    h.update(password.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// `Created` as devices parse it: UTC, whole seconds, `Z`.
pub fn created(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The `<wsse:Security>` header for `creds`, created at `at` (the device's clock: the
/// caller adds the offset) with `nonce`.
pub fn security_header(creds: &Credentials, nonce: &[u8], at: Timestamp) -> String {
    let created = created(at);
    let digest = password_digest(nonce, &created, &creds.password);
    let nonce = base64::engine::general_purpose::STANDARD.encode(nonce);
    format!(
        "<wsse:Security s:mustUnderstand=\"1\" xmlns:wsse=\"{NS_WSSE}\" xmlns:wsu=\"{NS_WSU}\">\
         <wsse:UsernameToken><wsse:Username>{user}</wsse:Username>\
         <wsse:Password Type=\"{DIGEST_TYPE}\">{digest}</wsse:Password>\
         <wsse:Nonce EncodingType=\"{NONCE_TYPE}\">{nonce}</wsse:Nonce>\
         <wsu:Created>{created}</wsu:Created></wsse:UsernameToken></wsse:Security>",
        user = escape(creds.user.as_str()),
    )
}

/// A SOAP 1.2 envelope around `body` (already XML), with `header` (already XML) if any.
pub fn envelope(header: Option<&str>, body: &str) -> String {
    let header = header.map_or(String::new(), |h| format!("<s:Header>{h}</s:Header>"));
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <s:Envelope xmlns:s=\"{NS_ENV}\" xmlns:tds=\"{NS_DEVICE}\" xmlns:trt=\"{NS_MEDIA}\" \
         xmlns:tptz=\"{NS_PTZ}\" xmlns:tt=\"{NS_SCHEMA}\">{header}<s:Body>{body}</s:Body></s:Envelope>"
    )
}

/// A request for `operation` of the service at `url` (`ns` its WSDL namespace), `body` its
/// element.
pub fn request(
    url: &str,
    ns: &str,
    operation: &'static str,
    body: &str,
    security: Option<String>,
) -> HttpRequest {
    HttpRequest {
        url: url.to_string(),
        operation,
        action: format!("{ns}/{operation}"),
        body: envelope(security.as_deref(), body).into_bytes(),
    }
}

fn fault(f: &Element, action: &'static str) -> Error {
    // SOAP 1.2: Code/Value, Code/Subcode/Value, Reason/Text; SOAP 1.1: faultcode, faultstring.
    let code = f
        .path(&["Code", "Subcode", "Value"])
        .or_else(|| f.path(&["Code", "Value"]))
        .or_else(|| f.child("faultcode"))
        .map_or("", Element::text);
    let reason = f
        .path(&["Reason", "Text"])
        .or_else(|| f.child("faultstring"))
        .map_or("", Element::text);
    Error::Fault {
        action,
        code: printable(code),
        reason: printable(reason),
    }
}

/// The SOAP body's first element, or the fault it carries.
pub fn body(bytes: &[u8], action: &'static str) -> Result<Element, Error> {
    let root = xml::parse(bytes)?;
    if root.name != "Envelope" {
        return Err(Error::NotSoap(printable(&root.name)));
    }
    let body = root
        .child("Body")
        .ok_or_else(|| Error::NotSoap("Envelope".into()))?;
    let first = body
        .children
        .first()
        .ok_or_else(|| Error::NotSoap("Envelope".into()))?;
    if first.name == "Fault" {
        return Err(fault(first, action));
    }
    Ok(first.clone())
}

/// An HTTP answer to `operation`: its body element, or why not (a 401/403, or a fault
/// saying the sender is not authorized, is [`Error::Unauthorized`]).
pub fn answer(status: u16, bytes: &[u8], operation: &'static str) -> Result<Element, Error> {
    let parsed = body(bytes, operation);
    let unauthorized = |reason: String| Error::Unauthorized {
        action: operation,
        status,
        reason,
    };
    match parsed {
        Ok(el) if (200..300).contains(&status) => Ok(el),
        Err(Error::Fault { code, reason, .. })
            if status == 401
                || status == 403
                || code.contains("NotAuthorized")
                || code.contains("FailedAuthentication") =>
        {
            Err(unauthorized(reason))
        }
        _ if status == 401 || status == 403 => Err(unauthorized(String::new())),
        Err(e @ Error::Fault { .. }) => Err(e),
        Err(e) if (200..300).contains(&status) => Err(e),
        _ => Err(Error::Http {
            action: operation,
            status,
            body: printable(&String::from_utf8_lossy(&bytes[..bytes.len().min(400)])),
        }),
    }
}

pub const GET_SYSTEM_DATE_AND_TIME: &str = "<tds:GetSystemDateAndTime/>";
pub const GET_CAPABILITIES: &str =
    "<tds:GetCapabilities><tds:Category>All</tds:Category></tds:GetCapabilities>";
pub const GET_SERVICES: &str =
    "<tds:GetServices><tds:IncludeCapability>false</tds:IncludeCapability></tds:GetServices>";

fn number(e: &Element, path: &[&str], what: &'static str) -> Result<i64, Error> {
    let el = e.path(path).ok_or(Error::Missing {
        action: "GetSystemDateAndTime",
        what,
    })?;
    el.text().parse().map_err(|_| Error::Invalid {
        action: "GetSystemDateAndTime",
        what,
        value: printable(el.text()),
        why: "not a number",
    })
}

/// The device's UTC clock from a GetSystemDateAndTime answer's body element; None when it
/// gives local time only (then the offset stays unknown).
pub fn system_time(el: &Element) -> Result<Option<Timestamp>, Error> {
    let Some(utc) = el.find("UTCDateTime") else {
        return Ok(None);
    };
    let n = |path: &[&str], what| number(utc, path, what);
    let (y, mo, d) = (
        n(&["Date", "Year"], "year")?,
        n(&["Date", "Month"], "month")?,
        n(&["Date", "Day"], "day")?,
    );
    let (h, mi, s) = (
        n(&["Time", "Hour"], "hour")?,
        n(&["Time", "Minute"], "minute")?,
        n(&["Time", "Second"], "second")?,
    );
    let invalid = || Error::Invalid {
        action: "GetSystemDateAndTime",
        what: "UTCDateTime",
        value: format!("{y}-{mo}-{d} {h}:{mi}:{s}"),
        why: "not a date and time",
    };
    let small = |v: i64| i8::try_from(v).map_err(|_| invalid());
    let year = i16::try_from(y).map_err(|_| invalid())?;
    let dt = jiff::civil::DateTime::new(
        year,
        small(mo)?,
        small(d)?,
        small(h)?,
        small(mi)?,
        small(s.min(59))?,
        0,
    )
    .map_err(|_| invalid())?;
    let ts = dt
        .to_zoned(jiff::tz::TimeZone::UTC)
        .map_err(|_| invalid())?
        .timestamp();
    Ok(Some(ts))
}

/// [`system_time`] of a whole answer document.
pub fn parse_system_time(bytes: &[u8]) -> Result<Option<Timestamp>, Error> {
    system_time(&body(bytes, "GetSystemDateAndTime")?)
}

/// The services a device names: media and PTZ (`XAddr`s).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Services {
    pub media: Option<String>,
    pub ptz: Option<String>,
}

/// An `XAddr` must be an http(s) URL with a host: it is where the next request goes.
pub fn xaddr(value: &str, action: &'static str) -> Result<String, Error> {
    let bad = |why| Error::Invalid {
        action,
        what: "XAddr",
        value: printable(value),
        why,
    };
    let u = url::Url::parse(value.trim()).map_err(|_| bad("not a URL"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
        return Err(bad("not an http:// or https:// URL with a host"));
    }
    Ok(u.to_string())
}

/// A GetCapabilities answer's body element → the media and PTZ services.
pub fn capabilities(el: &Element) -> Result<Services, Error> {
    let caps = el.child("Capabilities").ok_or(Error::Missing {
        action: "GetCapabilities",
        what: "Capabilities",
    })?;
    let addr = |name: &str| -> Result<Option<String>, Error> {
        caps.path(&[name, "XAddr"])
            .map(|x| xaddr(x.text(), "GetCapabilities"))
            .transpose()
    };
    Ok(Services {
        media: addr("Media")?,
        ptz: addr("PTZ")?,
    })
}

pub fn parse_capabilities(bytes: &[u8]) -> Result<Services, Error> {
    capabilities(&body(bytes, "GetCapabilities")?)
}

/// A GetServices answer's body element → the media and PTZ services (by namespace).
pub fn services(el: &Element) -> Result<Services, Error> {
    let mut out = Services::default();
    for s in el.children_named("Service") {
        let (Some(ns), Some(addr)) = (s.child("Namespace"), s.child("XAddr")) else {
            continue;
        };
        let slot = match ns.text() {
            NS_MEDIA => &mut out.media,
            "http://www.onvif.org/ver20/ptz/wsdl" => &mut out.ptz,
            _ => continue,
        };
        *slot = Some(xaddr(addr.text(), "GetServices")?);
    }
    Ok(out)
}

pub fn parse_services(bytes: &[u8]) -> Result<Services, Error> {
    services(&body(bytes, "GetServices")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_the_ws_security_example() {
        // The UsernameToken profile 1.0's worked example (§3.1 / ONVIF Core 5.12.2.1).
        let nonce = base64::engine::general_purpose::STANDARD
            .decode("LKqI6G/AikKCQrN0zqZFlg==")
            .unwrap();
        assert_eq!(
            password_digest(&nonce, "2010-09-16T07:50:45Z", "userpassword"),
            "tuOSpGlFlIXsozq4HFNeeGeFLEI="
        );
    }

    #[test]
    fn the_security_header_carries_the_digest_not_the_password() {
        let creds = Credentials {
            user: "ad<min".into(),
            password: "s3cret".into(),
        };
        let at: Timestamp = "2026-12-04T23:30:00Z".parse().unwrap();
        let h = security_header(&creds, &[1; 16], at);
        assert!(h.contains("<wsse:Username>ad&lt;min</wsse:Username>"));
        assert!(h.contains("<wsu:Created>2026-12-04T23:30:00Z</wsu:Created>"));
        assert!(h.contains(&password_digest(&[1; 16], "2026-12-04T23:30:00Z", "s3cret")));
        assert!(!h.contains("s3cret"));
        assert!(!format!("{creds:?}").contains("s3cret"));
        let env = envelope(Some(&h), GET_CAPABILITIES);
        assert!(xml::parse(env.as_bytes()).is_ok());
    }

    #[test]
    fn reads_a_soap_12_and_a_soap_11_fault() {
        let f12 = br#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" xmlns:ter="http://www.onvif.org/ver10/error"><s:Body><s:Fault><s:Code><s:Value>s:Sender</s:Value><s:Subcode><s:Value>ter:NotAuthorized</s:Value></s:Subcode></s:Code><s:Reason><s:Text xml:lang="en">Sender not
authorized</s:Text></s:Reason></s:Fault></s:Body></s:Envelope>"#;
        assert_eq!(
            body(f12, "GetProfiles"),
            Err(Error::Fault {
                action: "GetProfiles",
                code: "ter:NotAuthorized".into(),
                reason: "Sender not authorized".into()
            })
        );
        assert!(matches!(
            answer(400, f12, "GetProfiles"),
            Err(Error::Unauthorized { status: 400, .. })
        ));
        let f11 = br#"<SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/"><SOAP-ENV:Body><SOAP-ENV:Fault><faultcode>SOAP-ENV:Client</faultcode><faultstring>Action not supported</faultstring></SOAP-ENV:Fault></SOAP-ENV:Body></SOAP-ENV:Envelope>"#;
        let e = answer(500, f11, "GetServices").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the device answered GetServices with a SOAP fault SOAP-ENV:Client: Action not supported"
        );
        assert!(matches!(
            answer(404, b"Not Found", "GetProfiles"),
            Err(Error::Http { status: 404, .. })
        ));
        assert!(matches!(
            answer(200, b"<html/>", "GetProfiles"),
            Err(Error::NotSoap(_))
        ));
    }

    #[test]
    fn reads_the_utc_clock_and_refuses_nonsense() {
        let doc = br#"<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body><tds:GetSystemDateAndTimeResponse xmlns:tds="x" xmlns:tt="y"><tds:SystemDateAndTime><tt:DateTimeType>NTP</tt:DateTimeType><tt:UTCDateTime><tt:Time><tt:Hour>23</tt:Hour><tt:Minute>5</tt:Minute><tt:Second>9</tt:Second></tt:Time><tt:Date><tt:Year>2026</tt:Year><tt:Month>12</tt:Month><tt:Day>4</tt:Day></tt:Date></tt:UTCDateTime></tds:SystemDateAndTime></tds:GetSystemDateAndTimeResponse></s:Body></s:Envelope>"#;
        let t = parse_system_time(doc).unwrap().unwrap();
        assert_eq!(t.to_string(), "2026-12-04T23:05:09Z");
        let bad = String::from_utf8_lossy(doc).replace(">12<", ">13<");
        assert!(matches!(
            parse_system_time(bad.as_bytes()),
            Err(Error::Invalid { .. })
        ));
        let bad = String::from_utf8_lossy(doc).replace(">2026<", ">99999999999<");
        assert!(matches!(
            parse_system_time(bad.as_bytes()),
            Err(Error::Invalid { .. })
        ));
        let local = br#"<Envelope><Body><R><SystemDateAndTime><LocalDateTime/></SystemDateAndTime></R></Body></Envelope>"#;
        assert_eq!(parse_system_time(local), Ok(None));
    }

    #[test]
    fn reads_services_from_capabilities_and_from_get_services() {
        let caps = br#"<s:Envelope xmlns:s="e"><s:Body><tds:GetCapabilitiesResponse xmlns:tds="d" xmlns:tt="t"><tds:Capabilities><tt:Device><tt:XAddr>http://10.0.0.5/onvif/device_service</tt:XAddr></tt:Device><tt:Media><tt:XAddr>http://10.0.0.5/onvif/media_service</tt:XAddr></tt:Media><tt:PTZ><tt:XAddr>http://10.0.0.5/onvif/ptz_service</tt:XAddr></tt:PTZ></tds:Capabilities></tds:GetCapabilitiesResponse></s:Body></s:Envelope>"#;
        let s = parse_capabilities(caps).unwrap();
        assert_eq!(
            s.media.as_deref(),
            Some("http://10.0.0.5/onvif/media_service")
        );
        assert_eq!(s.ptz.as_deref(), Some("http://10.0.0.5/onvif/ptz_service"));
        let svc = br#"<Envelope><Body><GetServicesResponse><Service><Namespace>http://www.onvif.org/ver10/media/wsdl</Namespace><XAddr>http://cam/onvif/Media</XAddr></Service><Service><Namespace>http://www.onvif.org/ver10/events/wsdl</Namespace><XAddr>http://cam/onvif/Events</XAddr></Service></GetServicesResponse></Body></Envelope>"#;
        let s = parse_services(svc).unwrap();
        assert_eq!(s.media.as_deref(), Some("http://cam/onvif/Media"));
        assert_eq!(s.ptz, None);
        let bad = String::from_utf8_lossy(caps)
            .replace("http://10.0.0.5/onvif/media_service", "file:///etc/passwd");
        assert!(matches!(
            parse_capabilities(bad.as_bytes()),
            Err(Error::Invalid { what: "XAddr", .. })
        ));
    }
}
