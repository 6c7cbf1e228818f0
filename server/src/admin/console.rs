//! The operator's web console (issue 12 §3): a one-page app at `/`, its script and style
//! under `/console/`, all compiled into the binary (`include_bytes!` of `server/web/`), so a
//! node serves it with no files beside it and CI builds it with no network (hls.js is
//! vendored: `server/web/vendor/README.md`).
//!
//! The page holds no secret, so it is served without the admin token even beyond loopback
//! (`token::judge` lets GETs of these paths through); every API call it makes then meets the
//! token layer like any other client. A Content-Security-Policy allows scripts from this
//! origin only (no inline script, no `eval`), as a second wall behind the page's escaping.
//! In a cluster its `connect-src` also names the members' API origins: a recording's WHEP
//! offer is placed like a DESCRIBE and may be answered by a 307 to another member, which
//! answers CORS for this page (`admin::whep_api`).

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// The vendored hls.js release; its URL carries the version so browsers may keep it forever.
pub const HLS_JS_VERSION: &str = "1.7.4";

/// One embedded file.
struct Asset {
    /// Path under `/console/` (the index is served at `/`).
    name: &'static str,
    body: &'static [u8],
    content_type: &'static str,
    /// Versioned in its URL: cached for a year; else revalidated by ETag on every load.
    immutable: bool,
}

const INDEX: Asset = Asset {
    name: "index.html",
    body: include_bytes!("../../web/index.html"),
    content_type: "text/html; charset=utf-8",
    immutable: false,
};

const ASSETS: &[Asset] = &[
    Asset {
        name: "console.js",
        body: include_bytes!("../../web/console.js"),
        content_type: "text/javascript; charset=utf-8",
        immutable: false,
    },
    Asset {
        name: "cameras.js",
        body: include_bytes!("../../web/cameras.js"),
        content_type: "text/javascript; charset=utf-8",
        immutable: false,
    },
    Asset {
        name: "console.css",
        body: include_bytes!("../../web/console.css"),
        content_type: "text/css; charset=utf-8",
        immutable: false,
    },
    Asset {
        name: "vendor/hls-1.7.4.min.js",
        body: include_bytes!("../../web/vendor/hls.min.js"),
        content_type: "text/javascript; charset=utf-8",
        immutable: true,
    },
];

/// Scripts, styles, media and XHR from this origin only (and `connect-src` the cluster
/// members' API origins); hls.js starts its transmuxing worker from a `blob:` URL and feeds
/// the video element through a `blob:` MediaSource.
fn csp(members: &[String]) -> String {
    let connect: String = members.iter().map(|m| format!(" {m}")).collect();
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         media-src 'self' blob:; connect-src 'self'{connect}; worker-src 'self' blob:; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

type ClusterState = Option<std::sync::Arc<crate::cluster::Cluster>>;

/// Whether `path` is one of the console's static files: served to anyone (GET/HEAD only).
pub fn is_static(path: &str) -> bool {
    path == "/" || path.starts_with("/console/")
}

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    ClusterState: axum::extract::FromRef<S>,
{
    Router::new()
        .route("/", get(index))
        .route("/console/{*file}", get(asset))
}

async fn index(
    axum::extract::State(cluster): axum::extract::State<ClusterState>,
    headers: HeaderMap,
) -> Response {
    let members = cluster.map(|c| c.member_origins()).unwrap_or_default();
    let mut r = serve(&INDEX, &headers);
    if let Ok(v) = HeaderValue::from_str(&csp(&members)) {
        r.headers_mut().insert(header::CONTENT_SECURITY_POLICY, v);
    }
    r
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => serve(a, &headers),
        None => (StatusCode::NOT_FOUND, format!("no console file {file:?}\n")).into_response(),
    }
}

/// The asset's ETag: a hash of its bytes, computed once per asset.
fn etag(a: &'static Asset) -> &'static str {
    static TAGS: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        std::iter::once(&INDEX)
            .chain(ASSETS)
            .map(|a| {
                let d = Sha256::digest(a.body);
                let hex: String = d[..12].iter().map(|b| format!("{b:02x}")).collect();
                (a.name, format!("\"{hex}\""))
            })
            .collect()
    });
    tags.iter()
        .find(|(n, _)| *n == a.name)
        .map_or("\"\"", |(_, t)| t.as_str())
}

fn serve(a: &'static Asset, request: &HeaderMap) -> Response {
    let tag = etag(a);
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut r = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        a.body.into_response()
    };
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if a.immutable {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }),
    );
    if let Ok(v) = HeaderValue::from_str(tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if a.name == INDEX.name {
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_names_the_vendored_player_by_its_served_path() {
        let index = std::str::from_utf8(INDEX.body).expect("utf-8");
        let hls = ASSETS.iter().find(|a| a.immutable).expect("hls.js");
        assert!(hls.name.contains(HLS_JS_VERSION));
        for a in ASSETS {
            assert!(
                index.contains(&format!("/console/{}", a.name)),
                "index.html does not load /console/{}",
                a.name
            );
        }
        // No inline script or handler: the CSP would block it.
        assert!(!index.contains("<script>"));
        let handler = index.split(" on").skip(1).any(|rest| {
            let attr = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
            attr.len() < rest.len() && attr.starts_with('=')
        });
        assert!(!handler, "an inline event handler in index.html");
    }

    /// The pages build their DOM from text nodes: no API string is ever parsed as markup.
    #[test]
    fn the_scripts_never_assign_markup() {
        for a in ASSETS
            .iter()
            .filter(|a| a.name.ends_with(".js") && !a.immutable)
        {
            let js = std::str::from_utf8(a.body).expect("utf-8");
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!js.contains(sink), "{} uses {sink}", a.name);
            }
        }
    }

    #[test]
    fn static_paths_are_the_console_only() {
        assert!(is_static("/") && is_static("/console/console.js"));
        assert!(!is_static("/api/cameras") && !is_static("/hls/live/x/index.m3u8"));
        assert!(!is_static("/consolex"));
    }

    #[test]
    fn etags_differ_per_file_and_match_a_revalidation() {
        let a = &ASSETS[0];
        assert_ne!(etag(a), etag(&INDEX));
        let mut h = HeaderMap::new();
        h.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(etag(a)).expect("tag"),
        );
        assert_eq!(serve(a, &h).status(), StatusCode::NOT_MODIFIED);
        let r = serve(a, &HeaderMap::new());
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-cache");
    }
}
