//! The registry's directory on the shared root, `<root>/registry/`: blocking std I/O (the
//! node calls it off the async runtime).
//!
//! ```text
//! registry/v000000000042.reg      one version each, never rewritten (format::encode)
//! registry/changes/v…42.json      the change that made version 42 (also inside the .reg)
//! registry/.tmp-…                 a version being written
//! ```
//!
//! Writing version N+1: the whole file is written under a temp name and fsynced, then hard-
//! linked to its version's name. `link(2)` fails with EEXIST when the name exists, on local
//! file systems and on NFS alike (the server decides, whatever the client caches), so of two
//! nodes writing N+1 from N exactly one wins and the other learns it lost: the compare-and-
//! set. The directory listing is the index: no pointer file can disagree with the versions.
//! The newest [`KEEP`] versions stay; the change log is kept whole.

use crate::edit::ChangeItem;
use crate::format::{self, Body};
use crate::RegistryError;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Version files kept (older ones are deleted after each write; their changes stay logged).
pub const KEEP: usize = 32;

/// Who changed what, when: one per version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeRecord {
    pub version: u64,
    /// Unix ms on the writing node's clock.
    pub at_ms: i64,
    /// Who asked (the API's `X-Vigil-Actor`, `vigil ctl`'s user@host, or "seed").
    pub by: String,
    /// The node that wrote it.
    pub node: String,
    pub items: Vec<ChangeItem>,
}

impl ChangeRecord {
    pub fn new(version: u64, by: &str, node: &str, items: Vec<ChangeItem>) -> ChangeRecord {
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        ChangeRecord {
            version,
            at_ms,
            by: by.into(),
            node: node.into(),
            items,
        }
    }
}

/// A version read whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub version: u64,
    pub body: Body,
}

pub struct RegistryDir {
    dir: PathBuf,
    /// What versions are signed with and must be signed with to read (none: unsigned).
    key: Option<crate::SecretKey>,
}

/// Versions past this are names no writer reaches (a million edits a second for 285 years):
/// a file named so is not a version, so `seen + 1` never overflows.
pub const MAX_VERSION: u64 = 1 << 53;

impl RegistryDir {
    /// `<root>/registry`, created if missing.
    pub fn open(root: &Path) -> Result<RegistryDir, RegistryError> {
        let dir = root.join("registry");
        let changes = dir.join("changes");
        std::fs::create_dir_all(&changes).map_err(RegistryError::io("create", &changes))?;
        Ok(RegistryDir { dir, key: None })
    }

    /// Versions written signed with `key` (their users sealed with it), and read only when
    /// signed with it.
    pub fn with_key(mut self, key: Option<crate::SecretKey>) -> RegistryDir {
        self.key = key;
        self
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn version_path(&self, v: u64) -> PathBuf {
        self.dir.join(format!("v{v:012}.reg"))
    }

    /// The version files present, oldest first (the listing is the index).
    pub fn versions(&self) -> Result<Vec<u64>, RegistryError> {
        let rd = std::fs::read_dir(&self.dir).map_err(RegistryError::io("list", &self.dir))?;
        let mut out: Vec<u64> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                name.strip_prefix('v')?.strip_suffix(".reg")?.parse().ok()
            })
            .filter(|v| *v < MAX_VERSION)
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Version `v`: None when there is no such file, `Corrupt` when it does not read whole.
    pub fn read(&self, v: u64) -> Result<Option<Body>, RegistryError> {
        let path = self.version_path(v);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(RegistryError::io("read", &path)(e)),
        };
        format::decode(v, &bytes, self.key.as_ref())
            .map(Some)
            .map_err(|why| RegistryError::Corrupt {
                path: path.display().to_string(),
                why: why.to_string(),
            })
    }

    /// Writes version `v` if nobody has: `Conflict` (with `current: v`) when it exists.
    pub fn commit(&self, v: u64, body: &Body) -> Result<(), RegistryError> {
        if v >= MAX_VERSION {
            return Err(RegistryError::Conflict { current: v });
        }
        let bytes = format::encode(v, body, self.key.as_ref());
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}-{:016x}",
            std::process::id(),
            v,
            rand::random::<u64>()
        ));
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(RegistryError::io("write", &tmp)(e));
        }
        let path = self.version_path(v);
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(RegistryError::Conflict { current: v })
            }
            Err(e) => return Err(RegistryError::io("link", &path)(e)),
        }
        sync_dir(&self.dir);
        // The log's own copy of the change: the version file (authoritative) may be pruned.
        let log = self.dir.join("changes").join(format!("v{v:012}.json"));
        let tmp = log.with_extension("tmp");
        let json = serde_json::to_vec(&body.change).unwrap_or_default();
        if std::fs::write(&tmp, json)
            .and_then(|()| std::fs::rename(&tmp, &log))
            .is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
        self.prune();
        Ok(())
    }

    /// The newest `limit` changes, newest first.
    pub fn changes(&self, limit: usize) -> Vec<ChangeRecord> {
        let dir = self.dir.join("changes");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut names: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        names
            .iter()
            .rev()
            .take(limit)
            .filter_map(|p| serde_json::from_slice(&std::fs::read(p).ok()?).ok())
            .collect()
    }

    /// Deletes version files beyond the newest [`KEEP`] (best effort: another node's prune
    /// may race this one; a missing file is fine).
    fn prune(&self) {
        let Ok(versions) = self.versions() else {
            return;
        };
        let excess = versions.len().saturating_sub(KEEP);
        for v in &versions[..excess] {
            let _ = std::fs::remove_file(self.version_path(*v));
        }
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// A node's position in the registry: the newest version read whole (`good`), and the
/// newest version file looked at (`seen`, which may be corrupt). The next write is
/// `seen + 1`, so a corrupt newest file is written past instead of blocking every write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Follower {
    pub good: u64,
    pub seen: u64,
}

/// What one look at the directory found: the newest good version when it is newer than the
/// follower's, and every version that did not read.
#[derive(Debug, Default)]
pub struct Found {
    pub loaded: Option<Loaded>,
    pub errors: Vec<RegistryError>,
}

impl Follower {
    /// The version a node that has applied `applied` writes next: `seen + 1` (past a corrupt
    /// newest file too), made on top of `applied` — but only when `applied` is the newest
    /// good version read. A poll (the watcher's) moves the follower on before the version it
    /// read is applied; an edit made meanwhile on the older registry and written as
    /// `seen + 1` would silently undo every change in between. `None`: apply `good` first.
    pub fn next_write(&self, applied: u64) -> Option<u64> {
        (applied >= self.good).then_some(self.seen.saturating_add(1))
    }

    /// Reads the versions after `seen`: the next names one by one (an `open` of a known
    /// name is revalidated on NFS, where a directory listing may be served from the
    /// attribute cache), or with `list` the directory's listing too (after a gap: pruned
    /// versions this node never saw, a start-up).
    pub fn poll(&mut self, dir: &RegistryDir, list: bool) -> Found {
        let mut found = Found::default();
        let mut candidates: Vec<u64> = Vec::new();
        if list {
            match dir.versions() {
                Ok(vs) => candidates.extend(vs.into_iter().filter(|v| *v > self.seen)),
                Err(e) => found.errors.push(e),
            }
        }
        // Newest first among the listed; then probe upward from there.
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        for v in candidates {
            match dir.read(v) {
                Ok(Some(body)) => {
                    self.seen = self.seen.max(v);
                    if v > self.good {
                        self.good = v;
                        found.loaded = Some(Loaded { version: v, body });
                    }
                    break;
                }
                Ok(None) => {}
                Err(e) => {
                    self.seen = self.seen.max(v);
                    found.errors.push(e);
                }
            }
        }
        loop {
            let v = self.seen.saturating_add(1);
            if v >= MAX_VERSION {
                break;
            }
            match dir.read(v) {
                Ok(None) => break,
                Ok(Some(body)) => {
                    self.seen = v;
                    self.good = v;
                    found.loaded = Some(Loaded { version: v, body });
                }
                Err(e @ RegistryError::Corrupt { .. }) => {
                    self.seen = v;
                    found.errors.push(e);
                }
                Err(e) => {
                    found.errors.push(e);
                    break;
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Registry;

    fn body(v: u64, by: &str) -> Body {
        Body {
            change: ChangeRecord::new(v, by, "n1", Vec::new()),
            registry: Registry::default(),
        }
    }

    #[test]
    fn one_writer_of_a_version_wins_the_other_gets_a_conflict() {
        let root = tempfile::tempdir().unwrap();
        let dir = RegistryDir::open(root.path()).unwrap();
        dir.commit(1, &body(1, "alice")).unwrap();
        let e = dir.commit(1, &body(1, "bob")).unwrap_err();
        assert!(matches!(e, RegistryError::Conflict { current: 1 }), "{e}");
        assert_eq!(dir.read(1).unwrap().unwrap().change.by, "alice");
        assert_eq!(dir.changes(10)[0].by, "alice");
        // No temp file is left behind by either.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(".tmp")), "{names:?}");
    }

    #[test]
    fn a_follower_keeps_the_last_good_version_and_writes_past_a_corrupt_one() {
        let root = tempfile::tempdir().unwrap();
        let dir = RegistryDir::open(root.path()).unwrap();
        let mut f = Follower::default();
        assert!(f.poll(&dir, true).loaded.is_none());
        dir.commit(1, &body(1, "a")).unwrap();
        dir.commit(2, &body(2, "b")).unwrap();
        let found = f.poll(&dir, false);
        assert_eq!(found.loaded.unwrap().version, 2);
        assert_eq!(f, Follower { good: 2, seen: 2 });
        // Version 3 rots on the share: reported, the good one stays, the next write is 4.
        dir.commit(3, &body(3, "c")).unwrap();
        let p = dir.version_path(3);
        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 2] ^= 1;
        std::fs::write(&p, bytes).unwrap();
        let found = f.poll(&dir, false);
        assert!(found.loaded.is_none());
        assert!(matches!(found.errors[..], [RegistryError::Corrupt { .. }]));
        assert_eq!(f, Follower { good: 2, seen: 3 });
        dir.commit(f.seen + 1, &body(4, "d")).unwrap();
        assert_eq!(f.poll(&dir, false).loaded.unwrap().version, 4);
        // A fresh follower (a restart) lists, and takes the newest good.
        let mut fresh = Follower::default();
        assert_eq!(fresh.poll(&dir, true).loaded.unwrap().version, 4);
    }

    #[test]
    fn a_write_waits_for_the_newest_version_read_to_be_applied() {
        let root = tempfile::tempdir().unwrap();
        let dir = RegistryDir::open(root.path()).unwrap();
        let mut f = Follower::default();
        assert_eq!(f.next_write(0), Some(1));
        dir.commit(1, &body(1, "a")).unwrap();
        dir.commit(2, &body(2, "b")).unwrap();
        // The watcher read 2; the node still holds 1: an edit on 1 written as 3 would undo 2.
        assert_eq!(f.poll(&dir, false).loaded.unwrap().version, 2);
        assert_eq!(f.next_write(1), None);
        assert_eq!(f.next_write(2), Some(3));
        // A corrupt newest file: written past, on top of the last good one.
        dir.commit(3, &body(3, "c")).unwrap();
        std::fs::write(dir.version_path(3), b"rot").unwrap();
        assert!(f.poll(&dir, false).loaded.is_none());
        assert_eq!(f, Follower { good: 2, seen: 3 });
        assert_eq!(f.next_write(2), Some(4));
    }

    /// Issue 44, H3: whoever writes the share without the key can neither add a version the
    /// nodes read (it is reported and skipped, the next write goes past it) nor make the
    /// version counter overflow with a file named v18446744073709551615.
    #[test]
    fn a_version_written_without_the_key_is_skipped_and_reported() {
        let root = tempfile::tempdir().unwrap();
        let key = || Some(crate::SecretKey::from_bytes([9; 32]));
        let dir = RegistryDir::open(root.path()).unwrap().with_key(key());
        let intruder = RegistryDir::open(root.path()).unwrap();
        let mut f = Follower::default();
        dir.commit(1, &body(1, "alice")).unwrap();
        assert_eq!(f.poll(&dir, true).loaded.unwrap().version, 1);
        intruder.commit(2, &body(2, "mallory")).unwrap();
        let found = f.poll(&dir, false);
        assert!(found.loaded.is_none());
        match &found.errors[..] {
            [RegistryError::Corrupt { why, .. }] => assert!(why.contains("not signed"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(f, Follower { good: 1, seen: 2 });
        dir.commit(f.next_write(1).unwrap(), &body(3, "bob"))
            .unwrap();
        assert_eq!(f.poll(&dir, false).loaded.unwrap().body.change.by, "bob");
        // The largest name a u64 holds is no version.
        std::fs::write(
            root.path()
                .join("registry")
                .join(format!("v{}.reg", u64::MAX)),
            b"x",
        )
        .unwrap();
        let mut fresh = Follower::default();
        assert_eq!(fresh.poll(&dir, true).loaded.unwrap().version, 3);
        assert_eq!(fresh.next_write(3), Some(4));
    }

    #[test]
    fn old_versions_are_pruned_and_their_changes_kept() {
        let root = tempfile::tempdir().unwrap();
        let dir = RegistryDir::open(root.path()).unwrap();
        let n = KEEP as u64 + 5;
        for v in 1..=n {
            dir.commit(v, &body(v, "x")).unwrap();
        }
        let vs = dir.versions().unwrap();
        assert_eq!((vs.len(), vs[0], *vs.last().unwrap()), (KEEP, 6, n));
        assert_eq!(dir.changes(1000).len(), n as usize);
        // A follower that slept through the pruned ones jumps by listing.
        let mut f = Follower::default();
        assert_eq!(f.poll(&dir, true).loaded.unwrap().version, n);
    }
}
