//! The placement marker on redirect URLs: a redirected request carries it so the target
//! serves it without placing it again, and without asking the viewer to log in again.
//!
//! `vigil_placed=<expiry ms, hex>.<nonce, hex>.<HMAC-SHA256(cluster key, path | user |
//! expiry | nonce), 16 bytes hex>.<user, percent-encoded>`: only a holder of the cluster key can make one, it names
//! the one path it was issued for, and it is good for [`MARKER_TTL`]. The target accepts a
//! marker on one connection only (see `Cluster::accept_marker`), so a marker copied out of a
//! redirect cannot be replayed by someone else. A hand-made or replayed marker is ignored:
//! the request is authenticated and placed like any other.

use hmac::{Hmac, Mac};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use sha2::Sha256;
use std::time::Duration;
use vigil_proto::rtsp::url::stream_path;

/// Query parameter added to a redirect.
pub const PLACED_MARKER: &str = "vigil_placed";

/// How long a redirect's marker is honoured: the viewer follows a 302 at once; a little
/// slack covers clock differences between nodes (kept in sync for the gossip's ±30 s
/// window anyway).
pub const MARKER_TTL: Duration = Duration::from_secs(10);

/// What a valid marker says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub expiry_ms: i64,
    /// The user the original node authenticated ("" when it runs without `[auth]`).
    pub user: String,
    /// The MAC, which identifies the marker (for the one-connection rule).
    pub mac: String,
}

/// The random part makes every marker unique: two redirects of one path and user in the same
/// millisecond (a crowd arriving) must not share a marker, which only one connection may use.
fn mac_hex(key: &[u8], path: &str, expiry_ms: i64, nonce: u64, user: &str) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return String::new();
    };
    for part in [PLACED_MARKER.as_bytes(), path.as_bytes(), user.as_bytes()] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    mac.update(&expiry_ms.to_be_bytes());
    mac.update(&nonce.to_be_bytes());
    mac.finalize().into_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a marker is signed for: an RTSP URL's stream path, or `http:` and an HTTP URL's
/// path (a WHEP offer's), so a marker made for the one never passes for the other.
fn signed_path(url: &str) -> Option<String> {
    if let Some(p) = stream_path(url) {
        return Some(p);
    }
    let u = url::Url::parse(url).ok()?;
    matches!(u.scheme(), "http" | "https").then(|| format!("http:{}", u.path().trim_matches('/')))
}

/// The marker value for `path`, valid until `expiry_ms`.
fn marker_value(key: &[u8], path: &str, expiry_ms: i64, user: &str) -> String {
    let nonce: u64 = rand::random();
    format!(
        "{expiry_ms:x}.{nonce:x}.{}.{}",
        mac_hex(key, path, expiry_ms, nonce, user),
        utf8_percent_encode(user, NON_ALPHANUMERIC)
    )
}

/// The redirect target: the chosen node's base with the request's path and query, and a
/// signed marker. The raw query is kept as is (an RFC 3339 `+01:00` must not be re-encoded).
/// The marker is signed for the stream path of the target URL itself, read by the rule the
/// target serves it by ([`stream_path`]), so what is signed is what will be served.
pub fn redirect_url(key: &[u8], base: &str, request_uri: &str, user: &str, now_ms: i64) -> String {
    let (path, query) = match url::Url::parse(request_uri) {
        Ok(u) => (u.path().to_string(), u.query().map(str::to_string)),
        Err(_) => ("/".to_string(), None),
    };
    let target = format!("{}{path}", base.trim_end_matches('/'));
    let expiry = now_ms + MARKER_TTL.as_millis() as i64;
    let signed_path = signed_path(&target).unwrap_or_default();
    let value = marker_value(key, &signed_path, expiry, user);
    let q = match query.map(|q| strip_from_query(&q)) {
        Some(q) if !q.is_empty() => format!("?{q}&{PLACED_MARKER}={value}"),
        _ => format!("?{PLACED_MARKER}={value}"),
    };
    format!("{target}{q}")
}

/// The marker of a request URL if it was made with `key` for this URL's path and has not
/// expired. Signature and expiry only: the one-connection rule is the caller's.
pub fn verify(key: &[u8], url: &str, now_ms: i64) -> Option<Marker> {
    let u = url::Url::parse(url).ok()?;
    let value = u
        .query_pairs()
        .find(|(k, _)| k == PLACED_MARKER)
        .map(|(_, v)| v.into_owned())?;
    let mut parts = value.splitn(4, '.');
    let expiry_ms = i64::from_str_radix(parts.next()?, 16).ok()?;
    let nonce = u64::from_str_radix(parts.next()?, 16).ok()?;
    let mac = parts.next()?.to_string();
    let user = parts.next()?.to_string();
    let path = signed_path(url)?;
    let expected = mac_hex(key, &path, expiry_ms, nonce, &user);
    let ok = vigil_proto::rtsp::auth::constant_time_eq(expected.as_bytes(), mac.as_bytes());
    // Not yet expired, and not issued further ahead than a marker can be.
    let in_window = now_ms <= expiry_ms && expiry_ms - now_ms <= 2 * MARKER_TTL.as_millis() as i64;
    (ok && in_window).then_some(Marker {
        expiry_ms,
        user,
        mac,
    })
}

/// A query without the marker.
fn strip_from_query(q: &str) -> String {
    q.split('&')
        .filter(|p| p.split('=').next() != Some(PLACED_MARKER))
        .collect::<Vec<_>>()
        .join("&")
}

/// The URL without the placement marker (for Content-Base).
pub fn strip_marker(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        return url.to_string();
    };
    let Some(q) = u.query() else {
        return url.to_string();
    };
    let kept = strip_from_query(q);
    u.set_query((!kept.is_empty()).then_some(kept.as_str()));
    u.to_string()
}

/// Markers remembered at most (each lives [`MARKER_TTL`]); past it, new markers are
/// ignored rather than memory growing (a flood of valid markers needs the cluster key).
const USED_MARKERS_MAX: usize = 100_000;

impl super::Cluster {
    /// The user a valid, unexpired marker of `url` names (`""`: none), without taking the
    /// marker (the HTTP gate checks a placed WHEP offer; the route then consumes it).
    pub fn marker_user(&self, url: &str) -> Option<String> {
        verify(&self.marker_key, url, super::now_ms()).map(|m| m.user)
    }

    /// A 302 target on `base` for `request_uri`, signed for `user` (who logged in here).
    pub fn redirect_url(&self, base: &str, request_uri: &str, user: &str) -> String {
        redirect_url(&self.marker_key, base, request_uri, user, super::now_ms())
    }

    /// The marker of a request that arrived on connection `conn` if it is valid and was not
    /// used by another connection (a replay is ignored).
    pub fn accept_marker(&self, url: &str, conn: u64) -> Option<Marker> {
        let now = super::now_ms();
        let marker = verify(&self.marker_key, url, now)?;
        let mut used = self.used_markers.lock().unwrap_or_else(|p| p.into_inner());
        if used.len() >= USED_MARKERS_MAX {
            used.retain(|_, (_, expiry)| *expiry >= now);
        }
        match used.get(&marker.mac) {
            Some((c, _)) if *c != conn => None,
            Some(_) => Some(marker),
            None if used.len() >= USED_MARKERS_MAX => None,
            None => {
                used.insert(marker.mac.clone(), (conn, marker.expiry_ms));
                Some(marker)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"cluster key";
    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn redirect_keeps_path_and_query_and_signs() {
        let u = redirect_url(
            KEY,
            "rtsp://127.0.0.2:8554",
            "rtsp://127.0.0.1:9000/playback/cam?start=2026-01-01T00:00:00+01:00&end=x",
            "al ice",
            NOW,
        );
        assert!(
            u.starts_with(
                "rtsp://127.0.0.2:8554/playback/cam?start=2026-01-01T00:00:00+01:00&end=x&vigil_placed="
            ),
            "{u}"
        );
        let m = verify(KEY, &u, NOW + 1000).unwrap();
        assert_eq!(m.user, "al ice");
        assert_eq!(
            strip_marker(&u),
            "rtsp://127.0.0.2:8554/playback/cam?start=2026-01-01T00:00:00+01:00&end=x"
        );
        let live = redirect_url(KEY, "rtsp://h:1/", "rtsp://a:2/live/demo", "", NOW);
        assert_eq!(strip_marker(&live), "rtsp://h:1/live/demo");
        assert_eq!(verify(KEY, &live, NOW).unwrap().user, "");
        // A redirect of a redirected URL carries one marker.
        let again = redirect_url(KEY, "rtsp://h:1/", &live, "", NOW);
        assert_eq!(again.matches(PLACED_MARKER).count(), 1, "{again}");
    }

    #[test]
    fn markers_made_in_one_millisecond_are_distinct() {
        // A crowd: each viewer's redirect is its own marker (one connection may use each).
        let a = redirect_url(KEY, "rtsp://h:1", "rtsp://a:2/live/demo", "", NOW);
        let b = redirect_url(KEY, "rtsp://h:1", "rtsp://a:2/live/demo", "", NOW);
        assert_ne!(a, b);
        let (ma, mb) = (verify(KEY, &a, NOW).unwrap(), verify(KEY, &b, NOW).unwrap());
        assert_ne!(ma.mac, mb.mac);
    }

    #[test]
    fn hand_made_expired_moved_or_foreign_markers_are_refused() {
        let u = redirect_url(KEY, "rtsp://h:1", "rtsp://a:2/live/demo", "bob", NOW);
        assert!(verify(KEY, "rtsp://h:1/live/demo?vigil_placed=1", NOW).is_none());
        assert!(verify(b"other key", &u, NOW).is_none());
        assert!(verify(KEY, &u, NOW + MARKER_TTL.as_millis() as i64 + 1).is_none());
        // Moved to another camera.
        assert!(verify(KEY, &u.replace("/live/demo", "/live/other"), NOW).is_none());
        // Another user name with the same MAC.
        assert!(verify(KEY, &u.replace(".bob", ".admin"), NOW).is_none());
        // A later expiry with the same MAC.
        let value = u.split("vigil_placed=").nth(1).unwrap();
        let (_, rest) = value.split_once('.').unwrap();
        let later = format!(
            "rtsp://h:1/live/demo?vigil_placed={:x}.{rest}",
            NOW + 60_000
        );
        assert!(verify(KEY, &later, NOW).is_none());
        // Another nonce with the same MAC.
        let (expiry, rest) = value.split_once('.').unwrap();
        let (_, mac_user) = rest.split_once('.').unwrap();
        let other = format!("rtsp://h:1/live/demo?vigil_placed={expiry}.1234.{mac_user}");
        assert!(verify(KEY, &other, NOW).is_none());
        for junk in ["", ".", "x.y.z", "1.2", "1.2.3"] {
            assert!(verify(
                KEY,
                &format!("rtsp://h:1/live/demo?vigil_placed={junk}"),
                NOW
            )
            .is_none());
        }
    }

    /// The marker binds the string [`stream_path`] reads, which is the path the node serves:
    /// a respelling of the URL keeps the marker only if it names the same served path.
    /// `live//cam` or `live/%63am` are not `live/cam` to the node (no such stream; were one
    /// configured, another stream), so the marker must not vouch for them.
    #[test]
    fn a_marker_holds_for_the_spelling_the_node_serves_and_no_other() {
        let signed = redirect_url(KEY, "rtsp://h:1", "rtsp://a:2/live/cam", "", NOW);
        let query = signed.split_once('?').unwrap().1;
        let at = |path: &str| format!("rtsp://h:1{path}?{query}");
        assert!(verify(KEY, &at("/live/cam"), NOW).is_some());
        for same in ["/live/cam/", "//live/cam", "/live/./cam", "/x/../live/cam"] {
            assert_eq!(
                stream_path(&at(same)).as_deref(),
                Some("live/cam"),
                "{same}"
            );
            assert!(verify(KEY, &at(same), NOW).is_some(), "{same}");
        }
        for other in [
            "/live//cam",
            "/live/%63am",
            "/live/cam%2F",
            "/Live/cam",
            "/live/cam/trackID=0",
            "/live",
            "/playback/cam",
        ] {
            assert_ne!(
                stream_path(&at(other)).as_deref(),
                Some("live/cam"),
                "{other}"
            );
            assert!(verify(KEY, &at(other), NOW).is_none(), "{other}");
        }
        // Another scheme is not an RTSP request URL: no served path, no marker.
        assert!(verify(KEY, &signed.replacen("rtsp://", "http://", 1), NOW).is_none());
        // A WHEP offer's redirect is signed for its HTTP path, and passes only as that.
        let whep = redirect_url(
            KEY,
            "http://10.0.0.2:8080",
            "http://10.0.0.1:8080/whep/playback/cam?start=2026-01-01T00:00:00Z",
            "",
            NOW,
        );
        assert!(whep.starts_with(
            "http://10.0.0.2:8080/whep/playback/cam?start=2026-01-01T00:00:00Z&vigil_placed="
        ));
        assert!(verify(KEY, &whep, NOW).is_some());
        assert!(verify(KEY, &whep.replacen("http://", "rtsp://", 1), NOW).is_none());
        assert!(verify(
            KEY,
            &whep.replacen("/whep/playback/", "/whep/live/", 1),
            NOW
        )
        .is_none());
        // Signed for a respelling, refused for the served spelling: the rule is symmetric.
        let odd = redirect_url(KEY, "rtsp://h:1", "rtsp://a:2/live//cam", "", NOW);
        let odd_query = odd.split_once('?').unwrap().1;
        assert!(verify(KEY, &odd, NOW).is_some());
        assert!(verify(KEY, &format!("rtsp://h:1/live/cam?{odd_query}"), NOW).is_none());
    }
}
