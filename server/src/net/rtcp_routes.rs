//! Whose RTCP arrived on a port that many viewers share (`rtsp::shared_ports`).
//!
//! With one server port pair for every UDP viewer of a node, the port no longer says whose
//! receiver report a datagram is; its source does. A viewer's RTCP leaves from the client
//! RTCP port it named at SETUP (ffmpeg, live555 and GStreamer all send it from the socket
//! they receive RTCP on), so the exact source address is the key. A client whose source
//! port is rewritten on the way (a NAT) is still found by what its report is about: every
//! report block names the SSRC of the stream it reports on, which is the viewer's own (a
//! random 32 bits chosen at its SETUP) — taken only from the viewer's own IP address, as
//! the per-session ports took any port of it.
//!
//! Plain data, no sockets: the receive loop hands it each datagram.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use vigil_proto::rtcp::{parse_compound, RtcpPacket};

/// A registration, to take it out again: a newer one for the same address or SSRC
/// replaces it in that index, and its removal then leaves the newer one alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RouteId(u64);

#[derive(Debug)]
pub struct RtcpRoutes<T> {
    next: u64,
    /// Every registration's value, until its removal.
    values: HashMap<RouteId, T>,
    /// The newest registration naming each client RTCP address.
    by_addr: HashMap<SocketAddr, RouteId>,
    /// SSRC → its registration and the IP it was registered from.
    by_ssrc: HashMap<u32, (RouteId, IpAddr)>,
}

impl<T> Default for RtcpRoutes<T> {
    fn default() -> Self {
        RtcpRoutes {
            next: 0,
            values: HashMap::new(),
            by_addr: HashMap::new(),
            by_ssrc: HashMap::new(),
        }
    }
}

impl<T> RtcpRoutes<T> {
    /// RTCP from `client_rtcp`, or about `ssrc` from its IP, goes to `value`.
    pub fn insert(&mut self, client_rtcp: SocketAddr, ssrc: Option<u32>, value: T) -> RouteId {
        let id = RouteId(self.next);
        self.next += 1;
        self.values.insert(id, value);
        self.by_addr.insert(client_rtcp, id);
        if let Some(ssrc) = ssrc {
            self.by_ssrc.insert(ssrc, (id, client_rtcp.ip()));
        }
        id
    }

    /// Takes out what `id` put in (the indices only where newer registrations did not
    /// replace it).
    pub fn remove(&mut self, id: RouteId, client_rtcp: SocketAddr, ssrc: Option<u32>) {
        self.values.remove(&id);
        if self.by_addr.get(&client_rtcp) == Some(&id) {
            self.by_addr.remove(&client_rtcp);
        }
        if let Some(ssrc) = ssrc {
            if self.by_ssrc.get(&ssrc).is_some_and(|(i, _)| *i == id) {
                self.by_ssrc.remove(&ssrc);
            }
        }
    }

    /// Whose RTCP `packet` from `from` is; None for a stranger's or for garbage (not a
    /// valid compound packet). The stream a report is about decides first — the viewer's
    /// own SSRC, from the IP it registered from — and only a report that names none is
    /// routed by its source address. So a second viewer behind the same NAT that names
    /// the first one's client ports at SETUP takes over only the address index, never the
    /// first viewer's reports, which keep its session alive (issue 44, L8).
    pub fn route(&self, from: SocketAddr, packet: &[u8]) -> Option<&T> {
        let parsed = parse_compound(packet).ok()?;
        let by_stream = parsed.iter().find_map(|p| match p {
            RtcpPacket::ReceiverReport { sources, .. } => sources.iter().find_map(|s| {
                let (id, ip) = self.by_ssrc.get(s)?;
                (*ip == from.ip()).then_some(*id)
            }),
            _ => None,
        });
        let id = by_stream.or_else(|| self.by_addr.get(&from).copied())?;
        self.values.get(&id)
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_proto::rtcp::receiver_report;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// An RR from `reporter` with one report block about `source`.
    fn report_about(reporter: u32, source: u32) -> Vec<u8> {
        let mut b = vec![0x81, 201, 0, 7];
        b.extend_from_slice(&reporter.to_be_bytes());
        b.extend_from_slice(&source.to_be_bytes());
        b.extend_from_slice(&[0; 20]);
        b
    }

    #[test]
    fn a_report_goes_to_the_viewer_at_its_source_address() {
        let mut r = RtcpRoutes::default();
        r.insert(addr("127.0.0.1:5001"), Some(0xa), "a");
        r.insert(addr("127.0.0.1:5003"), Some(0xb), "b");
        let rr = receiver_report(77, "x");
        assert_eq!(r.route(addr("127.0.0.1:5001"), &rr), Some(&"a"));
        assert_eq!(r.route(addr("127.0.0.1:5003"), &rr), Some(&"b"));
        // Same IP, a port nobody registered, a report about nobody's stream.
        assert_eq!(r.route(addr("127.0.0.1:5005"), &rr), None);
        // Garbage from a registered address is nobody's.
        assert_eq!(r.route(addr("127.0.0.1:5001"), b"not rtcp"), None);
    }

    /// A NAT rewrote the source port: the report block's SSRC (the viewer's own stream)
    /// finds it, from the viewer's IP only.
    #[test]
    fn a_rewritten_port_is_found_by_the_stream_reported_on_from_the_same_ip_only() {
        let mut r = RtcpRoutes::default();
        r.insert(addr("198.18.0.7:5001"), Some(0xfeed), "a");
        let rr = report_about(1, 0xfeed);
        assert_eq!(r.route(addr("198.18.0.7:40123"), &rr), Some(&"a"));
        // The same report from another host: an intruder who learnt the SSRC.
        assert_eq!(r.route(addr("198.18.0.8:5001"), &rr), None);
        assert_eq!(
            r.route(addr("198.18.0.7:40123"), &report_about(1, 0xbeef)),
            None
        );
    }

    /// Issue 44, L8, as its attack: a second viewer from the victim's IP (the same NAT)
    /// names the victim's client RTCP port at its SETUP. The victim's reports, about its
    /// own stream, still reach the victim; the intruder's own reports reach the intruder.
    #[test]
    fn a_viewer_behind_the_same_nat_cannot_take_another_ones_reports() {
        let mut r = RtcpRoutes::default();
        let victim = addr("198.18.0.7:5001");
        r.insert(victim, Some(0xa11ce), "victim");
        r.insert(victim, Some(0xbad), "intruder");
        assert_eq!(r.route(victim, &report_about(1, 0xa11ce)), Some(&"victim"));
        assert_eq!(r.route(victim, &report_about(2, 0xbad)), Some(&"intruder"));
        // A report about no stream falls back to the address: the newest registration.
        assert_eq!(r.route(victim, &receiver_report(3, "x")), Some(&"intruder"));
    }

    /// A second SETUP naming the same client ports takes them over; the first one's end
    /// leaves the second in place.
    #[test]
    fn removing_a_replaced_registration_keeps_the_newer_one() {
        let mut r = RtcpRoutes::default();
        let a = r.insert(addr("127.0.0.1:5001"), Some(1), "a");
        let b = r.insert(addr("127.0.0.1:5001"), Some(2), "b");
        r.remove(a, addr("127.0.0.1:5001"), Some(1));
        assert_eq!(r.len(), 1);
        let rr = receiver_report(9, "x");
        assert_eq!(r.route(addr("127.0.0.1:5001"), &rr), Some(&"b"));
        r.remove(b, addr("127.0.0.1:5001"), Some(2));
        assert!(r.is_empty());
        assert_eq!(r.route(addr("127.0.0.1:5001"), &rr), None);
        assert_eq!(r.route(addr("127.0.0.1:5001"), &report_about(9, 2)), None);
    }
}
