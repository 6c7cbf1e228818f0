//! The crate's error type and the mapping from `std::io::Error`.
//!
//! The server reacts differently to a full disk (stop recording the camera, report it, retry
//! later) than to other I/O failures, so out-of-space conditions get their own variant.

use std::io;
use std::path::{Path, PathBuf};

/// Everything that can go wrong in `vigil-storage`.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The volume (or the user's quota on it) is full: `ENOSPC` or `EDQUOT`. The segment being
    /// written was discarded; recording can be retried once space is freed.
    #[error("storage full while writing {path}")]
    DiskFull { path: PathBuf },
    /// Another live node owns the camera's write lease.
    #[error("camera {camera} is recorded by {holder} (lease expires in {expires_in_ms} ms)")]
    LeaseHeld {
        camera: String,
        holder: String,
        expires_in_ms: i64,
    },
    /// The recorder found that another node took its lease over (it stalled past the lease's
    /// expiry); it stops writing so two nodes never write one camera.
    #[error("lost the write lease of camera {camera}")]
    LeaseLost { camera: String },
    /// The root no longer holds the id it had when the store opened it: the share was
    /// unmounted (its empty mount point left behind) or replaced. Nothing is written there,
    /// so a node never records to its own disk while the cluster reads the share.
    #[error(
        "the storage root {root} is no longer the one this node opened (id {expected}, now {}): \
         recording stopped until it is back",
        found.as_deref().unwrap_or("none: is the share unmounted?")
    )]
    RootChanged {
        root: PathBuf,
        expected: String,
        found: Option<String>,
    },
    /// No recording exists for this camera under the root.
    #[error("unknown camera {0}")]
    UnknownCamera(String),
    /// A file does not have the expected format or fails its checksum.
    #[error("corrupt {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// A camera or node id that is not `[A-Za-z0-9._-]+` (ids become path components).
    #[error("invalid id {0:?}: use [A-Za-z0-9._-], not . or ..")]
    InvalidCamera(String),
    /// Any other I/O failure, with the path it concerned.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl StorageError {
    /// Classifies an I/O error on `path`: out-of-space conditions become
    /// [`StorageError::DiskFull`], everything else [`StorageError::Io`].
    pub fn from_io(path: impl AsRef<Path>, source: io::Error) -> Self {
        let path = path.as_ref().to_path_buf();
        if is_disk_full(&source) {
            StorageError::DiskFull { path }
        } else {
            StorageError::Io { path, source }
        }
    }

    /// True for [`StorageError::DiskFull`]; a convenience for the server's retry logic.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StorageError::DiskFull { .. })
    }
}

/// True when the error means "no space left": `ENOSPC` on a full file system, `EDQUOT` when the
/// user's quota is exhausted (NFS servers report either), or the equivalent `ErrorKind`s.
pub fn is_disk_full(e: &io::Error) -> bool {
    match e.raw_os_error() {
        Some(code) => code == libc::ENOSPC || code == libc::EDQUOT,
        None => matches!(
            e.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        ),
    }
}

/// Shorthand for mapping an `io::Result` with its path.
pub(crate) trait IoContext<T> {
    fn at(self, path: &Path) -> Result<T, StorageError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T, StorageError> {
        self.map_err(|e| StorageError::from_io(path, e))
    }
}

/// Whether an id (camera or node) may become a path component: non-empty, at most 128
/// characters of `[A-Za-z0-9._-]`, not starting with '.' (so never `.`/`..`): it can never
/// escape the root. The one rule for camera ids: config, publishers, playback URLs and the
/// API all check ids with it (through `vigil_conf::is_valid_camera_id`).
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// [`is_valid_id`] as a typed error.
pub(crate) fn validate_id(id: &str) -> Result<(), StorageError> {
    if is_valid_id(id) {
        Ok(())
    } else {
        Err(StorageError::InvalidCamera(id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_and_edquot_map_to_disk_full() {
        for code in [libc::ENOSPC, libc::EDQUOT] {
            let e = StorageError::from_io("/x", io::Error::from_raw_os_error(code));
            assert!(e.is_disk_full(), "{code}: {e}");
        }
        let e = StorageError::from_io("/x", io::Error::from(io::ErrorKind::StorageFull));
        assert!(e.is_disk_full());
        let e = StorageError::from_io("/x", io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(e, StorageError::Io { .. }));
        let e = StorageError::from_io("/x", io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(matches!(e, StorageError::Io { .. }));
    }

    #[test]
    fn ids_reject_traversal() {
        for bad in ["", ".", "..", "../x", "a/b", ".hidden", "a b", "cam\0", "ä"] {
            assert!(validate_id(bad).is_err(), "{bad:?}");
        }
        for good in ["cam1", "front-door", "a.b_c-9"] {
            assert!(validate_id(good).is_ok(), "{good:?}");
        }
    }
}
