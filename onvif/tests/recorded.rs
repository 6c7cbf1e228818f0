//! The parsers over answers recorded from PyPI's `ipycam` 1.3.0 (its device on
//! 127.0.0.5:18080, 2026-12-04), the same files the fuzzer starts from
//! (`tests/fuzz/onvif/`), and the XXE and billion-laughs documents there, refused.
//!
//! ipycam's PTZ answers use prefixes they never declare (`ptz:`, `tptz:`): read by local
//! name, they parse all the same.

use vigil_onvif::{discovery, media, ptz, soap, Error};

macro_rules! recorded {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fuzz/onvif/",
            $name
        ))
        .as_slice()
    };
}

#[test]
fn ipycam_answers_parse() {
    let t = soap::parse_system_time(recorded!("ipycam-get-system-date-and-time.xml"));
    assert!(matches!(t, Ok(Some(_))), "{t:?}");
    let caps = soap::parse_capabilities(recorded!("ipycam-get-capabilities.xml")).unwrap();
    assert_eq!(
        caps.media.as_deref(),
        Some("http://127.0.0.5:18080/onvif/media_service")
    );
    assert_eq!(
        caps.ptz.as_deref(),
        Some("http://127.0.0.5:18080/onvif/ptz_service")
    );
    let svc = soap::parse_services(recorded!("ipycam-get-services.xml")).unwrap();
    assert_eq!(svc, caps);
    let profiles = media::parse_profiles(recorded!("ipycam-get-profiles.xml")).unwrap();
    let tokens: Vec<_> = profiles.iter().map(|p| p.token.as_str()).collect();
    assert_eq!(tokens, ["Profile_Main", "Profile_Sub"]);
    let main = media::choose(&profiles, None).unwrap();
    assert_eq!(
        (main.width, main.height, main.encoding.as_deref()),
        (1920, 1080, Some("H264"))
    );
    assert_eq!(
        media::parse_stream_uri(recorded!("ipycam-get-stream-uri.xml")).unwrap(),
        "rtsp://127.0.0.5:8554/live/demo"
    );
    let presets = ptz::parse_presets(recorded!("ipycam-get-presets.xml")).unwrap();
    assert_eq!(presets[0].token, "home");
    assert_eq!(
        ptz::parse_set_preset(recorded!("ipycam-set-preset.xml")).unwrap(),
        "preset_c2372b23"
    );
    let m = discovery::parse_matches(
        recorded!("ipycam-probe-match.xml"),
        Some("urn:uuid:00000000-0000-4000-8000-000000000000"),
    )
    .unwrap();
    assert_eq!(m[0].xaddrs, ["http://127.0.0.5:18080/onvif/device_service"]);
    assert_eq!(m[0].name.as_deref(), Some("ipycam-under-test"));
}

#[test]
fn ipycam_refusal_is_unauthorized() {
    let e = soap::answer(
        401,
        recorded!("ipycam-fault-not-authorized.xml"),
        "GetProfiles",
    );
    assert_eq!(
        e,
        Err(Error::Unauthorized {
            action: "GetProfiles",
            status: 401,
            reason: "Sender not authorized".into()
        })
    );
}

#[test]
fn xxe_and_billion_laughs_are_refused() {
    for doc in [recorded!("xxe.xml"), recorded!("billion-laughs.xml")] {
        assert_eq!(media::parse_stream_uri(doc), Err(Error::Dtd));
        assert_eq!(discovery::parse_matches(doc, None), Err(Error::Dtd));
    }
}
