//! Keeping playback reads ahead of recording writes on the disk.
//!
//! A segment read for playback is on a viewer's critical path (connect → first keyframe); a
//! recording write is not (it is queued in memory and only needs to reach the disk before its
//! group commit). With a saturated disk the two compete in the block layer's queue, and a read
//! waited behind seconds of write-back (docs/BENCHMARKS.md, "City scale"). Two measures:
//!
//! - the threads that write recordings run in a lower I/O priority class ([`WriterIoClass`]):
//!   the kernel's I/O schedulers that honour classes (mq-deadline, BFQ) dispatch every
//!   waiting read of the normal class first. `ioprio_set(2)` applies to the calling thread.
//! - optionally (`writeback_kb`, off by default: it did not measure better on the virtio
//!   disk of docs/BENCHMARKS.md) the writer itself starts the write-back of what it has
//!   written ([`WriteBehind`], `sync_file_range(SYNC_FILE_RANGE_WRITE)`): the I/O is then issued
//!   by the writer's thread, in its class, a little at a time, instead of by the kernel's
//!   flusher threads (normal class, in bursts when the dirty limit or a sync is reached). It
//!   also bounds the dirty bytes a group commit's sync must write.

use std::fs::File;
use std::io::{self, Write};

/// The I/O priority class of the recording writer threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriterIoClass {
    /// Served only when no other I/O waits (mq-deadline still serves it after its aging
    /// limit, 10 s by default, so recording is delayed, never starved).
    #[default]
    Idle,
    /// Best effort, lowest level: below the default level in schedulers that use levels
    /// (BFQ); the same class as reads in mq-deadline.
    Low,
    /// Unchanged (the process's own class).
    Normal,
}

const IOPRIO_CLASS_SHIFT: u32 = 13;
const IOPRIO_CLASS_BE: u32 = 2;
const IOPRIO_CLASS_IDLE: u32 = 3;
const IOPRIO_WHO_PROCESS: libc::c_int = 1;

/// The `ioprio_set(2)` value of a class (pure; `None`: leave the thread as it is).
pub fn ioprio_value(class: WriterIoClass) -> Option<u32> {
    match class {
        WriterIoClass::Idle => Some(IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT),
        WriterIoClass::Low => Some((IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | 7),
        WriterIoClass::Normal => None,
    }
}

/// Puts the calling thread in `class` (Linux; elsewhere a no-op).
pub fn set_current_thread(class: WriterIoClass) -> io::Result<()> {
    let Some(value) = ioprio_value(class) else {
        return Ok(());
    };
    // SAFETY: ioprio_set takes three integers; who = 0 is the calling thread.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0,
            value as libc::c_int,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

const IOPRIO_CLASS_NONE: libc::c_int = 0;

/// Runs `f` with the calling thread out of the idle class, when it is in it: a lease renewal
/// on a writer thread must not wait behind other I/O for up to mq-deadline's aging limit
/// (10 s), most of a lease's lifetime (15 s by default, renewed at 5 s). Other classes run
/// `f` as they are.
pub(crate) fn out_of_idle<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: ioprio_get takes two integers; who = 0 is the calling thread.
    let cur = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0) };
    let idle = cur >= 0 && (cur as u32) >> IOPRIO_CLASS_SHIFT == IOPRIO_CLASS_IDLE;
    if !idle {
        return f();
    }
    // SAFETY: as above; class NONE = the default derived from the thread's nice value.
    unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0,
            IOPRIO_CLASS_NONE,
        )
    };
    let r = f();
    // SAFETY: as above; back to the class it had.
    unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0,
            cur as libc::c_int,
        )
    };
    r
}

/// A file that starts the write-back of every `chunk` bytes written to it (0: never).
pub(crate) struct WriteBehind {
    file: File,
    chunk: u64,
    written: u64,
    /// Where the last write-back started stops.
    started: u64,
}

impl WriteBehind {
    pub(crate) fn new(file: File, chunk: u64) -> WriteBehind {
        WriteBehind {
            file,
            chunk,
            written: 0,
            started: 0,
        }
    }

    pub(crate) fn into_inner(self) -> File {
        self.file
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// The range to write back now, if a chunk is full (pure).
    fn due(&self) -> Option<(u64, u64)> {
        (self.chunk > 0 && self.written - self.started >= self.chunk)
            .then(|| (self.started, self.written - self.started))
    }

    fn start_writeback(&mut self) {
        let Some((offset, len)) = self.due() else {
            return;
        };
        use std::os::fd::AsRawFd;
        // SAFETY: sync_file_range only reads the descriptor, which `self.file` keeps open.
        // Advisory: an error (a file system without it) costs nothing but the write-behind,
        // and the group commit's sync still makes the data durable.
        let _ = unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        self.started = self.written;
    }
}

impl Write for WriteBehind {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        self.start_writeback();
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_values_are_the_kernels() {
        assert_eq!(ioprio_value(WriterIoClass::Idle), Some(3 << 13));
        assert_eq!(ioprio_value(WriterIoClass::Low), Some((2 << 13) | 7));
        assert_eq!(ioprio_value(WriterIoClass::Normal), None);
    }

    /// A thread in the idle class leaves it for the call and comes back to it.
    #[test]
    fn out_of_idle_restores_the_class() {
        std::thread::spawn(|| {
            let get = || unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0) };
            if set_current_thread(WriterIoClass::Idle).is_err() {
                return; // a kernel without ioprio: nothing to test
            }
            let idle = get();
            let inside = out_of_idle(get);
            assert_ne!(inside >> 13, 3, "still idle inside");
            assert_eq!(get(), idle);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn write_back_starts_every_chunk() {
        let f = tempfile::tempfile().unwrap();
        let mut w = WriteBehind::new(f, 1000);
        w.write_all(&[0; 600]).unwrap();
        assert_eq!(w.due(), None);
        assert_eq!(w.started, 0);
        w.write_all(&[0; 600]).unwrap();
        assert_eq!(w.started, 1200, "the whole written range was started");
        w.write_all(&[0; 999]).unwrap();
        assert_eq!(w.started, 1200);
        let mut off = WriteBehind::new(tempfile::tempfile().unwrap(), 0);
        off.write_all(&[0; 5000]).unwrap();
        assert_eq!(off.due(), None);
    }
}
