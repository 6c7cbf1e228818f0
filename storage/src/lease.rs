//! The per-camera write lease on the shared root.
//!
//! A lease is a small immutable file `lease.<generation>` in the camera directory; the highest
//! generation is the current one. Its text says who holds it and until when (wall-clock UTC
//! ms; nodes are assumed NTP-synchronised to well under a third of the TTL).
//!
//! **Why acquisition is atomic.** Every change — first acquisition, renewal, takeover of an
//! expired lease, release — creates generation N+1 by writing a private temp file and then
//! `link(2)`-ing it to `lease.<N+1>`. `link` fails with `EEXIST` when the name exists, on local
//! file systems and on NFS alike (it is the classic NFS-safe lock primitive; `O_EXCL` create is
//! not reliable on old NFS clients), so for every generation exactly one node wins. A holder
//! renews by creating N+1 itself: if a competitor took over first, the holder's link fails and
//! it knows it lost the lease. The file appears complete (it is linked after being written and
//! fsynced), so readers never see a half-written lease.
//!
//! **Why two nodes never write one camera.** A competitor only creates N+1 after N's expiry.
//! The holder renews every TTL/3, and before committing a segment it either renews (when less
//! than TTL/3 is left) or checks that N+1 does not exist; so a holder that stalled past its
//! expiry finds out before it renames another segment into place.

use crate::error::{IoContext, StorageError};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const LEASE_PREFIX: &str = "lease.";
const LEASE_TMP_PREFIX: &str = ".lease-tmp-";

/// The wall clock in UTC ms (negative before the epoch): the clock segments, leases and
/// the cluster's reports are stamped with. The one reading of it for every crate above
/// this one, which all depend on storage, so that no two disagree on how it is taken.
pub fn now_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

/// A process-unique token: distinguishes two processes that (wrongly) share a node id, and
/// makes temp names unique.
pub(crate) fn unique_token() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    nanos ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Contents of a lease file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LeaseInfo {
    pub holder: String,
    pub token: u64,
    pub expires_ms: i64,
}

impl LeaseInfo {
    fn render(&self) -> String {
        format!(
            "vigil-lease 1\nholder={}\ntoken={:016x}\nexpires_ms={}\n",
            self.holder, self.token, self.expires_ms
        )
    }

    fn parse(text: &str) -> Option<LeaseInfo> {
        let mut lines = text.lines();
        if lines.next()? != "vigil-lease 1" {
            return None;
        }
        let (mut holder, mut token, mut expires) = (None, None, None);
        for l in lines {
            match l.split_once('=') {
                Some(("holder", v)) => holder = Some(v.to_string()),
                Some(("token", v)) => token = u64::from_str_radix(v, 16).ok(),
                Some(("expires_ms", v)) => expires = v.parse().ok(),
                _ => {}
            }
        }
        Some(LeaseInfo {
            holder: holder?,
            token: token?,
            expires_ms: expires?,
        })
    }
}

fn lease_path(cam_dir: &Path, gen: u64) -> PathBuf {
    cam_dir.join(format!("{LEASE_PREFIX}{gen}"))
}

/// The current lease: its generation and contents (`None` contents if unreadable, which can
/// only be damage since lease files are immutable; such a lease counts as held by "?" until
/// its mtime is older than the TTL).
pub(crate) fn current(
    cam_dir: &Path,
    ttl: Duration,
) -> Result<Option<(u64, Option<LeaseInfo>)>, StorageError> {
    // A renewal may replace the file between listing and reading: then list again.
    for _ in 0..5 {
        let mut best: Option<u64> = None;
        for e in fs::read_dir(cam_dir).at(cam_dir)? {
            let e = e.at(cam_dir)?;
            if let Some(g) = e
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(LEASE_PREFIX))
                .and_then(|g| g.parse::<u64>().ok())
            {
                best = best.max(Some(g));
            }
        }
        let Some(gen) = best else { return Ok(None) };
        let path = lease_path(cam_dir, gen);
        match fs::read_to_string(&path) {
            Ok(text) => {
                if let Some(info) = LeaseInfo::parse(&text) {
                    return Ok(Some((gen, Some(info))));
                }
                let fresh = fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_none_or(|age| age < ttl);
                let info = fresh.then(|| LeaseInfo {
                    holder: "?".into(),
                    token: 0,
                    expires_ms: now_ms() + ttl.as_millis() as i64,
                });
                return Ok(Some((gen, info)));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(StorageError::from_io(&path, e)),
        }
    }
    Err(StorageError::from_io(
        cam_dir,
        io::Error::other("lease changes too fast to read"),
    ))
}

/// A held lease.
#[derive(Debug)]
pub(crate) struct Lease {
    cam_dir: PathBuf,
    camera: String,
    node: String,
    token: u64,
    ttl: Duration,
    gen: u64,
    expires_ms: i64,
    renewed_at: Instant,
    lost: bool,
}

impl Lease {
    /// Takes the camera's lease if it is free, released, expired, or (when `own_takeover`) held
    /// under our own node id by an earlier incarnation of this node that crashed.
    pub(crate) fn acquire(
        cam_dir: &Path,
        camera: &str,
        node: &str,
        ttl: Duration,
        own_takeover: bool,
    ) -> Result<Lease, StorageError> {
        cleanup_own_tmp(cam_dir, node);
        let token = unique_token();
        for _ in 0..3 {
            let now = now_ms();
            let cur = current(cam_dir, ttl)?;
            let gen = match &cur {
                None => 1,
                Some((_, Some(info)))
                    if info.expires_ms > now && !(own_takeover && info.holder == node) =>
                {
                    return Err(StorageError::LeaseHeld {
                        camera: camera.to_string(),
                        holder: info.holder.clone(),
                        expires_in_ms: info.expires_ms - now,
                    });
                }
                Some((g, _)) => g + 1,
            };
            let mut lease = Lease {
                cam_dir: cam_dir.to_path_buf(),
                camera: camera.to_string(),
                node: node.to_string(),
                token,
                ttl,
                gen: gen.saturating_sub(1),
                expires_ms: 0,
                renewed_at: Instant::now(),
                lost: false,
            };
            match lease.publish(now + ttl.as_millis() as i64) {
                Ok(true) => return Ok(lease),
                Ok(false) => continue, // someone else won this generation: re-read
                Err(e) => return Err(e),
            }
        }
        let now = now_ms();
        let (holder, expires_in_ms) = match current(cam_dir, ttl)? {
            Some((_, Some(i))) => (i.holder, i.expires_ms - now),
            _ => ("?".to_string(), ttl.as_millis() as i64),
        };
        Err(StorageError::LeaseHeld {
            camera: camera.to_string(),
            holder,
            expires_in_ms,
        })
    }

    /// Creates generation `self.gen + 1` with the given expiry. Ok(false) when another node
    /// created that generation first.
    fn publish(&mut self, expires_ms: i64) -> Result<bool, StorageError> {
        crate::io_priority::out_of_idle(|| self.publish_now(expires_ms))
    }

    fn publish_now(&mut self, expires_ms: i64) -> Result<bool, StorageError> {
        let info = LeaseInfo {
            holder: self.node.clone(),
            token: self.token,
            expires_ms,
        };
        let tmp = self.cam_dir.join(format!(
            "{LEASE_TMP_PREFIX}{}-{:016x}",
            self.node,
            unique_token()
        ));
        let write = || -> io::Result<()> {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(info.render().as_bytes())?;
            f.sync_all()
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(StorageError::from_io(&tmp, e));
        }
        let next = lease_path(&self.cam_dir, self.gen + 1);
        let linked = fs::hard_link(&tmp, &next);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                let _ = sync_dir(&self.cam_dir);
                if self.gen > 0 {
                    let _ = fs::remove_file(lease_path(&self.cam_dir, self.gen));
                }
                self.gen += 1;
                self.expires_ms = expires_ms;
                self.renewed_at = Instant::now();
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(StorageError::from_io(&next, e)),
        }
    }

    fn lost_err(&mut self) -> StorageError {
        self.lost = true;
        StorageError::LeaseLost {
            camera: self.camera.clone(),
        }
    }

    /// Renews if a third of the TTL has passed since the last renewal.
    pub(crate) fn renew_if_due(&mut self) -> Result<(), StorageError> {
        if self.lost {
            return Err(self.lost_err());
        }
        if self.renewed_at.elapsed() >= self.ttl / 3 {
            self.renew()?;
        }
        Ok(())
    }

    /// Publishes the next generation; fails with `LeaseLost` if a competitor already did.
    pub(crate) fn renew(&mut self) -> Result<(), StorageError> {
        if self.lost {
            return Err(self.lost_err());
        }
        if self.publish(now_ms() + self.ttl.as_millis() as i64)? {
            Ok(())
        } else {
            Err(self.lost_err())
        }
    }

    /// Called right before a segment is renamed into place: renews when less than a third of
    /// the TTL is left, otherwise checks (one `stat`) that nobody has taken the lease over.
    pub(crate) fn confirm(&mut self) -> Result<(), StorageError> {
        if self.lost {
            return Err(self.lost_err());
        }
        let margin = self.ttl.as_millis() as i64 / 3;
        if now_ms() >= self.expires_ms - margin {
            return self.renew();
        }
        match fs::symlink_metadata(lease_path(&self.cam_dir, self.gen + 1)) {
            Ok(_) => Err(self.lost_err()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StorageError::from_io(&self.cam_dir, e)),
        }
    }

    /// Marks the lease released (expiry 0) so the next recorder need not wait for the TTL.
    pub(crate) fn release(&mut self) {
        if !self.lost {
            let _ = self.publish(0);
            self.lost = true;
        }
    }

    pub(crate) fn expires_ms(&self) -> i64 {
        self.expires_ms
    }
}

/// Removes lease temp files left by an earlier crash of this node.
fn cleanup_own_tmp(cam_dir: &Path, node: &str) {
    let prefix = format!("{LEASE_TMP_PREFIX}{node}-");
    if let Ok(rd) = fs::read_dir(cam_dir) {
        for e in rd.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
            {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// fsyncs a directory so a rename or link in it survives a power loss.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_and_expiring() {
        let d = tempfile::tempdir().unwrap();
        let ttl = Duration::from_millis(300);
        let mut a = Lease::acquire(d.path(), "c", "a", ttl, true).unwrap();
        let err = Lease::acquire(d.path(), "c", "b", ttl, true).unwrap_err();
        assert!(matches!(err, StorageError::LeaseHeld { ref holder, .. } if holder == "a"));
        a.renew().unwrap();
        a.confirm().unwrap();
        std::thread::sleep(ttl + Duration::from_millis(50));
        let _b = Lease::acquire(d.path(), "c", "b", ttl, true).unwrap();
        // The stalled holder finds out instead of writing on.
        assert!(matches!(a.confirm(), Err(StorageError::LeaseLost { .. })));
        assert!(matches!(a.renew(), Err(StorageError::LeaseLost { .. })));
    }

    #[test]
    fn release_frees_at_once() {
        let d = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(60);
        let mut a = Lease::acquire(d.path(), "c", "a", ttl, true).unwrap();
        a.release();
        let b = Lease::acquire(d.path(), "c", "b", ttl, true).unwrap();
        assert!(b.expires_ms() > now_ms());
        let (gen, info) = current(d.path(), ttl).unwrap().unwrap();
        assert_eq!((gen, info.unwrap().holder), (3, "b".to_string()));
    }

    #[test]
    fn racing_acquirers_one_winner() {
        let d = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(60);
        let wins: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|i| {
                    let p = d.path();
                    s.spawn(move || {
                        Lease::acquire(p, "c", &format!("n{i}"), ttl, false)
                            .map(std::mem::forget)
                            .is_ok()
                    })
                })
                .collect();
            hs.into_iter().map(|h| usize::from(h.join().unwrap())).sum()
        });
        assert_eq!(wins, 1);
    }
}
