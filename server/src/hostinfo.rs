//! What the operating system says about this host that the exporter and `vigil ctl doctor`
//! both need: the free space of the file system holding a path, and the open-file limit.
//! Thin wrappers over libc, kept apart from `procfs` (which reads /proc text) so each reads
//! one kind of source.

use std::path::Path;

/// Space of the file system holding a path, as statvfs(3) gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Bytes of the file system.
    pub size: u64,
    /// Bytes an unprivileged process may still write (`f_bavail`): what a recorder gets.
    pub available: u64,
}

/// statvfs(3) of `path`. Blocks as long as the file system does (a hung NFS mount): call it
/// off the async runtime.
pub fn fs_space(path: &Path) -> std::io::Result<Space> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated string, `st` a zeroed statvfs the call fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; statvfs writes only into `st`.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frag = st.f_frsize as u64;
    Ok(Space {
        size: (st.f_blocks as u64).saturating_mul(frag),
        available: (st.f_bavail as u64).saturating_mul(frag),
    })
}

/// The soft and hard RLIMIT_NOFILE of this process (`u64::MAX` for unlimited).
pub fn open_file_limit() -> std::io::Result<(u64, u64)> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into `rl`.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // rlim_t is u64 here but not on every target.
    #[allow(clippy::unnecessary_cast)]
    let v = |x: libc::rlim_t| {
        if x == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            x as u64
        }
    };
    Ok((v(rl.rlim_cur), v(rl.rlim_max)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_space_of_a_temp_dir_is_plausible_and_a_missing_path_an_error() {
        let dir = std::env::temp_dir();
        let s = fs_space(&dir).expect("statvfs of the temp dir");
        assert!(s.size > 0 && s.available <= s.size, "{s:?}");
        assert!(fs_space(Path::new("/nonexistent/vigil/doctor")).is_err());
        let (soft, hard) = open_file_limit().expect("getrlimit");
        assert!(soft > 0 && soft <= hard, "{soft} {hard}");
    }
}
