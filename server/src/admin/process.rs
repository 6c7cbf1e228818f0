//! This process's CPU time and memory, from /proc (Linux). Used by `/api/node` and by
//! `vigil bench` to measure a node from outside.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq)]
pub struct ProcessStats {
    pub pid: u32,
    /// User + system CPU time consumed so far.
    pub cpu_seconds: f64,
    /// Resident set size.
    pub rss_bytes: u64,
    /// OS threads of the process.
    pub threads: u64,
}

/// Stats of process `pid` (None if it is gone or /proc is unreadable).
pub fn read(pid: u32) -> Option<ProcessStats> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields resume after its ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is index 0, so utime (field 14) is index 11, stime index 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // num_threads (field 20) is index 17.
    let threads: u64 = fields.get(17).and_then(|t| t.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Some(ProcessStats {
        pid,
        cpu_seconds: (utime + stime) / ticks,
        rss_bytes: rss_kb * 1024,
        threads,
    })
}

pub fn current() -> Option<ProcessStats> {
    read(std::process::id())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_own_process() {
        let s = super::current().unwrap();
        assert_eq!(s.pid, std::process::id());
        assert!(s.rss_bytes > 0);
        assert!(s.threads >= 1);
        assert!(s.cpu_seconds >= 0.0);
    }
}
