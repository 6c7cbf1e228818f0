//! The I/O of ONVIF onboarding and discovery; the protocol is `vigil_onvif`'s (sans-IO).
//!
//! - [`resolve`]: the onboarding flow's SOAP requests POSTed with `ureq` (the HTTP client the
//!   node already carries for `vigil ctl`), each bounded by `[onvif] request_timeout_ms` and
//!   its answer by `vigil_onvif::xml::MAX_DOCUMENT` bytes. Blocking: the API calls it on a
//!   blocking thread. No TLS (`ureq` is built without it): `https://` device services are
//!   refused by the client with its error.
//! - [`ptz`]: a PTZ command through the same flow (clock, PTZ service, the command), or
//!   straight to the PTZ service when an earlier command learnt it (`Known`), the full
//!   flow run again if that one fails. Every request is counted in
//!   `vigil_onvif_requests_total{operation}`.
//! - [`discover`]: one WS-Discovery Probe from `[onvif] discovery_address` to the multicast
//!   group (or a unicast target), ProbeMatches collected until the deadline, at most
//!   [`MAX_DEVICES`] devices.
//!
//! The user's password goes into WS-Security digests only; errors name the device's URL
//! (which carries no credentials: `vigil_onvif::onboard::check_device_url`) and what it
//! answered.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use vigil_onvif::{
    discovery, onboard, ptz, Credentials, HttpRequest, Known, Next, Onboard, ProbeMatch, Resolved,
};

/// Devices kept of one probe (a camera network of thousands answers in a burst).
pub const MAX_DEVICES: usize = 4096;

/// Why onboarding failed.
#[derive(Debug, thiserror::Error)]
pub enum OnvifError {
    /// The device answered, and what it answered is the reason.
    #[error(transparent)]
    Device(#[from] vigil_onvif::Error),
    /// No answer: connection refused, timeout, a bad URL.
    #[error("cannot reach the ONVIF device at {url} for {operation}: {reason}")]
    Unreachable {
        url: String,
        operation: &'static str,
        reason: String,
    },
}

fn post(agent: &ureq::Agent, req: &HttpRequest) -> Result<(u16, Vec<u8>), OnvifError> {
    let unreachable = |reason: String| OnvifError::Unreachable {
        url: crate::auth::redact_url(&req.url),
        operation: req.operation,
        reason: vigil_onvif::printable(&reason),
    };
    let http = ureq::http::Request::builder()
        .method("POST")
        .uri(&req.url)
        .header("Content-Type", req.content_type())
        .header("SOAPAction", format!("\"{}\"", req.action))
        .body(req.body.clone())
        .map_err(|e| unreachable(e.to_string()))?;
    metrics::counter!("vigil_onvif_requests_total", "operation" => req.operation).increment(1);
    let mut resp = agent.run(http).map_err(|e| unreachable(e.to_string()))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(vigil_onvif::xml::MAX_DOCUMENT as u64)
        .read_to_vec()
        .map_err(|e| unreachable(e.to_string()))?;
    Ok((status, body))
}

/// Runs `flow` to its end: the flow's last answer (never [`Next::Send`]).
fn run(flow: &mut Onboard, timeout: Duration) -> Result<Next, OnvifError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .max_redirects(0)
        .build()
        .into();
    let now = jiff::Timestamp::now;
    let mut req = flow.start(now(), &rand::random());
    // A flow ends within six requests; the bound keeps a bug from looping.
    for _ in 0..8 {
        let (status, body) = post(&agent, &req)?;
        match flow.on_response(status, &body, now(), &rand::random())? {
            Next::Send(next) => req = next,
            done => return Ok(done),
        }
    }
    Err(OnvifError::Unreachable {
        url: crate::auth::redact_url(&req.url),
        operation: req.operation,
        reason: "the flow did not end".into(),
    })
}

fn unexpected(device: &str, what: &str) -> OnvifError {
    OnvifError::Unreachable {
        url: crate::auth::redact_url(device),
        operation: "ONVIF",
        reason: format!("the flow ended with {what}"),
    }
}

/// The RTSP URI of `device`'s `profile` (else its main profile), asked with `creds`.
pub fn resolve(
    device: &str,
    creds: Credentials,
    profile: Option<String>,
    timeout: Duration,
) -> Result<Resolved, OnvifError> {
    match run(&mut Onboard::new(device, creds, profile)?, timeout)? {
        Next::Done(resolved) => Ok(resolved),
        _ => Err(unexpected(device, "no stream URI")),
    }
}

/// A PTZ `command` on `device`'s `profile`: straight to the PTZ service when `known` (one
/// request), else — or when that fails — through the clock and the services first. The
/// answer, and what to reuse for the next command. (A command the device refuses on the
/// short path is sent once more on the long one: a move or a preset twice is harmless, a
/// device that moved or restarted is found again.)
pub fn ptz(
    device: &str,
    creds: Credentials,
    profile: &str,
    command: ptz::Command,
    known: Option<&Known>,
    timeout: Duration,
) -> Result<(ptz::Answer, Option<Known>), OnvifError> {
    // One flow to its PTZ answer, and what it learnt for the next command.
    let finish = |mut flow: Onboard| match run(&mut flow, timeout)? {
        Next::Ptz(answer) => Ok((answer, flow.known())),
        _ => Err(unexpected(device, "no PTZ answer")),
    };
    if let Some(known) = known {
        let flow = Onboard::ptz_known(device, creds.clone(), profile, command.clone(), known)?;
        match finish(flow) {
            Ok(done) => return Ok(done),
            Err(e) => tracing::debug!(error = %e, "PTZ on the known service failed: the full flow"),
        }
    }
    finish(Onboard::ptz(device, creds, profile, command)?)
}

/// `device` as stored (the check the flow makes), for a caller that stores it before asking.
pub fn device_url(device: &str) -> Result<String, vigil_onvif::Error> {
    onboard::check_device_url(device)
}

/// One device that answered a probe, with the address its answer came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Found {
    pub from: String,
    #[serde(flatten)]
    pub device: ProbeMatch,
}

/// Probes from `bind` to `target` (None: the multicast group, out of `bind`'s interface)
/// and collects the matches for `wait`. Datagrams that are not matches of this probe are
/// skipped; a device answering twice (or from two addresses) is listed once.
pub fn discover(
    bind: IpAddr,
    target: Option<SocketAddr>,
    wait: Duration,
) -> std::io::Result<Vec<Found>> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    if let IpAddr::V4(v4) = bind {
        if !v4.is_unspecified() {
            socket.set_multicast_if_v4(&v4)?;
        }
    }
    socket.set_multicast_ttl_v4(1)?;
    socket.bind(&SocketAddr::new(bind, 0).into())?;
    let socket: std::net::UdpSocket = socket.into();
    let id = discovery::message_id(rand::random());
    let to = target.unwrap_or(SocketAddr::V4(discovery::MULTICAST));
    socket.send_to(&discovery::probe(&id), to)?;
    let deadline = Instant::now() + wait;
    let mut out: Vec<Found> = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while out.len() < MAX_DEVICES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        socket.set_read_timeout(Some(left))?;
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            // An ICMP unreachable of a unicast target, say: nothing more will come from it.
            Err(e) if target.is_some() => {
                tracing::debug!("WS-Discovery probe to {to}: {e}");
                break;
            }
            Err(_) => continue,
        };
        let Ok(matches) = discovery::parse_matches(&buf[..n], Some(&id)) else {
            continue;
        };
        for m in matches {
            let seen = out.iter().any(|f| {
                (!m.endpoint.is_empty() && f.device.endpoint == m.endpoint)
                    || f.device.xaddrs == m.xaddrs
            });
            if !seen {
                out.push(Found {
                    from: from.to_string(),
                    device: m,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_collects_a_unicast_answer_and_skips_other_probes() {
        let device = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = device.local_addr().unwrap();
        let responder = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let (n, from) = device.recv_from(&mut buf).unwrap();
            let probe = vigil_onvif::xml::parse(&buf[..n]).unwrap();
            let id = probe
                .path(&["Header", "MessageID"])
                .unwrap()
                .text()
                .to_string();
            let answer = |relates: &str, uuid: &str| {
                format!(
                    "<e:Envelope xmlns:e=\"x\"><e:Header><RelatesTo>{relates}</RelatesTo></e:Header>\
                     <e:Body><ProbeMatches><ProbeMatch><EndpointReference><Address>{uuid}</Address>\
                     </EndpointReference><Scopes>onvif://www.onvif.org/hardware/M1</Scopes>\
                     <XAddrs>http://127.0.0.1:1/onvif/device_service</XAddrs></ProbeMatch>\
                     </ProbeMatches></e:Body></e:Envelope>"
                )
            };
            for msg in [
                answer("urn:uuid:another-probe", "urn:uuid:b"),
                "not xml".to_string(),
                answer(&id, "urn:uuid:a"),
                answer(&id, "urn:uuid:a"),
            ] {
                device.send_to(msg.as_bytes(), from).unwrap();
            }
        });
        let found = discover(
            "127.0.0.1".parse().unwrap(),
            Some(addr),
            Duration::from_millis(500),
        )
        .unwrap();
        responder.join().unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].device.endpoint, "urn:uuid:a");
        assert_eq!(found[0].device.model.as_deref(), Some("M1"));
        assert_eq!(found[0].from, addr.to_string());
    }
}
