//! Media service: GetProfiles, GetStreamUri (RTP-Unicast over RTSP), the main profile, and
//! the RTSP URL with the user's credentials put in.

use crate::soap::body;
use crate::xml::Element;
use crate::{printable, Error};
use quick_xml::escape::escape;
use serde::Serialize;

/// A media profile as the device lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profile {
    pub token: String,
    pub name: String,
    /// The video encoder's encoding (`H264`, `H265`, `JPEG`…), when it has one.
    pub encoding: Option<String>,
    pub width: u32,
    pub height: u32,
}

pub const GET_PROFILES: &str = "<trt:GetProfiles/>";

/// GetStreamUri of `profile`: RTP unicast, RTSP (interleaved or not is the RTSP client's
/// choice: vigil's pull asks for TCP or UDP per camera).
pub fn get_stream_uri(profile: &str) -> String {
    format!(
        "<trt:GetStreamUri><trt:StreamSetup><tt:Stream>RTP-Unicast</tt:Stream>\
         <tt:Transport><tt:Protocol>RTSP</tt:Protocol></tt:Transport></trt:StreamSetup>\
         <trt:ProfileToken>{}</trt:ProfileToken></trt:GetStreamUri>",
        escape(profile)
    )
}

fn dimension(e: Option<&Element>) -> u32 {
    e.and_then(|e| e.text().parse().ok()).unwrap_or(0)
}

/// A GetProfiles answer's body element → its profiles, in the device's order.
pub fn profiles(el: &Element) -> Result<Vec<Profile>, Error> {
    let mut out = Vec::new();
    for p in el.children_named("Profiles") {
        let token = p.attr("token").map(str::trim).unwrap_or("");
        if token.is_empty() || token.len() > 64 || token.chars().any(char::is_control) {
            return Err(Error::Invalid {
                action: "GetProfiles",
                what: "profile token",
                value: printable(token),
                why: "empty, over 64 characters or not printable",
            });
        }
        let enc = p.child("VideoEncoderConfiguration");
        let res = enc.and_then(|e| e.child("Resolution"));
        out.push(Profile {
            token: token.to_string(),
            name: printable(p.child("Name").map_or("", Element::text)),
            encoding: enc
                .and_then(|e| e.child("Encoding"))
                .map(|e| printable(e.text())),
            width: dimension(res.and_then(|r| r.child("Width"))),
            height: dimension(res.and_then(|r| r.child("Height"))),
        });
    }
    if out.is_empty() {
        return Err(Error::NoProfiles);
    }
    Ok(out)
}

pub fn parse_profiles(bytes: &[u8]) -> Result<Vec<Profile>, Error> {
    profiles(&body(bytes, "GetProfiles")?)
}

/// `wanted` by token (or name), else the main profile: the one with the most pixels, the
/// first of equals (devices list the main stream first).
pub fn choose<'a>(profiles: &'a [Profile], wanted: Option<&str>) -> Result<&'a Profile, Error> {
    if let Some(w) = wanted {
        return profiles
            .iter()
            .find(|p| p.token == w)
            .or_else(|| profiles.iter().find(|p| p.name == w))
            .ok_or_else(|| Error::NoSuchProfile {
                wanted: printable(w),
                have: profiles
                    .iter()
                    .map(|p| p.token.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
    }
    let mut best: Option<&Profile> = None;
    for p in profiles {
        let px = |p: &Profile| u64::from(p.width) * u64::from(p.height);
        if best.is_none_or(|b| px(p) > px(b)) {
            best = Some(p);
        }
    }
    best.ok_or(Error::NoProfiles)
}

/// A GetStreamUri answer's body element → the RTSP URI (rtsp:// or rtsps://, a host).
pub fn stream_uri(el: &Element) -> Result<String, Error> {
    let uri = el.find("Uri").ok_or(Error::Missing {
        action: "GetStreamUri",
        what: "MediaUri/Uri",
    })?;
    let bad = |why| Error::Invalid {
        action: "GetStreamUri",
        what: "Uri",
        value: printable(uri.text()),
        why,
    };
    let u = url::Url::parse(uri.text()).map_err(|_| bad("not a URL"))?;
    if !matches!(u.scheme(), "rtsp" | "rtsps") || u.host_str().is_none_or(str::is_empty) {
        return Err(bad("not an rtsp:// or rtsps:// URL with a host"));
    }
    Ok(u.to_string())
}

pub fn parse_stream_uri(bytes: &[u8]) -> Result<String, Error> {
    stream_uri(&body(bytes, "GetStreamUri")?)
}

/// `uri` with `user:password@` (percent-encoded) in place of any credentials it had.
pub fn with_credentials(uri: &str, user: &str, password: &str) -> Result<String, Error> {
    let bad = |why| Error::Invalid {
        action: "GetStreamUri",
        what: "Uri",
        value: printable(uri),
        why,
    };
    let mut u = url::Url::parse(uri).map_err(|_| bad("not a URL"))?;
    if user.is_empty() {
        let _ = u.set_username("");
        let _ = u.set_password(None);
        return Ok(u.to_string());
    }
    u.set_username(user)
        .and_then(|()| u.set_password(Some(password)))
        .map_err(|()| bad("cannot carry credentials"))?;
    Ok(u.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from an ONVIF camera of a common vendor (Hikvision-style prefixes), cut to
    /// what is read.
    const PROFILES: &[u8] = br#"<?xml version="1.0" encoding="UTF-8"?>
<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope" xmlns:trt="http://www.onvif.org/ver10/media/wsdl" xmlns:tt="http://www.onvif.org/ver10/schema"><env:Body><trt:GetProfilesResponse>
<trt:Profiles token="Profile_2" fixed="true"><tt:Name>subStream</tt:Name><tt:VideoEncoderConfiguration token="VideoEncoderToken_2"><tt:Name>VideoEncoder_2</tt:Name><tt:Encoding>H264</tt:Encoding><tt:Resolution><tt:Width>640</tt:Width><tt:Height>360</tt:Height></tt:Resolution></tt:VideoEncoderConfiguration></trt:Profiles>
<trt:Profiles token="Profile_1" fixed="true"><tt:Name>mainStream</tt:Name><tt:VideoEncoderConfiguration token="VideoEncoderToken_1"><tt:Name>VideoEncoder_1</tt:Name><tt:Encoding>H264</tt:Encoding><tt:Resolution><tt:Width>2560</tt:Width><tt:Height>1440</tt:Height></tt:Resolution></tt:VideoEncoderConfiguration></trt:Profiles>
<trt:Profiles token="Profile_3"><tt:Name>audioOnly</tt:Name></trt:Profiles>
</trt:GetProfilesResponse></env:Body></env:Envelope>"#;

    #[test]
    fn reads_profiles_and_picks_the_largest_by_default() {
        let ps = parse_profiles(PROFILES).unwrap();
        assert_eq!(ps.len(), 3);
        assert_eq!(ps[1].token, "Profile_1");
        assert_eq!((ps[1].width, ps[1].height), (2560, 1440));
        assert_eq!(ps[2].encoding, None);
        assert_eq!(choose(&ps, None).unwrap().token, "Profile_1");
        assert_eq!(choose(&ps, Some("Profile_2")).unwrap().token, "Profile_2");
        assert_eq!(choose(&ps, Some("subStream")).unwrap().token, "Profile_2");
        assert_eq!(
            choose(&ps, Some("nope")).unwrap_err().to_string(),
            "the device has no profile \"nope\" (it has Profile_2, Profile_1, Profile_3)"
        );
    }

    #[test]
    fn equal_profiles_keep_the_first_and_none_is_an_error() {
        let p = |t: &str| Profile {
            token: t.into(),
            name: String::new(),
            encoding: None,
            width: 0,
            height: 0,
        };
        assert_eq!(choose(&[p("a"), p("b")], None).unwrap().token, "a");
        let empty = br#"<Envelope><Body><GetProfilesResponse/></Body></Envelope>"#;
        assert_eq!(parse_profiles(empty), Err(Error::NoProfiles));
        let bad = br#"<Envelope><Body><GetProfilesResponse><Profiles/></GetProfilesResponse></Body></Envelope>"#;
        assert!(matches!(parse_profiles(bad), Err(Error::Invalid { .. })));
    }

    #[test]
    fn reads_the_stream_uri_and_puts_credentials_in() {
        let doc = br#"<s:Envelope xmlns:s="e"><s:Body><trt:GetStreamUriResponse xmlns:trt="m" xmlns:tt="t"><trt:MediaUri><tt:Uri>rtsp://10.0.0.5:554/Streaming/Channels/101?transportmode=unicast&amp;profile=Profile_1</tt:Uri><tt:InvalidAfterConnect>false</tt:InvalidAfterConnect></trt:MediaUri></trt:GetStreamUriResponse></s:Body></s:Envelope>"#;
        let uri = parse_stream_uri(doc).unwrap();
        assert_eq!(
            uri,
            "rtsp://10.0.0.5:554/Streaming/Channels/101?transportmode=unicast&profile=Profile_1"
        );
        assert_eq!(
            with_credentials(&uri, "op", "p@ss:w/rd").unwrap(),
            "rtsp://op:p%40ss%3Aw%2Frd@10.0.0.5:554/Streaming/Channels/101?transportmode=unicast&profile=Profile_1"
        );
        let http = String::from_utf8_lossy(doc).replace("rtsp://", "http://");
        assert!(matches!(
            parse_stream_uri(http.as_bytes()),
            Err(Error::Invalid { .. })
        ));
        assert!(get_stream_uri("a<b").contains("<trt:ProfileToken>a&lt;b</trt:ProfileToken>"));
    }
}
