//! `vigil serve`: start every part of a node and stop it cleanly on SIGTERM/Ctrl-C.

use crate::cluster::Cluster;
use crate::library::Library;
use crate::net::tls::{Acceptor, CertStore};
use crate::node::Node;
use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::info;
use vigil_conf::Config;
use vigil_storage::{Store, StoreConfig};

pub fn run(config_path: Option<PathBuf>) -> anyhow::Result<()> {
    init_tracing();
    let config = match &config_path {
        Some(p) => Config::load(p)?,
        None => {
            info!("no --config: serving the bundled demo camera at live/demo");
            Config::embedded_default()
        }
    };
    raise_fd_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let ingest = ingest_runtime(&config.rtsp)?;
    let handle = ingest.as_ref().map(|r| r.handle().clone());
    let result = runtime.block_on(serve(config, config_path, handle));
    // Its tasks ended with the node's (`serve` waits for them); what is left is dropped.
    if let Some(r) = ingest {
        r.shutdown_timeout(Duration::from_secs(1));
    }
    result
}

/// The runtime of cameras' media (`[rtsp] ingest_runtime`), its threads named apart.
fn ingest_runtime(
    rtsp: &vigil_conf::RtspConfig,
) -> anyhow::Result<Option<tokio::runtime::Runtime>> {
    if !rtsp.ingest_runtime {
        return Ok(None);
    }
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all().thread_name("vigil-ingest");
    if rtsp.ingest_threads > 0 {
        b.worker_threads(rtsp.ingest_threads);
    }
    Ok(Some(b.build().context("starting the ingest runtime")?))
}

/// Every viewer costs a socket (three with UDP); the usual soft limit of 1024 descriptors
/// would cap a node at a few hundred viewers, so lift it to the hard limit.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Logs go to the journal, with each event's fields as journal fields (`journalctl -u vigil
/// -o verbose` shows VIGIL_NODE, VIGIL_CAMERA…), when systemd connected stderr to it; to
/// stderr as text otherwise (a terminal, a container, a test's log file).
fn init_tracing() {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("VIGIL_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let journal = stderr_is_journal()
        .then(|| tracing_journald::layer().ok())
        .flatten()
        .map(|l| {
            l.with_syslog_identifier("vigil".into())
                .with_field_prefix(Some("VIGIL".into()))
        });
    let text = journal.is_none().then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(journal)
        .with(text)
        .try_init();
}

/// Whether stderr is the journal stream systemd made for this service: `JOURNAL_STREAM`
/// names its device and inode (systemd.exec(5)). The variable alone is not enough: a
/// process started from a service's shell inherits it with another stderr.
fn stderr_is_journal() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// Run a node until SIGTERM/SIGINT. `config_path`: re-read on SIGHUP (users and rights).
pub async fn serve(
    config: Config,
    config_path: Option<PathBuf>,
    ingest: Option<tokio::runtime::Handle>,
) -> anyhow::Result<()> {
    let token = config.http.token().context("the admin API token")?;
    warn_if_open(&config, token.is_some());
    let rtsp = tokio::net::TcpListener::bind(config.rtsp.listen)
        .await
        .with_context(|| format!("cannot listen for RTSP on {}", config.rtsp.listen))?;
    let http = tokio::net::TcpListener::bind(config.http.listen)
        .await
        .with_context(|| format!("cannot listen for the admin API on {}", config.http.listen))?;
    let tls = TlsListeners::bind(&config).await?;
    let library = open_library(&config)?;
    // With [registry] on, the cameras and users are the registry's (seeded from this file
    // on the first start).
    let mut config = config;
    let registry = crate::registry::Shell::open(&mut config)?;
    // The trail's writer outlives the node's shutdown by its own token, so the sessions
    // ended by the shutdown are written too.
    let audit_stop = tokio_util::sync::CancellationToken::new();
    let audit = crate::audit::open(&config, audit_stop.clone());
    let node = Node::new(config, library, audit);
    if let Some(h) = ingest {
        node.set_ingest_runtime(h);
    }
    let (rtsp_addr, api_addr) = (rtsp.local_addr()?, http.local_addr()?);
    info!(
        node = %node.config.node.id,
        rtsp = %rtsp_addr,
        api = %api_addr,
        rtsps = ?tls.rtsp.as_ref().and_then(|(l, _)| l.local_addr().ok()),
        https = ?tls.http.as_ref().and_then(|(l, _)| l.local_addr().ok()),
        "vigil node up"
    );
    // Before the RTSP listener starts: a session's moves and take-backs reach migration
    // through the node's registered handler.
    crate::migrate::install_commands(&node);
    // The cluster shell is created before anything that reads it starts, and each of those
    // gets it from here: the node, below the cluster, does not hold it.
    let cluster = if node.config.cluster.enabled {
        let cluster = Cluster::start(&node).await?;
        crate::migrate::Service::install(&node, &cluster);
        crate::ingest::handover::Host::install(&node, &cluster);
        Some(cluster)
    } else {
        None
    };
    // The metrics recorder before anything that counts: a count made before it (a webhook's
    // retry of the first event, at start) would be lost.
    let prometheus = crate::admin::metrics::install();
    // Subscribed before the sources, recorders and the registry start: their first changes
    // are heard.
    crate::webhook::start(&node, cluster.as_ref())?;
    if let Some(registry) = &registry {
        registry.start(&node, cluster.as_ref());
    }
    start_sources(&node, cluster.as_ref());
    node.tasks
        .spawn(crate::ingest::sleep::run(node.clone(), cluster.clone()));
    start_recorders(&node, cluster.as_ref());
    if let Some(certs) = &tls.certs {
        let every = Duration::from_millis(node.config.tls.reload_check_ms);
        tokio::spawn(certs.clone().watch(every, node.shutdown.clone()));
    }
    tokio::spawn(reload_on_sighup(
        node.clone(),
        cluster.clone(),
        config_path,
        tls.certs.clone(),
    ));
    let webrtc = crate::webrtc::Service::start(node.clone())
        .await
        .with_context(|| format!("binding [webrtc] listen = {}", node.config.webrtc.listen))?;
    let api = tokio::spawn(crate::admin::api::serve(
        node.clone(),
        cluster.clone(),
        http,
        tls.http,
        prometheus,
        webrtc,
    ));
    let rtsps = tls.rtsp.map(|(listener, acceptor)| {
        tokio::spawn(crate::rtsp::conn::serve(
            node.clone(),
            cluster.clone(),
            listener,
            Some(acceptor),
        ))
    });
    let server = tokio::spawn(crate::rtsp::conn::serve(node.clone(), cluster, rtsp, None));
    // Every listener is bound (the cluster's by Cluster::start) and their loops spawned: a
    // connection made from now on is accepted.
    crate::systemd::ready(&format!(
        "serving RTSP on {rtsp_addr}, the admin API on {api_addr}"
    ));
    let rtsp_loop = server.abort_handle();
    crate::systemd::spawn_watchdog(node.shutdown.clone(), move || !rtsp_loop.is_finished());
    wait_for_signal().await;
    crate::systemd::stopping();
    info!("shutting down: closing sessions");
    node.shutdown.cancel();
    // Connections and media tasks send RTCP BYE and close; give them a moment, not forever.
    let _ = server.await;
    if let Some(rtsps) = rtsps {
        let _ = rtsps.await;
    }
    node.tasks.close();
    if tokio::time::timeout(Duration::from_secs(3), node.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("some sessions did not close within 3 s");
    }
    // The recorders have queued their last segment's close; let the writer threads write it.
    let recordings = node.recordings.clone();
    let writers = tokio::task::spawn_blocking(move || recordings.shutdown());
    if tokio::time::timeout(Duration::from_secs(3), writers)
        .await
        .is_err()
    {
        tracing::warn!("the recording writers did not finish within 3 s");
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), api).await;
    // The sessions' ends are queued: the trail writes them and a last checkpoint.
    audit_stop.cancel();
    if let Some(audit) = &node.audit {
        if !audit.closed(Duration::from_secs(3)).await {
            tracing::warn!("the audit trail did not finish writing within 3 s");
        }
    }
    info!("stopped");
    Ok(())
}

/// The recording store on the shared root, and the playback cache in front of it.
fn open_library(config: &Config) -> anyhow::Result<Option<Library>> {
    let s = &config.storage;
    if !s.enabled {
        return Ok(None);
    }
    let hours = |h: f64| (h > 0.0).then(|| Duration::from_secs_f64(h * 3600.0));
    let store_config = StoreConfig {
        segment_duration: Duration::from_secs_f64(s.segment_secs),
        retention_max_age: hours(s.retention_max_age_hours),
        retention_max_bytes: (s.retention_max_bytes > 0).then_some(s.retention_max_bytes),
        lease_ttl: Duration::from_secs_f64(s.lease_ttl_secs),
        commit_interval: Duration::from_millis(s.commit_interval_ms),
        commit_sync: match s.commit_sync {
            vigil_conf::CommitSync::Syncfs => vigil_storage::SyncMode::Syncfs,
            vigil_conf::CommitSync::Files => vigil_storage::SyncMode::Files,
        },
        writeback_bytes: s.writeback_kb.saturating_mul(1024),
        direct_io: s.direct_io,
        ..StoreConfig::default()
    };
    let store = Store::open(&s.root, &config.node.id, store_config)
        .with_context(|| format!("cannot open the recording root {}", s.root.display()))?;
    info!(root = %s.root.display(), "recording to the storage root");
    if s.emulate.read_latency_ms > 0 {
        tracing::warn!(
            ms = s.emulate.read_latency_ms,
            "storage emulation: every segment read is delayed (experiments only)"
        );
    }
    if s.emulate.read_mbps > 0.0 {
        tracing::warn!(
            mbps = s.emulate.read_mbps,
            "storage emulation: segment reads share a limited read bandwidth (experiments only)"
        );
    }
    let budget =
        usize::try_from(config.cache.budget_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    Ok(Some(
        Library::new(
            store,
            budget,
            config.cache.read_ahead_segments,
            Duration::from_millis(s.emulate.read_latency_ms),
        )
        .with_read_bandwidth(s.emulate.read_mbps)
        .with_start_budget(config.cache.start_bytes()),
    ))
}

/// A recorder for every path that may carry a camera (push paths created later start
/// theirs when they are created), and the retention sweep.
fn start_recorders(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>) {
    let Some(library) = &node.library else { return };
    for path in node.paths() {
        crate::record::start(node, cluster, &path);
    }
    node.tasks.spawn(crate::record::retention(
        node.clone(),
        library.store.clone(),
    ));
}

/// Always-on sources start with the node; on-demand pulls start on first DESCRIBE.
fn start_sources(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>) {
    for path in node.paths() {
        crate::ingest::start(node, cluster, &path);
    }
}

/// The TLS listeners (`[rtsp] tls_listen`, `[http] tls_listen`) bound, with the acceptor
/// each uses; both share one certificate store, reloaded on SIGHUP and on file change.
struct TlsListeners {
    certs: Option<Arc<CertStore>>,
    rtsp: Option<(TcpListener, Acceptor)>,
    http: Option<(TcpListener, Acceptor)>,
}

impl TlsListeners {
    async fn bind(config: &Config) -> anyhow::Result<Self> {
        let mut out = TlsListeners {
            certs: None,
            rtsp: None,
            http: None,
        };
        let Some((cert, key)) = config.tls.files() else {
            return Ok(out);
        };
        if config.rtsp.tls_listen.is_none() && config.http.tls_listen.is_none() {
            return Ok(out);
        }
        let certs = Arc::new(CertStore::load(cert, key).context("the [tls] certificate")?);
        if let Some(addr) = config.rtsp.tls_listen {
            let l = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for RTSPS on {addr}"))?;
            out.rtsp = Some((l, Acceptor::new(certs.clone(), &config.tls, &[])));
        }
        if let Some(addr) = config.http.tls_listen {
            let l = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen for HTTPS on {addr}"))?;
            out.http = Some((l, Acceptor::new(certs.clone(), &config.tls, &[b"http/1.1"])));
        }
        out.certs = Some(certs);
        Ok(out)
    }
}

/// Anything listening beyond loopback without authentication is said loudly at start.
fn warn_if_open(config: &Config, api_token: bool) {
    for w in open_warnings(config, api_token) {
        tracing::warn!("{w}");
    }
}

/// The warnings `warn_if_open` logs (pure, for the tests).
pub fn open_warnings(config: &Config, api_token: bool) -> Vec<String> {
    let mut out = Vec::new();
    let beyond = |listen: SocketAddr, tls: Option<SocketAddr>| {
        std::iter::once(listen)
            .chain(tls)
            .find(|a| !a.ip().is_loopback())
    };
    if let (None, Some(at)) = (
        &config.auth,
        beyond(config.rtsp.listen, config.rtsp.tls_listen),
    ) {
        out.push(format!(
            "RTSP IS OPEN TO THE NETWORK WITHOUT [auth]: anyone who can reach {at} may watch and \
             play back every camera and publish to any live/<id>. Add users with \
             `vigil user add`, or listen on 127.0.0.1."
        ));
    }
    if let (false, Some(at)) = (
        api_token,
        beyond(config.http.listen, config.http.tls_listen),
    ) {
        out.push(format!(
            "the admin API listens on {at} beyond loopback without [http] token: it serves only \
             /api/health until a token is configured"
        ));
    }
    out
}

/// SIGHUP: re-read the config file and apply its `[auth]` (users, rights, back-off), API
/// tokens and `[cluster] retired_certs`, and the
/// TLS certificate files, without touching running sessions. Other keys need a restart. A
/// file that no longer parses is reported and the policy in force is kept.
async fn reload_on_sighup(
    node: Arc<Node>,
    cluster: Option<Arc<Cluster>>,
    config_path: Option<PathBuf>,
    certs: Option<Arc<CertStore>>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            r = hup.recv() => if r.is_none() { return },
        }
        crate::systemd::reloading();
        if let Some(certs) = &certs {
            certs.reload_logged("SIGHUP");
        }
        match &config_path {
            None => info!("SIGHUP: no --config file to reload"),
            Some(path) => match Config::load(path) {
                Ok(c) => {
                    let auth = crate::registry::auth_with_users(&node, c.auth);
                    node.auth.reload(auth.as_ref());
                    node.auth.set_config_tokens(&c.http.api_tokens);
                    if let Some(cluster) = &cluster {
                        cluster.set_retired(&c.cluster.retired_certs);
                    }
                }
                Err(e) => tracing::error!("SIGHUP: {e}; keeping the users and rights in force"),
            },
        }
        crate::systemd::ready("serving (config reloaded)");
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_listeners_are_warned_about() {
        let demo = Config::embedded_default();
        assert!(
            open_warnings(&demo, false).is_empty(),
            "the demo is loopback only"
        );
        let open = Config::from_toml(
            "[rtsp]\nlisten = \"0.0.0.0:8554\"\nallow_plaintext = true\n\
             [http]\nlisten = \"0.0.0.0:8080\"\nallow_plaintext = true",
        )
        .unwrap();
        let w = open_warnings(&open, false);
        assert!(
            w.len() == 2 && w[0].contains("WITHOUT [auth]") && w[1].contains("token"),
            "{w:?}"
        );
        let closed = Config::from_toml(
            "[rtsp]\nlisten = \"0.0.0.0:8554\"\nallow_plaintext = true\n[auth]\n",
        )
        .unwrap();
        assert!(open_warnings(&closed, true).is_empty());
        // A TLS listener beyond loopback is open to the network too.
        let tls = Config::from_toml(
            "[rtsp]\ntls_listen = \"0.0.0.0:322\"\n[http]\ntls_listen = \"0.0.0.0:8443\"\n\
             [tls]\ncert = \"c.pem\"\nkey = \"k.pem\"",
        )
        .unwrap();
        let w = open_warnings(&tls, false);
        assert!(
            w.len() == 2 && w[0].contains("0.0.0.0:322") && w[1].contains("0.0.0.0:8443"),
            "{w:?}"
        );
    }
}
