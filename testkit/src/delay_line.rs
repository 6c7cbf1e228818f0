//! A delay line on a host's link of the bed ([`crate::hosts`]), for kernels that cannot
//! delay a packet: this machine's has no `netem`, `fq` or `etf` qdisc (only `htb`, `tbf`,
//! `pfifo` and `clsact`: a token bucket, a FIFO, a classifier hook), so no qdisc holds a
//! packet back by time. The link itself stays the kernel's: the host's `eth0` and its veth
//! peer, the port, in the switch namespace. The line takes the port out of the bridge and
//! puts a TAP device in its place; a raw `AF_PACKET` socket on the port reads every frame
//! the host sends, and a thread writes it into the TAP — onto the bridge — `delay ± jitter`
//! after it arrived, in arrival order (no reordering); frames to the host pass through at
//! once. Loss, partitions (nftables in the host), a link down (the port) and the MTU stay as
//! they were.
//!
//! Hand-written on libc (`socket(AF_PACKET)`, `/dev/net/tun`, `poll`): the crates for either
//! (`tun`, `pnet`) would bring an async runtime or a packet-parsing stack for two file
//! descriptors that only copy frames.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The largest frame the line copies (segmentation offloads are off on every host's link,
/// so a frame is at most the MTU and its Ethernet header).
const FRAME: usize = 65_536;
/// How often a blocked thread looks at the stop flag.
const TICK_MS: i32 = 100;

/// A running delay line; stopped (its threads joined, its TAP gone) on drop.
pub struct DelayLine {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Frames waiting for their time, with when each is due.
struct Queue {
    frames: Mutex<VecDeque<(Instant, Vec<u8>)>>,
    ready: Condvar,
}

impl DelayLine {
    /// Opens the TAP `tap` and a raw socket on `port` in the namespace the calling thread
    /// is in (the bed's switch), and starts copying: frames from the port reach the TAP
    /// `delay` ± `jitter` later, frames from the TAP reach the port at once. The caller
    /// puts the TAP on the bridge in the port's place.
    pub fn start(port: &str, tap: &str, delay: Duration, jitter: Duration) -> io::Result<Self> {
        let tap_fd = open_tap(tap)?;
        let raw = open_raw(port)?;
        let stop = Arc::new(AtomicBool::new(false));
        let queue = Arc::new(Queue {
            frames: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        });
        let (raw, tap_fd) = (Arc::new(raw), Arc::new(tap_fd));
        let mut threads = Vec::new();
        // Host → bridge: read, stamp with its due time, queue.
        {
            let (raw, queue, stop) = (raw.clone(), queue.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut rng = Jitter(0x9E37_79B9_7F4A_7C15 ^ delay.as_nanos() as u64);
                let mut last_due = Instant::now();
                let mut buf = vec![0u8; FRAME];
                while !stop.load(Ordering::Relaxed) {
                    let Some(n) = read_ready(&raw, &mut buf) else {
                        continue;
                    };
                    let due = (Instant::now() + rng.around(delay, jitter)).max(last_due);
                    last_due = due;
                    let mut q = queue.frames.lock().unwrap_or_else(|p| p.into_inner());
                    q.push_back((due, buf[..n].to_vec()));
                    queue.ready.notify_one();
                }
                queue.ready.notify_all();
            }));
        }
        // Queue → bridge, each frame at its time.
        {
            let (tap_fd, queue, stop) = (tap_fd.clone(), queue.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut q = queue.frames.lock().unwrap_or_else(|p| p.into_inner());
                while !stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    let wait = match q.front() {
                        Some((due, _)) if *due <= now => {
                            if let Some((_, frame)) = q.pop_front() {
                                write_frame(&tap_fd, &frame);
                            }
                            continue;
                        }
                        Some((due, _)) => *due - now,
                        None => Duration::from_millis(TICK_MS as u64),
                    };
                    q = queue
                        .ready
                        .wait_timeout(q, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }));
        }
        // Bridge → host, at once.
        {
            let (raw, tap_fd, stop) = (raw.clone(), tap_fd.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; FRAME];
                while !stop.load(Ordering::Relaxed) {
                    if let Some(n) = read_ready(&tap_fd, &mut buf) {
                        write_frame(&raw, &buf[..n]);
                    }
                }
            }));
        }
        Ok(DelayLine { stop, threads })
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A small xorshift: the jitter needs spread, not quality.
struct Jitter(u64);

impl Jitter {
    /// `delay` ± up to `jitter`, uniformly.
    fn around(&mut self, delay: Duration, jitter: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let span = jitter.as_nanos() as i128;
        if span == 0 {
            return delay;
        }
        let off = (self.0 % (2 * span as u64 + 1)) as i128 - span;
        Duration::from_nanos((delay.as_nanos() as i128 + off).max(0) as u64)
    }
}

/// A TAP device named `name` (no packet-info header: the descriptor reads and writes bare
/// Ethernet frames), in the calling thread's namespace.
fn open_tap(name: &str) -> io::Result<OwnedFd> {
    // SAFETY: a constant path; the returned descriptor is checked and then owned.
    let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= ifr.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "TAP name too long",
        ));
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes an ifreq, which `ifr` is.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &mut ifr) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// A raw packet socket bound to interface `name`, not seeing what it sends itself.
fn open_raw(name: &str) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    // SAFETY: a valid C string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket creation; the result is checked and then owned.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(proto),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = index as i32;
    // SAFETY: `addr` is a sockaddr_ll of the size passed.
    let bound = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::addr_of!(addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if bound < 0 {
        return Err(io::Error::last_os_error());
    }
    let one: libc::c_int = 1;
    // SAFETY: an int option of the size passed.
    let set = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            std::ptr::addr_of!(one).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// One frame from `fd` once it is readable within a tick, else None (to look at the stop
/// flag).
fn read_ready(fd: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut p, 1, TICK_MS) } <= 0 {
        return None;
    }
    // SAFETY: `buf` is valid for its length.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    (n > 0).then_some(n as usize)
}

/// Writes one frame; a frame the link refuses (down, too big) is lost, as on a wire.
fn write_frame(fd: &OwnedFd, frame: &[u8]) {
    // SAFETY: `frame` is valid for its length.
    let _ = unsafe { libc::write(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_spreads_around_the_delay_within_its_bound() {
        let mut j = Jitter(42);
        let (d, s) = (Duration::from_millis(10), Duration::from_micros(2_500));
        let v: Vec<Duration> = (0..10_000).map(|_| j.around(d, s)).collect();
        assert!(v.iter().all(|x| *x >= d - s && *x <= d + s));
        let mean = v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len() as f64;
        assert!((mean - 0.010).abs() < 0.000_2, "mean {mean}");
        assert!(v.iter().any(|x| *x < d - s / 2) && v.iter().any(|x| *x > d + s / 2));
        assert_eq!(Jitter(7).around(d, Duration::ZERO), d);
    }
}
