//! One WebRTC viewer: str0m's `Rtc` driven by its datagrams, its timers and its media.
//! Until ICE and DTLS complete no media is read; then a live viewer is one more reader of
//! the camera's hub (its own RTP identity, started on the newest keyframe, skipped to
//! keyframes when behind, as an RTSP viewer), and a recording's viewer gets the paced
//! sender RTSP playback uses (`playback::task`: pacing, gaps cut, the range's end) writing
//! into a channel. Each packet goes to str0m as RTP (no repacketizing) with its payload type
//! and SSRC from the answer; str0m encrypts, paces and answers NACKs from its history.

use crate::live::reader::{OutPacket, Reader, TrackSetup};
use crate::live::stream::Stream;
use crate::node::SessionInfo;
use rand::Rng;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use str0m::media::{Mid, Pt};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{RtpWrite, Ssrc};
use str0m::{Event, IceConnectionState, Input, Output, Rtc};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

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
    /// The last 16-bit sequence number written and its extended (64-bit) value.
    last_seq: Option<(u16, u64)>,
}

impl TrackOut {
    pub fn new(track: usize, mid: Mid, pt: Pt, ssrc: Ssrc) -> TrackOut {
        TrackOut {
            track,
            mid,
            pt,
            ssrc,
            last_seq: None,
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
    Recording {
        library: crate::library::Library,
        tracks: Vec<crate::playback::task::TrackOut>,
        params: Box<crate::playback::task::PlayParams>,
    },
}

/// A source once started.
enum Running {
    Live(Reader),
    Recording(mpsc::Receiver<crate::playback::task::TcpOut>),
}

pub struct Peer {
    pub rtc: Rtc,
    pub media: Vec<TrackOut>,
    pub source: Option<Source>,
    pub socket: Arc<UdpSocket>,
    pub local: SocketAddr,
    pub rx: mpsc::Receiver<Datagram>,
    pub info: Arc<SessionInfo>,
    pub cancel: CancellationToken,
    pub connect_timeout: Duration,
}

enum Wake {
    Stop,
    Datagram(Datagram),
    /// The hub has packets (None), or the recording's sender sent some.
    Media(Option<crate::playback::task::TcpOut>),
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
                        Some(Running::Recording(rx)) => match rx.recv().await {
                            Some(out) => Wake::Media(Some(out)),
                            None => Wake::Ended,
                        },
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = self.cancel.cancelled() => Wake::Stop,
                    d = self.rx.recv() => d.map_or(Wake::Stop, Wake::Datagram),
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
                Wake::Ended => {
                    info!("the recording (or its range) ended");
                    break;
                }
                Wake::Media(Some(crate::playback::task::TcpOut::Packets(packets))) => {
                    self.write(&packets, now);
                    self.rtc.handle_input(Input::Timeout(now))
                }
                // The sender's RTCP is its own SR and BYE: str0m makes the peer's.
                Wake::Media(Some(crate::playback::task::TcpOut::Rtcp(_))) => continue,
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
                    self.write(&out, now);
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
            Source::Recording {
                library,
                mut tracks,
                params,
            } => {
                // The carried tracks get their identities now (the others stay disabled).
                for (i, s) in self.setups().into_iter().enumerate() {
                    if let (Some(t), Some(s)) = (tracks.get_mut(i), s) {
                        t.identity =
                            vigil_proto::rtp::RtpIdentity::new(s.ssrc, s.first_seq, s.first_ts);
                        t.enabled = true;
                    }
                }
                info!(camera = %params.camera, "connected: playing the recording");
                let (tx, rx) = mpsc::channel(32);
                tokio::spawn(crate::playback::task::run(
                    library,
                    tracks,
                    *params,
                    crate::playback::task::Sink::Tcp(tx),
                    self.info.clone(),
                    self.cancel.child_token(),
                ));
                Some(Running::Recording(rx))
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

    fn write(&mut self, packets: &[OutPacket], now: Instant) {
        let mut bytes = 0u64;
        for p in packets {
            let Some(t) = self.media.iter_mut().find(|t| t.track == p.track) else {
                continue;
            };
            let h = &p.header;
            let marker = h[1] & 0x80 != 0;
            let seq = t.extend(u16::from_be_bytes([h[2], h[3]]));
            let ts = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
            let (pt, ssrc) = (t.pt, t.ssrc);
            if let Some(tx) = self.rtc.direct_api().stream_tx(&ssrc) {
                bytes += 12 + p.payload.len() as u64;
                tx.write_rtp(
                    RtpWrite::new(pt, seq.into(), ts, now, p.payload.to_vec())
                        .marker(marker)
                        .nackable(true),
                );
            }
        }
        self.info
            .packets
            .fetch_add(packets.len() as u64, Ordering::Relaxed);
        self.info.bytes.fetch_add(bytes, Ordering::Relaxed);
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
        let mut t = TrackOut::new(0, Mid::from("0"), Pt::from(96), Ssrc::from(1));
        assert_eq!(t.extend(65_534), 65_534);
        assert_eq!(t.extend(65_535), 65_535);
        assert_eq!(t.extend(0), 65_536);
        assert_eq!(t.extend(9), 65_545, "a skip of nine");
        assert_eq!(t.extend(8), 65_544, "one late packet steps back");
    }
}
