//! The onboarding flow as a state machine the shell feeds with HTTP answers:
//!
//! 1. GetSystemDateAndTime without a token (ONVIF lets it be asked before authenticating);
//!    the device's UTC clock minus ours is the offset every token's `Created` carries, so a
//!    camera whose clock is off by hours still accepts the digest. A device that wants a
//!    token even for this (some do, ipycam does) is asked again with one at our clock;
//!    refused again, the offset stays unknown (0) and the next step says why.
//! 2. GetCapabilities → the media (and PTZ) service's address; a device that faults on it
//!    is asked GetServices; faulting on both, the device service's address is used.
//! 3. GetProfiles → the profile asked for, or the main one ([`media::choose`]).
//! 4. GetStreamUri of it → [`Resolved`].
//!
//! A PTZ command ([`Onboard::ptz`]) takes steps 1–2 (for the clock and the PTZ service's
//! address), then sends the command to the PTZ service → [`Next::Ptz`]. What those steps
//! learnt ([`Onboard::known`]) lets the next command skip them ([`Onboard::ptz_known`]): a
//! joystick's moves are then one request each, not three.
//!
//! At most six requests; the shell bounds each by its timeout.

use crate::media::{self, Profile};
use crate::ptz;
use crate::soap::{self, Credentials, HttpRequest, Services, NS_DEVICE, NS_MEDIA, NS_PTZ};
use crate::Error;
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

/// What the flow found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    /// The device's RTSP URI of the profile, as it gave it but on the device's host
    /// ([`on_device_host`]; no credentials).
    pub uri: String,
    pub profile: Profile,
    pub profiles: Vec<Profile>,
    /// Device clock minus ours, ms; None when the device did not tell.
    pub clock_offset_ms: Option<i64>,
    pub media: String,
    pub ptz: Option<String>,
}

/// What a PTZ flow learnt of the device that the next command can reuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    /// Device clock minus ours, ms (None: the device did not tell).
    pub offset_ms: Option<i64>,
    /// The PTZ service's address.
    pub ptz: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Time,
    TimeWithToken,
    Capabilities,
    Services,
    Profiles,
    StreamUri,
    Ptz,
    Done,
}

/// What to do next: send a request, or the flow's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Send(HttpRequest),
    Done(Resolved),
    /// The PTZ command's answer.
    Ptz(ptz::Answer),
}

/// What the flow is for.
#[derive(Debug, Clone, PartialEq)]
enum Goal {
    StreamUri,
    Ptz(ptz::Command),
}

#[derive(Debug)]
pub struct Onboard {
    device: String,
    creds: Credentials,
    wanted: Option<String>,
    goal: Goal,
    step: Step,
    offset: Option<SignedDuration>,
    services: Services,
    profiles: Vec<Profile>,
    chosen: Option<Profile>,
    /// Starts at the goal's own request (the clock and the service already known).
    from_known: bool,
}

/// `url` must be an http(s) URL with a host and no credentials in it (they go in tokens).
pub fn check_device_url(url: &str) -> Result<String, Error> {
    let bad = || Error::DeviceUrl(crate::printable(url));
    let u = url::Url::parse(url.trim()).map_err(|_| bad())?;
    if !matches!(u.scheme(), "http" | "https")
        || u.host_str().is_none_or(str::is_empty)
        || !u.username().is_empty()
        || u.password().is_some()
    {
        return Err(bad());
    }
    Ok(u.to_string())
}

/// `url` — an address the device gave: a service's XAddr, a stream URI — moved onto the
/// device's own host, its scheme, port and path kept. Taken as given, a device (or anyone
/// answering for it, e.g. a spoofed discovery answer) could aim the node's next request and
/// its WS-Security digest at any host (127.0.0.1, 169.254.169.254, the LAN), or have the
/// camera password sent inside the RTSP URL to a server of its own (issue 44, M4). The host
/// the operator gave is also the one that reaches a camera behind NAT that reports its LAN
/// address, as many do.
pub fn on_device_host(url: &str, device: &str) -> Result<String, Error> {
    let bad = || Error::DeviceUrl(crate::printable(url));
    let mut u = url::Url::parse(url.trim()).map_err(|_| bad())?;
    let d = url::Url::parse(device).map_err(|_| Error::DeviceUrl(crate::printable(device)))?;
    let host = d.host_str().filter(|h| !h.is_empty()).ok_or_else(bad)?;
    u.set_host(Some(host)).map_err(|_| bad())?;
    Ok(u.to_string())
}

impl Onboard {
    /// The services a device named, on its own host.
    fn set_services(&mut self, found: Services) -> Result<(), Error> {
        let on_host = |x: Option<String>| -> Result<Option<String>, Error> {
            x.map(|u| on_device_host(&u, &self.device)).transpose()
        };
        let (media, ptz) = (on_host(found.media)?, on_host(found.ptz)?);
        self.services.media = self.services.media.take().or(media);
        self.services.ptz = self.services.ptz.take().or(ptz);
        Ok(())
    }

    pub fn new(device: &str, creds: Credentials, profile: Option<String>) -> Result<Self, Error> {
        Ok(Onboard {
            device: check_device_url(device)?,
            creds,
            wanted: profile.filter(|p| !p.is_empty()),
            goal: Goal::StreamUri,
            step: Step::Time,
            offset: None,
            services: Services::default(),
            profiles: Vec::new(),
            chosen: None,
            from_known: false,
        })
    }

    /// A PTZ `command` on `profile` of the device.
    pub fn ptz(
        device: &str,
        creds: Credentials,
        profile: &str,
        command: ptz::Command,
    ) -> Result<Self, Error> {
        let mut flow = Onboard::new(device, creds, Some(profile.to_string()))?;
        flow.goal = Goal::Ptz(command);
        Ok(flow)
    }

    /// A PTZ `command` sent straight to the PTZ service `known` names, with its clock
    /// offset: one request. Should it fail (the device moved, restarted, its clock jumped),
    /// the caller runs [`Onboard::ptz`] again from the start.
    pub fn ptz_known(
        device: &str,
        creds: Credentials,
        profile: &str,
        command: ptz::Command,
        known: &Known,
    ) -> Result<Self, Error> {
        let mut flow = Onboard::ptz(device, creds, profile, command)?;
        flow.offset = known.offset_ms.map(SignedDuration::from_millis);
        flow.services.ptz = Some(known.ptz.clone());
        flow.from_known = true;
        Ok(flow)
    }

    /// What this flow learnt for the next PTZ command: the clock offset and the PTZ
    /// service (None before the service is known).
    pub fn known(&self) -> Option<Known> {
        Some(Known {
            offset_ms: self.offset.map(|o| o.as_millis() as i64),
            ptz: self.services.ptz.clone()?,
        })
    }

    /// Where the flow goes once it knows the services.
    fn after_services(&self) -> Step {
        match self.goal {
            Goal::StreamUri => Step::Profiles,
            Goal::Ptz(_) => Step::Ptz,
        }
    }

    /// The service the goal needs is known.
    fn has_service(&self) -> bool {
        match self.goal {
            Goal::StreamUri => self.services.media.is_some(),
            Goal::Ptz(_) => self.services.ptz.is_some(),
        }
    }

    fn token(&self, now: Timestamp, nonce: &[u8; 16]) -> String {
        let at = now
            .checked_add(self.offset.unwrap_or(SignedDuration::ZERO))
            .unwrap_or(now);
        soap::security_header(&self.creds, nonce, at)
    }

    fn request(&self, now: Timestamp, nonce: &[u8; 16]) -> HttpRequest {
        let media = self.services.media.as_deref().unwrap_or(&self.device);
        let stream_uri;
        let ptz_body;
        let (url, ns, op, body) = match self.step {
            Step::Time | Step::TimeWithToken => (
                self.device.as_str(),
                NS_DEVICE,
                "GetSystemDateAndTime",
                soap::GET_SYSTEM_DATE_AND_TIME,
            ),
            Step::Capabilities => (
                self.device.as_str(),
                NS_DEVICE,
                "GetCapabilities",
                soap::GET_CAPABILITIES,
            ),
            Step::Services => (
                self.device.as_str(),
                NS_DEVICE,
                "GetServices",
                soap::GET_SERVICES,
            ),
            Step::Profiles => (media, NS_MEDIA, "GetProfiles", media::GET_PROFILES),
            Step::StreamUri | Step::Done => {
                let token = self.chosen.as_ref().map_or("", |p| p.token.as_str());
                stream_uri = media::get_stream_uri(token);
                (media, NS_MEDIA, "GetStreamUri", stream_uri.as_str())
            }
            Step::Ptz => {
                let Goal::Ptz(cmd) = &self.goal else {
                    unreachable!("the PTZ step is a PTZ goal's")
                };
                ptz_body = cmd.body(self.wanted.as_deref().unwrap_or(""));
                let url = self.services.ptz.as_deref().unwrap_or(&self.device);
                (url, NS_PTZ, cmd.operation(), ptz_body.as_str())
            }
        };
        // Only the very first question goes without a token (and every one to an open
        // device: no user).
        let token = (self.step != Step::Time && !self.creds.user.is_empty())
            .then(|| self.token(now, nonce));
        soap::request(url, ns, op, body, token)
    }

    /// The first request.
    pub fn start(&mut self, now: Timestamp, nonce: &[u8; 16]) -> HttpRequest {
        self.step = if self.from_known {
            self.after_services()
        } else {
            Step::Time
        };
        self.request(now, nonce)
    }

    /// The answer to the last request (HTTP status and body) at `now`; `nonce` for the
    /// next request's token (fresh random bytes each time).
    pub fn on_response(
        &mut self,
        status: u16,
        bytes: &[u8],
        now: Timestamp,
        nonce: &[u8; 16],
    ) -> Result<Next, Error> {
        let op = match self.step {
            Step::Time | Step::TimeWithToken => "GetSystemDateAndTime",
            Step::Capabilities => "GetCapabilities",
            Step::Services => "GetServices",
            Step::Profiles => "GetProfiles",
            Step::StreamUri | Step::Done => "GetStreamUri",
            Step::Ptz => match &self.goal {
                Goal::Ptz(cmd) => cmd.operation(),
                Goal::StreamUri => "PTZ",
            },
        };
        let answer = soap::answer(status, bytes, op);
        self.step = match self.step {
            Step::Time | Step::TimeWithToken => {
                match answer.and_then(|el| soap::system_time(&el)) {
                    Ok(device) => {
                        self.offset = device.map(|d| d.duration_since(now));
                        Step::Capabilities
                    }
                    // Asked again with a token; a second refusal leaves the offset unknown.
                    Err(_) if self.step == Step::Time => Step::TimeWithToken,
                    Err(_) => Step::Capabilities,
                }
            }
            Step::Capabilities => match answer {
                Ok(el) => {
                    self.services = Services::default();
                    self.set_services(soap::capabilities(&el)?)?;
                    if self.has_service() {
                        self.after_services()
                    } else {
                        Step::Services
                    }
                }
                Err(e @ Error::Unauthorized { .. }) => return Err(e),
                Err(_) => Step::Services,
            },
            Step::Services => {
                match answer {
                    Ok(el) => self.set_services(soap::services(&el)?)?,
                    Err(e @ Error::Unauthorized { .. }) => return Err(e),
                    // No GetServices either: the media service answers at the device's
                    // address on many small cameras.
                    Err(_) => {}
                }
                if matches!(self.goal, Goal::Ptz(_)) && self.services.ptz.is_none() {
                    return Err(Error::Missing {
                        action: "GetCapabilities",
                        what: "PTZ service (the camera has no PTZ)",
                    });
                }
                self.after_services()
            }
            Step::Ptz => {
                let Goal::Ptz(cmd) = &self.goal else {
                    unreachable!("the PTZ step is a PTZ goal's")
                };
                let done = cmd.answer(&answer?)?;
                self.step = Step::Done;
                return Ok(Next::Ptz(done));
            }
            Step::Profiles => {
                self.profiles = media::profiles(&answer?)?;
                self.chosen = Some(media::choose(&self.profiles, self.wanted.as_deref())?.clone());
                Step::StreamUri
            }
            Step::StreamUri | Step::Done => {
                let uri = on_device_host(&media::stream_uri(&answer?)?, &self.device)?;
                self.step = Step::Done;
                let profile = self.chosen.clone().ok_or(Error::NoProfiles)?;
                return Ok(Next::Done(Resolved {
                    uri,
                    profile,
                    profiles: std::mem::take(&mut self.profiles),
                    clock_offset_ms: self.offset.map(|o| o.as_millis() as i64),
                    media: self
                        .services
                        .media
                        .clone()
                        .unwrap_or_else(|| self.device.clone()),
                    ptz: self.services.ptz.clone(),
                }));
            }
        };
        Ok(Next::Send(self.request(now, nonce)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(body: &str) -> Vec<u8> {
        format!(
            "<s:Envelope xmlns:s=\"http://www.w3.org/2003/05/soap-envelope\" \
             xmlns:tds=\"{NS_DEVICE}\" xmlns:trt=\"{NS_MEDIA}\" xmlns:tt=\"t\"><s:Body>{body}</s:Body></s:Envelope>"
        )
        .into_bytes()
    }

    const FAULT_AUTH: &str = "<s:Fault><s:Code><s:Value>s:Sender</s:Value><s:Subcode><s:Value>ter:NotAuthorized</s:Value></s:Subcode></s:Code><s:Reason><s:Text>Sender not authorized</s:Text></s:Reason></s:Fault>";

    fn time(at: &str) -> Vec<u8> {
        let t: Timestamp = at.parse().unwrap();
        let z = t.to_zoned(jiff::tz::TimeZone::UTC);
        env(&format!(
            "<tds:GetSystemDateAndTimeResponse><tds:SystemDateAndTime><tt:UTCDateTime><tt:Time><tt:Hour>{}</tt:Hour><tt:Minute>{}</tt:Minute><tt:Second>{}</tt:Second></tt:Time><tt:Date><tt:Year>{}</tt:Year><tt:Month>{}</tt:Month><tt:Day>{}</tt:Day></tt:Date></tt:UTCDateTime></tds:SystemDateAndTime></tds:GetSystemDateAndTimeResponse>",
            z.hour(), z.minute(), z.second(), z.year(), z.month(), z.day()
        ))
    }

    fn creds() -> Credentials {
        Credentials {
            user: "admin".into(),
            password: "Pa55word".into(),
        }
    }

    fn send(n: Next) -> HttpRequest {
        match n {
            Next::Send(r) => r,
            other => panic!("done early: {other:?}"),
        }
    }

    fn created_of(r: &HttpRequest) -> String {
        let body = String::from_utf8_lossy(&r.body).into_owned();
        let start = body.find("<wsu:Created>").expect("a token") + "<wsu:Created>".len();
        body[start..start + 20].to_string()
    }

    const PROFILES: &str = "<trt:GetProfilesResponse><trt:Profiles token=\"sub\"><tt:Name>Sub</tt:Name><tt:VideoEncoderConfiguration><tt:Encoding>H264</tt:Encoding><tt:Resolution><tt:Width>640</tt:Width><tt:Height>360</tt:Height></tt:Resolution></tt:VideoEncoderConfiguration></trt:Profiles><trt:Profiles token=\"main\"><tt:Name>Main</tt:Name><tt:VideoEncoderConfiguration><tt:Encoding>H264</tt:Encoding><tt:Resolution><tt:Width>1920</tt:Width><tt:Height>1080</tt:Height></tt:Resolution></tt:VideoEncoderConfiguration></trt:Profiles></trt:GetProfilesResponse>";

    #[test]
    fn a_device_two_hours_ahead_gets_tokens_at_its_clock() {
        let now: Timestamp = "2026-12-04T23:00:00Z".parse().unwrap();
        let nonce = [7u8; 16];
        let mut ob = Onboard::new("http://127.0.0.9/onvif/device_service", creds(), None).unwrap();
        let r = ob.start(now, &nonce);
        assert_eq!(r.operation, "GetSystemDateAndTime");
        assert!(!String::from_utf8_lossy(&r.body).contains("Security"));
        let r = send(
            ob.on_response(200, &time("2026-12-05T01:00:00Z"), now, &nonce)
                .unwrap(),
        );
        assert_eq!(r.operation, "GetCapabilities");
        assert_eq!(created_of(&r), "2026-12-05T01:00:00Z");
        assert!(r
            .content_type()
            .contains("action=\"http://www.onvif.org/ver10/device/wsdl/GetCapabilities\""));
        let caps = env("<tds:GetCapabilitiesResponse><tds:Capabilities><tt:Media><tt:XAddr>http://127.0.0.9/onvif/media</tt:XAddr></tt:Media></tds:Capabilities></tds:GetCapabilitiesResponse>");
        let r = send(ob.on_response(200, &caps, now, &nonce).unwrap());
        assert_eq!(
            (r.operation, r.url.as_str()),
            ("GetProfiles", "http://127.0.0.9/onvif/media")
        );
        let r = send(ob.on_response(200, &env(PROFILES), now, &nonce).unwrap());
        assert_eq!(r.operation, "GetStreamUri");
        assert!(
            String::from_utf8_lossy(&r.body).contains("<trt:ProfileToken>main</trt:ProfileToken>")
        );
        let uri = env("<trt:GetStreamUriResponse><trt:MediaUri><tt:Uri>rtsp://127.0.0.9:554/main</tt:Uri></trt:MediaUri></trt:GetStreamUriResponse>");
        let Next::Done(res) = ob.on_response(200, &uri, now, &nonce).unwrap() else {
            panic!("not done");
        };
        assert_eq!(res.uri, "rtsp://127.0.0.9:554/main");
        assert_eq!(res.profile.token, "main");
        assert_eq!(res.clock_offset_ms, Some(7_200_000));
        assert_eq!(res.media, "http://127.0.0.9/onvif/media");
    }

    /// Issue 44, M4: a device that names services and a stream elsewhere — the node itself,
    /// the cloud metadata address, another LAN host — gets every request on its own host, and
    /// the RTSP URI (which will carry the camera password) is on its host too.
    #[test]
    fn a_device_cannot_aim_the_node_at_another_host() {
        let now: Timestamp = "2026-12-04T23:00:00Z".parse().unwrap();
        let nonce = [3u8; 16];
        let mut ob = Onboard::new(
            "http://198.18.0.20:8000/onvif/device_service",
            creds(),
            None,
        )
        .unwrap();
        ob.start(now, &nonce);
        send(
            ob.on_response(200, &time("2026-12-04T23:00:00Z"), now, &nonce)
                .unwrap(),
        );
        let caps = env("<tds:GetCapabilitiesResponse><tds:Capabilities><tt:Media><tt:XAddr>http://169.254.169.254:8000/latest/meta-data</tt:XAddr></tt:Media><tt:PTZ><tt:XAddr>http://127.0.0.1:8080/api/cameras/x/ptz</tt:XAddr></tt:PTZ></tds:Capabilities></tds:GetCapabilitiesResponse>");
        let r = send(ob.on_response(200, &caps, now, &nonce).unwrap());
        assert_eq!(r.url, "http://198.18.0.20:8000/latest/meta-data");
        assert_eq!(
            ob.known().map(|k| k.ptz).as_deref(),
            Some("http://198.18.0.20:8080/api/cameras/x/ptz")
        );
        send(ob.on_response(200, &env(PROFILES), now, &nonce).unwrap());
        let uri = env("<trt:GetStreamUriResponse><trt:MediaUri><tt:Uri>rtsp://attacker.example:554/main</tt:Uri></trt:MediaUri></trt:GetStreamUriResponse>");
        let Next::Done(res) = ob.on_response(200, &uri, now, &nonce).unwrap() else {
            panic!("not done");
        };
        assert_eq!(res.uri, "rtsp://198.18.0.20:554/main");
        assert_eq!(
            crate::media::with_credentials(&res.uri, "admin", "Pa55word").unwrap(),
            "rtsp://admin:Pa55word@198.18.0.20:554/main"
        );
    }

    #[test]
    fn a_device_that_wants_a_token_for_its_clock_and_has_no_capabilities() {
        let now: Timestamp = "2026-12-04T23:00:00Z".parse().unwrap();
        let nonce = [1u8; 16];
        let mut ob = Onboard::new(
            "http://127.0.0.9/onvif/device_service",
            creds(),
            Some("sub".into()),
        )
        .unwrap();
        ob.start(now, &nonce);
        let r = send(ob.on_response(401, &env(FAULT_AUTH), now, &nonce).unwrap());
        assert_eq!(r.operation, "GetSystemDateAndTime");
        assert_eq!(created_of(&r), "2026-12-04T23:00:00Z");
        let r = send(
            ob.on_response(200, &time("2026-12-04T22:59:00Z"), now, &nonce)
                .unwrap(),
        );
        assert_eq!(created_of(&r), "2026-12-04T22:59:00Z");
        let not_supported = env("<s:Fault><s:Code><s:Value>s:Receiver</s:Value></s:Code><s:Reason><s:Text>Action not supported</s:Text></s:Reason></s:Fault>");
        let r = send(ob.on_response(500, &not_supported, now, &nonce).unwrap());
        assert_eq!(r.operation, "GetServices");
        let r = send(ob.on_response(500, &not_supported, now, &nonce).unwrap());
        assert_eq!(
            (r.operation, r.url.as_str()),
            ("GetProfiles", "http://127.0.0.9/onvif/device_service")
        );
        let r = send(ob.on_response(200, &env(PROFILES), now, &nonce).unwrap());
        assert!(
            String::from_utf8_lossy(&r.body).contains("<trt:ProfileToken>sub</trt:ProfileToken>")
        );
    }

    #[test]
    fn a_ptz_command_goes_to_the_ptz_service_of_the_profile() {
        let now: Timestamp = "2026-12-04T23:00:00Z".parse().unwrap();
        let n = [3u8; 16];
        let cmd = ptz::Command::SetPreset {
            name: "Gate".into(),
        };
        let mut ob = Onboard::ptz("http://cam/onvif/device_service", creds(), "main", cmd).unwrap();
        ob.start(now, &n);
        send(
            ob.on_response(200, &time("2026-12-04T23:00:00Z"), now, &n)
                .unwrap(),
        );
        let caps = env("<tds:GetCapabilitiesResponse><tds:Capabilities><tt:Media><tt:XAddr>http://cam/media</tt:XAddr></tt:Media><tt:PTZ><tt:XAddr>http://cam/ptz</tt:XAddr></tt:PTZ></tds:Capabilities></tds:GetCapabilitiesResponse>");
        let r = send(ob.on_response(200, &caps, now, &n).unwrap());
        assert_eq!(
            (r.operation, r.url.as_str()),
            ("SetPreset", "http://cam/ptz")
        );
        assert!(r
            .content_type()
            .contains("http://www.onvif.org/ver20/ptz/wsdl/SetPreset"));
        let body = String::from_utf8_lossy(&r.body).into_owned();
        assert!(
            body.contains("<tptz:ProfileToken>main</tptz:ProfileToken>"),
            "{body}"
        );
        assert!(
            body.contains("<tptz:PresetName>Gate</tptz:PresetName>"),
            "{body}"
        );
        let answer = env("<tptz:SetPresetResponse xmlns:tptz=\"p\"><tptz:PresetToken>7</tptz:PresetToken></tptz:SetPresetResponse>");
        assert_eq!(
            ob.on_response(200, &answer, now, &n).unwrap(),
            Next::Ptz(ptz::Answer::Preset("7".into()))
        );
        // What it learnt lets the next command go straight to the PTZ service, its token
        // at the device's clock (two hours ahead here).
        let known = ob.known().expect("the PTZ service is known");
        assert_eq!(known.ptz, "http://cam/ptz");
        let known = Known {
            offset_ms: Some(7_200_000),
            ..known
        };
        let mut ob = Onboard::ptz_known(
            "http://cam/onvif/device_service",
            creds(),
            "main",
            ptz::Command::Stop,
            &known,
        )
        .unwrap();
        let r = ob.start(now, &n);
        assert_eq!((r.operation, r.url.as_str()), ("Stop", "http://cam/ptz"));
        let body = String::from_utf8_lossy(&r.body).into_owned();
        assert!(
            body.contains("<wsu:Created>2026-12-05T01:00:00Z</wsu:Created>"),
            "{body}"
        );
        let stopped = env("<tptz:StopResponse xmlns:tptz=\"p\"/>");
        assert_eq!(
            ob.on_response(200, &stopped, now, &n).unwrap(),
            Next::Ptz(ptz::Answer::Done)
        );
        // A camera without PTZ says so.
        let mut ob = Onboard::ptz(
            "http://cam/onvif/device_service",
            creds(),
            "main",
            ptz::Command::Stop,
        )
        .unwrap();
        ob.start(now, &n);
        send(
            ob.on_response(200, &time("2026-12-04T23:00:00Z"), now, &n)
                .unwrap(),
        );
        let no_ptz = env("<tds:GetCapabilitiesResponse><tds:Capabilities><tt:Media><tt:XAddr>http://cam/media</tt:XAddr></tt:Media></tds:Capabilities></tds:GetCapabilitiesResponse>");
        let r = send(ob.on_response(200, &no_ptz, now, &n).unwrap());
        assert_eq!(r.operation, "GetServices");
        assert!(matches!(
            ob.on_response(500, b"", now, &n),
            Err(Error::Missing { .. })
        ));
    }

    #[test]
    fn an_open_device_gets_no_token() {
        let now = Timestamp::UNIX_EPOCH;
        let n = [0u8; 16];
        let open = Credentials {
            user: String::new(),
            password: String::new(),
        };
        let mut ob = Onboard::new("http://cam/onvif/device_service", open, None).unwrap();
        ob.start(now, &n);
        let r = send(
            ob.on_response(200, &time("2026-12-04T22:59:00Z"), now, &n)
                .unwrap(),
        );
        assert_eq!(r.operation, "GetCapabilities");
        assert!(!String::from_utf8_lossy(&r.body).contains("Security"));
    }

    #[test]
    fn wrong_credentials_and_faults_are_named() {
        let now = Timestamp::UNIX_EPOCH;
        let n = [0u8; 16];
        let mut ob = Onboard::new("http://cam/onvif/device_service", creds(), None).unwrap();
        ob.start(now, &n);
        send(
            ob.on_response(200, &time("2026-12-04T22:59:00Z"), now, &n)
                .unwrap(),
        );
        let e = ob.on_response(400, &env(FAULT_AUTH), now, &n).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the device refused the user's credentials for GetCapabilities (HTTP 400: Sender not authorized)"
        );
        let mut ob =
            Onboard::new("http://cam/onvif/device_service", creds(), Some("x".into())).unwrap();
        ob.start(now, &n);
        send(
            ob.on_response(200, &time("2026-12-04T22:59:00Z"), now, &n)
                .unwrap(),
        );
        send(ob.on_response(500, b"", now, &n).unwrap());
        send(ob.on_response(500, b"", now, &n).unwrap());
        assert!(matches!(
            ob.on_response(200, &env(PROFILES), now, &n),
            Err(Error::NoSuchProfile { .. })
        ));
        for bad in ["ftp://cam/x", "http://u:p@cam/x", "not a url", "http://"] {
            assert!(
                matches!(Onboard::new(bad, creds(), None), Err(Error::DeviceUrl(_))),
                "{bad}"
            );
        }
    }
}
