//! A session's per-track RTP output: the identity chosen at SETUP and carried across
//! every PLAY, PAUSE, seek and migration, so sequence numbers and timestamps continue
//! (RFC 2326 App. B).

use vigil_proto::codec::Codec;
use vigil_proto::rtp::RtpIdentity;
use vigil_proto::sdp::SessionDescription;

/// The RTP identity of one set-up track (SETUP answers its SSRC; RTP-Info its seq/rtptime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackSetup {
    pub ssrc: u32,
    pub first_seq: u16,
    pub first_ts: u32,
}

/// Per-track output state that outlives one PLAY (so pause and seek stay continuous).
#[derive(Debug, Clone)]
pub struct TrackOut {
    pub codec: Codec,
    pub payload_type: u8,
    pub clock_rate: u32,
    pub identity: RtpIdentity,
    /// Our own input sequence counter (frames are re-packetised, there is no input seq).
    pub seq: u16,
    /// Set for tracks the client SETUP.
    pub enabled: bool,
}

/// A playback's tracks for its first PLAY: one per media of the recorded SDP, with the
/// identity SETUP chose (tracks not set up are carried, disabled, so indices match).
pub fn new_tracks(sdp: &SessionDescription, setups: &[Option<TrackSetup>]) -> Vec<TrackOut> {
    sdp.media
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let setup = setups.get(i).copied().flatten();
            let (ssrc, seq, ts) = setup.map_or((0, 0, 0), |s| (s.ssrc, s.first_seq, s.first_ts));
            TrackOut {
                codec: m.codec(),
                payload_type: m.payload_type,
                clock_rate: m.clock_rate.max(1),
                identity: RtpIdentity::new(ssrc, seq, ts),
                seq: 0,
                enabled: setup.is_some(),
            }
        })
        .collect()
}
