use super::*;
use crate::hostinfo::Space;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn cert_pem(not_before: (i32, u8, u8), not_after: (i32, u8, u8)) -> String {
    let mut p = rcgen::CertificateParams::new(vec!["node-1".to_string()]).expect("params");
    p.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
    p.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
    let key = rcgen::KeyPair::generate().expect("key");
    p.self_signed(&key).expect("cert").pem()
}

#[test]
fn the_validity_of_rcgen_certificates_is_read_back() {
    let dir = tempfile_dir();
    let path = dir.join("chain.pem");
    // A chain: the second ends first (2049: UTCTime; 2051: GeneralizedTime).
    let text = cert_pem((2020, 1, 1), (2051, 6, 1)) + &cert_pem((2021, 3, 4), (2049, 12, 31));
    std::fs::write(&path, text).expect("write");
    let v = cert_validity(&path).expect("parse");
    assert_eq!(
        v,
        vec![
            Validity {
                not_before: 1_577_836_800,
                not_after: 2_569_190_400,
            },
            Validity {
                not_before: 1_614_816_000,
                not_after: 2_524_521_600,
            },
        ]
    );
    std::fs::write(&path, "no pem here").expect("write");
    assert!(matches!(cert_validity(&path), Err(CertError::Empty { .. })));
    assert!(matches!(
        cert_validity(&dir.join("missing.pem")),
        Err(CertError::Read { .. })
    ));
    let junk = "-----BEGIN CERTIFICATE-----\nMAUw\n-----END CERTIFICATE-----\n";
    std::fs::write(&path, junk).expect("write");
    assert!(matches!(cert_validity(&path), Err(CertError::Der(_))));
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "vigil-doctor-test-{}-{}",
        std::process::id(),
        vigil_storage::now_ms()
    ));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
fn certificates_fail_when_expired_or_early_and_warn_within_thirty_days() {
    let p = Path::new("/etc/vigil/node.pem");
    let day = 86_400;
    let now = 1_800_000_000;
    let v = |nb: i64, na: i64| {
        Ok(vec![Validity {
            not_before: nb,
            not_after: na,
        }])
    };
    let c = |r| check_cert("[cluster] node_cert", p, &r, now, RENEW_NODE_CERT);
    assert_eq!(c(v(now - day, now + 31 * day)).level, Level::Ok);
    let w = c(v(now - day, now + 29 * day));
    assert_eq!(w.level, Level::Warn);
    assert!(w.detail.contains("in 29 days"), "{}", w.detail);
    let f = c(v(now - 10 * day, now - 1));
    assert_eq!(f.level, Level::Fail);
    assert!(f.detail.contains("expired"), "{}", f.detail);
    assert!(f
        .fix
        .as_deref()
        .is_some_and(|x| x.contains("vigil cluster cert")));
    let early = c(v(now + 60, now + 90 * day));
    assert_eq!(early.level, Level::Fail);
    assert!(
        early.detail.contains("not valid before"),
        "{}",
        early.detail
    );
    // A chain: the CA's end counts when it comes first.
    let chain = Ok(vec![
        Validity {
            not_before: now - day,
            not_after: now + 400 * day,
        },
        Validity {
            not_before: now - day,
            not_after: now + 3 * day,
        },
    ]);
    assert_eq!(c(chain).level, Level::Warn);
    let missing = c(Err(CertError::Empty { path: p.into() }));
    assert_eq!(missing.level, Level::Fail);
}

#[test]
fn the_fsync_budget_follows_cameras_threads_and_segments() {
    // One fsync per segment: 16 threads, 4 s segments, 2000 cameras: 500 fsyncs/s, 32 ms
    // each at most, half.
    let per_segment = Duration::ZERO;
    assert_eq!(fsync_budget(16, 4.0, 2000, per_segment), ms(16));
    assert_eq!(fsync_budget(16, 4.0, 10, per_segment), ms(100));
    assert_eq!(fsync_budget(8, 4.0, 0, per_segment), ms(100));
    // Group commit: one sync per 200 ms for all, done before the next 0.5 s segment closes.
    assert_eq!(fsync_budget(16, 4.0, 2000, ms(200)), ms(100));
    assert_eq!(fsync_budget(16, 0.5, 2000, ms(200)), ms(100));
    assert_eq!(fsync_budget(16, 0.5, 2000, ms(400)), ms(50));
    let root = Path::new("/srv/vigil");
    let b = ms(16);
    assert_eq!(
        check_root(root, &RootProbe::Writable { fsync: ms(3) }, b).level,
        Level::Ok
    );
    let slow = check_root(root, &RootProbe::Writable { fsync: ms(40) }, b);
    assert_eq!(slow.level, Level::Warn);
    assert!(slow.detail.contains("40 ms"), "{}", slow.detail);
    for p in [
        RootProbe::Missing,
        RootProbe::NotADirectory,
        RootProbe::Unwritable("Permission denied".into()),
    ] {
        let f = check_root(root, &p, b);
        assert_eq!(f.level, Level::Fail, "{p:?}");
        assert!(f.fix.is_some());
    }
    assert!(check_root(root, &RootProbe::Missing, b)
        .fix
        .is_some_and(|f| f.contains("mount the shared volume at /srv/vigil")));
}

#[test]
fn free_space_fails_under_an_hour_of_recording_and_warns_under_ten_percent() {
    let g = 1u64 << 30;
    let space = |free: u64| Space {
        size: 1000 * g,
        available: free,
    };
    let one = |s, need| check_space(s, need, 0).remove(0).level;
    assert_eq!(one(space(500 * g), None), Level::Ok);
    assert_eq!(one(space(99 * g), None), Level::Warn);
    assert_eq!(one(space(0), None), Level::Fail);
    // 200 cameras at 4 Mb/s: 360 GB an hour.
    let hour = 200 * 4_000_000 / 8 * 3600;
    assert_eq!(hour, 360_000_000_000);
    assert_eq!(one(space(300 * g), Some(hour)), Level::Fail);
    assert_eq!(one(space(400 * g), Some(hour)), Level::Ok);
    let r = check_space(space(500 * g), None, 2000 * g);
    assert_eq!(r.len(), 2);
    assert_eq!(r[1].level, Level::Warn);
    assert!(r[1]
        .fix
        .as_deref()
        .is_some_and(|f| f.contains(&(900 * g).to_string())));
}

#[test]
fn members_on_another_root_fail_and_silent_ones_warn() {
    let peer = |n: &str, id: Option<&str>| PeerRoot {
        node: n.into(),
        root_id: id.map(Into::into),
    };
    assert_eq!(check_same_root(Some("a"), Some("a"), &[]).level, Level::Ok);
    assert_eq!(
        check_same_root(
            Some("a"),
            None,
            &[peer("n2", Some("a")), peer("n3", Some("a"))]
        )
        .level,
        Level::Ok
    );
    let f = check_same_root(Some("a"), Some("a"), &[peer("n2", Some("b"))]);
    assert_eq!(f.level, Level::Fail);
    assert!(f.detail.contains("n2 (id b)"), "{}", f.detail);
    let running = check_same_root(Some("a"), Some("b"), &[]);
    assert_eq!(running.level, Level::Fail);
    assert_eq!(
        check_same_root(Some("a"), None, &[peer("n2", None)]).level,
        Level::Warn
    );
    assert_eq!(check_same_root(None, None, &[]).level, Level::Warn);
}

#[test]
fn clock_skew_counts_only_what_the_round_trip_cannot_explain() {
    let s = |skew, rtt| ClockSample {
        node: "n2".into(),
        skew_ms: skew,
        rtt_ms: rtt,
    };
    assert_eq!(check_clock(&[]).level, Level::Ok);
    assert_eq!(check_clock(&[s(30, 2)]).level, Level::Ok);
    // 300 ms off, measured over a 200 ms round trip: 200 ms certain → OK.
    assert_eq!(check_clock(&[s(300, 200)]).level, Level::Ok);
    assert_eq!(check_clock(&[s(-300, 2)]).level, Level::Warn);
    let f = check_clock(&[s(10, 2), s(-2500, 4)]);
    assert_eq!(f.level, Level::Fail);
    assert!(f.detail.contains("-2500 ms"), "{}", f.detail);
}

#[test]
fn the_open_file_need_adds_connections_sessions_and_cameras() {
    let c = Config::default();
    // 10 000 RTSP + 512 API + 2 × 4000 sessions + 256.
    assert_eq!(nofile_need(&c), 18_768);
    let w = check_nofile(1024, 18_768, "the node's");
    assert_eq!(w.level, Level::Warn);
    assert!(w
        .fix
        .as_deref()
        .is_some_and(|f| f.contains("LimitNOFILE=65536")));
    assert_eq!(check_nofile(u64::MAX, 18_768, "x").level, Level::Ok);
    assert_eq!(check_nofile(20_000, 18_768, "x").level, Level::Ok);
}

#[test]
fn a_config_error_is_shown_typed() {
    let e = Config::from_toml("[rtsp]\nlisen = 1");
    let f = check_config(Path::new("/etc/vigil/vigil.toml"), &e);
    assert_eq!(f.level, Level::Fail);
    assert!(f.detail.contains("lisen"), "{}", f.detail);
    let ok = check_config(Path::new("x"), &Config::from_toml(""));
    assert_eq!(ok.level, Level::Ok);
}

#[test]
fn a_registry_version_the_node_could_not_read_is_a_warning() {
    let mut s = crate::registry::Status {
        version: 7,
        path: "/srv/vigil/registry".into(),
        cameras: 3,
        users: 1,
        error: None,
        errors_total: 0,
        last_change: None,
        applied_lag_ms: None,
        secret_key: true,
    };
    let ok = check_registry(Some(&s));
    assert_eq!(ok.level, Level::Ok, "{ok:?}");
    assert!(
        ok.detail.contains("version 7: 3 cameras, 1 users"),
        "{ok:?}"
    );
    s.error = Some("registry file v000000000008.reg: checksum mismatch".into());
    let w = check_registry(Some(&s));
    assert_eq!(w.level, Level::Warn);
    assert!(
        w.detail.contains("checksum") && w.detail.contains("version 7"),
        "{w:?}"
    );
    assert_eq!(check_registry(None).level, Level::Warn);
}
