//! Media routing gathered while the tracks are SETUP: interleaved channels (TCP) or the
//! local port pairs and the server's RTCP address (UDP).

use super::udp::Pair;
use super::{ClientError, ClientTransport};
use std::net::{IpAddr, SocketAddr};
use vigil_proto::rtsp::{LowerTransport, Transport};

/// Media routing gathered while the tracks are SETUP.
pub(crate) struct MediaSetup {
    pub(crate) transport: ClientTransport,
    /// TCP: (channel, track, is RTP).
    pub(crate) channels: Vec<(u8, usize, bool)>,
    pub(crate) udp: Vec<(usize, Pair, Option<SocketAddr>)>,
}

impl MediaSetup {
    pub fn new(transport: ClientTransport) -> MediaSetup {
        MediaSetup {
            transport,
            channels: Vec::new(),
            udp: Vec::new(),
        }
    }

    pub fn udp_pending(&mut self, track: usize, pair: Pair) {
        self.udp.push((track, pair, None));
    }

    /// Record the server's Transport answer for `track`.
    pub fn answered(
        &mut self,
        track: usize,
        answer: &Transport,
        server_ip: IpAddr,
    ) -> Result<(), ClientError> {
        match (self.transport, answer.lower) {
            (ClientTransport::Tcp, LowerTransport::Tcp) => {
                let (rtp, rtcp) = answer
                    .interleaved
                    .unwrap_or(((2 * track) as u8, (2 * track + 1) as u8));
                self.channels.push((rtp, track, true));
                self.channels.push((rtcp, track, false));
                Ok(())
            }
            (ClientTransport::Udp, LowerTransport::Udp) => {
                let ip = answer
                    .source
                    .as_deref()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(server_ip);
                if let Some(entry) = self.udp.iter_mut().find(|u| u.0 == track) {
                    entry.2 = answer
                        .server_port
                        .map(|(_, rtcp)| SocketAddr::new(ip, rtcp));
                }
                Ok(())
            }
            _ => Err(ClientError::Protocol(format!(
                "asked for {:?}, the server answered {answer}",
                self.transport
            ))),
        }
    }
}
