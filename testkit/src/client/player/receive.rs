//! The media receive loop of a playing session: RTP in place from the TCP buffer or the UDP
//! sockets, RTCP noted, keepalives out, answers to them checked.

use super::Player;
use crate::client::control::{scan, Scanned};
use crate::client::udp::udp_ready;
use crate::client::ClientError;
use bytes::Buf;
use std::ops::Range;
use std::time::Instant;
use vigil_proto::rtcp::{self, RtcpPacket};
use vigil_proto::rtsp::Method;

/// What [`Player::poll`] found.
pub(super) enum Polled {
    /// An RTP packet of `track` at `range` of the media buffer.
    Rtp {
        track: usize,
        range: Range<usize>,
        at: Instant,
    },
    End,
    Stopped,
}

impl Player {
    pub(super) fn media_buf(&self) -> &[u8] {
        if self.is_tcp() {
            &self.ctl.rx
        } else {
            &self.udp_rx
        }
    }

    /// Drop the packet yielded last from the front of the media buffer.
    pub(super) fn release(&mut self) {
        let n = std::mem::take(&mut self.pending);
        if self.is_tcp() {
            self.ctl.rx.advance(n);
        } else {
            self.udp_rx.clear();
        }
    }

    /// The next RTP packet, in place; handles RTCP, RTSP answers, keepalives and timeouts.
    pub(super) async fn poll(&mut self) -> Result<Polled, ClientError> {
        self.release();
        loop {
            if self.ended {
                // Over UDP the control connection may close (or a BYE arrive) before the
                // datagrams sent ahead of it are read: yield what is already queued first.
                if !self.is_tcp() {
                    if let Some(p) = self.drain_udp()? {
                        return Ok(p);
                    }
                }
                return Ok(Polled::End);
            }
            let now = Instant::now();
            if self.stop_at.is_some_and(|s| now >= s) {
                return Ok(Polled::Stopped);
            }
            if self.is_tcp() {
                if let Some(p) = self.scan_tcp(now)? {
                    return Ok(p);
                }
            } else {
                self.scan_control()?;
            }
            if self.opts.send_keepalive && now >= self.next_keepalive {
                self.keepalive().await?;
            }
            let idle_limit = self.last_input + self.opts.read_timeout;
            if now >= idle_limit {
                return Err(ClientError::Timeout {
                    what: "media".into(),
                    after: self.opts.read_timeout,
                });
            }
            let mut wake = idle_limit;
            if self.opts.send_keepalive {
                wake = wake.min(self.next_keepalive);
            }
            if let Some(s) = self.stop_at {
                wake = wake.min(s);
            }
            // Re-arm only when needed: a reset per read would cost a timer-wheel update per
            // packet batch for every viewer; an early wake-up just recomputes.
            if self.timer.is_elapsed() || wake < self.timer.deadline().into_std() {
                self.timer.as_mut().reset(wake.into());
            }
            let udp = &self.udp;
            tokio::select! {
                r = self.ctl.read_more() => {
                    if r? == 0 {
                        self.ended = true;
                    }
                }
                (i, is_rtp) = udp_ready(udp) => {
                    let t = &self.udp[i];
                    let sock = if is_rtp { &t.rtp } else { &t.rtcp };
                    self.udp_rx.clear();
                    self.udp_rx.reserve(2048);
                    match sock.try_recv_buf_from(&mut self.udp_rx) {
                        Ok((n, from)) => {
                            self.udp_from = Some(from);
                            let track = t.track;
                            let at = Instant::now();
                            self.last_input = at;
                            if is_rtp {
                                self.pending = n;
                                return Ok(Polled::Rtp { track, range: 0..n, at });
                            }
                            let data = std::mem::take(&mut self.udp_rx);
                            self.on_rtcp(track, &data);
                            self.udp_rx = data;
                            self.udp_rx.clear();
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        // ICMP errors of earlier sends (ECONNREFUSED): not fatal.
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                _ = &mut self.timer => {}
            }
        }
    }

    /// The next datagram already queued on any UDP socket, without waiting (RTCP is noted
    /// on the way); `None` once every socket is empty. Reads the sockets directly rather than
    /// through tokio's readiness, which may not have seen the last datagrams yet.
    fn drain_udp(&mut self) -> Result<Option<Polled>, ClientError> {
        use std::io::Read;
        let mut tmp = [0u8; 2048];
        for i in 0..self.udp.len() {
            for is_rtp in [true, false] {
                loop {
                    let t = &self.udp[i];
                    let sock = socket2::SockRef::from(if is_rtp { &t.rtp } else { &t.rtcp });
                    let n = match (&*sock).read(&mut tmp) {
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
                        Err(e) => return Err(e.into()),
                    };
                    let track = t.track;
                    if is_rtp {
                        self.udp_rx.clear();
                        self.udp_rx.extend_from_slice(&tmp[..n]);
                        self.pending = n;
                        self.udp_from = None;
                        return Ok(Some(Polled::Rtp {
                            track,
                            range: 0..n,
                            at: Instant::now(),
                        }));
                    }
                    self.on_rtcp(track, &tmp[..n]);
                }
            }
        }
        Ok(None)
    }

    /// Cut frames from the TCP buffer until an RTP packet turns up.
    fn scan_tcp(&mut self, now: Instant) -> Result<Option<Polled>, ClientError> {
        while let Some(frame) = scan(&self.ctl.rx)? {
            match frame {
                Scanned::Interleaved {
                    channel,
                    payload,
                    consumed,
                } => {
                    self.last_input = now;
                    match self.channels.iter().find(|c| c.0 == channel) {
                        Some(&(_, track, true)) => {
                            self.pending = consumed;
                            return Ok(Some(Polled::Rtp {
                                track,
                                range: payload,
                                at: now,
                            }));
                        }
                        Some(&(_, track, false)) => {
                            let data = self.ctl.rx.split_to(consumed);
                            self.on_rtcp(track, &data[payload]);
                        }
                        None => self.ctl.rx.advance(consumed),
                    }
                }
                Scanned::Response(r, n) => {
                    self.ctl.rx.advance(n);
                    check_answer(&r)?;
                }
            }
        }
        Ok(None)
    }

    /// UDP sessions: answers to keepalives on the control connection.
    fn scan_control(&mut self) -> Result<(), ClientError> {
        while let Some(frame) = scan(&self.ctl.rx)? {
            match frame {
                Scanned::Interleaved { consumed, .. } => self.ctl.rx.advance(consumed),
                Scanned::Response(r, n) => {
                    self.ctl.rx.advance(n);
                    check_answer(&r)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn on_rtcp(&mut self, track: usize, data: &[u8]) {
        let Ok(packets) = rtcp::parse_compound(data) else {
            return;
        };
        let Some(seen) = self.rtcp_seen.get_mut(track) else {
            return;
        };
        for p in packets {
            match p {
                RtcpPacket::SenderReport(_) => seen.0 += 1,
                RtcpPacket::Bye { .. } => {
                    seen.1 = true;
                    self.ended = true;
                }
                _ => {}
            }
        }
    }

    /// GET_PARAMETER over TCP (its answer is read with the media); RTCP RR over UDP.
    async fn keepalive(&mut self) -> Result<(), ClientError> {
        self.next_keepalive = Instant::now() + self.keepalive_every;
        if self.is_tcp() {
            let req = self.ctl.request(Method::GetParameter, &self.play_url);
            return self.ctl.send(&req).await;
        }
        let rr = rtcp::receiver_report(self.ssrc, "vigil-client");
        for t in &self.udp {
            if let Some(dest) = t.server_rtcp {
                // A lost keepalive is retried at the next interval.
                let _ = t.rtcp.send_to(&rr, dest).await;
            }
        }
        Ok(())
    }
}

/// A keepalive answer: anything but 2xx means the session is gone or refused.
pub(super) fn check_answer(r: &vigil_proto::rtsp::Response) -> Result<(), ClientError> {
    if r.status.is_success() {
        return Ok(());
    }
    Err(ClientError::Status {
        method: "GET_PARAMETER".into(),
        status: r.status.0,
        reason: r.reason.clone(),
    })
}
