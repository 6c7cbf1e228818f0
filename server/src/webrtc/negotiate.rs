//! What a WHEP answer carries: the camera's tracks a browser gets (H.264, G.711) and those
//! named as not carried, and what str0m settled per track (mid, payload type, SSRC).

use super::{peer, WhepError};
use std::time::Instant;
use str0m::format::Codec;
use str0m::media::MediaKind;
use str0m::{Output, Rtc};
use tracing::warn;
use vigil_proto::codec::Codec as HubCodec;

/// The hub tracks a WebRTC viewer gets: the H.264 video (required) and a G.711 audio; the
/// others named.
pub(crate) struct Carried {
    pub video: usize,
    pub audio: Option<(usize, HubCodec)>,
    pub not_carried: Vec<String>,
}

pub(super) fn carried_tracks(camera: &str, codecs: &[HubCodec]) -> Result<Carried, WhepError> {
    let video = codecs
        .iter()
        .position(|c| *c == HubCodec::H264)
        .ok_or_else(|| WhepError::Codec {
            camera: camera.to_string(),
            codec: codecs
                .iter()
                .find(|c| c.is_video())
                .map_or("without video".to_string(), |c| format!("{c:?}")),
        })?;
    let audio = codecs
        .iter()
        .enumerate()
        .find(|(_, c)| matches!(c, HubCodec::Pcmu | HubCodec::Pcma))
        .map(|(i, c)| (i, *c));
    let not_carried = codecs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != video && audio.is_none_or(|(a, _)| a != *i))
        .map(|(_, c)| {
            let kind = if c.is_video() { "video" } else { "audio" };
            format!("{kind} {}", c.name())
        })
        .collect();
    Ok(Carried {
        video,
        audio,
        not_carried,
    })
}

/// What the answer settled, per carried hub track: the mid, the payload type and the
/// sending SSRC str0m declared.
pub(super) fn negotiated(
    rtc: &mut Rtc,
    answer: &str,
    tracks: &Carried,
) -> Result<Vec<peer::TrackOut>, WhepError> {
    // str0m declares a send stream per media as time first moves.
    rtc.handle_input(str0m::Input::Timeout(Instant::now()))
        .map_err(|e| WhepError::Rtc(e.to_string()))?;
    loop {
        match rtc.poll_output() {
            Ok(Output::Timeout(_)) => break,
            Ok(_) => {}
            Err(e) => return Err(WhepError::Rtc(e.to_string())),
        }
    }
    let mids = answer_mids(answer);
    let pick =
        |rtc: &mut Rtc, kind: MediaKind, want: &dyn Fn(&str0m::format::PayloadParams) -> bool| {
            mids.iter()
                .filter(|(_, k)| *k == kind)
                .find_map(|(mid, _)| {
                    let pts = rtc.media(*mid)?.remote_pts().to_vec();
                    let pt = rtc
                        .codec_config()
                        .params()
                        .iter()
                        .find(|p| pts.contains(&p.pt()) && want(p))?
                        .pt();
                    let ssrc = rtc.direct_api().stream_tx_by_mid(*mid, None)?.ssrc();
                    Some((*mid, pt, ssrc))
                })
        };
    let (mid, pt, ssrc) = pick(rtc, MediaKind::Video, &|p| {
        p.spec().codec == Codec::H264 && p.spec().format.packetization_mode == Some(1)
    })
    .ok_or(WhepError::NoVideo)?;
    let mut out = vec![peer::TrackOut::new(
        tracks.video,
        mid,
        pt,
        ssrc,
        false,
        90_000,
    )];
    if let Some((track, codec)) = tracks.audio {
        let want = if codec == HubCodec::Pcmu {
            Codec::PCMU
        } else {
            Codec::PCMA
        };
        match pick(rtc, MediaKind::Audio, &|p| p.spec().codec == want) {
            // G.711 is 8 kHz (RFC 3551).
            Some((mid, pt, ssrc)) => {
                out.push(peer::TrackOut::new(track, mid, pt, ssrc, true, 8_000))
            }
            None => warn!("the offer takes no {want:?} audio: video only"),
        }
    }
    Ok(out)
}

/// The media sections of an answer: (mid, kind), in order.
pub(super) fn answer_mids(sdp: &str) -> Vec<(str0m::media::Mid, MediaKind)> {
    let mut out = Vec::new();
    let mut kind = None;
    for line in sdp.lines().map(str::trim) {
        if let Some(m) = line.strip_prefix("m=") {
            kind = match m.split_whitespace().next() {
                Some("video") => Some(MediaKind::Video),
                Some("audio") => Some(MediaKind::Audio),
                _ => None,
            };
        } else if let (Some(mid), Some(k)) = (line.strip_prefix("a=mid:"), kind) {
            out.push((str0m::media::Mid::from(mid), k));
        }
    }
    out
}
