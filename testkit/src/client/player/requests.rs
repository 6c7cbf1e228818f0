//! The control exchange of a playing session: the PLAY request and answer types, and the
//! requests sent on the session (PAUSE, PLAY again, TEARDOWN).

use super::receive::check_answer;
use super::{Player, ReceivedPacket};
use crate::client::control::{scan, Scanned};
use crate::client::ClientError;
use bytes::Buf;
use std::time::{Duration, Instant};
use vigil_proto::rtp;
use vigil_proto::rtsp::{
    parse_rtp_info, parse_scale, parse_speed, Method, NptTime, Range as RangeHeader, Request,
    Response, RtpInfo,
};

/// The headers of a PLAY request, beyond CSeq and Session. `None` leaves a header out: a PLAY
/// without `Range` resumes where the session was paused (RFC 2326 §10.5).
///
/// Values are kept as text so a test can send anything (`Scale: 0`, `Range: npt=abc-`); the
/// builder methods format well-formed ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlayRequest {
    pub range: Option<String>,
    pub scale: Option<String>,
    pub speed: Option<String>,
}

impl PlayRequest {
    /// No headers: resume (or start at the URL's start).
    pub fn new() -> PlayRequest {
        PlayRequest::default()
    }

    /// `Range: <value>` as given, e.g. `npt=now-` or `npt=3-5`.
    pub fn range(mut self, value: impl Into<String>) -> PlayRequest {
        self.range = Some(value.into());
        self
    }

    /// `Range: npt=<secs>-`: seek relative to the presentation's start.
    pub fn npt(self, secs: f64) -> PlayRequest {
        self.range(format!("npt={secs:.3}-"))
    }

    /// `Range: clock=<UTC>-`: seek to an absolute time (milliseconds since the Unix epoch).
    pub fn clock(self, unix_millis: i64) -> PlayRequest {
        let t = vigil_proto::rtsp::UtcTime { unix_millis };
        self.range(format!("clock={}-", t.to_clock_string()))
    }

    /// `Scale: <s>` (trick play: s times the media per wall second).
    pub fn scale(mut self, s: f64) -> PlayRequest {
        self.scale = Some(format!("{s}"));
        self
    }

    /// `Speed: <s>` (delivery rate; GStreamer's way of asking for a rate).
    pub fn speed(mut self, s: f64) -> PlayRequest {
        self.speed = Some(format!("{s}"));
        self
    }

    pub(crate) fn apply(&self, mut req: Request) -> Request {
        for (name, value) in [
            ("Range", &self.range),
            ("Scale", &self.scale),
            ("Speed", &self.speed),
        ] {
            if let Some(v) = value {
                req = req.header(name, v.clone());
            }
        }
        req
    }
}

/// What a server answered to a PLAY: where it actually starts (`Range`), the rate it
/// accepted (`Scale`/`Speed`, echoed) and which RTP packet starts the new range per track
/// (`RTP-Info`). Headers that are missing or do not parse are `None`/empty.
#[derive(Debug, Clone)]
pub struct PlayAnswer {
    /// When the PLAY was sent (start-up and seek latency are measured from here).
    pub sent: Instant,
    /// When its answer arrived.
    pub received: Instant,
    pub range: Option<RangeHeader>,
    pub scale: Option<f64>,
    pub speed: Option<f64>,
    pub rtp_info: Vec<RtpInfo>,
}

impl PlayAnswer {
    /// A 2xx answer's headers; any other status is [`ClientError::Status`].
    pub(crate) fn from_response(resp: &Response, sent: Instant) -> Result<PlayAnswer, ClientError> {
        if !resp.status.is_success() {
            return Err(ClientError::Status {
                method: "PLAY".into(),
                status: resp.status.0,
                reason: resp.reason.clone(),
            });
        }
        let h = &resp.headers;
        Ok(PlayAnswer {
            sent,
            received: Instant::now(),
            range: h.get("Range").and_then(|v| RangeHeader::parse(v).ok()),
            scale: h.get("Scale").and_then(|v| parse_scale(v).ok()),
            speed: h.get("Speed").and_then(|v| parse_speed(v).ok()),
            rtp_info: h
                .get("RTP-Info")
                .and_then(|v| parse_rtp_info(v).ok())
                .unwrap_or_default(),
        })
    }

    /// Start of the answer's `Range: npt=` in seconds (`None` for `now`, clock ranges or none).
    pub fn npt_start(&self) -> Option<f64> {
        match self.range {
            Some(RangeHeader::Npt {
                start: NptTime::Seconds(s),
                ..
            }) => Some(s),
            _ => None,
        }
    }

    /// Start of the answer's `Range: clock=` (UTC ms), if it is a clock range.
    pub fn clock_start(&self) -> Option<i64> {
        match self.range {
            Some(RangeHeader::Clock { start, .. }) => Some(start.unix_millis),
            _ => None,
        }
    }

    /// End of the answer's `Range: npt=` in seconds, if it has one.
    pub fn npt_end(&self) -> Option<f64> {
        match self.range {
            Some(RangeHeader::Npt {
                end: Some(NptTime::Seconds(s)),
                ..
            }) => Some(s),
            _ => None,
        }
    }
}

impl Player {
    /// PAUSE, and wait for the answer. The server stops sending; packets it sent before
    /// (already received or still in flight) are still yielded by [`Player::next_packet`].
    pub async fn pause(&mut self) -> Result<(), ClientError> {
        let req = self.ctl.request(Method::Pause, &self.play_url);
        let resp = self.call(req).await?;
        if !resp.status.is_success() {
            return Err(ClientError::Status {
                method: "PAUSE".into(),
                status: resp.status.0,
                reason: resp.reason,
            });
        }
        // No more media is due until the next PLAY: do not time out waiting for it.
        self.last_input = Instant::now() + Duration::from_secs(3600);
        Ok(())
    }

    /// PLAY again on this session: a seek (`Range`), a resume where paused (no `Range`) or a
    /// new rate (`Scale`/`Speed`). Returns the answer, also kept as [`Player::answer`];
    /// packets that arrive before it stay queued for [`Player::next_packet`], and a client
    /// tells them from the new range's by the answer's RTP-Info sequence numbers.
    pub async fn play(&mut self, request: PlayRequest) -> Result<&PlayAnswer, ClientError> {
        let req = request.apply(self.ctl.request(Method::Play, &self.play_url));
        let sent = Instant::now();
        let resp = self.call(req).await?;
        self.answer = PlayAnswer::from_response(&resp, sent)?;
        self.last_input = Instant::now();
        if self.opts.stop_reading_after.is_none() {
            self.stop_at = None;
        }
        Ok(&self.answer)
    }

    /// Send a request on the session and wait for its answer (with the read timeout). Over
    /// TCP, RTP met on the way is queued in the backlog and RTCP is noted; answers to earlier
    /// keepalives are checked.
    async fn call(&mut self, req: Request) -> Result<Response, ClientError> {
        self.release();
        let cseq = req.cseq();
        let what = format!("{} {}", req.method, req.uri);
        self.ctl.send(&req).await?;
        let deadline = Instant::now() + self.opts.read_timeout;
        loop {
            while let Some(frame) = scan(&self.ctl.rx)? {
                match frame {
                    Scanned::Interleaved {
                        channel,
                        payload,
                        consumed,
                    } => {
                        let at = Instant::now();
                        let data = self.ctl.rx.split_to(consumed).freeze();
                        match self.channels.iter().find(|c| c.0 == channel) {
                            Some(&(_, track, true)) => {
                                if let Ok((header, body)) = rtp::parse(&data[payload.clone()]) {
                                    let from = payload.start;
                                    self.backlog.push_back(ReceivedPacket {
                                        track,
                                        header,
                                        payload: data.slice(from + body.start..from + body.end),
                                        at,
                                        from: None,
                                    });
                                }
                            }
                            Some(&(_, track, false)) => self.on_rtcp(track, &data[payload]),
                            None => {}
                        }
                    }
                    Scanned::Response(r, n) => {
                        self.ctl.rx.advance(n);
                        if r.cseq() == cseq {
                            return Ok(r);
                        }
                        check_answer(&r)?;
                    }
                }
            }
            match tokio::time::timeout_at(deadline.into(), self.ctl.read_more()).await {
                Err(_) => {
                    return Err(ClientError::Timeout {
                        what,
                        after: self.opts.read_timeout,
                    })
                }
                Ok(Ok(0)) => return Err(ClientError::Closed),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e.into()),
            }
        }
    }

    /// TEARDOWN and wait for the answer (media met meanwhile is dropped).
    pub async fn teardown(mut self) -> Result<(), ClientError> {
        self.release();
        let req = self.ctl.request(Method::Teardown, &self.play_url);
        self.ctl
            .call_ok(req, self.opts.read_timeout)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_proto::rtsp::StatusCode;

    #[test]
    fn play_request_headers() {
        let req = PlayRequest::new()
            .npt(5.0)
            .scale(2.0)
            .apply(Request::new(Method::Play, "rtsp://h/p"));
        assert_eq!(req.headers.get("Range"), Some("npt=5.000-"));
        assert_eq!(req.headers.get("Scale"), Some("2"));
        assert_eq!(req.headers.get("Speed"), None);
        // 2026-11-30T08:00:00.5Z
        let req = PlayRequest::new()
            .clock(1_796_025_600_500)
            .speed(0.5)
            .apply(Request::new(Method::Play, "rtsp://h/p"));
        assert_eq!(req.headers.get("Range"), Some("clock=20261130T080000.5Z-"));
        assert_eq!(req.headers.get("Speed"), Some("0.5"));
        let resume = PlayRequest::new().apply(Request::new(Method::Play, "rtsp://h/p"));
        assert!(
            resume.headers.get("Range").is_none(),
            "a resume has no Range"
        );
    }

    #[test]
    fn play_answer_is_parsed() {
        let sent = Instant::now();
        let resp = Response::new(StatusCode::OK)
            .header("Range", "npt=4.960-20.007")
            .header("Scale", "2")
            .header(
                "RTP-Info",
                "url=rtsp://h/playback/c/trackID=0?start=x;seq=7;rtptime=99,url=rtsp://h/playback/c/trackID=1?start=x;seq=3;rtptime=5",
            );
        let a = PlayAnswer::from_response(&resp, sent).unwrap();
        assert_eq!((a.npt_start(), a.npt_end()), (Some(4.96), Some(20.007)));
        assert_eq!((a.scale, a.speed), (Some(2.0), None));
        assert_eq!(a.rtp_info.len(), 2);
        assert_eq!(
            (a.rtp_info[1].seq, a.rtp_info[1].rtptime),
            (Some(3), Some(5))
        );
        let refused = Response::new(StatusCode::HEADER_FIELD_NOT_VALID);
        assert!(matches!(
            PlayAnswer::from_response(&refused, sent),
            Err(ClientError::Status { status: 456, .. })
        ));
    }
}
