//! [`SegmentFile`]: how a segment's bytes reach its file — through the page cache, or past
//! it with direct I/O (`[storage] direct_io`).
//!
//! Written through the page cache, every recorded byte is copied once more by the CPU (into
//! a page-cache page the kernel first has to find, and later write back and reclaim): at
//! 1000 cameras × 2 Mb/s that copy was the largest item of a node's profile, a third of its
//! samples (docs/BENCHMARKS.md, "Recording at the disk's bandwidth"). A segment is written
//! once, front to back, and read later (if ever) by playback through its own cache, so the
//! page cache gains little from holding it. With `O_DIRECT` the device reads the recorder's
//! buffer itself. It is off by default all the same: once the writer pool stopped waking a
//! thread per frame, the node's CPU measured no lower with it, and each direct write waits
//! for the device, so the writers' throughput follows the LUN's latency instead of being
//! absorbed by the page cache. The buffer is the recorder's in both modes (aligned, kept from
//! one segment to the next).
//!
//! `O_DIRECT` wants the buffer's address, the file offset and the length aligned to the
//! device's logical block: the buffer here is [`ALIGN`]-aligned and only ever written whole
//! (`CAPACITY` bytes at offsets that are multiples of it). The one unaligned part, the
//! segment's tail, is written through the page cache after turning `O_DIRECT` off on the
//! descriptor (`fcntl(F_SETFL)`; Linux allows it), so the file's content and length are exactly
//! those of a buffered write and nothing in the format changes. Durability is the group
//! commit's, as before: `O_DIRECT` bypasses the page cache, not the device's volatile cache or
//! the file system's metadata, which the commit's `syncfs`/`fdatasync` still flush.
//!
//! A file system that refuses `O_DIRECT` (at open, e.g. an old tmpfs; or at the first write,
//! some FUSE or network file systems) gets the same bytes through the page cache: the
//! descriptor falls back once and stays buffered. `direct = false` in [`SegmentFile::create`]
//! (`[storage] direct_io = false`) asks for that from the start.
//!
//! Hand-written: the alignment logic is a few lines over `std::fs::File`; the crates that
//! wrap `O_DIRECT` bring async runtimes or `io_uring` with them.

use crate::io_priority::WriteBehind;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Alignment of the buffer, offsets and lengths of direct writes: the largest logical block
/// size of common devices (512 and 4096), so it satisfies both.
pub(crate) const ALIGN: usize = 4096;
/// The buffer: the size of one write (a multiple of [`ALIGN`]).
pub(crate) const CAPACITY: usize = 256 * 1024;

/// A buffer of `CAPACITY` bytes whose start is `ALIGN`-aligned, carved out of a slightly
/// larger `Vec` (no `unsafe` allocation). Kept by the recorder from one segment to the next.
pub(crate) struct AlignedBuf {
    mem: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub(crate) fn new() -> AlignedBuf {
        let mem = vec![0u8; CAPACITY + ALIGN];
        let start = mem.as_ptr().align_offset(ALIGN);
        AlignedBuf { mem, start, len: 0 }
    }

    fn filled(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.len]
    }

    /// Copies as much of `data` as fits; returns how much.
    fn fill(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(CAPACITY - self.len);
        let at = self.start + self.len;
        self.mem[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        n
    }

    fn is_full(&self) -> bool {
        self.len == CAPACITY
    }
}

/// A segment file being written: the recorder's buffer in front of the file, written out
/// whole with `O_DIRECT` while the file allows it.
pub(crate) struct SegmentFile {
    out: WriteBehind,
    buf: AlignedBuf,
    /// Writes bypass the page cache (the descriptor has `O_DIRECT`).
    direct: bool,
}

impl SegmentFile {
    /// Creates (or truncates) `path`. `writeback_bytes` applies to buffered writing only (a
    /// direct write is on the device when it returns).
    pub(crate) fn create(
        path: &Path,
        direct: bool,
        writeback_bytes: u64,
        buf: AlignedBuf,
    ) -> io::Result<SegmentFile> {
        let open = |flags: i32| {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(flags)
                .open(path)
        };
        let (file, direct) = if direct {
            match open(libc::O_DIRECT) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(0)?, false),
                Err(e) => return Err(e),
            }
        } else {
            (open(0)?, false)
        };
        let chunk = if direct { 0 } else { writeback_bytes };
        let mut buf = buf;
        buf.len = 0;
        Ok(SegmentFile {
            out: WriteBehind::new(file, chunk),
            buf,
            direct,
        })
    }

    /// Whether writes still bypass the page cache.
    #[cfg(test)]
    pub(crate) fn is_direct(&self) -> bool {
        self.direct
    }

    /// Writes the buffer out whole (it is full, or it is the tail and `direct` is off).
    fn write_buf(&mut self) -> io::Result<()> {
        if self.buf.len == 0 {
            return Ok(());
        }
        match self.out.write_all(self.buf.filled()) {
            Ok(()) => {}
            // Accepted at open, refused at the write: buffered from now on. A direct write
            // that failed this way wrote nothing, so the whole buffer goes again.
            Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                self.set_direct(false)?;
                self.out.write_all(self.buf.filled())?;
            }
            Err(e) => return Err(e),
        }
        self.buf.len = 0;
        Ok(())
    }

    fn set_direct(&mut self, on: bool) -> io::Result<()> {
        if self.direct == on {
            return Ok(());
        }
        let fd = self.out.file().as_raw_fd();
        // SAFETY: F_GETFL/F_SETFL only read and set the status flags of a descriptor that
        // `self.out` keeps open.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::O_DIRECT
        } else {
            flags & !libc::O_DIRECT
        };
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
            return Err(io::Error::last_os_error());
        }
        self.direct = on;
        Ok(())
    }

    /// Writes what is buffered and returns the file and the buffer (for the next segment).
    pub(crate) fn into_parts(mut self) -> io::Result<(File, AlignedBuf)> {
        self.flush()?;
        Ok((self.out.into_inner(), self.buf))
    }
}

impl Write for SegmentFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = self.buf.fill(data);
        if self.buf.is_full() {
            self.write_buf()?;
        }
        Ok(n)
    }

    /// Writes the buffer, aligned or not: a partial buffer is the segment's tail, so the
    /// descriptor leaves `O_DIRECT` for it (and stays buffered if written to again).
    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.len.is_multiple_of(ALIGN) {
            self.set_direct(false)?;
        }
        self.write_buf()?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn read(path: &Path) -> Vec<u8> {
        let mut v = Vec::new();
        File::open(path).unwrap().read_to_end(&mut v).unwrap();
        v
    }

    /// Whatever the mix of small and large writes, the file holds exactly the bytes written,
    /// with its unaligned tail, in both modes; the buffer serves the next file.
    #[test]
    fn the_file_holds_exactly_what_was_written_in_both_modes() {
        let dir = tempfile::tempdir().unwrap();
        let mut buf = AlignedBuf::new();
        for direct in [true, false] {
            for (i, total) in [
                0usize,
                1,
                4095,
                4096,
                CAPACITY,
                CAPACITY + 1,
                3 * CAPACITY + 777,
            ]
            .into_iter()
            .enumerate()
            {
                let path = dir.path().join(format!("{direct}-{i}"));
                let mut f = SegmentFile::create(&path, direct, 0, buf).unwrap();
                let data = pattern(total, i as u8);
                // Writes of uneven sizes, one larger than the buffer.
                let mut rest = &data[..];
                let mut step = 23;
                while !rest.is_empty() {
                    let n = step.min(rest.len());
                    f.write_all(&rest[..n]).unwrap();
                    rest = &rest[n..];
                    step = if step > CAPACITY { 23 } else { step * 7 };
                }
                let (file, b) = f.into_parts().unwrap();
                assert_eq!(
                    file.metadata().unwrap().len(),
                    total as u64,
                    "{direct} {total}"
                );
                drop(file);
                assert!(
                    read(&path) == data,
                    "content of {total} bytes, direct {direct}"
                );
                buf = b;
            }
        }
    }

    /// A file system that takes `O_DIRECT` writes the whole buffers past the page cache; the
    /// tail turns it off. (Skipped where the test directory's file system refuses it.)
    #[test]
    fn whole_buffers_go_direct_and_the_tail_leaves_direct_io() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let mut f = SegmentFile::create(&path, true, 0, AlignedBuf::new()).unwrap();
        if !f.is_direct() {
            eprintln!("the test directory's file system refuses O_DIRECT: nothing to check");
            return;
        }
        f.write_all(&pattern(CAPACITY + 10, 1)).unwrap();
        assert!(f.is_direct(), "a whole buffer keeps O_DIRECT");
        let fd = f.out.file().as_raw_fd();
        // SAFETY: reads the flags of a descriptor `f` keeps open.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        assert_ne!(flags & libc::O_DIRECT, 0);
        f.flush().unwrap();
        assert!(!f.is_direct(), "the tail is written through the page cache");
        // SAFETY: as above.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        assert_eq!(flags & libc::O_DIRECT, 0);
        let (file, _) = f.into_parts().unwrap();
        assert_eq!(file.metadata().unwrap().len(), (CAPACITY + 10) as u64);
    }

    #[test]
    fn the_buffer_is_aligned() {
        for _ in 0..8 {
            let b = AlignedBuf::new();
            assert_eq!(b.filled().as_ptr() as usize % ALIGN, 0);
            assert!(b.mem.len() - b.start >= CAPACITY);
        }
    }
}
