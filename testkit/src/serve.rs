//! The one harness for `vigil serve` processes, shared by the end-to-end tests and the lab:
//! a node's config written from one template, the process started with its log beside the
//! config, waits that notice at once when the node has exited (a bad configuration), and
//! the process killed on drop so a failed test or lab run leaves nothing behind.
//!
//! What differs between the two callers stays with them: the tests panic on a failure and
//! keep each node in its own temp dir; the lab returns errors and keeps a run's nodes under
//! one site directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Why a node process could not be started or did not become what was awaited.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{binary} not found: {hint}")]
    MissingBinary { binary: PathBuf, hint: String },
    #[error("node {node} exited ({status}) while waiting for {what}; its log:\n{log}")]
    Exited {
        node: String,
        status: ExitStatus,
        what: String,
        log: String,
    },
    #[error("node {node}: no {what} within {timeout:?}; its log:\n{log}")]
    Timeout {
        node: String,
        what: String,
        timeout: Duration,
        log: String,
    },
    #[error("{0} is not an ip:port")]
    Address(String),
    #[error("GET {url}: {reason}")]
    Api { url: String, reason: String },
    #[error("cluster certificates: {0}")]
    Certs(String),
}

impl HarnessError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
        let what = what.into();
        move |source| HarnessError::Io { what, source }
    }
}

/// The `[node]`, `[rtsp]` and `[http]` tables every node starts from; `tables` follows them
/// (`[limits]`, `[cluster]`, `[storage]`, cameras…).
#[derive(Debug, Clone, Default)]
pub struct NodeConfig {
    pub id: String,
    pub ip: String,
    pub rtsp_port: u16,
    pub api_port: u16,
    /// `[rtsp] udp_port_min..=udp_port_max`.
    pub udp: (u16, u16),
    /// `[http] token`: the admin token write routes need.
    pub token: String,
    /// Extra keys of the `[rtsp]` table.
    pub rtsp: String,
    /// Extra keys of the `[http]` table.
    pub http: String,
    /// Tables after `[http]`.
    pub tables: String,
}

impl NodeConfig {
    pub fn rtsp_addr(&self) -> String {
        format!("{}:{}", self.ip, self.rtsp_port)
    }

    /// The admin API's base URL (`http://ip:port`).
    pub fn api_url(&self) -> String {
        format!("http://{}:{}", self.ip, self.api_port)
    }

    /// The config file's text. `id` is written as a TOML basic string, so no `"` or `\`.
    pub fn render(&self) -> String {
        let NodeConfig {
            id,
            ip,
            rtsp_port,
            api_port,
            udp: (umin, umax),
            token,
            rtsp,
            http,
            tables,
        } = self;
        format!(
            "[node]\nid = \"{id}\"\n\n[rtsp]\nlisten = \"{ip}:{rtsp_port}\"\nudp_port_min = {umin}\nudp_port_max = {umax}\n{rtsp}\n[http]\nlisten = \"{ip}:{api_port}\"\ntoken = \"{token}\"\n{http}\n{tables}"
        )
    }
}

/// A running `vigil serve --config DIR/vigil.toml`, logging to DIR/vigil.log; killed on drop.
pub struct ServeProcess {
    child: Option<Child>,
    name: String,
    log: PathBuf,
}

impl ServeProcess {
    /// Writes `config` to `dir/vigil.toml` and starts `bin serve` on it with `VIGIL_LOG` set
    /// to `log_filter` and `env` added; `name` names the node in errors.
    pub fn spawn(
        bin: &Path,
        dir: &Path,
        name: &str,
        config: &str,
        log_filter: &str,
        env: &[(String, String)],
    ) -> Result<ServeProcess, HarnessError> {
        Self::spawn_in(None, bin, dir, name, config, log_filter, env)
    }

    /// [`ServeProcess::spawn`] inside network namespace `netns` (a host of a
    /// `hosts::Bed`), when given.
    pub fn spawn_in(
        netns: Option<&str>,
        bin: &Path,
        dir: &Path,
        name: &str,
        config: &str,
        log_filter: &str,
        env: &[(String, String)],
    ) -> Result<ServeProcess, HarnessError> {
        if !bin.is_file() {
            return Err(HarnessError::MissingBinary {
                binary: bin.to_path_buf(),
                hint: "build it with `cargo build --bin vigil` or name one in VIGIL_BIN".into(),
            });
        }
        std::fs::create_dir_all(dir)
            .map_err(HarnessError::io(format!("creating {}", dir.display())))?;
        let path = dir.join("vigil.toml");
        std::fs::write(&path, config)
            .map_err(HarnessError::io(format!("writing {}", path.display())))?;
        let log_path = dir.join("vigil.log");
        let log = std::fs::File::create(&log_path)
            .map_err(HarnessError::io(format!("creating {}", log_path.display())))?;
        let log2 = log
            .try_clone()
            .map_err(HarnessError::io("duplicating the log file"))?;
        let mut command = match netns {
            // `ip netns exec` execs the node, so the child's pid is the node's.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = command
            .args(["serve", "--config"])
            .arg(&path)
            .env("VIGIL_LOG", log_filter)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log2)
            .stderr(log)
            .current_dir(dir)
            .spawn()
            .map_err(HarnessError::io(format!(
                "starting {} serve",
                bin.display()
            )))?;
        Ok(ServeProcess {
            child: Some(child),
            name: name.into(),
            log: log_path,
        })
    }

    /// The node's log so far (empty if unreadable).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The exit status, if the process has exited (or was killed).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Polls `f` every `every` until it answers, for at most `timeout`; fails at once when
    /// the process has exited.
    pub fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        every: Duration,
        mut f: impl FnMut() -> Option<T>,
    ) -> Result<T, HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f() {
                return Ok(v);
            }
            if let Some(status) = self.exited() {
                return Err(HarnessError::Exited {
                    node: self.name.clone(),
                    status,
                    what: what.into(),
                    log: self.log(),
                });
            }
            if Instant::now() > deadline {
                return Err(HarnessError::Timeout {
                    node: self.name.clone(),
                    what: what.into(),
                    timeout,
                    log: self.log(),
                });
            }
            std::thread::sleep(every);
        }
    }

    /// The child, for a caller that ends it another way (SIGTERM and its exit status).
    pub fn take_child(&mut self) -> Option<Child> {
        self.child.take()
    }

    /// SIGKILL, like a crash, and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `GET base+path` with a 5 s bound (`base`: `http://ip:port`): the body of a 2xx answer.
pub fn api_get(base: &str, path: &str) -> Result<String, HarnessError> {
    api_get_as(base, path, None)
}

/// [`api_get`] with the admin token, when given: a node answers reads from beyond loopback
/// only with it.
pub fn api_get_as(base: &str, path: &str, token: Option<&str>) -> Result<String, HarnessError> {
    let url = format!("{}{path}", base.trim_end_matches('/'));
    let fail = |reason: String| HarnessError::Api {
        url: url.clone(),
        reason,
    };
    let mut req = ureq::get(&url);
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = req
        .config()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .call()
        .map_err(|e| fail(e.to_string()))?;
    resp.body_mut()
        .read_to_string()
        .map_err(|e| fail(e.to_string()))
}

/// `GET base+path` parsed as JSON; `None` when the node does not answer or the answer is
/// not JSON.
pub fn api_json(base: &str, path: &str) -> Option<serde_json::Value> {
    api_json_as(base, path, None)
}

/// [`api_json`] with the admin token, when given.
pub fn api_json_as(base: &str, path: &str, token: Option<&str>) -> Option<serde_json::Value> {
    serde_json::from_str(&api_get_as(base, path, token).ok()?).ok()
}

/// The `vigil` binary a harness outside cargo's test runner starts: `VIGIL_BIN` if set, else
/// `vigil` in the directory of the running executable (cargo puts a profile's binaries in
/// one directory: target/debug/vigil-lab beside target/debug/vigil).
pub fn sibling_vigil() -> Result<PathBuf, HarnessError> {
    if let Some(bin) = std::env::var_os("VIGIL_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let me = std::env::current_exe().map_err(HarnessError::io("locating the running binary"))?;
    let bin = me.with_file_name("vigil");
    if !bin.is_file() {
        return Err(HarnessError::MissingBinary {
            binary: bin,
            hint: "build it with `cargo build --bin vigil` (with --release for a release run) \
                   or name one in VIGIL_BIN"
                .into(),
        });
    }
    Ok(bin)
}

/// A node's RTSP address from its config (what its `rtsp://` URLs name).
pub fn rtsp_socket(config: &NodeConfig) -> Result<SocketAddr, HarnessError> {
    let addr = config.rtsp_addr();
    addr.parse().map_err(|_| HarnessError::Address(addr))
}
