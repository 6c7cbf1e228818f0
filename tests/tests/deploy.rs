//! The shipped Grafana dashboard and Prometheus alert rules (`deploy/`, issue 28 §3): every
//! metric they name exists on a running node's `/metrics` from its start (a panel or alert
//! on a series the node never writes shows nothing and fires never, without an error), the
//! rules load in promtool, and promtool's unit tests of them say which alerts fire when.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use vigil_tests::{poll_until, run_with_timeout, workspace, NodeBuilder, DEMO_CAMERA};

fn deploy(file: &str) -> PathBuf {
    workspace().join("deploy").join(file)
}

fn read(file: &str) -> String {
    let p = deploy(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `vigil_*` metric names in a PromQL expression (label values are not names: the lexer
/// skips quoted strings).
fn metric_names(expr: &str, out: &mut BTreeSet<String>) {
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':')
                {
                    i += 1;
                }
                let word = &expr[start..i];
                if word.starts_with("vigil_") {
                    out.insert(word.to_string());
                }
            }
            _ => i += 1,
        }
    }
}

/// Every PromQL string of the dashboard: targets' `expr` and the template variables'
/// queries.
fn dashboard_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_exprs(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| dashboard_exprs(x, out)),
        _ => {}
    }
}

/// The `expr:` of every rule in a rule file: one line, or a block scalar (`>-`, `|`) of the
/// lines indented under it.
fn rule_exprs(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let Some(value) = t.strip_prefix("expr:") else {
            continue;
        };
        let value = value.trim();
        if !value.starts_with(['>', '|']) {
            out.push(value.to_string());
            continue;
        }
        let indent = line.len() - t.len();
        let block: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
            .map(|l| l.trim())
            .collect();
        out.push(block.join(" "));
    }
    out
}

/// Names of the series in an exposition.
fn exposed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Present as itself, or as the base of a histogram or summary (`x` of `x_bucket`/`x_count`),
/// or a histogram's part whose base is there.
fn present(name: &str, have: &BTreeSet<String>) -> bool {
    if have.contains(name) {
        return true;
    }
    if ["_bucket", "_count", "_sum"]
        .iter()
        .any(|s| have.contains(&format!("{name}{s}")))
    {
        return true;
    }
    ["_bucket", "_count", "_sum"].iter().any(|s| {
        name.strip_suffix(s)
            .is_some_and(|base| have.contains(&format!("{base}_bucket")))
    })
}

fn named_metrics() -> BTreeSet<String> {
    let dash: serde_json::Value =
        serde_json::from_str(&read("grafana/vigil-dashboard.json")).expect("dashboard JSON");
    let mut exprs = Vec::new();
    dashboard_exprs(&dash, &mut exprs);
    exprs.extend(rule_exprs(&read("prometheus/vigil-rules.yml")));
    let mut names = BTreeSet::new();
    for e in &exprs {
        metric_names(e, &mut names);
    }
    names
}

#[test]
fn the_expression_scanner_finds_names_and_skips_label_values() {
    let mut n = BTreeSet::new();
    metric_names(
        r#"sum by (x) (rate(vigil_a_total{path=~"live/vigil_not_a_name"}[5m])) / vigil_b:c + up"#,
        &mut n,
    );
    assert_eq!(
        n.into_iter().collect::<Vec<_>>(),
        ["vigil_a_total", "vigil_b:c"]
    );
    let yaml = "  - alert: A\n    expr: vigil_x > 1\n    for: 1m\n  - alert: B\n    expr: >-\n      vigil_y\n      + vigil_z\n    for: 2m\n";
    assert_eq!(rule_exprs(yaml), ["vigil_x > 1", "vigil_y + vigil_z"]);
    let have: BTreeSet<String> = ["h_bucket", "h_sum", "h_count", "g"]
        .map(String::from)
        .into();
    assert!(present("h", &have) && present("h_bucket", &have) && present("g", &have));
    assert!(!present("g_total", &have));
}

/// A node recording the demo camera exposes every `vigil_*` series the dashboard and the
/// rules name, within a few seconds of its start and before any viewer, placement, move or
/// refusal happened.
#[test]
fn every_metric_the_dashboard_and_the_rules_name_is_on_a_running_node() {
    let names = named_metrics();
    for must in [
        "vigil_recording",
        "vigil_storage_free_bytes",
        "vigil_placement_decisions_total",
        "vigil_cluster_scheduler_changes_total",
        "vigil_migrations_total",
        "vigil_path_readers",
        "vigil_cache_hits_total",
        "vigil_limit_refusals_total",
    ] {
        assert!(
            names.contains(must),
            "{must} not found in deploy/: {names:?}"
        );
    }
    let root = tempfile::tempdir().expect("root");
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\n{DEMO_CAMERA}",
            root.path().display()
        ))
        .start();
    let mut missing = Vec::new();
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        poll_until(Duration::from_secs(20), "every named metric", || {
            let have = exposed(&node.try_api("/metrics")?);
            missing = names
                .iter()
                .filter(|n| !present(n, &have))
                .cloned()
                .collect();
            missing.is_empty().then_some(())
        })
    }));
    assert!(
        found.is_ok(),
        "named in deploy/ but not on the node's /metrics: {missing:?}"
    );
}

/// `name` from Debian's `prometheus` package (`promtool`, the `prometheus` server) on the
/// PATH, or None with the reason printed; under `CI=true` a missing one fails the test.
fn prometheus_tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why =
            format!("{name} not found: install Debian's prometheus package (scripts/test does)");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
    }
    found
}

fn promtool() -> Option<PathBuf> {
    prometheus_tool("promtool")
}

fn promtool_ok(bin: &PathBuf, args: &[&str]) -> String {
    let out = run_with_timeout(
        Command::new(bin)
            .args(args)
            .current_dir(workspace().join("deploy").join("prometheus")),
        Duration::from_secs(60),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {text}");
    text
}

/// The rules load, and their unit tests (`vigil-rules.test.yml`: a camera recorded nowhere,
/// a filling volume, a scheduler failover, a node down, refusals) fire exactly as stated.
#[test]
fn promtool_loads_the_rules_and_their_unit_tests_pass() {
    let Some(bin) = promtool() else {
        return;
    };
    let text = promtool_ok(&bin, &["check", "rules", "vigil-rules.yml"]);
    assert!(text.contains("SUCCESS"), "{text}");
    let text = promtool_ok(&bin, &["test", "rules", "vigil-rules.test.yml"]);
    assert!(text.contains("SUCCESS"), "{text}");
    // Every alert says how bad it is and what to do.
    let rules = read("prometheus/vigil-rules.yml");
    let alerts = rules.matches("- alert:").count();
    assert!(alerts >= 6, "{alerts} alerts");
    assert_eq!(rules.matches("severity:").count(), alerts);
    assert_eq!(rules.matches("description:").count(), alerts);
    assert_eq!(rules.matches("for:").count(), alerts);
}

/// Every query of the dashboard is PromQL Prometheus accepts: promtool checks them as the
/// expressions of recording rules, the Grafana variables replaced by a match-all regex.
#[test]
fn promtool_accepts_every_dashboard_query() {
    let Some(bin) = promtool() else {
        return;
    };
    let d: serde_json::Value =
        serde_json::from_str(&read("grafana/vigil-dashboard.json")).expect("dashboard JSON");
    let mut exprs = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            exprs.push(t["expr"].as_str().expect("an expr").to_string());
        }
    }
    assert!(exprs.len() > 20, "{} queries", exprs.len());
    let mut yaml = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = ["$node", "$camera", "$job"]
            .iter()
            .fold(e.clone(), |e, var| e.replace(var, ".+"));
        yaml.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: '{}'\n",
            e.replace('\'', "''")
        ));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("dashboard-queries.yml");
    std::fs::write(&file, yaml).expect("write");
    let out = run_with_timeout(
        Command::new(&bin).args(["check", "rules"]).arg(&file),
        Duration::from_secs(60),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{text}"
    );
}

/// The dashboard is an importable export: a Prometheus data source input every panel uses,
/// `node` and `camera` variables from label values, the cluster, node and camera rows, ids
/// unique.
#[test]
fn the_dashboard_is_an_importable_grafana_export() {
    let d: serde_json::Value =
        serde_json::from_str(&read("grafana/vigil-dashboard.json")).expect("dashboard JSON");
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "{}",
        d["schemaVersion"]
    );
    assert_eq!(d["__inputs"][0]["name"], "DS_PROMETHEUS");
    assert_eq!(d["__inputs"][0]["pluginId"], "prometheus");
    let vars = d["templating"]["list"].as_array().expect("variables");
    for name in ["node", "camera"] {
        let v = vars
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name} variable"));
        let q = v["query"]["query"].as_str().unwrap_or_default();
        assert!(q.starts_with("label_values("), "${name}: {q}");
    }
    let panels = d["panels"].as_array().expect("panels");
    let rows: Vec<&str> = panels
        .iter()
        .filter(|p| p["type"] == "row")
        .filter_map(|p| p["title"].as_str())
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows[0].starts_with("Cluster")
            && rows[1].starts_with("Node")
            && rows[2].starts_with("Camera")
    );
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "duplicate id {}",
            p["id"]
        );
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{}", p["title"]);
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            assert!(
                t["expr"].as_str().is_some_and(|e| e.contains("vigil_")),
                "{}",
                p["title"]
            );
        }
    }
    let titles: String = panels
        .iter()
        .filter_map(|p| p["title"].as_str())
        .collect::<Vec<_>>()
        .join("|");
    for what in [
        "Viewers",
        "bitrate",
        "Recording state",
        "drops",
        "hit ratio",
        "read latency",
        "Placement",
        "Migrations",
        "Refusals",
    ] {
        assert!(titles.contains(what), "no panel for {what}: {titles}");
    }
}

/// The value of the first sample of an instant query's answer, by job.
fn up_by_job(answer: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    answer["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let job = r["metric"]["job"].as_str()?.to_string();
            let v = r["value"][1].as_str()?.to_string();
            Some((job, v))
        })
        .collect()
}

/// The shipped scrape config, run by a real Prometheus against a running node: with the
/// `metrics` token `vigil ctl token add --scope metrics` made, the scrape succeeds and the
/// node's series are stored; the same job without the token scrapes nothing (401), and the
/// token reads nothing but `/metrics`.
#[test]
fn prometheus_scrapes_a_node_with_the_shipped_config_and_a_metrics_token() {
    let Some(bin) = prometheus_tool("prometheus") else {
        return;
    };
    let root = tempfile::tempdir().expect("root");
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\n[registry]\nenabled = true\n\
             secret_key = \"5f2b8c0e9d4a7163b2c5e8f1a4d7b0c3e6f9a2d5c8b1e4f7a0d3c6b9e2f5a8d1\"\n\
             {DEMO_CAMERA}",
            root.path().display()
        ))
        .start();
    let secret = vigil_tests::ctl(&node, &["token", "add", "prometheus", "--scope", "metrics"]);
    let secret = secret.trim();
    let work = tempfile::tempdir().expect("prometheus dir");
    let token_file = work.path().join("vigil-metrics.token");
    std::fs::write(&token_file, format!("{secret}\n")).expect("token file");
    let shipped = read("prometheus/prometheus.yml");
    assert!(shipped.contains("credentials_file: /etc/prometheus/vigil-metrics.token"));
    let mut config = shipped
        .replace(
            "/etc/prometheus/vigil-metrics.token",
            &token_file.display().to_string(),
        )
        .replace(
            "/etc/prometheus/vigil-rules.yml",
            &deploy("prometheus/vigil-rules.yml").display().to_string(),
        )
        .replace(
            r#"["node-1:8080", "node-2:8080", "node-3:8080"]"#,
            &format!(r#"["{}"]"#, node.api),
        )
        .replace("scrape_interval: 15s", "scrape_interval: 1s");
    // The control: the same job without credentials.
    config.push_str(&format!(
        "  - job_name: vigil-no-token\n    static_configs:\n      - targets: [\"{}\"]\n",
        node.api
    ));
    let config_file = work.path().join("prometheus.yml");
    std::fs::write(&config_file, &config).expect("config");
    let port = vigil_tests::free_port("127.0.0.1");
    let log = std::fs::File::create(work.path().join("prometheus.log")).expect("log");
    let _server = vigil_tests::Background(
        Command::new(bin)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                work.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn prometheus"),
    );
    let query = |q: &str| -> Option<serde_json::Value> {
        let url = format!("http://127.0.0.1:{port}/api/v1/query");
        let mut resp = ureq::get(&url).query("query", q).call().ok()?;
        serde_json::from_str(&resp.body_mut().read_to_string().ok()?).ok()
    };
    let up = poll_until(Duration::from_secs(60), "both jobs scraped", || {
        let by_job = up_by_job(&query("up")?);
        (by_job.len() == 2).then_some(by_job)
    });
    assert_eq!(up["vigil"], "1", "{up:?}");
    assert_eq!(up["vigil-no-token"], "0", "{up:?}");
    let stored = poll_until(Duration::from_secs(30), "the node's series stored", || {
        let a = query(r#"count({job="vigil",__name__=~"vigil_.+"})"#)?;
        let n: f64 = a["data"]["result"][0]["value"][1].as_str()?.parse().ok()?;
        (n > 50.0).then_some(n)
    });
    eprintln!("FIGURE prometheus stored {stored} vigil series from one scrape job");
    // The scraper's token opens nothing else.
    for path in [
        "/api/cameras/demo",
        "/hls/live/demo/index.m3u8",
        "/api/users",
    ] {
        let (status, _) =
            vigil_tests::api_send_as(&node, "GET", path, None, &[], &format!("Bearer {secret}"));
        assert_eq!(status, 403, "{path}");
    }
    let log = std::fs::read_to_string(work.path().join("prometheus.log")).unwrap_or_default();
    assert!(!log.contains(secret), "the token in Prometheus's log");
}
