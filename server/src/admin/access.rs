//! Who asks over HTTP and what each route needs: the HTTP half of the trust model, pure.
//!
//! The gate (`token::layer`) turns a request's credentials into a [`Principal`] — the admin
//! token, an `[auth]` user (the same users and rights as RTSP, proven by HTTP Basic), the
//! anonymous rights of `[auth]`, or the local caller of an *open* node (no token and no
//! users: the embedded demo) — and judges it against the route's [`Need`]. No listener or
//! address grants anything once a token or a user exists. Routes that list cameras take the
//! principal from the request's extensions and show only what it may see
//! ([`Principal::may_see`]), so a guard's answers never name a camera outside their rights.

use crate::auth::{grants, Right};
use axum::http::Method;
use std::sync::Arc;
use vigil_conf::Rights;

/// Who a request comes from, once the gate has checked its credentials.
#[derive(Debug, Clone)]
pub enum Principal {
    /// A local caller of a node with no admin token and no users: reads everything,
    /// changes nothing (the demo on a laptop).
    OpenLocal,
    /// The bearer of the admin token.
    Admin,
    /// An `[auth]` user who proved their password.
    User { name: String, rights: Arc<Rights> },
    /// A program's API token (`auth::tokens`); `label` is `token:<name>` (user names hold no
    /// `:`, so the trail never confuses the two).
    Token { label: String, rights: Arc<Rights> },
    /// Nobody proven: the `[auth] anonymous` rights, if any.
    Anonymous(Arc<Rights>),
}

/// What a route needs of the principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Anyone: health, the console's static files, a CORS preflight.
    Open,
    /// A right on one camera (HLS, WHEP offers, export, a camera's recordings, PTZ).
    Camera(Right, String),
    /// A proven principal; the answer lists only the cameras it may see (paths, sessions,
    /// cameras, recording states, a WHEP resource of its own), or says what the node
    /// offers (`/api/node`: the console needs it to know which pages apply).
    Listing,
    /// The `operate` role: migrate, drain, move, and the cache and cluster views.
    Operate,
    /// `/metrics`: the `metrics` right (a scraper's token) or the admin role.
    Metrics,
    /// The `admin` role: everything else (the registry, users, tokens, ONVIF).
    Admin,
}

impl Principal {
    /// The name the audit and logs give it.
    pub fn name(&self) -> &str {
        match self {
            Principal::OpenLocal => "local",
            Principal::Admin => "admin-token",
            Principal::User { name, .. } => name,
            Principal::Token { label, .. } => label,
            Principal::Anonymous(_) => "anonymous",
        }
    }

    /// The name a per-user limit counts the principal's sessions under: a proven user's or
    /// token's; "" for everyone else (the admin token, the open node's local caller,
    /// anonymous viewers), whom no per-user limit holds — they are not one person.
    pub fn limit_key(&self) -> &str {
        match self {
            Principal::User { name, .. } => name,
            Principal::Token { label, .. } => label,
            Principal::OpenLocal | Principal::Admin | Principal::Anonymous(_) => "",
        }
    }

    /// Whether the principal holds `right` on `camera`.
    pub fn may(&self, right: Right, camera: &str) -> bool {
        match self {
            Principal::OpenLocal | Principal::Admin => true,
            Principal::User { rights, .. } | Principal::Token { rights, .. } => {
                rights.admin || grants(rights, right, camera)
            }
            Principal::Anonymous(rights) => grants(rights, right, camera),
        }
    }

    /// Whether lists may name `camera` to the principal: it holds some right on it, or a
    /// role that spans every camera.
    pub fn may_see(&self, camera: &str) -> bool {
        let any = |r: &Rights| {
            [
                Right::Read,
                Right::Playback,
                Right::Export,
                Right::Ptz,
                Right::Publish,
            ]
            .into_iter()
            .any(|right| grants(r, right, camera))
        };
        match self {
            Principal::OpenLocal | Principal::Admin => true,
            Principal::User { rights, .. } | Principal::Token { rights, .. } => {
                rights.admin || rights.operate || any(rights)
            }
            Principal::Anonymous(rights) => any(rights),
        }
    }

    /// Whether lists may name a media path (`live/<camera>`, `playback/<camera>`).
    pub fn may_see_path(&self, path: &str) -> bool {
        self.may_see(camera_of_path(path))
    }

    /// Whether the principal may do what `need` asks with `method`. An open node's local
    /// caller reads everything and writes nothing (a viewer's WHEP offer is a read).
    pub fn allows(&self, need: &Need, method: &Method, path: &str) -> bool {
        match self {
            Principal::Admin => true,
            Principal::OpenLocal => is_viewing(method, path),
            Principal::User { rights, .. } | Principal::Token { rights, .. } => match need {
                Need::Open | Need::Listing => true,
                Need::Camera(right, camera) => self.may(*right, camera),
                Need::Operate => rights.operate || rights.admin,
                Need::Metrics => rights.metrics || rights.admin,
                Need::Admin => rights.admin,
            },
            Principal::Anonymous(rights) => match need {
                Need::Open => true,
                Need::Camera(right, camera) => self.may(*right, camera),
                Need::Metrics => rights.metrics,
                Need::Listing | Need::Operate | Need::Admin => false,
            },
        }
    }

    /// Whether the principal proved who it is (a user or the token).
    pub fn is_proven(&self) -> bool {
        matches!(
            self,
            Principal::Admin | Principal::User { .. } | Principal::Token { .. }
        )
    }
}

/// A read, or a viewer's WHEP request (an offer, its resource's trickle, control, end):
/// what an open node serves to its local caller.
pub fn is_viewing(method: &Method, path: &str) -> bool {
    method == Method::GET || method == Method::HEAD || path.starts_with("/whep/")
}

pub use crate::node::camera_of_path;

/// The one segment after `prefix` in `path`, when `path` is `prefix<segment>[/…]`.
fn segment<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?;
    let seg = rest.split('/').next().unwrap_or(rest);
    (!seg.is_empty()).then_some(seg)
}

/// What `method path` needs. Every route of the router is named here or falls to
/// [`Need::Admin`]: a route a later change adds is closed until someone opens it.
pub fn need(method: &Method, path: &str) -> Need {
    let read = method == Method::GET || method == Method::HEAD;
    let cam = |right: Right, prefix: &str| {
        segment(path, prefix).map(|c| Need::Camera(right, percent_decoded(c)))
    };
    if path == "/api/health" || (method == Method::OPTIONS && path.starts_with("/whep/")) {
        return Need::Open;
    }
    // Signing in and out, and asking who one is: anyone (`signin`).
    if (method == Method::POST && matches!(path, "/api/signin" | "/api/signout"))
        || (read && path == "/api/whoami")
    {
        return Need::Open;
    }
    if read && super::console::is_static(path) {
        return Need::Open;
    }
    let camera_need = if read {
        cam(Right::Read, "/hls/live/")
            .or_else(|| cam(Right::Playback, "/hls/playback/"))
            .or_else(|| cam(Right::Export, "/api/export/"))
            .or_else(|| cam(Right::Playback, "/api/recordings/"))
            .or_else(|| cam(Right::Read, "/api/ingest/"))
    } else if method == Method::POST {
        cam(Right::Read, "/whep/live/")
            .or_else(|| cam(Right::Playback, "/whep/playback/"))
            .or_else(|| {
                super::token::is_ptz(path)
                    .then(|| cam(Right::Ptz, "/api/cameras/"))
                    .flatten()
            })
    } else {
        None
    };
    if let Some(n) = camera_need {
        return n;
    }
    if path.starts_with("/whep/resource/") {
        return Need::Listing;
    }
    if read
        && matches!(
            path,
            "/api/paths"
                | "/api/sessions"
                | "/api/cameras"
                | "/api/recordings"
                | "/api/cluster/sessions"
                | "/api/node"
        )
    {
        return Need::Listing;
    }
    let operate_read = read
        && matches!(
            path,
            "/api/cache" | "/api/cluster/nodes" | "/api/cluster/scheduler" | "/api/cluster/plan"
        );
    let operate_write = method == Method::POST
        && ((path.starts_with("/api/sessions/") && path.ends_with("/migrate"))
            || (path.starts_with("/api/cluster/nodes/")
                && (path.ends_with("/drain") || path.ends_with("/undrain")))
            || (path.starts_with("/api/cluster/cameras/") && path.ends_with("/move")));
    if operate_read || operate_write {
        return Need::Operate;
    }
    if read && path == "/metrics" {
        return Need::Metrics;
    }
    Need::Admin
}

/// A path segment as the router hands it to the route (`%20` → space), so the camera the
/// gate judges is the camera the route serves.
fn percent_decoded(seg: &str) -> String {
    percent_encoding::percent_decode_str(seg)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(r: Rights) -> Principal {
        Principal::User {
            name: "guard".into(),
            rights: Arc::new(r),
        }
    }

    fn live_only() -> Principal {
        user(Rights {
            read: vec!["gate-*".into()],
            ..Rights::default()
        })
    }

    #[test]
    fn routes_need_what_they_serve() {
        let get = Method::GET;
        let post = Method::POST;
        let c = |r: Right, c: &str| Need::Camera(r, c.to_string());
        assert_eq!(need(&get, "/api/health"), Need::Open);
        assert_eq!(need(&get, "/"), Need::Open);
        assert_eq!(need(&post, "/"), Need::Admin);
        assert_eq!(
            need(&get, "/hls/live/gate-1/index.m3u8"),
            c(Right::Read, "gate-1")
        );
        assert_eq!(
            need(&get, "/hls/playback/gate-1/seg-3.m4s"),
            c(Right::Playback, "gate-1")
        );
        assert_eq!(
            need(&get, "/api/export/gate%201"),
            c(Right::Export, "gate 1")
        );
        assert_eq!(
            need(&get, "/api/recordings/gate-1"),
            c(Right::Playback, "gate-1")
        );
        assert_eq!(need(&post, "/whep/live/gate-1"), c(Right::Read, "gate-1"));
        assert_eq!(
            need(&post, "/whep/playback/gate-1"),
            c(Right::Playback, "gate-1")
        );
        assert_eq!(need(&Method::OPTIONS, "/whep/live/gate-1"), Need::Open);
        assert_eq!(need(&Method::DELETE, "/whep/resource/x"), Need::Listing);
        assert_eq!(
            need(&post, "/api/cameras/gate-1/ptz"),
            c(Right::Ptz, "gate-1")
        );
        for p in [
            "/api/paths",
            "/api/sessions",
            "/api/cameras",
            "/api/recordings",
        ] {
            assert_eq!(need(&get, p), Need::Listing, "{p}");
        }
        assert_eq!(need(&post, "/api/sessions/x/migrate"), Need::Operate);
        assert_eq!(need(&post, "/api/cluster/nodes/n1/drain"), Need::Operate);
        assert_eq!(need(&post, "/api/cluster/cameras/c/move"), Need::Operate);
        assert_eq!(need(&get, "/api/cluster/nodes"), Need::Operate);
        assert_eq!(need(&get, "/metrics"), Need::Metrics);
        for (m, p) in [
            (&get, "/api/tokens"),
            (&Method::DELETE, "/api/tokens/prometheus"),
            (&get, "/api/users"),
            (&get, "/api/cameras/gate-1"),
            (&post, "/api/cameras"),
            (&post, "/api/cameras/gate-1/onvif"),
            (&Method::PUT, "/api/users/x"),
            (&get, "/api/registry"),
            (&get, "/api/some/route/added/later"),
            (&post, "/hls/live/gate-1/index.m3u8"),
        ] {
            assert_eq!(need(m, p), Need::Admin, "{m} {p}");
        }
    }

    /// The guard of the issue: live on their cameras, and nothing else.
    #[test]
    fn a_live_only_user_gets_live_and_nothing_more() {
        let g = live_only();
        let get = Method::GET;
        let allows = |m: &Method, p: &str| g.allows(&need(m, p), m, p);
        assert!(allows(&get, "/hls/live/gate-1/index.m3u8"));
        assert!(allows(&Method::POST, "/whep/live/gate-1"));
        assert!(!allows(&get, "/hls/playback/gate-1/index.m3u8"));
        assert!(!allows(&get, "/api/export/gate-1"));
        assert!(!allows(&get, "/api/recordings/gate-1"));
        assert!(!allows(&get, "/hls/live/lobby/index.m3u8"));
        assert!(!allows(&Method::POST, "/api/cameras/gate-1/ptz"));
        assert!(allows(&get, "/api/sessions"));
        assert!(!allows(&get, "/metrics"));
        assert!(!allows(&get, "/api/cluster/nodes"));
        assert!(!allows(&Method::POST, "/api/sessions/x/migrate"));
        assert!(g.may_see("gate-1") && !g.may_see("lobby"));
        assert!(g.may_see_path("live/gate-2") && !g.may_see_path("playback/lobby"));
    }

    #[test]
    fn roles_open_their_routes() {
        let operator = user(Rights {
            operate: true,
            ..Rights::default()
        });
        let get = Method::GET;
        let post = Method::POST;
        let allows = |p: &Principal, m: &Method, path: &str| p.allows(&need(m, path), m, path);
        assert!(allows(&operator, &post, "/api/cluster/nodes/n/drain"));
        assert!(allows(&operator, &get, "/api/cluster/nodes"));
        assert!(operator.may_see("any-camera"));
        // Operating is not watching.
        assert!(!allows(&operator, &get, "/hls/live/gate-1/index.m3u8"));
        assert!(!allows(&operator, &get, "/metrics"));
        let admin = user(Rights {
            admin: true,
            ..Rights::default()
        });
        for (m, p) in [
            (&get, "/metrics"),
            (&post, "/api/users"),
            (&get, "/api/export/gate-1"),
            (&post, "/api/cluster/nodes/n/drain"),
        ] {
            assert!(allows(&admin, m, p), "{m} {p}");
        }
        let investigator = user(Rights {
            playback: vec!["*".into()],
            export: vec!["gate-*".into()],
            ..Rights::default()
        });
        assert!(allows(&investigator, &get, "/api/export/gate-3"));
        assert!(!allows(&investigator, &get, "/api/export/lobby"));
        assert!(allows(&investigator, &get, "/api/recordings/lobby"));
    }

    /// A scraper's token reads `/metrics` and nothing else; a token with camera rights is
    /// judged like a user with them, and named apart from users.
    #[test]
    fn tokens_are_judged_by_their_rights() {
        let get = Method::GET;
        let allows = |p: &Principal, m: &Method, path: &str| p.allows(&need(m, path), m, path);
        let scraper = Principal::Token {
            label: "token:prometheus".into(),
            rights: Arc::new(Rights {
                metrics: true,
                ..Rights::default()
            }),
        };
        assert!(allows(&scraper, &get, "/metrics"));
        assert!(scraper.is_proven() && scraper.name() == "token:prometheus");
        // Per-user limits count a token's sessions under its label, a user's under the
        // name; nobody proven, the admin token and the open node's caller are not a user.
        assert_eq!(scraper.limit_key(), "token:prometheus");
        assert_eq!(user(Rights::default()).limit_key(), "guard");
        for nobody in [
            Principal::Admin,
            Principal::OpenLocal,
            Principal::Anonymous(Arc::new(Rights::default())),
        ] {
            assert_eq!(nobody.limit_key(), "", "{nobody:?}");
        }
        for (m, p) in [
            (&get, "/hls/live/gate-1/index.m3u8"),
            (&get, "/api/export/gate-1"),
            (&get, "/api/cluster/nodes"),
            (&get, "/api/tokens"),
            (&Method::POST, "/api/cameras"),
        ] {
            assert!(!allows(&scraper, m, p), "{m} {p}");
        }
        assert!(!scraper.may_see("gate-1"));
        let vms = Principal::Token {
            label: "token:vms".into(),
            rights: Arc::new(Rights {
                read: vec!["gate-*".into()],
                ..Rights::default()
            }),
        };
        assert!(allows(&vms, &get, "/hls/live/gate-1/index.m3u8"));
        assert!(!allows(&vms, &get, "/hls/live/lobby/index.m3u8"));
        assert!(!allows(&vms, &get, "/metrics"));
        // A user with the metrics right scrapes too; the operate role alone does not.
        let monitor = user(Rights {
            metrics: true,
            ..Rights::default()
        });
        assert!(allows(&monitor, &get, "/metrics"));
    }

    #[test]
    fn nobody_proven_gets_only_open_routes_and_anonymous_rights() {
        let none = Principal::Anonymous(Arc::new(Rights::default()));
        let get = Method::GET;
        for p in [
            "/api/sessions",
            "/api/paths",
            "/hls/live/demo/index.m3u8",
            "/api/export/demo",
            "/metrics",
        ] {
            assert!(!none.allows(&need(&get, p), &get, p), "{p}");
        }
        assert!(none.allows(&need(&get, "/api/health"), &get, "/api/health"));
        let open_live = Principal::Anonymous(Arc::new(Rights {
            read: vec!["public-*".into()],
            ..Rights::default()
        }));
        let p = "/hls/live/public-1/index.m3u8";
        assert!(open_live.allows(&need(&get, p), &get, p));
        assert!(!open_live.allows(&need(&get, "/api/sessions"), &get, "/api/sessions"));
        // The open node's local caller: every read, no write.
        let local = Principal::OpenLocal;
        assert!(local.allows(&need(&get, "/metrics"), &get, "/metrics"));
        let post = Method::POST;
        assert!(local.allows(&need(&post, "/whep/live/demo"), &post, "/whep/live/demo"));
        assert!(!local.allows(&need(&post, "/api/cameras"), &post, "/api/cameras"));
    }

    #[test]
    fn media_paths_name_their_camera() {
        assert_eq!(camera_of_path("live/gate-1"), "gate-1");
        assert_eq!(camera_of_path("/playback/gate-1/trackID=0"), "gate-1");
        assert_eq!(camera_of_path("other/x"), "other/x");
        assert_eq!(camera_of_path("live"), "live");
    }
}
