//! Memory hints for walks over many viewers.
//!
//! A group's walk sends each of its viewers (up to 256, `live_sender::group::GROUP_MAX`) one frame: a
//! few hundred nanoseconds of work around a send call, on memory of the viewer's own — its
//! slot, its reader's tracks, its socket's state — that the kernel's work since the last
//! frame has pushed out of the caches. Each first touch was a cache miss paid in full, one
//! after another (`perf annotate` at 1000 TCP viewers: two thirds of `Reader::poll_shared`'s
//! samples on the load of the viewer's track, most of `Slot::pump`'s on its sink's lock).
//! The walk asks for the next viewers' memory a few viewers ahead, so it arrives while
//! earlier ones are sent (docs/BENCHMARKS.md, "The walk's memory fetched ahead").
//!
//! Hand-written: `std` has no stable prefetch outside `core::arch`.

/// Asks for the `len` bytes at `p` to be brought into the caches. A hint only: it never
/// faults and changes nothing, whatever `p` is, so a stale or dangling pointer is harmless.
#[inline(always)]
pub fn prefetch<T>(p: *const T, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = (p as usize) & !63;
        let end = (p as usize).wrapping_add(len);
        let mut line = start;
        while line < end {
            // SAFETY: PREFETCHT0 is a hint that never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// [`prefetch`] of one value.
#[inline(always)]
pub fn prefetch_val<T>(v: &T) {
    prefetch(v as *const T, std::mem::size_of::<T>());
}

/// [`prefetch`] of a slice's elements.
#[inline(always)]
pub fn prefetch_slice<T>(s: &[T]) {
    prefetch(s.as_ptr(), std::mem::size_of_val(s));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hint may name memory that is not mapped (null, a freed allocation) without a
    /// fault, and leaves what it names as it was: what the module promises its callers.
    #[test]
    fn hints_never_fault_and_change_nothing() {
        prefetch(std::ptr::null::<u8>(), 4096);
        prefetch(usize::MAX as *const u8, 4096);
        let freed = {
            let v = vec![7u8; 100_000];
            v.as_ptr()
        };
        prefetch(freed, 100_000);
        let values = [1u64, 2, 3, 4, 5, 6, 7, 8, 9];
        prefetch_slice(&values);
        prefetch_val(&values);
        assert_eq!(values, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    }
}
