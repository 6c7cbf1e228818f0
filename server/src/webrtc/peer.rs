//! One WebRTC viewer: str0m's `Rtc` driven by its datagrams, its timers and its media.
//! Until ICE and DTLS complete no media is read; then a live viewer is one more reader of
//! the camera's hub (its own RTP identity, started on the newest keyframe, skipped to
//! keyframes when behind, as an RTSP viewer), and a recording's viewer gets the paced
//! sender RTSP playback uses (`playback::task`: pacing, gaps cut, the range's end) writing
//! into a channel, stopped and started again as the viewer steers it (`recording`). Each
//! packet goes to str0m as RTP (no repacketizing) with its payload type, its SSRC from the
//! answer and its timestamp on a line a browser plays in real time (`steer::Retime`); str0m
//! encrypts, paces and answers NACKs from its history.

use super::recording::{self, Command, Recording};
use super::WhepError;
use crate::live::reader::{OutPacket, Reader, TrackSetup};
use crate::live::stream::Stream;
use crate::node::SessionInfo;
use crate::playback::task::{Cursor, TcpOut};
use rand::Rng;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use str0m::bwe::BweKind;
use str0m::media::{Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{RtpWrite, Ssrc};
use str0m::{Event, IceConnectionState, Input, Output, Rtc};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};
use vigil_session::Retime;

/// Packets moved from the hub per wake-up (as a TCP viewer's pump).
const BATCH: usize = 256;

/// A datagram the socket task routed to this peer.
pub struct Datagram {
    pub from: SocketAddr,
    pub data: Vec<u8>,
}

/// A carried hub track and where it goes in the peer connection.
pub struct TrackOut {
    track: usize,
    mid: Mid,
    pt: Pt,
    ssrc: Ssrc,
    audio: bool,
    /// The last 16-bit sequence number written and its extended (64-bit) value.
    last_seq: Option<(u16, u64)>,
    retime: Retime,
}

impl TrackOut {
    pub fn new(
        track: usize,
        mid: Mid,
        pt: Pt,
        ssrc: Ssrc,
        audio: bool,
        clock_rate: u32,
    ) -> TrackOut {
        TrackOut {
            track,
            mid,
            pt,
            ssrc,
            audio,
            last_seq: None,
            retime: Retime::new(clock_rate),
        }
    }

    /// str0m counts sequence numbers in 64 bits: extend ours by the signed step from the
    /// last one (the reader's numbers move forward, by more than one after a skip).
    fn extend(&mut self, seq: u16) -> u64 {
        let ext = match self.last_seq {
            None => u64::from(seq),
            Some((last, ext)) => ext.wrapping_add_signed(i64::from(seq.wrapping_sub(last) as i16)),
        };
        self.last_seq = Some((seq, ext));
        ext
    }
}

/// Where a peer's media comes from once it is connected.
pub enum Source {
    /// The camera's hub.
    Live(Arc<Stream>),
    /// A recording, from a cursor: the playback sender's run, started at connection.
    Recording(Box<recording::Plan>),
}

/// A source once started.
enum Running {
    Live(Reader),
    Recording(Box<Recording>),
}

pub struct Peer {
    pub rtc: Rtc,
    pub media: Vec<TrackOut>,
    pub source: Option<Source>,
    pub socket: Arc<UdpSocket>,
    pub local: SocketAddr,
    pub rx: mpsc::Receiver<Datagram>,
    /// Controls of a recording's viewer (a live viewer's sender is dropped at once).
    pub commands: mpsc::Receiver<Command>,
    pub info: Arc<SessionInfo>,
    pub cancel: CancellationToken,
    pub connect_timeout: Duration,
}

enum Wake {
    Stop,
    Datagram(Datagram),
    Command(Command),
    /// The hub has packets (None), or the recording's sender sent some.
    Media(Option<TcpOut>),
    /// The recording's sender is done.
    Ended,
    Timer,
}

impl Peer {
    pub async fn run(mut self) {
        let give_up = Instant::now() + self.connect_timeout;
        let mut connected = false;
        let mut reader: Option<Running> = None;
        let mut out: Vec<OutPacket> = Vec::with_capacity(BATCH);
        loop {
            let mut keyframe_asked = false;
            let next = match self.flush(&mut connected, &mut keyframe_asked).await {
                Some(t) => t,
                None => break,
            };
            if connected && reader.is_none() {
                reader = self.start_source();
            }
            if let (true, Some(Running::Live(r))) = (keyframe_asked, reader.as_mut()) {
                // A live viewer's decoder lost its reference: it gets the next keyframe and
                // nothing before it. (A recording's sender runs on: its next keyframe comes
                // with its GOP.)
                r.wait_for_keyframe();
            }
            let deadline = if connected { next } else { next.min(give_up) };
            if !connected && Instant::now() >= give_up {
                info!(
                    "ICE and DTLS did not complete within {:?}: dropped",
                    self.connect_timeout
                );
                break;
            }
            let wake = {
                let media = async {
                    match &mut reader {
                        Some(Running::Live(r)) => {
                            r.wait().await;
                            Wake::Media(None)
                        }
                        Some(Running::Recording(r)) => match r.next().await {
                            recording::Next::Out(out) => Wake::Media(Some(out)),
                            recording::Next::Ended => Wake::Ended,
                        },
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = self.cancel.cancelled() => Wake::Stop,
                    d = self.rx.recv() => d.map_or(Wake::Stop, Wake::Datagram),
                    Some(c) = self.commands.recv() => Wake::Command(c),
                    w = media => w,
                    _ = tokio::time::sleep_until(deadline.into()) => Wake::Timer,
                }
            };
            let now = Instant::now();
            let r = match wake {
                Wake::Stop => break,
                Wake::Timer => self.rtc.handle_input(Input::Timeout(now)),
                Wake::Datagram(d) => {
                    let Ok(recv) = Receive::new(Protocol::Udp, d.from, self.local, &d.data) else {
                        continue;
                    };
                    let input = Input::Receive(now, recv);
                    if !self.rtc.accepts(&input) {
                        continue;
                    }
                    self.rtc.handle_input(input)
                }
                // The peer stays: the viewer may seek back.
                Wake::Ended => continue,
                Wake::Command(c) => {
                    let r = match reader.as_mut() {
                        Some(Running::Recording(r)) => self.steer(r, c.control, c.cursor).await,
                        Some(Running::Live(_)) => Err(WhepError::NotPlayback),
                        None => Err(WhepError::NotConnected),
                    };
                    let _ = c.reply.send(r);
                    continue;
                }
                Wake::Media(Some(TcpOut::Packets(packets))) => {
                    let audio = match &reader {
                        Some(Running::Recording(r)) => r.carries_audio(),
                        _ => true,
                    };
                    // The sender counted them.
                    self.write(&packets, now, audio);
                    self.rtc.handle_input(Input::Timeout(now))
                }
                // The sender's RTCP is its own SR and BYE: str0m makes the peer's.
                Wake::Media(Some(TcpOut::Rtcp(_))) => continue,
                Wake::Media(None) => {
                    let Some(Running::Live(r)) = reader.as_mut() else {
                        continue;
                    };
                    out.clear();
                    let consumed = r.poll_batch(&mut out, BATCH);
                    if consumed == 0 && r.stream().is_finished() {
                        info!("the camera's stream ended");
                        break;
                    }
                    let (sent, bytes) = self.write(&out, now, true);
                    self.info.packets.fetch_add(sent, Ordering::Relaxed);
                    self.info.bytes.fetch_add(bytes, Ordering::Relaxed);
                    self.rtc.handle_input(Input::Timeout(now))
                }
            };
            if let Err(e) = r {
                debug!("peer failed: {e}");
                break;
            }
        }
        self.rtc.disconnect();
        let _ = self.flush(&mut connected, &mut false).await;
    }

    /// Starts the media once connected.
    fn start_source(&mut self) -> Option<Running> {
        match self.source.take()? {
            Source::Live(stream) => {
                info!("connected: sending from the newest keyframe");
                Some(Running::Live(Reader::new(stream, &self.setups())))
            }
            Source::Recording(plan) => {
                // The carried tracks get their identities now (the others stay disabled).
                let setups = self.setups();
                let setup = |tracks: &mut [crate::playback::task::TrackOut]| {
                    for (t, s) in tracks.iter_mut().zip(setups) {
                        if let Some(s) = s {
                            t.identity =
                                vigil_proto::rtp::RtpIdentity::new(s.ssrc, s.first_seq, s.first_ts);
                            t.enabled = true;
                        }
                    }
                };
                info!("connected: playing the recording");
                let rec =
                    Recording::start(*plan, setup, self.info.clone(), self.cancel.child_token());
                Some(Running::Recording(Box::new(rec)))
            }
        }
    }

    /// One `TrackSetup` per carried hub track (the identity the reader writes; str0m sends
    /// with its own SSRC, our sequence numbers and timestamps).
    fn setups(&self) -> Vec<Option<TrackSetup>> {
        let n = self.media.iter().map(|t| t.track + 1).max().unwrap_or(0);
        let mut rng = rand::thread_rng();
        (0..n)
            .map(|i| {
                self.media.iter().any(|t| t.track == i).then(|| TrackSetup {
                    ssrc: rng.gen(),
                    // Low enough that str0m's first extended number has no rollover.
                    first_seq: rng.gen_range(0..16_384),
                    first_ts: rng.gen(),
                })
            })
            .collect()
    }

    /// Carries out a recording viewer's control; after a restart every track draws a new
    /// timestamp line at the new Scale.
    async fn steer(
        &mut self,
        rec: &mut Recording,
        control: vigil_session::Control,
        cursor: Option<Cursor>,
    ) -> Result<vigil_session::SteerState, WhepError> {
        if rec.control(control, cursor).await? {
            let scale = rec.state().scale;
            for t in &mut self.media {
                t.retime.restart(scale);
            }
        }
        debug!(?control, state = ?rec.state(), "playback steered");
        Ok(rec.state())
    }

    /// Hands `packets` to str0m (`audio`: audio tracks are carried; not at Scale ≠ 1): the
    /// packets and bytes written.
    fn write(&mut self, packets: &[OutPacket], now: Instant, audio: bool) -> (u64, u64) {
        let (mut sent, mut bytes) = (0u64, 0u64);
        for p in packets {
            let Some(t) = self.media.iter_mut().find(|t| t.track == p.track) else {
                continue;
            };
            if t.audio && !audio {
                continue;
            }
            let h = &p.header;
            let marker = h[1] & 0x80 != 0;
            let seq = t.extend(u16::from_be_bytes([h[2], h[3]]));
            let ts = t
                .retime
                .map(u32::from_be_bytes([h[4], h[5], h[6], h[7]]), now);
            let (pt, ssrc) = (t.pt, t.ssrc);
            if let Some(tx) = self.rtc.direct_api().stream_tx(&ssrc) {
                sent += 1;
                bytes += 12 + p.payload.len() as u64;
                tx.write_rtp(
                    RtpWrite::new(pt, seq.into(), ts, now, p.payload.to_vec())
                        .marker(marker)
                        .nackable(true),
                );
            }
        }
        (sent, bytes)
    }

    /// Sends what str0m has to send and takes its events; the time it next wants to be
    /// woken, or None when the peer is over.
    async fn flush(&mut self, connected: &mut bool, keyframe_asked: &mut bool) -> Option<Instant> {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => return self.rtc.is_alive().then_some(t),
                Ok(Output::Transmit(t)) => {
                    let _ = self.socket.send_to(&t.contents, t.destination).await;
                }
                Ok(Output::Event(e)) => match e {
                    Event::Connected => *connected = true,
                    Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                        info!("ICE disconnected");
                        return None;
                    }
                    Event::MediaEgressStats(s) => {
                        let mut f = self.info.feedback.lock().unwrap_or_else(|p| p.into_inner());
                        let f = f.get_or_insert_with(Default::default);
                        if let Some(rtt) = s.rtt {
                            f.rtt_ms = Some((rtt.as_secs_f64() * 10_000.0).round() / 10.0);
                        }
                        if s.loss.is_some() {
                            f.loss = s.loss;
                        }
                        if self.media.first().is_some_and(|t| t.mid == s.mid) {
                            (f.nacks, f.plis, f.firs) = (s.nacks, s.plis, s.firs);
                        }
                    }
                    Event::EgressBitrateEstimate(e) => {
                        let (bps, from) = match e {
                            BweKind::Remb { estimate, .. } => (estimate, "remb"),
                            BweKind::Twcc { estimate, .. } => (estimate, "twcc"),
                            _ => continue,
                        };
                        let mut f = self.info.feedback.lock().unwrap_or_else(|p| p.into_inner());
                        let f = f.get_or_insert_with(Default::default);
                        f.estimate_bps = Some(bps.as_u64());
                        f.estimate_from = Some(from.to_string());
                    }
                    Event::KeyframeRequest(k) => {
                        let track = self.media.iter().find(|t| t.mid == k.mid).map(|t| t.track);
                        debug!(?track, kind = ?k.kind, "keyframe requested: sending from the next one");
                        *keyframe_asked = true;
                    }
                    _ => {}
                },
                Err(e) => {
                    debug!("peer failed: {e}");
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_extend_across_their_wrap_and_skips() {
        let mut t = TrackOut::new(
            0,
            Mid::from("0"),
            Pt::from(96),
            Ssrc::from(1),
            false,
            90_000,
        );
        assert_eq!(t.extend(65_534), 65_534);
        assert_eq!(t.extend(65_535), 65_535);
        assert_eq!(t.extend(0), 65_536);
        assert_eq!(t.extend(9), 65_545, "a skip of nine");
        assert_eq!(t.extend(8), 65_544, "one late packet steps back");
    }
}
