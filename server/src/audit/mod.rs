//! The audit trail (issue 44 §2): every access to video and every change, per node,
//! append-only on the shared root, chained and signed (`chain`), read across the cluster
//! (`store`).
//!
//! Recording it never blocks a viewer: [`Audit::record`] puts the event on a bounded queue
//! and returns. One writer task appends what has queued as one batch with one `fdatasync`
//! (group commit), adds a signed checkpoint every `[audit] checkpoint_secs`, and removes
//! day files past `retention_days`. When the queue is full or the share refuses a write the
//! events are dropped and counted and the trail is *down* until a write succeeds again;
//! with `[audit] required = true` new sessions are refused meanwhile ([`Audit::admits`]),
//! else they go on and the gap is logged — the operator's choice, said at start.

pub mod chain;
pub mod store;

pub use chain::Event;

use chain::Chain;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// The secret every node's checkpoint key is derived from (`chain::node_key`): `[audit]
/// key`, else the cluster key, else the registry's `secret_key`; None: unsigned.
pub fn key_secret(config: &vigil_conf::Config) -> Option<Vec<u8>> {
    if !config.audit.key.is_empty() {
        return Some(config.audit.key.expose().as_bytes().to_vec());
    }
    if config.cluster.enabled && !config.cluster.key.is_empty() {
        return Some(config.cluster.key.expose().as_bytes().to_vec());
    }
    match config.registry.secret_key(None) {
        Ok(vigil_conf::SecretKeySource::Key(k)) => Some(k.to_vec()),
        _ => None,
    }
}

/// Starts the node's trail as its config says: None when it is off (`[audit] enabled =
/// false`, or no storage root because recording is off).
pub fn open(config: &vigil_conf::Config, shutdown: CancellationToken) -> Option<Arc<Audit>> {
    let a = &config.audit;
    if !a.enabled || !config.storage.enabled {
        if a.required {
            warn!("[audit] required = true but the trail is off (no storage root): nothing is refused for it");
        }
        return None;
    }
    let node = config.node.id.clone();
    let key = key_secret(config).map(|s| chain::node_key(&s, &node));
    Some(Audit::start(
        Settings {
            node,
            dir: store::audit_dir(&config.storage.root),
            key,
            queue: a.queue,
            required: a.required,
            checkpoint: Duration::from_secs(a.checkpoint_secs),
            retention_days: a.retention_days,
        },
        shutdown,
    ))
}

/// What the trail has done, for `/metrics`.
#[derive(Debug, Default)]
pub struct AuditStats {
    pub written: AtomicU64,
    /// Events lost: the queue was full or the share refused them.
    pub dropped: AtomicU64,
    pub write_errors: AtomicU64,
    /// Sessions refused because the trail was down and `required = true`.
    pub refused: AtomicU64,
}

/// The node's handle on its trail.
#[derive(Debug)]
pub struct Audit {
    tx: mpsc::Sender<Event>,
    required: bool,
    down: Arc<AtomicBool>,
    pub stats: Arc<AuditStats>,
    /// `<root>/audit`: every node's trail, for queries.
    pub dir: PathBuf,
    /// The writer task, awaited at shutdown ([`Audit::closed`]).
    writer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// How the writer runs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub node: String,
    /// `<root>/audit`.
    pub dir: PathBuf,
    /// The node's checkpoint key (`chain::node_key`); None: checkpoints unsigned.
    pub key: Option<[u8; 32]>,
    pub queue: usize,
    pub required: bool,
    pub checkpoint: Duration,
    pub retention_days: u32,
}

impl Audit {
    /// Starts the writer task; it ends, after writing what is queued and a checkpoint,
    /// when `shutdown` is cancelled.
    pub fn start(s: Settings, shutdown: CancellationToken) -> Arc<Audit> {
        let (tx, rx) = mpsc::channel(s.queue.max(1));
        let s_required = s.required;
        let down = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(AuditStats::default());
        info!(
            dir = %s.dir.display(),
            signed = s.key.is_some(),
            required = s.required,
            "audit trail: {}",
            if s.required {
                "new sessions are refused while it cannot be written"
            } else {
                "sessions go on while it cannot be written (the gap is logged)"
            }
        );
        if s.key.is_none() {
            warn!("audit trail checkpoints are not signed: set [audit] key (or a cluster key)");
        }
        let dir = s.dir.clone();
        let task = tokio::spawn(writer(s, rx, down.clone(), stats.clone(), shutdown));
        Arc::new(Audit {
            tx,
            required: s_required,
            down,
            stats,
            dir,
            writer: std::sync::Mutex::new(Some(task)),
        })
    }

    /// Whether the writer finished (its shutdown token cancelled: the queue written and a
    /// last checkpoint) within `within`.
    pub async fn closed(&self, within: Duration) -> bool {
        let task = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        match task {
            Some(t) => tokio::time::timeout(within, t).await.is_ok(),
            None => true,
        }
    }

    /// Queues `event`; never waits. A full queue drops it (counted, and the trail is down).
    pub fn record(&self, event: Event) {
        if self.tx.try_send(event).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            if !self.down.swap(true, Ordering::AcqRel) {
                error!("audit trail queue full: events are being dropped");
            }
        }
    }

    /// Whether a new session may start: always, unless the trail is down and required.
    pub fn admits(&self) -> bool {
        let ok = !(self.required && self.is_down());
        if !ok {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }
}

/// The writer's state, moved into the blocking pool for each batch and back.
struct Writer {
    s: Settings,
    dir: PathBuf,
    chain: Chain,
    /// The day file open for appending, and its day.
    file: Option<(String, std::fs::File)>,
    /// The newest day written: a late event from yesterday still goes to today's file, so
    /// the files stay in chain order.
    day: String,
}

impl Writer {
    fn open(s: Settings) -> std::io::Result<Writer> {
        let dir = s.dir.join(store::node_dir_name(&s.node));
        std::fs::create_dir_all(&dir)?;
        let files = store::day_files(&dir)?;
        let mut chain = Chain::new(&s.node);
        let mut day = String::new();
        if let Some(last) = files.last() {
            repair_tail(last)?;
            if let Some(line) = store::last_line(last)? {
                chain = Chain::resume(&s.node, &line)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            }
            day = last
                .file_stem()
                .and_then(|d| d.to_str())
                .unwrap_or_default()
                .to_string();
        }
        Ok(Writer {
            s,
            dir,
            chain,
            file: None,
            day,
        })
    }

    /// Appends `lines` for `day` (or the newest day seen) and syncs.
    fn append(&mut self, day: &str, lines: &str) -> std::io::Result<()> {
        if day > self.day.as_str() {
            self.day = day.to_string();
        }
        if self.file.as_ref().is_none_or(|(d, _)| *d != self.day) {
            let path = self.dir.join(format!("{}.jsonl", self.day));
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            self.file = Some((self.day.clone(), f));
        }
        let Some((_, f)) = self.file.as_mut() else {
            return Ok(());
        };
        f.write_all(lines.as_bytes())?;
        f.sync_data()
    }

    /// Writes `events` (and a checkpoint when `checkpoint_at` is given) as one batch. On
    /// failure the chain is left as it was before the batch, so what is written stays a
    /// chain; the batch is lost (counted by the caller).
    fn write(&mut self, events: Vec<Event>, checkpoint_at: Option<i64>) -> std::io::Result<usize> {
        let before = self.chain.clone();
        let mut text = String::new();
        let mut newest = i64::MIN;
        for e in events {
            newest = newest.max(e.at_ms);
            text.push_str(&self.chain.append(e));
            text.push('\n');
        }
        if let Some(at) = checkpoint_at {
            newest = newest.max(at);
            text.push_str(
                &self
                    .chain
                    .checkpoint(at, self.s.key.as_ref().map(|k| &k[..])),
            );
            text.push('\n');
        }
        if text.is_empty() {
            return Ok(0);
        }
        let n = text.lines().count();
        match self.append(&store::day_of(newest), &text) {
            Ok(()) => Ok(n),
            Err(e) => {
                self.chain = before;
                self.file = None;
                Err(e)
            }
        }
    }
}

/// Ends a day file cut in the middle of a line (a crash while appending) at its last
/// whole line: the partial record was never acknowledged, and the chain resumes after the
/// last whole one.
fn repair_tail(file: &std::path::Path) -> std::io::Result<()> {
    if !store::ends_mid_line(file)? {
        return Ok(());
    }
    let text = std::fs::read(file)?;
    let keep = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    warn!(file = %file.display(), cut = text.len() - keep, "audit trail: a partial record left by a crash removed");
    let f = std::fs::OpenOptions::new().write(true).open(file)?;
    f.set_len(keep as u64)?;
    f.sync_all()
}

/// The most events one batch (one fdatasync) takes.
const BATCH: usize = 1024;

/// Writes one batch (and a checkpoint at `checkpoint_at`) in the blocking pool — the share
/// may hang — opening the writer first when there is none (at start, after a failure).
async fn write_batch(
    s: &Settings,
    w: &mut Option<Writer>,
    batch: Vec<Event>,
    checkpoint_at: Option<i64>,
) -> std::io::Result<usize> {
    let mut x = match w.take() {
        Some(x) => x,
        None => {
            let s = s.clone();
            tokio::task::spawn_blocking(move || Writer::open(s))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e)))?
        }
    };
    let (x, r) = tokio::task::spawn_blocking(move || {
        let r = x.write(batch, checkpoint_at);
        (x, r)
    })
    .await
    .map_err(std::io::Error::other)?;
    *w = Some(x);
    r
}

async fn writer(
    s: Settings,
    mut rx: mpsc::Receiver<Event>,
    down: Arc<AtomicBool>,
    stats: Arc<AuditStats>,
    shutdown: CancellationToken,
) {
    let checkpoint = s.checkpoint.max(Duration::from_secs(1));
    let mut w = None;
    let mut tick = tokio::time::interval(checkpoint);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_retention = 0i64;
    let mut pending_since_checkpoint = 0usize;
    loop {
        let mut batch = Vec::new();
        let mut stop = false;
        let mut checkpoint_now = false;
        tokio::select! {
            _ = shutdown.cancelled() => {
                stop = true;
                while let Ok(e) = rx.try_recv() {
                    batch.push(e);
                }
                checkpoint_now = pending_since_checkpoint > 0 || !batch.is_empty();
            }
            n = rx.recv_many(&mut batch, BATCH) => {
                if n == 0 {
                    stop = true;
                    checkpoint_now = pending_since_checkpoint > 0;
                }
            }
            _ = tick.tick() => checkpoint_now = pending_since_checkpoint > 0,
        }
        let now = vigil_storage::now_ms();
        let n = batch.len();
        // Nothing to write (an idle tick): the share is not touched.
        if n > 0 || checkpoint_now {
            match write_batch(&s, &mut w, batch, checkpoint_now.then_some(now)).await {
                Ok(lines) => {
                    stats.written.fetch_add(n as u64, Ordering::Relaxed);
                    pending_since_checkpoint = if checkpoint_now {
                        0
                    } else {
                        pending_since_checkpoint + lines
                    };
                    if down.swap(false, Ordering::AcqRel) {
                        info!("audit trail written again");
                    }
                }
                Err(e) => {
                    stats.write_errors.fetch_add(1, Ordering::Relaxed);
                    stats.dropped.fetch_add(n as u64, Ordering::Relaxed);
                    if !down.swap(true, Ordering::AcqRel) {
                        error!("audit trail cannot be written ({e}): {n} event(s) lost");
                    }
                }
            }
        }
        if now - last_retention > 3_600_000 {
            last_retention = now;
            let (dir, keep) = (s.dir.clone(), s.retention_days);
            let removed =
                tokio::task::spawn_blocking(move || store::apply_retention(&dir, now, keep)).await;
            if let Ok(Ok(n)) = removed.as_ref() {
                if *n > 0 {
                    info!(files = n, "audit trail: day files past retention removed");
                }
            }
        }
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &std::path::Path, queue: usize) -> Settings {
        Settings {
            node: "n1".into(),
            dir: dir.join("audit"),
            key: Some(chain::node_key(b"k", "n1")),
            queue,
            required: true,
            checkpoint: Duration::from_secs(3600),
            retention_days: 3650,
        }
    }

    fn event(i: i64) -> Event {
        Event {
            at_ms: vigil_storage::now_ms() + i,
            kind: "export".into(),
            user: "investigator".into(),
            camera: Some("gate-1".into()),
            ..Event::default()
        }
    }

    /// Events written by one writer, then by a second after a restart (the chain resumed
    /// from the share), verify as one trail ending in a signed checkpoint.
    #[tokio::test]
    async fn a_restarted_writer_continues_the_chain() {
        let root = tempfile::tempdir().expect("dir");
        for run in 0..2 {
            let stop = CancellationToken::new();
            let a = Audit::start(settings(root.path(), 64), stop.clone());
            for i in 0..10 {
                a.record(event(i));
            }
            stop.cancel();
            // Every event written and the shutdown's checkpoint last (a tick may add one
            // between).
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let dir = root.path().join("audit").join("n1");
            loop {
                let lines = store::lines_of(&dir).expect("lines");
                let events = lines
                    .iter()
                    .filter(|l| !l.contains(r#""kind":"checkpoint""#))
                    .count();
                let closed = lines
                    .last()
                    .is_some_and(|l| l.contains(r#""kind":"checkpoint""#));
                if events == (run + 1) * 10 && closed {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} lines",
                    lines.len()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let lines = store::lines_of(&root.path().join("audit").join("n1")).expect("lines");
        let key = chain::node_key(b"k", "n1");
        let v = chain::verify(lines.iter().map(String::as_str), Some(&key)).expect("sound");
        assert_eq!(
            (v.records, v.signed_checkpoints, v.unsigned_tail),
            (22, 2, 0)
        );
    }

    /// A share that refuses writes: the events are counted lost, the trail is down, and a
    /// required trail refuses new sessions.
    #[tokio::test]
    async fn an_unwritable_share_takes_the_trail_down() {
        let root = tempfile::tempdir().expect("dir");
        // A file where the audit directory should be: nothing can be created under it.
        std::fs::write(root.path().join("audit"), b"not a directory").expect("file");
        let stop = CancellationToken::new();
        let a = Audit::start(settings(root.path(), 64), stop.clone());
        assert!(a.admits());
        a.record(event(0));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !a.is_down() {
            assert!(std::time::Instant::now() < deadline, "never down");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!a.admits());
        assert!(a.stats.dropped.load(Ordering::Relaxed) >= 1);
        stop.cancel();
    }

    /// Benchmark (docs/BENCHMARKS.md "Audit trail"): what one session start costs the
    /// caller (`record`: a bounded queue's `try_send`), and how many events a second the
    /// writer puts on the disk with one `fdatasync` per batch, under a sustained burst.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "benchmark: run with --ignored --nocapture"]
    async fn bench_record_cost_and_writer_throughput() {
        let root = tempfile::tempdir_in(".").expect("dir");
        let stop = CancellationToken::new();
        let n = 200_000usize;
        let a = Audit::start(settings(root.path(), n), stop.clone());
        let started = std::time::Instant::now();
        let mut costs = Vec::with_capacity(n);
        for i in 0..n {
            let t = std::time::Instant::now();
            a.record(event(i as i64));
            costs.push(t.elapsed().as_nanos() as u64);
        }
        let enqueued = started.elapsed();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while a.stats.written.load(Ordering::Relaxed) < n as u64 {
            assert!(std::time::Instant::now() < deadline, "writer too slow");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let written = started.elapsed();
        costs.sort_unstable();
        let pct = |p: f64| costs[((costs.len() - 1) as f64 * p) as usize];
        println!(
            "record(): p50 {} ns, p99 {} ns, max {} ns; {n} enqueued in {:.0} ms; written (fdatasync per batch of ≤ {BATCH}) in {:.0} ms = {:.0} events/s; dropped {}",
            pct(0.5),
            pct(0.99),
            costs[costs.len() - 1],
            enqueued.as_secs_f64() * 1e3,
            written.as_secs_f64() * 1e3,
            n as f64 / written.as_secs_f64(),
            a.stats.dropped.load(Ordering::Relaxed)
        );
        stop.cancel();
    }
}
