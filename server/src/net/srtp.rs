//! SRTP on the node's send paths (issue 28 §1): the keys an RTSPS DESCRIBE hands out, and
//! one track's protection as every sender of it (the UDP pump, a playback task, the TCP
//! connection) uses it. The transform and MIKEY are `vigil_proto::srtp`'s; this is where
//! the node keeps their state and draws the random keys.

use crate::live::reader::OutPacket;
use bytes::Bytes;
use rand::RngCore;
use std::sync::Mutex;
use std::time::SystemTime;
use vigil_proto::rtcp::ntp_timestamp;
use vigil_proto::srtp::{keymgmt, mikey, Context, MasterKey, Profile, KEY_AND_SALT_LEN};

/// The keys an RTSPS DESCRIBE answer gave its tracks, kept on the connection for the
/// SETUPs that follow it (RFC 4567: the server's key travels in the description).
pub struct Offer {
    /// The URL described, without its query: a SETUP of another presentation finds no key.
    pub base: String,
    pub keys: Vec<MasterKey>,
}

impl Offer {
    /// Fresh keys for `tracks` tracks, and the `a=key-mgmt` value of each.
    pub fn new(base: String, tracks: usize) -> (Offer, Vec<String>) {
        let mut rng = rand::thread_rng();
        let wall = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let keys: Vec<MasterKey> = (0..tracks)
            .map(|_| {
                let mut b = [0u8; KEY_AND_SALT_LEN];
                rng.fill_bytes(&mut b);
                MasterKey::from_bytes(&b)
            })
            .collect();
        let attributes = keys
            .iter()
            .map(|key| {
                let mut rand = [0u8; 16];
                rng.fill_bytes(&mut rand);
                keymgmt::sdp_attribute(&mikey::psk_init(&mikey::Init {
                    key,
                    csb_id: rng.next_u32(),
                    ntp: ntp_timestamp(wall),
                    rand,
                    streams: &[],
                }))
            })
            .collect();
        let base = base.split('?').next().unwrap_or_default().to_string();
        (Offer { base, keys }, attributes)
    }

    /// The key of `track` when `uri` (a SETUP's) lies under the described URL.
    pub fn key_for(&self, uri: &str, track: usize) -> Option<&MasterKey> {
        let uri = uri.split('?').next().unwrap_or(uri);
        uri.starts_with(self.base.trim_end_matches('/'))
            .then(|| self.keys.get(track))
            .flatten()
    }
}

/// One track's SRTP: what the node sends (its key from the description) and, when the
/// client's `KeyMgmt` gave one, what the client's RTCP is checked with.
pub struct Track {
    tx: Mutex<Context>,
    rx: Option<Mutex<Context>>,
}

impl Track {
    pub fn new(server: &MasterKey, client: Option<(MasterKey, Profile)>) -> Track {
        Track {
            tx: Mutex::new(Context::new(server, Profile::AesCm128HmacSha1_80)),
            rx: client.map(|(k, p)| Mutex::new(Context::new(&k, p))),
        }
    }

    /// The packets as SRTP: the same headers, each payload encrypted and tagged.
    pub fn protect(&self, packets: &[OutPacket]) -> Vec<OutPacket> {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        packets.iter().filter_map(|p| seal(&mut tx, p)).collect()
    }

    /// One packet as SRTP (a TCP viewer's batches mix tracks, each with its own SRTP).
    pub fn protect_one(&self, packet: &OutPacket) -> Option<OutPacket> {
        seal(
            &mut self.tx.lock().unwrap_or_else(|p| p.into_inner()),
            packet,
        )
    }

    /// One RTCP compound packet of ours as SRTCP (None only for a packet too short to be
    /// RTCP, which the node never makes).
    pub fn protect_rtcp(&self, packet: &[u8]) -> Option<Vec<u8>> {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        tx.protect_rtcp(packet).ok()
    }

    /// The client's SRTCP, checked and decrypted: None for anything that fails its tag (a
    /// forger, or a client whose key we do not have).
    pub fn unprotect_rtcp(&self, packet: &[u8]) -> Option<Vec<u8>> {
        let mut rx = self.rx.as_ref()?.lock().unwrap_or_else(|p| p.into_inner());
        rx.unprotect_rtcp(packet).ok()
    }
}

fn seal(tx: &mut Context, p: &OutPacket) -> Option<OutPacket> {
    let payload = tx.protect_parts(&p.header, &p.payload).ok()?;
    Some(OutPacket {
        track: p.track,
        header: p.header,
        payload: Bytes::from(payload),
    })
}

/// Protects `packets` with `srtp` when the track has it, else hands them back as they are.
pub fn maybe_protect<'a>(
    srtp: Option<&Track>,
    packets: &'a [OutPacket],
) -> std::borrow::Cow<'a, [OutPacket]> {
    match srtp {
        Some(t) => std::borrow::Cow::Owned(t.protect(packets)),
        None => std::borrow::Cow::Borrowed(packets),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setup_finds_the_key_of_its_track_under_the_described_url() {
        let (offer, attrs) = Offer::new("rtsps://n:322/live/cam/".into(), 2);
        assert_eq!(attrs.len(), 2);
        assert!(attrs.iter().all(|a| a.starts_with("mikey ")));
        assert_ne!(offer.keys[0], offer.keys[1], "a key per track");
        assert!(offer
            .key_for("rtsps://n:322/live/cam/trackID=1", 1)
            .is_some());
        assert!(offer
            .key_for("rtsps://n:322/live/cam/trackID=2", 2)
            .is_none());
        assert!(offer
            .key_for("rtsps://n:322/live/other/trackID=0", 0)
            .is_none());
        // Each attribute is a MIKEY message carrying its track's key.
        let got = keymgmt::parse_sdp_attribute(&attrs[1]).unwrap();
        assert_eq!(got.key, offer.keys[1]);
    }

    #[test]
    fn what_the_node_sends_the_client_reads_and_forged_rtcp_is_dropped() {
        let server = MasterKey::from_bytes(&[1; KEY_AND_SALT_LEN]);
        let client = MasterKey::from_bytes(&[2; KEY_AND_SALT_LEN]);
        let track = Track::new(
            &server,
            Some((client.clone(), Profile::AesCm128HmacSha1_80)),
        );
        let mut header = [0u8; 12];
        header[0] = 0x80;
        header[2..4].copy_from_slice(&7u16.to_be_bytes());
        let p = OutPacket {
            track: 0,
            header,
            payload: Bytes::from_static(b"payload"),
        };
        let sealed = track.protect(std::slice::from_ref(&p));
        let mut whole = sealed[0].header.to_vec();
        whole.extend_from_slice(&sealed[0].payload);
        let mut viewer = Context::new(&server, Profile::AesCm128HmacSha1_80);
        let plain = viewer.unprotect_rtp(&whole).unwrap();
        assert_eq!(&plain[12..], b"payload");
        // The client's receiver report, protected with its own key, is read; the same
        // report protected with any other key is not.
        let mut rr = vec![0x80, 201, 0, 1];
        rr.extend_from_slice(&5u32.to_be_bytes());
        let mut client_side = Context::new(&client, Profile::AesCm128HmacSha1_80);
        let srtcp = client_side.protect_rtcp(&rr).unwrap();
        assert_eq!(track.unprotect_rtcp(&srtcp), Some(rr.clone()));
        let mut forger = Context::new(&server, Profile::AesCm128HmacSha1_80);
        assert_eq!(
            track.unprotect_rtcp(&forger.protect_rtcp(&rr).unwrap()),
            None
        );
        assert_eq!(
            track.unprotect_rtcp(&rr),
            None,
            "plain RTCP is not accepted"
        );
    }
}
