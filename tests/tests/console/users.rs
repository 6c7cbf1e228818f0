//! Issue 44: a guard signs in to the console with a name and password — no token pasted into
//! the page — and sees only what their rights give.

use super::*;

/// The guard may watch `demo` live and nothing else; the node also has `lobby`, live. In
/// headless Chromium the guard signs in, the cameras page lists `demo` alone, the wall plays
/// it and never `lobby`, the cluster, scheduler and recordings tabs are hidden; the session
/// cookie is `HttpOnly` (not in `document.cookie`); a write carrying the cookie without the
/// session's CSRF token is refused, and one with it is judged by the guard's rights (a drain
/// needs the operate role: 403); signing out ends the session.
#[test]
fn a_guard_signs_in_with_a_password_and_sees_only_their_cameras() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let users = dir.path().join("users.toml");
    std::fs::write(&users, "[auth]\nrealm = \"console\"\n").expect("users");
    auth::user_add(&users, "guard", "guard-pw", &["--read", "demo"]);
    let node = NodeBuilder::new()
        .extra("[storage]\nenabled = false")
        .extra(DEMO_CAMERA)
        .extra("[[camera]]\nid = \"lobby\"\nsource = \"demo\"\non_demand = false")
        .extra(&std::fs::read_to_string(&users).expect("users"))
        .start();
    node.wait_live("live/demo");
    node.wait_live("live/lobby");
    let base = format!("http://{}/", node.api);
    browser.goto(&format!("{base}#cameras"));
    browser.wait(
        "the console to ask for credentials",
        WAIT,
        "return document.getElementById('banner').textContent.includes('sign in') || null;",
        vec![],
    );
    browser.type_into("#signin-user", "guard");
    browser.type_into("#signin-password", "guard-pw");
    browser.click("#token-set");
    browser.wait(
        "signed in as guard",
        WAIT,
        "const m = window.vigilConsole.me; return m && m.user === 'guard' && m.proof === 'session' || null;",
        vec![],
    );
    // The cameras page names the guard's camera alone (the admin's answer has both).
    let all = strings(&node.api_json("/api/cameras"), "camera");
    assert!(all.contains(&"lobby".to_string()), "{all:?}");
    let rows = browser.wait(
        "the guard's camera list",
        WAIT,
        "const k = [...document.querySelectorAll('#cameras tbody tr')].map(r => r.dataset.key); \
         return k.length ? k : null;",
        vec![],
    );
    assert_eq!(rows, json!(["demo"]));
    let hidden = browser.eval(
        "return ['cluster', 'scheduler', 'recordings', 'wall', 'cameras', 'sessions'] \
           .map(t => document.querySelector('#tabs a[data-tab=' + t + ']').hidden);",
        vec![],
    );
    assert_eq!(hidden, json!([true, true, true, false, false, false]));
    let page = browser.eval(
        "return [document.cookie.includes('vigil_session'), document.documentElement.outerHTML.includes('guard-pw')];",
        vec![],
    );
    assert_eq!(
        page,
        json!([false, false]),
        "cookie readable or password kept"
    );
    // The wall plays demo, never lobby.
    browser.goto(&base);
    browser.wait(
        "the wall's demo tile to decode 25 frames",
        WAIT,
        "const t = window.vigilWall.tiles.get('demo'); if (!t) return null; \
         return t.stats().then(s => s && s.framesDecoded >= 25 || null);",
        vec![],
    );
    assert_eq!(
        browser.eval("return window.vigilWall.tiles.has('lobby');", vec![]),
        json!(false)
    );
    // Writes with the cookie: without the CSRF token refused, with it judged by the rights.
    let statuses = browser.wait(
        "the writes' answers",
        WAIT,
        "const csrf = window.vigilConsole.me.csrf; \
         const post = (path, h) => fetch(path, { method: 'POST', headers: h, body: 'v=0' }).then(r => r.status); \
         return Promise.all([ \
           post('/whep/live/demo', { 'Content-Type': 'application/sdp' }), \
           post('/whep/live/demo', { 'Content-Type': 'application/sdp', 'X-Vigil-CSRF': csrf }), \
           post('/whep/live/lobby', { 'Content-Type': 'application/sdp', 'X-Vigil-CSRF': csrf }), \
           post('/api/cluster/nodes/x/drain', { 'X-Vigil-CSRF': csrf }), \
         ]);",
        vec![],
    );
    let s: Vec<u64> = statuses
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    assert_eq!(s.len(), 4, "{statuses}");
    assert_eq!(s[0], 403, "a cookie-borne write without the CSRF token");
    assert!(
        ![401, 403].contains(&s[1]),
        "the guard's offer for demo: {}",
        s[1]
    );
    assert_eq!(s[2], 403, "the guard's offer for lobby");
    assert_eq!(s[3], 403, "a drain by the guard");
    // Signing out ends the session: the same page reads nothing any more.
    browser.click("#token-clear");
    let after = browser.wait(
        "signed out",
        WAIT,
        "const m = window.vigilConsole.me; if (!m || m.user !== null) return null; \
         return fetch('/api/sessions').then(r => r.status);",
        vec![],
    );
    assert_eq!(after, json!(401));
    // Only refusals the test provoked, nothing else, in the browser's log.
    let errors: Vec<_> = browser
        .logs()
        .into_iter()
        .filter(|(level, m)| {
            level == "SEVERE"
                && !["401", "403", "400"]
                    .iter()
                    .any(|s| m.contains(&format!("status of {s}")))
        })
        .collect();
    assert!(errors.is_empty(), "browser errors: {errors:#?}");
}
