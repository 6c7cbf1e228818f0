//! [`Store`]: the root directory, per-camera index caches refreshed incrementally from disk,
//! segment reads, retention and start-up repair.

use crate::commit::{CommitHook, Committer, SyncMode};
use crate::error::{validate_id, IoContext, StorageError};
use crate::format::{decode_segment, StreamHeader};
use crate::index::{
    hour_of, is_hour_dir_name, parse_segment_file_name, CameraIndex, Entry, Hour, SegmentMeta,
};
use crate::lease::{self, now_ms};
use crate::recorder::Recorder;
use crate::Segment;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

pub(crate) const CAMERAS_DIR: &str = "cameras";
pub(crate) const TMP_DIR: &str = ".tmp";
/// A directory whose mtime is within this much of our last scan is scanned again: mtime
/// granularity (1 s on some file systems) and NFS client/server clock skew could otherwise hide
/// a change made in the same tick as the scan.
const MTIME_SLACK: Duration = Duration::from_secs(5);

/// [`StoreConfig::commit_interval`] by default (the server's `[storage] commit_interval_ms`):
/// long enough that a pass at 1000 cameras × 4 s segments shares one sync between ≈ 50
/// segments, short against a segment, so a closed segment is listed (and playable) this
/// soon after its close.
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_millis(200);

/// [`StoreConfig::writeback_bytes`] by default (`[storage] writeback_kb`): off, the kernel's
/// flusher and the group commit's sync write back (write-behind did not measure better).
pub const DEFAULT_WRITEBACK_BYTES: u64 = 0;

/// Recording and retention settings.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Target segment length; segments are cut at the first video keyframe after it.
    pub segment_duration: Duration,
    /// Write-lease lifetime; renewed every third of it while recording.
    pub lease_ttl: Duration,
    /// Delete segments that ended more than this long ago.
    pub retention_max_age: Option<Duration>,
    /// Delete the oldest segments (across all cameras) while the root holds more than this.
    pub retention_max_bytes: Option<u64>,
    /// An index refreshed this recently is answered as is: a DESCRIBE and the PLAY after it
    /// (or many sessions starting on one camera) list the camera directory once, not each.
    /// Segments this process commits are in its index at once anyway; only changes made by
    /// another node (or another `Store` on the root) show up to this late.
    pub index_fresh: Duration,
    /// Group commit ([`crate::commit`]): segments closed within this interval are synced
    /// together by one pass and renamed into place after it. Zero: each segment is synced
    /// and renamed by its writer at close (one `fsync` of the file and one of its directory
    /// per segment), the behaviour before group commit.
    pub commit_interval: Duration,
    /// How a group commit pass syncs its batch.
    pub commit_sync: SyncMode,
    /// The recorder starts the write-back of every this many bytes it writes to a segment
    /// (`crate::io_priority::WriteBehind`; 0 = leave it to the kernel).
    pub writeback_bytes: u64,
    /// Segments are written past the page cache (`O_DIRECT`, `crate::segment_file`), where
    /// the file system allows it; their tails and everything else go through it. Off by
    /// default: with the writer pool's bell it measured no better than the page cache
    /// (docs/BENCHMARKS.md), and a synchronous write per 256 KiB ties the writers'
    /// throughput to the device's latency (a loaded IPSAN LUN's), which the page cache hides.
    pub direct_io: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            segment_duration: Duration::from_secs(4),
            lease_ttl: Duration::from_secs(15),
            retention_max_age: None,
            retention_max_bytes: None,
            index_fresh: Duration::from_millis(500),
            commit_interval: DEFAULT_COMMIT_INTERVAL,
            commit_sync: SyncMode::Syncfs,
            writeback_bytes: DEFAULT_WRITEBACK_BYTES,
            direct_io: false,
        }
    }
}

/// What the index cache knows about one hour directory.
struct DirState {
    mtime: Option<SystemTime>,
    scanned_at: SystemTime,
    /// The hour its segments start in (None while it is empty).
    hour: Option<i64>,
}

pub(crate) struct CamCache {
    pub(crate) index: CameraIndex,
    dirs: HashMap<String, DirState>,
    refreshed: Option<Instant>,
}

pub(crate) struct Inner {
    pub(crate) root: PathBuf,
    /// The root's [`ROOT_ID_FILE`] id.
    pub(crate) root_id: String,
    pub(crate) node: String,
    pub(crate) config: StoreConfig,
    cams: Cams,
    /// Cameras with a live `Recorder` in this process (a second one is refused).
    pub(crate) active: Mutex<HashSet<String>>,
    /// Test hook: errno injected into the next segment write (0 = none).
    fault: AtomicI32,
    /// Test hook run before every frame write (to make writes slow); `has_hook` keeps the
    /// normal path to one atomic load.
    hook: Mutex<Option<WriteHook>>,
    has_hook: AtomicBool,
    /// Per-camera settings over the store's (the registry's `segment_secs`,
    /// `retention_hours`): see [`Store::set_camera_settings`].
    pub(crate) per_camera: Mutex<HashMap<String, CameraSettings>>,
    /// Test hook of the group commit passes ([`Store::set_commit_hook`]).
    commit_hook: Arc<Mutex<Option<CommitHook>>>,
    /// The group committer (`None` when `commit_interval` is zero). Declared last: dropped
    /// after the rest, it runs its last pass over what the recorders handed it.
    pub(crate) committer: Option<Committer>,
}

/// One camera's settings over the store's [`StoreConfig`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CameraSettings {
    /// Its segment length (a recorder started after the change uses it).
    pub segment_duration: Option<Duration>,
    /// Its age limit: `Some(None)` keeps its recordings whatever the store's age limit,
    /// `Some(Some(age))` deletes them past `age`; `None`: the store's. The byte limit stays
    /// the store's, over all cameras.
    pub retention_max_age: Option<Option<Duration>>,
}

/// The per-camera index caches, shared with the committer thread (which records what it
/// renamed without holding the store).
type Cams = Arc<Mutex<HashMap<String, Arc<Mutex<CamCache>>>>>;

/// See [`Store::set_write_hook`].
pub type WriteHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Handle to a storage root. Cheap to clone; all clones share caches.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

/// Locks a mutex, recovering from poisoning: the protected caches stay consistent enough (at
/// worst a stale index that the next refresh repairs), and a panic elsewhere must not stop
/// recording.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Store {
    /// Opens (creating if needed) the root. For each camera found, removes temp files left by
    /// a crashed writer unless another live node holds the camera's lease. The index needs no
    /// other repair: it is the listing of complete (renamed) segment files, loaded lazily by
    /// [`Store::index`], so files missing from it or entries without a file cannot exist.
    pub fn open(
        root: impl Into<PathBuf>,
        node_id: &str,
        config: StoreConfig,
    ) -> Result<Store, StorageError> {
        validate_id(node_id)?;
        let root = root.into();
        let cams = root.join(CAMERAS_DIR);
        fs::create_dir_all(&cams).at(&cams)?;
        crate::root::ensure_layout(&root)?;
        let root_id = crate::root::ensure_root_id(&root)?;
        let cams: Cams = Arc::default();
        let commit_hook = Arc::new(Mutex::new(None));
        let committer = if config.commit_interval.is_zero() {
            None
        } else {
            let cams = cams.clone();
            Some(
                Committer::start(crate::commit::Context {
                    root: root.clone(),
                    mode: config.commit_sync,
                    interval: config.commit_interval,
                    hook: commit_hook.clone(),
                    committed: Box::new(move |dir, meta| note_committed(&cams, dir, meta)),
                })
                .at(&root)?,
            )
        };
        let store = Store {
            inner: Arc::new(Inner {
                root_id,
                root,
                node: node_id.to_string(),
                config,
                cams,
                active: Mutex::new(HashSet::new()),
                fault: AtomicI32::new(0),
                hook: Mutex::new(None),
                has_hook: AtomicBool::new(false),
                per_camera: Mutex::new(HashMap::new()),
                commit_hook,
                committer,
            }),
        };
        for cam in store.cameras()? {
            store.repair_camera(&cam)?;
        }
        Ok(store)
    }

    fn repair_camera(&self, camera: &str) -> Result<(), StorageError> {
        let dir = self.camera_dir(camera);
        if let Some((_, Some(info))) = lease::current(&dir, self.inner.config.lease_ttl)? {
            if info.expires_ms > now_ms() && info.holder != self.inner.node {
                return Ok(()); // a live writer elsewhere: its temp file is in use
            }
        }
        self.clear_tmp(camera);
        Ok(())
    }

    /// Repairs a camera's temp segments; only called while no other node can write it. A
    /// temp file that holds a whole, checksum-valid segment was closed and waiting for its
    /// group commit when its writer died: it is synced and renamed into place
    /// ([`crate::commit::recover_plan`]). Every other one (the open segment) is deleted.
    pub(crate) fn clear_tmp(&self, camera: &str) {
        let cam_dir = self.camera_dir(camera);
        let Ok(rd) = fs::read_dir(cam_dir.join(TMP_DIR)) else {
            return;
        };
        for e in rd.flatten() {
            let path = e.path();
            let plan = match fs::read(&path) {
                Ok(data) => crate::commit::recover_plan(&cam_dir, bytes::Bytes::from(data)),
                Err(_) => crate::commit::Recovery::Delete,
            };
            let renamed = match plan {
                crate::commit::Recovery::Rename(dest) => recover_one(&path, &dest).is_ok(),
                crate::commit::Recovery::Delete => false,
            };
            if !renamed {
                let _ = fs::remove_file(&path);
            }
        }
    }

    /// The root's identity ([`ROOT_ID_FILE`]): the same for every node that opened it.
    pub fn root_id(&self) -> &str {
        &self.inner.root_id
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// This node's id (the lease holder name).
    pub fn node_id(&self) -> &str {
        &self.inner.node
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    pub(crate) fn camera_dir(&self, camera: &str) -> PathBuf {
        self.inner.root.join(CAMERAS_DIR).join(camera)
    }

    /// Cameras with a directory under the root, sorted.
    pub fn cameras(&self) -> Result<Vec<String>, StorageError> {
        let dir = self.inner.root.join(CAMERAS_DIR);
        let mut out = Vec::new();
        for e in fs::read_dir(&dir).at(&dir)? {
            let e = e.at(&dir)?;
            if let Some(name) = e.file_name().to_str() {
                if validate_id(name).is_ok() && e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(name.to_string());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Acquires the camera's write lease and starts recording. `Err(LeaseHeld)` if another
    /// live node (or another recorder in this process) holds it.
    /// The end of `camera`'s newest segment, read from the directory now (not through the
    /// index cache, which may not show a segment another node renamed a moment ago); None
    /// when nothing is recorded or the directory cannot be read.
    pub(crate) fn newest_end_ms(&self, camera: &str) -> Option<i64> {
        let cam_dir = self.camera_dir(camera);
        let mut hours: Vec<String> = fs::read_dir(&cam_dir)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| crate::index::is_hour_dir_name(n))
            .collect();
        // `YYYY-MM-DDTHH` sorts by time; a segment is filed under its start's hour, so the
        // newest non-empty hour holds the newest segment.
        hours.sort_unstable();
        hours.iter().rev().find_map(|h| {
            fs::read_dir(cam_dir.join(h))
                .ok()?
                .filter_map(|e| {
                    let name = e.ok()?.file_name().into_string().ok()?;
                    crate::index::parse_segment_file_name(&name).map(|(_, end, ..)| end)
                })
                .max()
        })
    }

    pub fn recorder(&self, camera: &str, header: StreamHeader) -> Result<Recorder, StorageError> {
        validate_id(camera)?;
        self.check_root()?;
        Recorder::start(self.clone(), camera, header)
    }

    /// Whether the root still holds the id it had at [`Store::open`] (issue 44, M7): read
    /// again before a recorder makes its camera's directories, so an unmounted share's empty
    /// mount point is never written to. One small read per recorder start (a camera's
    /// start, or its retry after an error), never per segment.
    pub fn check_root(&self) -> Result<(), StorageError> {
        let root = &self.inner.root;
        let found = crate::root::read_root_id(root).unwrap_or(None);
        if found.as_deref() == Some(self.inner.root_id.as_str()) {
            return Ok(());
        }
        Err(StorageError::RootChanged {
            root: root.clone(),
            expected: self.inner.root_id.clone(),
            found,
        })
    }

    pub(crate) fn cache(&self, camera: &str) -> Arc<Mutex<CamCache>> {
        cam_cache(&self.inner.cams, camera)
    }

    /// The camera's index, refreshed incrementally: one listing of the camera directory and
    /// one `stat` per hour directory; only directories whose mtime changed are listed again,
    /// and not at all within `index_fresh` of the last refresh. The directory I/O runs without
    /// the camera's lock, so a recorder committing a segment never waits for a listing.
    pub fn index(&self, camera: &str) -> Result<CameraIndex, StorageError> {
        validate_id(camera)?;
        // A camera is cached only once its directory exists: any valid id a client names
        // (a playback, an export, an RPC) would otherwise leave an entry for ever (issue
        // 44, M8). The `stat` is paid once per camera and process.
        let known = lock(&self.inner.cams).get(camera).cloned();
        let cache = match known {
            Some(cache) => cache,
            None if !self.camera_dir(camera).is_dir() => {
                return Err(StorageError::UnknownCamera(camera.to_string()))
            }
            None => self.cache(camera),
        };
        {
            let c = lock(&cache);
            if c.refreshed
                .is_some_and(|t| t.elapsed() < self.inner.config.index_fresh)
            {
                return Ok(c.index.clone());
            }
        }
        let cam_dir = self.camera_dir(camera);
        let listing = match fs::read_dir(&cam_dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StorageError::UnknownCamera(camera.to_string()))
            }
            Err(e) => return Err(StorageError::from_io(&cam_dir, e)),
        };
        let mut present: HashMap<String, Option<SystemTime>> = HashMap::new();
        for e in listing {
            let e = e.at(&cam_dir)?;
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if is_hour_dir_name(&name) {
                match e.metadata() {
                    Ok(m) if m.is_dir() => {
                        present.insert(name, m.modified().ok());
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(err) => return Err(StorageError::from_io(e.path(), err)),
                }
            }
        }
        let stale: Vec<(String, Option<SystemTime>)> = {
            let c = lock(&cache);
            present
                .iter()
                .filter(|(name, mtime)| match (c.dirs.get(*name), mtime) {
                    (Some(st), Some(m)) => {
                        st.mtime != Some(*m) || st.scanned_at <= *m + MTIME_SLACK
                    }
                    _ => true,
                })
                .map(|(n, m)| (n.clone(), *m))
                .collect()
        };
        let mut scanned = Vec::with_capacity(stale.len());
        for (name, mtime) in stale {
            let scanned_at = SystemTime::now();
            let (hour, chunk) = self.scan_dir(camera, &name)?;
            scanned.push((name, mtime, scanned_at, hour, chunk));
        }
        let mut c = lock(&cache);
        let gone: Vec<String> = c
            .dirs
            .keys()
            .filter(|d| !present.contains_key(*d))
            .cloned()
            .collect();
        for d in gone {
            if let Some(h) = c.dirs.remove(&d).and_then(|st| st.hour) {
                c.index.set_hour(h, None);
            }
        }
        for (name, mtime, scanned_at, hour, chunk) in scanned {
            if let Some(h) = c.dirs.get(&name).and_then(|st| st.hour) {
                c.index.set_hour(h, None);
            }
            if let Some(h) = hour {
                c.index.set_hour(h, Some(chunk));
            }
            c.dirs.insert(
                name,
                DirState {
                    mtime,
                    scanned_at,
                    hour,
                },
            );
        }
        c.refreshed = Some(Instant::now());
        Ok(c.index.clone())
    }

    /// Lists one hour directory. Only files named for this hour count: the recorder puts
    /// every segment in the directory of its start's hour, and the index derives each file's
    /// path from that.
    fn scan_dir(&self, camera: &str, dir_name: &str) -> Result<(Option<i64>, Hour), StorageError> {
        let dir = self.camera_dir(camera).join(dir_name);
        let mut entries = Vec::new();
        let mut hour = None;
        match fs::read_dir(&dir) {
            Ok(rd) => {
                for e in rd {
                    let e = e.at(&dir)?;
                    let name = e.file_name();
                    let Some(name) = name.to_str() else { continue };
                    if let Some((start, end, frames, bytes, crc)) = parse_segment_file_name(name) {
                        let h = hour_of(start);
                        if *hour.get_or_insert(h) != h {
                            continue;
                        }
                        entries.push(Entry {
                            start_ms: start,
                            end_ms: end,
                            bytes,
                            frames,
                            crc32: crc,
                        });
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::from_io(&dir, e)),
        }
        if hour.is_some_and(|h| crate::index::hour_dir_name(h * 3_600_000) != dir_name) {
            return Ok((None, Hour::default())); // not the directory of its files' hour
        }
        Ok((hour, Hour::from_entries(entries)))
    }

    /// Records a segment this process just committed, so local readers see it at once.
    pub(crate) fn note_committed(&self, dir_name: &str, meta: &SegmentMeta) {
        note_committed(&self.inner.cams, dir_name, meta);
    }

    /// Waits until every segment closed so far is synced and renamed (group commit; at once
    /// without it). Tests and tools that read what they just wrote call it.
    pub fn flush_commits(&self) {
        if let Some(c) = &self.inner.committer {
            c.flush();
        }
    }

    /// Test hook: `hook(point)` runs at each step of every group commit pass; returning
    /// false stops that pass there for good, as a crash would (its temp files stay).
    #[doc(hidden)]
    pub fn set_commit_hook(&self, hook: Option<CommitHook>) {
        *lock(&self.inner.commit_hook) = hook;
    }

    /// Reads one complete segment and verifies its checksum (against the file's own trailer
    /// and the index's CRC).
    pub fn read_segment(
        &self,
        camera: &str,
        segment: &SegmentMeta,
    ) -> Result<Segment, StorageError> {
        validate_id(camera)?;
        let expected = Path::new(CAMERAS_DIR).join(camera);
        let safe = segment.file.starts_with(&expected)
            && segment
                .file
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        if !safe {
            return Err(StorageError::InvalidCamera(
                segment.file.display().to_string(),
            ));
        }
        let path = self.inner.root.join(&segment.file);
        let data = read_noatime(&path).at(&path)?;
        let d =
            decode_segment(bytes::Bytes::from(data)).map_err(|reason| StorageError::Corrupt {
                path: path.clone(),
                reason,
            })?;
        if d.crc32 != segment.crc32 {
            return Err(StorageError::Corrupt {
                path,
                reason: format!(
                    "checksum {:08x} differs from the index's {:08x}",
                    d.crc32, segment.crc32
                ),
            });
        }
        Ok(Segment {
            meta: segment.clone(),
            header: d.header,
            frames: d.frames,
        })
    }

    /// Replaces the per-camera settings (cameras not named use the store's).
    pub fn set_camera_settings(&self, settings: HashMap<String, CameraSettings>) {
        *lock(&self.inner.per_camera) = settings;
    }

    pub(crate) fn camera_settings(&self, camera: &str) -> CameraSettings {
        lock(&self.inner.per_camera)
            .get(camera)
            .copied()
            .unwrap_or_default()
    }

    /// Bytes of all complete segments of all cameras.
    pub fn total_bytes(&self) -> Result<u64, StorageError> {
        let mut total = 0;
        for cam in self.cameras()? {
            total += self.index(&cam)?.total_bytes();
        }
        Ok(total)
    }

    /// Test hook: makes the next segment write fail with this errno (e.g. `libc::ENOSPC`).
    #[doc(hidden)]
    pub fn inject_write_error(&self, errno: Option<i32>) {
        self.inner.fault.store(errno.unwrap_or(0), Ordering::SeqCst);
    }

    /// Test and bench support: creates `count` empty segment files of `len_ms` each from
    /// `start_ms` on, named as the recorder names them (claiming `bytes` each, CRC 0). Only
    /// the index can use them: a read fails its checksum.
    #[doc(hidden)]
    pub fn create_synthetic_segments(
        &self,
        camera: &str,
        start_ms: i64,
        count: usize,
        len_ms: i64,
        bytes: u64,
    ) -> Result<(), StorageError> {
        validate_id(camera)?;
        let cam = self.camera_dir(camera);
        let mut made = HashSet::new();
        for i in 0..count as i64 {
            let start = start_ms + i * len_ms;
            let dir = cam.join(crate::index::hour_dir_name(start));
            if made.insert(dir.clone()) {
                fs::create_dir_all(&dir).at(&dir)?;
            }
            let name = crate::index::segment_file_name(start, start + len_ms, 100, bytes, 0);
            let path = dir.join(name);
            fs::File::create(&path).at(&path)?;
        }
        Ok(())
    }

    /// Test hook: `hook(camera)` runs on the writing thread before every frame is written
    /// (tests block it to fill the writer threads with slow writes).
    #[doc(hidden)]
    pub fn set_write_hook(&self, hook: Option<WriteHook>) {
        self.inner.has_hook.store(hook.is_some(), Ordering::SeqCst);
        *lock(&self.inner.hook) = hook;
    }

    pub(crate) fn run_write_hook(&self, camera: &str) {
        if self.inner.has_hook.load(Ordering::Relaxed) {
            let hook = lock(&self.inner.hook).clone();
            if let Some(h) = hook {
                h(camera);
            }
        }
    }

    pub(crate) fn take_fault(&self) -> Option<io::Error> {
        match self.inner.fault.swap(0, Ordering::SeqCst) {
            0 => None,
            code => Some(io::Error::from_raw_os_error(code)),
        }
    }
}

fn cam_cache(cams: &Cams, camera: &str) -> Arc<Mutex<CamCache>> {
    lock(cams)
        .entry(camera.to_string())
        .or_insert_with(|| {
            Arc::new(Mutex::new(CamCache {
                index: CameraIndex::new(camera),
                dirs: HashMap::new(),
                refreshed: None,
            }))
        })
        .clone()
}

/// Puts a committed segment in the camera's cached index.
fn note_committed(cams: &Cams, dir_name: &str, meta: &SegmentMeta) {
    let cache = cam_cache(cams, &meta.camera);
    let mut c = lock(&cache);
    if let Some(st) = c.dirs.get_mut(dir_name) {
        st.hour = Some(hour_of(meta.start_ms));
    }
    c.index.insert(Entry {
        start_ms: meta.start_ms,
        end_ms: meta.end_ms,
        bytes: meta.bytes,
        frames: meta.frames,
        crc32: meta.crc32,
    });
}

/// Syncs a recovered temp segment and renames it to `dest` (its hour directory created if
/// needed); a failure leaves it to be deleted.
fn recover_one(tmp: &Path, dest: &Path) -> io::Result<()> {
    fs::File::open(tmp)?.sync_all()?;
    if let Some(dir) = dest.parent() {
        match fs::create_dir(dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    fs::rename(tmp, dest)?;
    if let Some(dir) = dest.parent() {
        crate::lease::sync_dir(dir)?;
    }
    Ok(())
}

/// Reads a whole file without updating its access time: under `relatime` a segment's first
/// read after it was written is otherwise a metadata write (a journal handle on ext4, a
/// SETATTR round trip on NFS) for a value nothing uses. It did not shorten the playback
/// tail at a saturated disk (docs/BENCHMARKS.md, "City scale"), but costs nothing.
/// `O_NOATIME` is refused (EPERM) for a file this process does not own: then the plain read.
fn read_noatime(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => fs::File::open(path)?,
        Err(e) => return Err(e),
    };
    let mut data = Vec::with_capacity(f.metadata().map_or(0, |m| m.len() as usize));
    f.read_to_end(&mut data)?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 44, M8: asking for the index of cameras that were never recorded leaves no
    /// entry behind (every valid id a client named used to stay cached for ever).
    #[test]
    fn unknown_cameras_are_not_cached() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path(), "n1", StoreConfig::default()).expect("store");
        for i in 0..1000 {
            assert!(matches!(
                store.index(&format!("never-{i}")),
                Err(StorageError::UnknownCamera(_))
            ));
        }
        assert!(lock(&store.inner.cams).is_empty());
        // A camera whose directory exists is cached as before.
        fs::create_dir_all(store.camera_dir("cam")).expect("mkdir");
        assert!(store.index("cam").is_ok());
        assert_eq!(lock(&store.inner.cams).len(), 1);
    }
}
