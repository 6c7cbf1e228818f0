//! Group commit: one sync pass per interval for every segment closed in it.
//!
//! Before this, every segment ended with its own `fsync` of the file and one of its hour
//! directory, on the writer's thread. On ext4 each is a journal commit and a cache flush, and
//! the node stopped scaling at the disk's commit rate (≈ 200 segments/s with playback still
//! fast on the virtio disk of docs/BENCHMARKS.md, "City scale"), far below its bandwidth. Here
//! a closed segment (trailer written, the file complete in the page cache) is handed to the
//! store's committer thread, which every `commit_interval` makes the whole batch durable with
//! one sync ([`SyncMode`]) and only then renames each file into its hour directory: a listed
//! segment is always a synced one, as before.
//!
//! What a crash can lose, per camera (FORMAT.md, "Writing and crash safety"):
//! - the process killed (`kill -9`): only the open segment. A batch waiting for its sync is
//!   complete in the page cache, which survives the process; the next owner of the camera
//!   ([`recover_plan`]) syncs every temp file that decodes as a whole, checksum-valid segment
//!   and renames it into place, and deletes the others.
//! - the machine (power, kernel): the open segment and the batch waiting for its sync. A
//!   recorder has at most one segment in a batch: closing its next one first waits for the
//!   previous one's pass, so a slow disk holds the writer back rather than letting batches
//!   grow. A renamed file's directory entry becomes durable with the next pass's sync (ext4
//!   commits its journal in order); if it is lost, its synced temp file is recovered as above.
//!
//! The ordering is pure ([`run_pass`] over [`CommitFs`]) so that a model file system can
//! crash it at every step (the unit tests); the thread and the real system calls are the shell.

use crate::error::StorageError;
use crate::index::SegmentMeta;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a pass makes its batch durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// One `syncfs(2)` of the root's file system: one journal commit and one cache flush for
    /// the whole batch, whatever its size. Also writes back everything else dirty on that
    /// file system, which is only the recordings on a dedicated volume.
    #[default]
    Syncfs,
    /// `fdatasync(2)` of each file of the batch in turn (file systems or mounts where
    /// `syncfs` is not the recordings' alone). On ext4 the first one commits the journal for
    /// all; the others find their inode committed and only wait for their data.
    Files,
}

/// Where a pass stands: the test hook ([`crate::Store::set_commit_hook`]) runs at each and
/// may stop the pass there for good, as a crash would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitPoint {
    /// The batch's files are written, not yet synced.
    BeforeSync,
    /// Synced, not yet renamed.
    BeforeRename,
}

/// One closed segment waiting for its pass.
pub(crate) struct Pending {
    /// The temp file, still open (`None` only in the model tests).
    pub file: Option<File>,
    pub tmp: PathBuf,
    /// The camera directory and the hour directory name.
    pub cam_dir: PathBuf,
    pub dir_name: String,
    pub dest: PathBuf,
    pub meta: SegmentMeta,
    /// The recorder's lease expiry when it handed the segment over; a pass that runs later
    /// than this renames nothing of it (another node may be writing the camera by then).
    pub lease_expires_ms: i64,
    pub ticket: Arc<Ticket>,
}

/// The outcome of one pending segment, waited for by its recorder.
#[derive(Default)]
pub(crate) struct Ticket {
    outcome: Mutex<Option<Result<(), StorageError>>>,
    done: Condvar,
}

impl Ticket {
    fn settle(&self, r: Result<(), StorageError>) {
        *crate::store::lock(&self.outcome) = Some(r);
        self.done.notify_all();
    }

    /// The outcome if the pass has run (taken: a second call sees `Ok`).
    pub(crate) fn try_take(&self) -> Option<Result<(), StorageError>> {
        let mut o = crate::store::lock(&self.outcome);
        o.as_mut().map(|r| std::mem::replace(r, Ok(())))
    }

    /// Waits for the pass.
    pub(crate) fn wait(&self) -> Result<(), StorageError> {
        let mut o = crate::store::lock(&self.outcome);
        loop {
            if let Some(r) = o.as_mut() {
                return std::mem::replace(r, Ok(()));
            }
            o = self.done.wait(o).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// The system calls of a pass, so the order can be checked against a model that crashes.
pub(crate) trait CommitFs {
    /// Makes the data of every file of the batch durable.
    fn sync(&mut self, batch: &[&Pending]) -> io::Result<()>;
    /// Creates the hour directory if it does not exist.
    fn ensure_dir(&mut self, dir: &Path) -> io::Result<()>;
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove(&mut self, path: &Path);
    /// The test hook; false stops the pass here (a crash: nothing after it runs).
    fn reached(&mut self, _point: CommitPoint) -> bool {
        true
    }
}

/// One pass: sync the batch, then rename each segment whose lease still held. Returns each
/// segment's outcome in batch order, or `None` when the hook stopped the pass (the crash
/// tests: the temp files stay for recovery). A failed sync fails the whole batch and
/// deletes its temp files: none of them is known to be on disk.
pub(crate) fn run_pass<F: CommitFs>(
    fs: &mut F,
    batch: &[Pending],
    now_ms: i64,
) -> Option<Vec<Result<(), StorageError>>> {
    if !fs.reached(CommitPoint::BeforeSync) {
        return None;
    }
    let refs: Vec<&Pending> = batch.iter().collect();
    if let Err(e) = fs.sync(&refs) {
        let kind = e.kind();
        let code = e.raw_os_error();
        return Some(
            batch
                .iter()
                .map(|p| {
                    fs.remove(&p.tmp);
                    let e = match code {
                        Some(c) => io::Error::from_raw_os_error(c),
                        None => io::Error::from(kind),
                    };
                    Err(StorageError::from_io(&p.tmp, e))
                })
                .collect(),
        );
    }
    if !fs.reached(CommitPoint::BeforeRename) {
        return None;
    }
    Some(
        batch
            .iter()
            .map(|p| {
                if now_ms >= p.lease_expires_ms {
                    fs.remove(&p.tmp);
                    return Err(StorageError::LeaseLost {
                        camera: p.meta.camera.clone(),
                    });
                }
                let r = rename_into(fs, p);
                if r.is_err() {
                    fs.remove(&p.tmp);
                }
                r
            })
            .collect(),
    )
}

/// Renames into the hour directory, which retention may remove at any time while empty:
/// (re)create it and retry.
fn rename_into<F: CommitFs>(fs: &mut F, p: &Pending) -> Result<(), StorageError> {
    let dir = p.cam_dir.join(&p.dir_name);
    let mut last = io::Error::from(io::ErrorKind::NotFound);
    for _ in 0..3 {
        fs.ensure_dir(&dir)
            .map_err(|e| StorageError::from_io(&dir, e))?;
        match fs.rename(&p.tmp, &p.dest) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => last = e,
            Err(e) => return Err(StorageError::from_io(&p.dest, e)),
        }
    }
    Err(StorageError::from_io(&p.dest, last))
}

/// What to do with a temp segment found by the camera's next owner.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Recovery {
    /// A whole, checksum-valid segment (closed, its pass not run): sync it and rename it here.
    Rename(PathBuf),
    /// Torn (the open segment) or unreadable: delete it.
    Delete,
}

/// Decides a temp segment's fate from its bytes (pure): a file that decodes completely and
/// whose trailer's CRC holds is renamed to the name its recorder would have given it under
/// `cam_dir`; anything else is deleted.
pub(crate) fn recover_plan(cam_dir: &Path, data: bytes::Bytes) -> Recovery {
    let bytes = data.len() as u64;
    let Ok(d) = crate::format::decode_segment(data) else {
        return Recovery::Delete;
    };
    let Ok(frames) = u32::try_from(d.frames.len()) else {
        return Recovery::Delete;
    };
    if frames == 0 {
        return Recovery::Delete;
    }
    let name = crate::index::segment_file_name(d.start_ms, d.end_ms, frames, bytes, d.crc32);
    Recovery::Rename(
        cam_dir
            .join(crate::index::hour_dir_name(d.start_ms))
            .join(name),
    )
}

/// The real system calls.
pub(crate) struct RealFs<'a> {
    pub root: &'a Path,
    pub mode: SyncMode,
    pub hook: Option<CommitHook>,
}

/// See [`crate::Store::set_commit_hook`].
pub type CommitHook = Arc<dyn Fn(CommitPoint) -> bool + Send + Sync>;

impl CommitFs for RealFs<'_> {
    fn sync(&mut self, batch: &[&Pending]) -> io::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        match self.mode {
            SyncMode::Syncfs => {
                use std::os::fd::AsRawFd;
                let root = File::open(self.root)?;
                // SAFETY: syncfs only reads the descriptor, which `root` keeps open.
                if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                // syncfs(2) reports write-back errors of the file system since Linux 5.8. Not
                // fdatasync each file as well to be sure: on ext4 each such call on synced
                // data still sends the disk a cache flush, the cost this pass exists to share.
                Ok(())
            }
            SyncMode::Files => batch
                .iter()
                .filter_map(|p| p.file.as_ref())
                .try_for_each(File::sync_data),
        }
    }

    fn ensure_dir(&mut self, dir: &Path) -> io::Result<()> {
        match fs::create_dir(dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&mut self, path: &Path) {
        let _ = fs::remove_file(path);
    }

    fn reached(&mut self, point: CommitPoint) -> bool {
        self.hook.as_ref().is_none_or(|h| h(point))
    }
}

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    /// When the oldest pending segment arrived.
    since: Option<Instant>,
    stop: bool,
    /// Segments submitted, and those whose pass has run (for [`Committer::flush`]).
    submitted: u64,
    settled: u64,
    /// Someone waits in [`Committer::flush`]: run the pass now.
    hurry: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Signalled after every pass.
    passed: Condvar,
}

/// The store's committer thread. Started with the store when group commit is on; dropping it
/// runs a last pass over what is queued and joins the thread.
pub(crate) struct Committer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Told of each segment renamed into place: its hour directory's name and its entry.
pub(crate) type Committed = Box<dyn Fn(&str, &SegmentMeta) + Send>;

/// What the committer thread needs of the store (not the store itself: the store owns the
/// committer, and the thread must not keep it alive).
pub(crate) struct Context {
    pub root: PathBuf,
    pub mode: SyncMode,
    pub interval: Duration,
    pub hook: Arc<Mutex<Option<CommitHook>>>,
    /// Called for each segment renamed into place (the local index).
    pub committed: Committed,
}

impl Committer {
    pub(crate) fn start(ctx: Context) -> io::Result<Committer> {
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            wake: Condvar::new(),
            passed: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("vigil-commit".into())
            .spawn(move || run(&s, &ctx))?;
        Ok(Committer {
            shared,
            thread: Some(thread),
        })
    }

    pub(crate) fn submit(&self, p: Pending) {
        let mut q = crate::store::lock(&self.shared.queue);
        q.since.get_or_insert_with(Instant::now);
        q.pending.push(p);
        q.submitted += 1;
        self.shared.wake.notify_one();
    }

    /// Runs a pass now over what is queued and waits for it: what was submitted before the
    /// call is renamed (or failed) when it returns.
    pub(crate) fn flush(&self) {
        let mut q = crate::store::lock(&self.shared.queue);
        let target = q.submitted;
        while q.settled < target {
            q.hurry = true;
            self.shared.wake.notify_one();
            q = self
                .shared
                .passed
                .wait(q)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        crate::store::lock(&self.shared.queue).stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, ctx: &Context) {
    loop {
        let (batch, stop) = {
            let mut q = crate::store::lock(&shared.queue);
            loop {
                let due = q.since.map(|s| s + ctx.interval);
                match due {
                    Some(d) if q.stop || q.hurry || Instant::now() >= d => break,
                    Some(d) => {
                        let wait = d.saturating_duration_since(Instant::now());
                        q = shared
                            .wake
                            .wait_timeout(q, wait)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                    None if q.stop => return,
                    None => q = shared.wake.wait(q).unwrap_or_else(|p| p.into_inner()),
                }
            }
            q.since = None;
            q.hurry = false;
            (std::mem::take(&mut q.pending), q.stop)
        };
        let n = batch.len() as u64;
        let hook = crate::store::lock(&ctx.hook).clone();
        let mut fs = RealFs {
            root: &ctx.root,
            mode: ctx.mode,
            hook,
        };
        match run_pass(&mut fs, &batch, crate::lease::now_ms()) {
            Some(outcomes) => {
                for (p, r) in batch.into_iter().zip(outcomes) {
                    if r.is_ok() {
                        (ctx.committed)(&p.dir_name, &p.meta);
                    }
                    p.ticket.settle(r);
                }
            }
            None => {
                // The hook stopped the pass (a crash test): the recorders waiting on it
                // must not hang, the files stay as a crash leaves them.
                for p in batch {
                    p.ticket.settle(Err(StorageError::from_io(
                        &p.tmp,
                        io::Error::other("commit stopped by the test hook"),
                    )));
                }
            }
        }
        let mut q = crate::store::lock(&shared.queue);
        q.settled += n;
        shared.passed.notify_all();
        // When the store closes, a last pass runs over what was queued.
        if stop && q.pending.is_empty() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
