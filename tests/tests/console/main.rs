//! The operator's web console (issue 12 §3) in a real headless Chromium: every page loads
//! without a browser error, its tables match the API, the player reaches `playing` on a
//! live camera and on a recording, a node name carrying markup is shown as text, and actions
//! appear only once the admin token is given. The cameras page's registry editor:
//! `cameras`.

mod cameras;
mod users;

use serde_json::{json, Value};
use std::time::Duration;
use vigil_tests::browser::Browser;
use vigil_tests::export::http_get;
use vigil_tests::*;

/// A node id that is markup: node ids are free text (a node without recording takes any),
/// and a peer's id arrives over the gossip.
const MARKUP_ID: &str = "n2<b id=xss-b>bold</b><img src=/nope id=xss-img>";

const WAIT: Duration = Duration::from_secs(30);

/// The `data-key`s of `table`'s rows, as the page shows them.
const ROW_KEYS: &str =
    "return [...document.querySelectorAll(arguments[0] + ' tbody tr')].map(r => r.dataset.key).sort();";

/// Waits until `table`'s row keys equal `expected()` (the API's, fetched again each time).
fn wait_rows(b: &Browser, table: &str, expected: impl Fn() -> Vec<String>) -> Vec<String> {
    let mut last = (Value::Null, Vec::new());
    let found = poll_until(WAIT, &format!("{table} rows to match the API"), || {
        let mut want = expected();
        want.sort();
        let shown = b.eval(ROW_KEYS, vec![json!(table)]);
        last = (shown.clone(), want.clone());
        (shown == json!(want) && !want.is_empty()).then_some(want)
    });
    assert!(!found.is_empty(), "{last:?}");
    found
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x[key].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the page's player plays `src_part` and its clock advanced past 1 s.
fn wait_playing(b: &Browser, src_part: &str) -> Value {
    b.wait(
        &format!("the player to play {src_part}"),
        Duration::from_secs(60),
        "const v = document.getElementById('player'); const p = window.vigilConsole.player; \
         if (p.state === 'error') return {error: p.error}; \
         return p.src && p.src.includes(arguments[0]) && p.state === 'playing' \
           && v.readyState >= 3 && v.currentTime > 1 \
           ? {state: p.state, t: v.currentTime, w: v.videoWidth, src: p.src} : null;",
        vec![json!(src_part)],
    )
}

#[test]
fn console_shows_the_cluster_and_plays_video_in_chromium() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let key = "console-test-key";
    let root = tempfile::tempdir().expect("shared root");
    let (n1, seed) = start_member(
        0,
        None,
        key,
        10,
        &format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n\n[webrtc]\ntwcc = true\n\n{DEMO_CAMERA}",
            root.path().display()
        ),
    );
    let gossip = format!("127.0.0.2:{}", free_udp("127.0.0.2"));
    let _n2 = NodeBuilder::new()
        .ip("127.0.0.2")
        .node_id(MARKUP_ID)
        // A recording node's id names its storage lease, so it is restricted; this one's is not.
        .extra("[storage]\nenabled = false")
        .extra(&format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{gossip}\"\nseeds = [\"{seed}\"]\nkey = \"{key}\"\npriority = 20\n"
        ))
        .start();
    let id1 = node_id(&n1);
    poll_until(WAIT, "both nodes alive in n1's view", || {
        alive_ids(&n1).filter(|ids| ids.len() == 2)
    });
    n1.wait_live("live/demo");
    let base = format!("http://{}/", n1.api);

    // Cluster: one row per member, the markup id as text, a load line per node.
    browser.sign_in(&format!("{base}#cluster"), ADMIN_TOKEN);
    let ids = wait_rows(&browser, "#nodes", || {
        strings(&nodes_view(&n1).unwrap_or_default()["nodes"], "id")
    });
    assert!(ids.contains(&MARKUP_ID.to_string()) && ids.contains(&id1));
    let shown = browser.eval(
        "const row = [...document.querySelectorAll('#nodes tbody tr')].find(r => r.dataset.key === arguments[0]); \
         return {cell: row.cells[0].textContent, elements: row.cells[0].children.length, \
           injected: document.querySelectorAll('#xss-b, #xss-img, main b, main img').length};",
        vec![json!(MARKUP_ID)],
    );
    assert_eq!(
        shown,
        json!({"cell": MARKUP_ID, "elements": 0, "injected": 0}),
        "a node id with markup must be shown as text"
    );
    let scheduler = browser.eval(
        "return [...document.querySelectorAll('#nodes tbody tr')].filter(r => r.cells[2].textContent === 'yes').map(r => r.dataset.key);",
        vec![],
    );
    assert_eq!(scheduler, json!([scheduler_of(&n1).expect("a scheduler")]));
    // The chart grows with each refresh (every 2 s), for both nodes, legend as text.
    let chart = browser.wait(
        "three load points per node",
        WAIT,
        "const h = window.vigilConsole.loadHistory; const ids = Object.keys(h); \
         return ids.length === 2 && ids.every(i => h[i].length >= 3) \
           ? [...document.querySelectorAll('#load-legend li')].map(li => li.dataset.node).sort() : null;",
        vec![],
    );
    assert_eq!(chart, json!(ids));
    browser.assert_no_errors("on the cluster page");

    // Cameras: the API's rows; the live camera plays over HLS.
    browser.goto(&format!("{base}#cameras"));
    wait_rows(&browser, "#cameras", || {
        strings(&n1.api_json("/api/cameras"), "camera")
    });
    let state = browser.eval(
        "return document.querySelector('#cameras tr[data-key=demo]').cells[3].textContent;",
        vec![],
    );
    assert_eq!(state, "live");
    browser.click("#cameras tr[data-key=demo] .act-play");
    // Live plays over WebRTC (WHEP): Chromium decodes it, with no freeze.
    let live = wait_playing(&browser, "/whep/live/demo");
    assert!(live["w"].as_u64().unwrap_or(0) > 0, "no picture: {live}");
    let stats = browser.wait(
        "50 WebRTC frames decoded",
        WAIT,
        "return window.vigilWebrtcStats().then(s => s && s.framesDecoded >= 50 ? s : null);",
        vec![],
    );
    // Then 50 frames more with no freeze (a freeze: a frame shown later than 3 frame times
    // or 150 ms after the one before).
    let more = browser.wait(
        "50 more WebRTC frames decoded",
        WAIT,
        "return window.vigilWebrtcStats().then(s => s && s.framesDecoded >= arguments[0] ? s : null);",
        vec![json!(stats["framesDecoded"].as_u64().unwrap_or(0) + 50)],
    );
    eprintln!("WebRTC in Chromium: {stats} then {more}");
    assert_eq!(
        more["freezeCount"], stats["freezeCount"],
        "the live video froze: {stats} then {more}"
    );
    assert_eq!(more["packetsLost"], 0, "{more}");
    assert_eq!(
        n1.api_json("/api/sessions")
            .as_array()
            .map(|a| a.iter().filter(|s| s["kind"] == "webrtc").count()),
        Some(1),
        "the console's viewer is a webrtc session"
    );
    // Chromium's transport-wide feedback (TWCC) is read: the node's estimate of the
    // viewer's bandwidth and the round trip show with the session.
    let feedback = poll_until(WAIT, "the viewer's TWCC estimate", || {
        let v = n1.api_json("/api/sessions");
        let s = v
            .as_array()?
            .iter()
            .find(|s| s["kind"] == "webrtc")?
            .clone();
        let f = s["feedback"].clone();
        (f["estimate_from"] == "twcc" && f["estimate_bps"].as_u64()? > 0 && f["rtt_ms"].is_number())
            .then_some(f)
    });
    eprintln!("Chromium's feedback: {feedback}");
    browser.assert_no_errors("playing live video");

    // Sessions: an RTSP viewer is listed where it plays, with its moves.
    let viewer = spawn_ffmpeg_decode(
        &n1.url("live/demo"),
        &["-rtsp_transport", "tcp"],
        &["-t", "30"],
        Duration::from_secs(60),
    );
    poll_until(WAIT, "the RTSP viewer's session", || {
        let s = n1.api_json("/api/sessions");
        (!strings(&s, "id").is_empty()).then_some(())
    });
    browser.goto(&format!("{base}#sessions"));
    let sessions = wait_rows(&browser, "#sessions", || {
        strings(&n1.api_json("/api/sessions"), "id")
    });
    let row = browser.eval(
        "const r = document.querySelector('#sessions tbody tr[data-key=\"' + arguments[0] + '\"]'); \
         return [r.cells[1].textContent, r.cells[5].textContent, r.cells[6].textContent];",
        vec![json!(sessions[0])],
    );
    assert_eq!(row, json!(["live/demo", id1, "0"]));
    wait_rows(&browser, "#cluster-sessions", || {
        let v = n1.api_json("/api/cluster/sessions");
        v["sessions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        format!(
                            "{}/{}",
                            s["node"].as_str().unwrap_or(""),
                            s["id"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    });

    // Scheduler: the viewer's placement and its reason, as the API lists them.
    browser.goto(&format!("{base}#scheduler"));
    let api_reasons = || {
        strings(
            &n1.api_json("/api/cluster/scheduler")["decisions"],
            "reason",
        )
    };
    poll_until(WAIT, "the decisions table to match the API", || {
        let want = api_reasons();
        let shown = browser.eval(
            "return [...document.querySelectorAll('#decisions tbody tr')].map(r => r.cells[9].textContent);",
            vec![],
        );
        (!want.is_empty() && shown == json!(want)).then_some(())
    });
    browser.assert_no_errors("on the sessions and scheduler pages");
    drop(viewer);

    // Recordings: a timeline with the API's ranges; a click plays from that moment and
    // fills the export range, which the export route serves.
    let first = demo_recorded_for(&n1, 8_000);
    browser.goto(&format!("{base}#recordings"));
    let ranges = browser.wait(
        "the demo timeline",
        WAIT,
        "const t = document.querySelector('.timeline[data-camera=demo]'); \
         return t ? t.querySelectorAll('.range').length : null;",
        vec![],
    );
    let api_ranges = n1.api_json("/api/recordings/demo")["ranges"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(ranges, json!(api_ranges));
    browser.click(".timeline[data-camera=demo]");
    let played = wait_playing(&browser, "/whep/playback/demo?start=");
    // Steered in place over its WHEP resource: a second click on the timeline seeks the
    // same playback (no new offer: the player's source stays), the speed select sets
    // Scale 2 and frames go on decoding, the pause button holds it and resumes it.
    let src = played["src"].clone();
    browser.eval(
        "const bar = document.querySelector('.timeline[data-camera=demo]'); \
         const b = bar.getBoundingClientRect(); \
         bar.dispatchEvent(new MouseEvent('click', {bubbles: true, clientX: b.left + b.width * 0.3, clientY: b.top + 1})); \
         return true;",
        vec![],
    );
    let steer = |what: &str, cond: &str| {
        browser.wait(
            what,
            WAIT,
            &format!("const s = window.vigilConsole.steer; return s && ({cond}) ? s : null;"),
            vec![],
        )
    };
    steer("the seek's answer", "s.scale === 1 && !s.paused");
    assert_eq!(
        browser.eval("return window.vigilConsole.player.src;", vec![]),
        src,
        "a seek steers the playing recording"
    );
    let decoded = |b: &Browser| {
        b.eval("return window.vigilWebrtcStats();", vec![])["framesDecoded"]
            .as_i64()
            .unwrap_or(0)
    };
    let before = decoded(&browser);
    browser.eval(
        "const s = document.getElementById('steer-scale'); s.value = '2'; \
         s.dispatchEvent(new Event('change')); return true;",
        vec![],
    );
    steer("Scale 2", "s.scale === 2");
    browser.wait(
        "25 frames decoded at Scale 2",
        WAIT,
        "return window.vigilWebrtcStats().then((v) => v && v.framesDecoded >= arguments[0] + 25 ? v : null);",
        vec![json!(before)],
    );
    browser.click("#steer-pause");
    steer("the pause", "s.paused");
    browser.click("#steer-pause");
    steer("the resume", "!s.paused");
    let form = browser.eval(
        "const v = (id) => document.getElementById(id).value; \
         return [v('export-camera'), v('export-start'), v('export-end'), \
           Date.parse(v('export-start')), Date.parse(v('export-end'))];",
        vec![],
    );
    let (start, end) = (
        form[1].as_str().unwrap_or(""),
        form[2].as_str().unwrap_or(""),
    );
    let (start_ms, end_ms) = (form[3].as_i64().unwrap_or(0), form[4].as_i64().unwrap_or(0));
    assert_eq!(form[0], "demo", "{form}");
    // The click landed inside the recording (whole seconds: the form drops the fraction).
    assert!(
        start_ms >= first - 1000 && end_ms > start_ms,
        "{form} {played}"
    );
    let mp4 = http_get(
        &n1,
        &format!("/api/export/demo?start={start}&end={end}&download=1"),
    );
    assert_eq!(mp4.status, 200, "{}", String::from_utf8_lossy(&mp4.body));
    assert_eq!(&mp4.body[4..8], b"ftyp");
    browser.assert_no_errors("playing a recording");

    // Signed in with the token, the actions show: drain and undrain this node.
    browser.goto(&format!("{base}#cluster"));
    wait_rows(&browser, "#nodes", || ids.clone());
    browser.wait(
        "drain buttons once signed in",
        WAIT,
        "return document.querySelectorAll('#nodes .act-drain').length === 2;",
        vec![],
    );
    let draining = |want: bool| {
        poll_until(WAIT, &format!("{id1} draining = {want}"), || {
            let v = nodes_view(&n1)?;
            let me = v["nodes"]
                .as_array()?
                .iter()
                .find(|x| x["id"] == id1.as_str())?
                .clone();
            (me["draining"] == want).then_some(())
        })
    };
    browser.click(&format!("#nodes tr[data-key={id1}] .act-drain"));
    draining(true);
    browser.wait(
        "the undrain button",
        WAIT,
        "return document.querySelector('#nodes tr[data-key=' + arguments[0] + '] .act-undrain') !== null;",
        vec![json!(id1)],
    );
    browser.click(&format!("#nodes tr[data-key={id1}] .act-undrain"));
    draining(false);
    // Signed in, an export is fetched with the bearer header and handed over as a blob.
    browser.goto(&format!("{base}#recordings"));
    browser.wait(
        "the demo timeline",
        WAIT,
        "return document.querySelector('.timeline[data-camera=demo]') !== null;",
        vec![],
    );
    browser.click(".timeline[data-camera=demo]");
    wait_playing(&browser, "/whep/playback/demo?start=");
    browser.click("#export-form button[type=submit]");
    let exported = browser.wait(
        "the export to arrive",
        Duration::from_secs(60),
        "const s = document.getElementById('export-state').textContent; \
         const a = document.getElementById('export-link'); \
         return s.endsWith(' MB') && a.href.startsWith('blob:') ? s : null;",
        vec![],
    );
    assert!(
        exported.as_str().is_some_and(|s| s != "0.0 MB"),
        "{exported}"
    );
    // The token stays in the tab's session storage, never in the page.
    let kept = browser.eval(
        "return [sessionStorage.getItem('vigil.adminToken'), document.documentElement.outerHTML.includes(arguments[0])];",
        vec![json!(ADMIN_TOKEN)],
    );
    assert_eq!(kept, json!([ADMIN_TOKEN, false]));
    browser.assert_no_errors("signed in");
    assert_eq!(
        browser.eval("return window.vigilConsole.errors;", vec![]),
        json!([])
    );
}

/// A single node without clustering or recording: every page loads cleanly and says what is off.
#[test]
fn console_without_a_cluster_loads_every_page_cleanly() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let node = NodeBuilder::new()
        .extra("[storage]\nenabled = false")
        .extra(DEMO_CAMERA)
        .start();
    let base = format!("http://{}/", node.api);
    browser.sign_in(&format!("{base}#cluster"), ADMIN_TOKEN);
    // The first page is the wall: the live camera plays over WebRTC.
    browser.goto(&base);
    let tile = browser.wait(
        "the wall's demo tile to decode 25 frames",
        WAIT,
        "const t = window.vigilWall.tiles.get('demo'); if (!t) return null; \
         return t.stats().then(s => s && s.framesDecoded >= 25 && t.box.dataset.state === 'playing' \
           ? {frames: s.framesDecoded, w: t.video.videoWidth} : null);",
        vec![],
    );
    assert!(
        tile["w"].as_u64().unwrap_or(0) > 0,
        "no picture on the wall: {tile}"
    );
    assert_eq!(
        node.api_json("/api/sessions")
            .as_array()
            .map(|a| a.iter().filter(|s| s["kind"] == "webrtc").count()),
        Some(1)
    );
    // Leaving the wall ends its viewers.
    browser.goto(&format!("{base}#cluster"));
    poll_until(WAIT, "the wall's viewer to end", || {
        let s = node.api_json("/api/sessions");
        s.as_array()?
            .iter()
            .all(|s| s["kind"] != "webrtc")
            .then_some(())
    });
    // The cluster page shows the node itself, its CPU as the load line.
    let row = browser.wait(
        "the node's own row",
        WAIT,
        "const r = document.querySelector('#nodes tbody tr'); \
         return r && window.vigilConsole.loadHistory[r.dataset.key] ? r.dataset.key : null;",
        vec![],
    );
    assert_eq!(row, json!(node_id(&node)));
    for (tab, what) in [
        ("cluster", "#cluster-summary"),
        ("sessions", "#cluster-sessions-note"),
        ("scheduler", "#scheduler-summary"),
    ] {
        browser.goto(&format!("{base}#{tab}"));
        let said = browser.wait(
            &format!("the {tab} page to say clustering is off"),
            WAIT,
            "const t = document.querySelector(arguments[0]).textContent; return t.includes('off') ? t : null;",
            vec![json!(what)],
        );
        assert!(said
            .as_str()
            .is_some_and(|s| s.contains("Clustering is off")));
    }
    browser.goto(&format!("{base}#recordings"));
    browser.wait(
        "the recordings page to say recording is off",
        WAIT,
        "return document.getElementById('timelines').textContent.includes('disabled');",
        vec![],
    );
    browser.goto(&format!("{base}#cameras"));
    wait_rows(&browser, "#cameras", || {
        strings(&node.api_json("/api/cameras"), "camera")
    });
    // The registry is off: the page says how to turn it on (and asks nothing that answers 503).
    browser.wait(
        "the cameras page to say the registry is off",
        WAIT,
        "const p = document.getElementById('registry-off');          return !p.hidden && p.textContent.includes('[registry] enabled = true');",
        vec![],
    );
    // The page is served with its headers; an unknown console file is a 404.
    let page = http_get(&node, "/");
    let header = |name: &str| page.header(name).unwrap_or("").to_string();
    assert!(header("content-type").starts_with("text/html"));
    assert!(header("content-security-policy").contains("script-src 'self'"));
    assert_eq!(header("cache-control"), "no-cache");
    assert_eq!(http_get(&node, "/console/nope.js").status, 404);
    browser.assert_no_errors("on a node without cluster or recording");
}
