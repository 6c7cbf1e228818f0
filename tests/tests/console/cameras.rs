//! The cameras page's registry editor (issue 26 §2) in Chromium: an operator adds, edits,
//! disables, enables and removes a camera by filling the form and clicking, and the API
//! shows each change; a write without the token is refused; an edit that lost a race with
//! another operator says so and reloads; a bad field is named; the camera password typed
//! is found nowhere afterwards (page, API answers, node log, registry files).

use super::WAIT;
use serde_json::{json, Value};
use vigil_tests::browser::Browser;
use vigil_tests::*;

/// The camera's password as the operator types it: it must appear nowhere but sealed.
const PASSWORD: &str = "Console-Cam-Secr3t";
const KEY: &str = "0c7e5a9b3d1f2468ace0bdf13579bdf02468ace13579bdf02468ace13579bdf0";
/// An on-demand camera nobody watches: the node never connects to it.
const SOURCE: &str = "rtsp://127.0.0.1:9/live/gate";

/// Sets form fields by id (replacing what they hold), as the operator would.
fn set_fields(b: &Browser, fields: &[(&str, &str)]) {
    let v: Value = fields
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    b.eval(
        "for (const [id, v] of Object.entries(arguments[0])) { \
           const e = document.getElementById(id); e.value = v; \
           e.dispatchEvent(new Event('input', {bubbles: true})); } return true;",
        vec![v],
    );
}

/// Waits until the form's message contains `part`; returns it.
fn message(b: &Browser, part: &str) -> String {
    b.wait(
        &format!("the message {part:?}"),
        WAIT,
        "const t = document.getElementById('cam-message').textContent; \
         return t.includes(arguments[0]) ? t : null;",
        vec![json!(part)],
    )
    .as_str()
    .unwrap_or_default()
    .to_string()
}

fn record(node: &Node, id: &str) -> Option<Value> {
    node.api_json("/api/registry/cameras")
        .as_array()?
        .iter()
        .find(|c| c["id"] == id)
        .cloned()
}

/// Polls until the camera's record satisfies `ok` (None: it is gone).
fn wait_record(node: &Node, what: &str, ok: impl Fn(Option<&Value>) -> bool) -> Option<Value> {
    let mut last = None;
    poll_until(WAIT, what, || {
        last = record(node, "gate");
        ok(last.as_ref()).then_some(())
    });
    last
}

/// The browser logged no error but the refused requests the test provoked.
fn assert_only_refusals(b: &Browser, allowed: &[u16]) {
    let errors: Vec<_> = b
        .logs()
        .into_iter()
        .filter(|(level, m)| {
            level == "SEVERE"
                && !allowed
                    .iter()
                    .any(|s| m.contains(&format!("the server responded with a status of {s}")))
        })
        .collect();
    assert!(errors.is_empty(), "browser errors: {errors:#?}");
}

#[test]
fn console_edits_the_camera_registry_with_versions_and_a_write_only_password() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let root = tempfile::tempdir().expect("shared root");
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1.0\n\n[registry]\nenabled = true\nsecret_key = \"{KEY}\"\n",
            root.path().display()
        ))
        .start();
    // A node with a token answers nothing without it, on loopback too: sign in first.
    browser.goto(&format!("http://{}/#cameras", node.api));
    browser.type_into("#token-input", ADMIN_TOKEN);
    browser.click("#token-set");
    browser.wait(
        "the registry's table",
        WAIT,
        "return !document.getElementById('registry-on').hidden && window.vigilRegistry.version !== null;",
        vec![],
    );
    set_fields(
        &browser,
        &[
            ("cam-id", "gate"),
            ("cam-source", SOURCE),
            ("cam-user", "cam"),
            ("cam-retention", "72"),
            ("cam-labels", "site=north, floor=2"),
        ],
    );
    browser.type_into("#cam-password", PASSWORD);
    browser.click("#cam-save");
    message(&browser, "gate added");
    let added = wait_record(&node, "gate in the registry", |r| r.is_some()).expect("gate");
    assert_eq!(added["source"], SOURCE, "{added}");
    assert_eq!(added["has_password"], true, "{added}");
    assert_eq!(added["retention_hours"], 72.0, "{added}");
    assert_eq!(added["labels"], json!({"site": "north", "floor": "2"}));
    assert_eq!(
        (&added["on_demand"], &added["enabled"]),
        (&json!(true), &json!(true))
    );
    browser.wait(
        "gate's row",
        WAIT,
        "const r = document.querySelector('#registry tr[data-key=gate]'); \
         return r ? [...r.cells].map(c => c.textContent) : null;",
        vec![],
    );

    // Edit: the form shows the record without credentials; two fields changed.
    browser.click("#registry tr[data-key=gate] .act-edit");
    let form = browser.eval(
        "const v = (id) => document.getElementById(id); \
         return [v('cam-id').value, v('cam-id').readOnly, v('cam-source').value, v('cam-user').value, \
           v('cam-password').value, v('cam-password').placeholder];",
        vec![],
    );
    assert_eq!(form, json!(["gate", true, SOURCE, "", "", "unchanged"]));
    set_fields(&browser, &[("cam-retention", "48"), ("cam-group", "north")]);
    browser.click("#cam-save");
    message(&browser, "gate saved");
    let edited = wait_record(&node, "the edit", |r| {
        r.is_some_and(|r| r["retention_hours"] == 48.0)
    })
    .expect("gate");
    assert_eq!(edited["group"], "north");
    assert_eq!(
        edited["has_password"], true,
        "an edit without a source keeps it"
    );

    // Another operator saves between this one's load and save: 409, said, reloaded.
    browser.click("#registry tr[data-key=gate] .act-edit");
    let (status, answer) = api_send(
        &node,
        "PUT",
        "/api/cameras/gate",
        Some(("application/json", r#"{"record": false}"#)),
        &[],
    );
    assert_eq!(status, 200, "{answer}");
    set_fields(&browser, &[("cam-retention", "12")]);
    browser.click("#cam-save");
    message(&browser, "changed by someone else, reloaded");
    let reloaded = browser.wait(
        "the form reloaded with the other operator's change",
        WAIT,
        "const r = document.getElementById('cam-record'); \
         return !r.checked && window.vigilRegistry.editing ? window.vigilRegistry.editing.id : null;",
        vec![],
    );
    assert_eq!(reloaded, "gate");
    let kept = record(&node, "gate").expect("gate");
    assert_eq!(
        (&kept["retention_hours"], &kept["record"]),
        (&json!(48.0), &json!(false))
    );
    // Saved again against the version now shown, it goes through.
    set_fields(&browser, &[("cam-retention", "12")]);
    browser.click("#cam-save");
    message(&browser, "gate saved");
    wait_record(&node, "the second save", |r| {
        r.is_some_and(|r| r["retention_hours"] == 12.0 && r["record"] == false)
    });

    // A bad field: the API's 400 names it, the page marks it, nothing changes.
    browser.click("#registry tr[data-key=gate] .act-edit");
    set_fields(&browser, &[("cam-source", "ftp://127.0.0.1/x")]);
    browser.click("#cam-save");
    let bad = message(&browser, "source");
    assert!(bad.contains("rtsp://"), "{bad}");
    assert_eq!(
        browser.eval(
            "return document.getElementById('cam-source').classList.contains('invalid');",
            vec![]
        ),
        json!(true)
    );
    assert_eq!(record(&node, "gate").expect("gate")["source"], SOURCE);
    browser.click("#cam-cancel");

    // The password: nowhere in the page, the API's answers, the log or the files.
    let page = browser.eval(
        "return [document.documentElement.outerHTML, \
           [...document.querySelectorAll('input')].map(i => i.value).join(' ')];",
        vec![],
    );
    assert!(
        !page.to_string().contains(PASSWORD),
        "the page shows the password"
    );
    for path in [
        "/api/registry/cameras",
        "/api/cameras",
        "/api/cameras/gate",
        "/api/registry",
        "/api/registry/changes",
    ] {
        let (_, answer) = api_send(&node, "GET", path, None, &[]);
        assert!(!answer.contains(PASSWORD), "{path} answers the password");
    }

    // Disable: viewers are refused with 404; enable again.
    browser.click("#registry tr[data-key=gate] .act-disable");
    wait_record(&node, "gate disabled", |r| {
        r.is_some_and(|r| r["enabled"] == false)
    });
    poll_until(WAIT, "DESCRIBE of the disabled camera to be 404", || {
        (describe_status(&node, "live/gate") == 404).then_some(())
    });
    browser.click("#registry tr[data-key=gate] .act-enable");
    wait_record(&node, "gate enabled", |r| {
        r.is_some_and(|r| r["enabled"] == true)
    });

    // Remove, confirmed by a second click.
    browser.click("#registry tr[data-key=gate] .act-remove");
    assert!(record(&node, "gate").is_some(), "one click does not remove");
    browser.click("#registry tr[data-key=gate] .act-remove-confirm");
    wait_record(&node, "gate removed", |r| r.is_none());
    browser.wait(
        "gate's row to go",
        WAIT,
        "return document.querySelector('#registry tr[data-key=gate]') === null;",
        vec![],
    );

    assert!(
        !node.log().contains(PASSWORD),
        "the node logged the password"
    );
    let files = files_text(&root.path().join("registry"));
    assert!(
        files.contains("gate") && !files.contains(PASSWORD),
        "registry files"
    );
    // The refusals provoked above (401, 409, 400) are the only errors the browser saw.
    assert_only_refusals(&browser, &[400, 401, 409]);
    assert_eq!(
        browser.eval("return window.vigilConsole.errors;", vec![]),
        json!([])
    );
}
