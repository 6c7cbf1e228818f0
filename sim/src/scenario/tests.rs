use super::*;

#[test]
fn every_builtin_parses_and_validates() {
    for (name, _) in BUILTIN {
        let s = builtin(name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&s.name, name);
        assert!(!s.arms().is_empty());
    }
}

#[test]
fn seed_vod_has_the_papers_parameters() {
    let s = builtin("seed-vod").unwrap();
    assert_eq!(s.nodes.count, 5);
    assert_eq!(s.workload.cameras, 80);
    assert_eq!(s.workload.recordings_per_camera, 5);
    assert_eq!(s.workload.bitrate_mbps, 2.0);
    assert_eq!(s.workload.choice, Choice::Uniform);
    let shares: Vec<(f64, f64)> = s.workload.vcr.iter().map(|v| (v.scale, v.share)).collect();
    assert_eq!(shares, vec![(2.0, 0.2), (3.0, 0.1), (0.5, 0.1)]);
    assert_eq!(
        s.ramp.as_ref().unwrap().steps,
        vec![100, 200, 300, 400, 500]
    );
    assert_eq!(
        s.policies,
        vec![
            "least-load",
            "similarity",
            "similarity+rem",
            "cache-aware+rem",
            "affinity+rem"
        ]
    );
    let p = builtin("seed-planner").unwrap();
    assert_eq!(
        (p.nodes.count, p.nodes.max_sessions, p.workload.cameras),
        (20, 100, 1500)
    );
    assert_eq!(p.workload.choice, Choice::Zipf { s: 0.6 });
    assert_eq!(p.workload.session_mean_secs, 5400.0);
    assert_eq!(p.sweep.as_ref().unwrap().duration_min, 360.0);
}

fn with(edit: impl Fn(&mut toml::Table)) -> Result<Scenario, ScenarioError> {
    let (_, text) = BUILTIN[0];
    let mut t: toml::Table = toml::from_str(text).unwrap();
    edit(&mut t);
    parse("edited", &toml::to_string(&t).unwrap())
}

fn table<'a>(t: &'a mut toml::Table, k: &str) -> &'a mut toml::Table {
    t.get_mut(k).and_then(|v| v.as_table_mut()).unwrap()
}

fn err(r: Result<Scenario, ScenarioError>) -> String {
    r.expect_err("should be refused").to_string()
}

#[test]
fn bad_values_are_refused_with_the_field() {
    let e = err(with(|t| {
        table(t, "nodes").insert("count".into(), 0.into());
    }));
    assert!(e.contains("nodes.count"), "{e}");
    let e = err(with(|t| {
        t.insert("policies".into(), vec!["fastest"].into());
    }));
    assert!(e.contains("policies") && e.contains("fastest"), "{e}");
    let e = err(with(|t| {
        t.insert("policies".into(), vec!["manual"].into());
    }));
    assert!(e.contains("not an arm"), "{e}");
    let e = err(with(|t| {
        table(t, "workload").insert("bitrate_mbps".into(), (-2.0).into());
    }));
    assert!(e.contains("workload.bitrate_mbps"), "{e}");
    let e = err(with(|t| {
        table(t, "ramp").insert("settle_secs".into(), 1e6.into());
    }));
    assert!(e.contains("ramp.step_secs"), "{e}");
    let e = err(with(|t| {
        let w = table(t, "workload");
        let mut v = toml::Table::new();
        v.insert("scale".into(), 2.0.into());
        v.insert("share".into(), 0.9.into());
        let arr = w.get_mut("vcr").and_then(|v| v.as_array_mut()).unwrap();
        arr.push(toml::Value::Table(v));
    }));
    assert!(e.contains("add up to"), "{e}");
    let e = err(with(|t| {
        table(t, "nodes").insert("report_delay_ms".into(), 120_000.into());
    }));
    assert!(e.contains("nodes.report_delay_ms"), "{e}");
    let e = err(with(|t| {
        table(t, "nodes").insert("colour".into(), "red".into());
    }));
    assert!(e.contains("unknown field") && e.contains("colour"), "{e}");
    let e = err(with(|t| {
        t.remove("ramp");
    }));
    assert!(e.contains("needs [ramp]"), "{e}");
    assert!(matches!(
        builtin("seed-nothing"),
        Err(ScenarioError::Unknown(_))
    ));
    assert!(builtin("seed-nothing")
        .unwrap_err()
        .to_string()
        .contains("seed-vod"));
}

#[test]
fn a_file_overrides_the_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.toml");
    let text = BUILTIN[0].1.replace("count = 5", "count = 3");
    std::fs::write(&path, text).unwrap();
    let s = load(path.to_str().unwrap()).unwrap();
    assert_eq!(s.nodes.count, 3);
    let missing = load("/nonexistent/x.toml").unwrap_err().to_string();
    assert!(missing.contains("/nonexistent/x.toml"), "{missing}");
}
