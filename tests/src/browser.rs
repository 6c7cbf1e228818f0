//! A real headless Chromium for the console's tests, driven over WebDriver: Debian's
//! `chromium` and `chromium-driver` (chromedriver), with `fantoccini` as the client. The
//! tests are plain `#[test]` functions, so this wraps the async client in its own runtime
//! and bounds every WebDriver call by a deadline.

use crate::{free_port, poll_until, spawn_background, Background};
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// No single WebDriver call may take longer (a hung browser fails the test, never hangs it).
const STEP: Duration = Duration::from_secs(30);

/// A browser session; chromedriver and Chromium end on drop.
pub struct Browser {
    rt: tokio::runtime::Runtime,
    client: Option<Client>,
    _driver: Background,
    _profile: tempfile::TempDir,
}

/// The first of `names` on PATH (or an absolute path that exists).
fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        let abs = PathBuf::from(n);
        if abs.is_absolute() {
            return abs.is_file().then_some(abs);
        }
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

/// Chromium's browser log endpoint of chromedriver (`goog:loggingPrefs`); not in the W3C
/// protocol, so fantoccini has no method for it.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or("")))
    }
    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

impl Browser {
    /// A fresh headless Chromium, or None (said on stderr) when `chromium` or `chromedriver`
    /// is not installed here (CI installs both: `.ci/run`).
    pub fn start() -> Option<Browser> {
        // Debian's /usr/bin/chromium is a shell wrapper; chromedriver wants the binary.
        let chromium = find(&["/usr/lib/chromium/chromium", "chromium", "chromium-browser"]);
        let driver = find(&["chromedriver", "/usr/lib/chromium/chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            // CI installs them (scripts/test): a missing browser there is a broken set-up.
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but chromium/chromedriver are missing (scripts/test installs them)"
            );
            eprintln!(
                "SKIPPED: chromium and chromedriver are not installed \
                 (apt-get install chromium chromium-driver); the console's browser test did not run"
            );
            return None;
        };
        let port = free_port("127.0.0.1");
        let driver = spawn_background(
            Command::new(driver)
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1"),
        );
        let base = format!("http://127.0.0.1:{port}");
        poll_until(Duration::from_secs(20), "chromedriver to answer", || {
            ureq::get(&format!("{base}/status")).call().ok().map(|_| ())
        });
        let profile = tempfile::tempdir().expect("profile dir");
        // This machine has no network: without these Chromium stalls on lookups and updates.
        let args = [
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1280,1000".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
            "goog:loggingPrefs": { "browser": "ALL" },
        });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!("a JSON object")
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = rt
            .block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(60),
                    ClientBuilder::new(connector)
                        .capabilities(caps)
                        .connect(&base),
                )
                .await
            })
            .expect("Chromium to start within 60 s")
            .expect("a WebDriver session");
        Some(Browser {
            rt,
            client: Some(client),
            _driver: driver,
            _profile: profile,
        })
    }

    fn run<T, E: std::fmt::Debug>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T, E>>,
    ) -> T {
        self.rt
            .block_on(async { tokio::time::timeout(STEP, f).await })
            .unwrap_or_else(|_| panic!("{what}: no answer from the browser within {STEP:?}"))
            .unwrap_or_else(|e| panic!("{what}: {e:?}"))
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("session open")
    }

    pub fn goto(&self, url: &str) {
        self.run(&format!("open {url}"), self.client().goto(url));
    }

    /// Runs `script` (a function body: `return …`) with `args` as `arguments`.
    pub fn eval(&self, script: &str, args: Vec<Value>) -> Value {
        self.run(script, self.client().execute(script, args))
    }

    /// Polls `script` until it returns something other than null/false, or panics after
    /// `timeout` naming `what` and the last value.
    pub fn wait(&self, what: &str, timeout: Duration, script: &str, args: Vec<Value>) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(script, args.clone());
            if !(v.is_null() || v == Value::Bool(false)) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what} (browser log: {:?})",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A real (WebDriver) click on the element `css` selects. The page replaces a table row
    /// when its content changes, on its next refresh after the change: an element not there
    /// yet (an action the row offers only after the change the test just made through the
    /// node) or replaced between the find and the click is looked for again every 100 ms,
    /// bounded by a deadline.
    pub fn click(&self, css: &str) {
        let c = self.client();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.run(&format!("click {css}"), async move {
                Ok::<_, std::convert::Infallible>(
                    async { c.find(Locator::Css(css)).await?.click().await }.await,
                )
            });
            match r {
                Ok(()) => return,
                Err(e)
                    if (e.is_stale_element_reference() || e.is_no_such_element())
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("click {css}: {e:?}"),
            }
        }
    }

    /// Types `text` into the element `css` selects.
    pub fn type_into(&self, css: &str, text: &str) {
        let c = self.client();
        self.run(&format!("type into {css}"), async move {
            c.find(Locator::Css(css)).await?.send_keys(text).await
        });
    }

    /// The browser's log since the last call: `(level, message)`; console messages, uncaught
    /// errors, failed loads and CSP violations all land here.
    pub fn logs(&self) -> Vec<(String, String)> {
        let v = self.run("read the browser log", self.client().issue_cmd(BrowserLog));
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["level"].as_str().unwrap_or("").to_string(),
                            e["message"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Panics if the browser logged an error (SEVERE) since the last read.
    /// Opens the console's `page` and signs it in with `token`. A node with a token answers
    /// nothing without it, on loopback too (issue 44): the page first says so, then reads.
    /// The reads refused before are taken out of the log (and checked to be only those).
    pub fn sign_in(&self, page: &str, token: &str) {
        self.goto(page);
        self.wait(
            "the console to ask for credentials",
            Duration::from_secs(30),
            "const t = document.getElementById('banner').textContent; \
             return t.includes('401') && t.includes('sign in') ? t : null;",
            vec![],
        );
        self.type_into("#token-input", token);
        self.click("#token-set");
        self.wait(
            "the console to read with the token",
            Duration::from_secs(30),
            "return document.getElementById('banner').hidden;",
            vec![],
        );
        let refused = self.logs();
        assert!(
            refused
                .iter()
                .filter(|(level, _)| level == "SEVERE")
                .all(|(_, m)| m.contains("status of 401")),
            "{refused:#?}"
        );
    }

    pub fn assert_no_errors(&self, when: &str) {
        let errors: Vec<_> = self
            .logs()
            .into_iter()
            .filter(|(level, _)| level == "SEVERE")
            .collect();
        assert!(errors.is_empty(), "browser errors {when}: {errors:#?}");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(10), c.close()).await });
        }
    }
}
