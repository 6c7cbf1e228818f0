//! HLS media playlists (RFC 8216) for fMP4 segments (pure).

use std::fmt::Write as _;

/// One segment of a playlist.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub uri: String,
    /// Seconds.
    pub duration: f64,
    /// The segment follows a gap in the recording (a new timestamp line for the player).
    pub discontinuity: bool,
    /// Wall-clock time of its first frame (UTC ms): `EXT-X-PROGRAM-DATE-TIME`, which
    /// players use to show the time of day and which measures the live latency.
    pub start_ms: Option<i64>,
}

/// What kind of playlist: a live window, or a recording (growing while the camera records,
/// closed when the range ends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Live,
    Event,
    Vod,
}

/// The playlist text: version 7 (fMP4 with `EXT-X-MAP`), the init segment's URI, the
/// entries from `media_sequence` on.
pub fn render(kind: Kind, init_uri: &str, media_sequence: u64, entries: &[Entry]) -> String {
    let target = entries
        .iter()
        .map(|e| e.duration)
        .fold(1.0_f64, f64::max)
        .ceil() as u64;
    let mut s = String::from("#EXTM3U\n#EXT-X-VERSION:7\n");
    let _ = writeln!(s, "#EXT-X-TARGETDURATION:{target}");
    let _ = writeln!(s, "#EXT-X-MEDIA-SEQUENCE:{media_sequence}");
    match kind {
        Kind::Live => {}
        Kind::Event => s.push_str("#EXT-X-PLAYLIST-TYPE:EVENT\n"),
        Kind::Vod => s.push_str("#EXT-X-PLAYLIST-TYPE:VOD\n"),
    }
    s.push_str("#EXT-X-INDEPENDENT-SEGMENTS\n");
    let _ = writeln!(s, "#EXT-X-MAP:URI=\"{init_uri}\"");
    for e in entries {
        if e.discontinuity {
            s.push_str("#EXT-X-DISCONTINUITY\n");
        }
        if let Some(ms) = e.start_ms {
            let t = vigil_proto::rtsp::rfc3339(ms);
            let _ = writeln!(s, "#EXT-X-PROGRAM-DATE-TIME:{t}");
        }
        let _ = writeln!(s, "#EXTINF:{:.3},\n{}", e.duration, e.uri);
    }
    if kind == Kind::Vod {
        s.push_str("#EXT-X-ENDLIST\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn playlists_have_their_kind_target_and_entries() {
        let entries = vec![
            Entry {
                uri: "seg-4.m4s".into(),
                duration: 1.0,
                discontinuity: false,
                start_ms: None,
            },
            Entry {
                uri: "seg-5.m4s".into(),
                duration: 2.04,
                discontinuity: true,
                start_ms: Some(1_000),
            },
        ];
        let live = render(Kind::Live, "init.mp4", 4, &entries);
        assert_eq!(
            live,
            "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:3\n#EXT-X-MEDIA-SEQUENCE:4\n\
             #EXT-X-INDEPENDENT-SEGMENTS\n#EXT-X-MAP:URI=\"init.mp4\"\n#EXTINF:1.000,\nseg-4.m4s\n\
             #EXT-X-DISCONTINUITY\n#EXT-X-PROGRAM-DATE-TIME:1970-01-01T00:00:01Z\n\
             #EXTINF:2.040,\nseg-5.m4s\n"
        );
        let vod = render(Kind::Vod, "init.mp4?start=x", 0, &entries);
        assert!(vod.contains("#EXT-X-PLAYLIST-TYPE:VOD\n"));
        assert!(vod.ends_with("#EXT-X-ENDLIST\n"));
        let event = render(Kind::Event, "i", 0, &[]);
        assert!(event.contains("TYPE:EVENT") && !event.contains("ENDLIST"));
        assert!(event.contains("#EXT-X-TARGETDURATION:1\n"));
    }
}
