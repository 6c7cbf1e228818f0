//! Everything vigil reads from Linux's /proc, in one place: the machine's CPU times and
//! memory (the §C.1 indicators a node gossips, and `vigil bench`'s whole-machine figures),
//! one process's CPU time, memory, threads and bytes written (`/api/node`, benches), the
//! machine's CPU model, memory and load average (the lab's reports), and the kernel's UDP receive errors and
//! backlog drops (the tests' UDP readers report them on failure), and whether a loopback TCP
//! connection's other end is a socket of this process (the RTSPS bridge's check).
//! The parsers are pure functions over the file's text, unit-tested without /proc.

use serde::{Deserialize, Serialize};

/// Clock ticks per second, the unit of /proc's CPU times.
fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// The aggregate `cpu` line of /proc/stat, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    /// idle + iowait.
    pub idle: u64,
    /// user nice system idle iowait irq softirq steal.
    pub total: u64,
    pub softirq: u64,
}

impl CpuTimes {
    pub fn parse(stat: &str) -> Option<CpuTimes> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() < 4 {
            return None;
        }
        Some(CpuTimes {
            idle: v[3] + v.get(4).copied().unwrap_or(0),
            total: v.iter().sum(),
            softirq: v.get(6).copied().unwrap_or(0),
        })
    }

    pub fn read() -> Option<CpuTimes> {
        CpuTimes::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// (busy, softirq) CPU seconds over all cores.
    pub fn seconds(&self) -> (f64, f64) {
        let hz = ticks_per_sec();
        (
            self.total.saturating_sub(self.idle) as f64 / hz,
            self.softirq as f64 / hz,
        )
    }
}

/// θ_mem = (MemTotal − MemAvailable)/MemTotal (§C.1), from /proc/meminfo's text.
pub fn parse_mem_utilisation(meminfo: &str) -> Option<f64> {
    let total = field(meminfo, "MemTotal:")? as f64;
    let avail = field(meminfo, "MemAvailable:")? as f64;
    (total > 0.0).then(|| ((total - avail) / total).clamp(0.0, 1.0))
}

/// The machine's memory utilisation now (0 when /proc is unreadable).
pub fn mem_utilisation() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_mem_utilisation(&t))
        .unwrap_or(0.0)
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq)]
pub struct ProcessStats {
    pub pid: u32,
    /// User + system CPU time consumed so far.
    pub cpu_seconds: f64,
    /// Of that, user space: on loopback the receivers' softirq work runs in the sender's
    /// system time, so what a relay itself spends is clearer here.
    pub user_seconds: f64,
    /// Resident set size.
    pub rss_bytes: u64,
    /// OS threads of the process.
    pub threads: u64,
}

/// (utime + stime ticks, utime ticks, threads) from /proc/<pid>/stat's text.
fn parse_pid_stat(stat: &str) -> Option<(f64, f64, u64)> {
    // The command name (field 2) may contain spaces; fields resume after its ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is index 0, so utime (field 14) is index 11, stime index 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // num_threads (field 20) is index 17.
    let threads: u64 = fields.get(17).and_then(|t| t.parse().ok()).unwrap_or(0);
    Some((utime + stime, utime, threads))
}

/// The value of a `Name: value` line (first word) in /proc/meminfo, /proc/<pid>/status or io.
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Stats of process `pid` (None if it is gone or /proc is unreadable).
pub fn process(pid: u32) -> Option<ProcessStats> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (ticks, user_ticks, threads) = parse_pid_stat(&stat)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb = field(&status, "VmRSS:").unwrap_or(0);
    Some(ProcessStats {
        pid,
        cpu_seconds: ticks / ticks_per_sec(),
        user_seconds: user_ticks / ticks_per_sec(),
        rss_bytes: rss_kb * 1024,
        threads,
    })
}

/// This process's stats.
pub fn current() -> Option<ProcessStats> {
    process(std::process::id())
}

/// /proc/<pid>/io `wchar`: bytes passed to write(2) and friends.
pub fn written_bytes(pid: u32) -> Option<u64> {
    field(
        &std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?,
        "wchar:",
    )
}

/// The machine a report was measured on, as the lab's reports describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub cpus: usize,
    /// `model name` of /proc/cpuinfo.
    pub model: Option<String>,
    /// `MemTotal` of /proc/meminfo.
    pub mem_kib: Option<u64>,
    /// The three load averages of /proc/loadavg, as written there.
    pub load: Option<String>,
}

impl Machine {
    /// This machine now (fields /proc does not give are None).
    pub fn read() -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            model: read("/proc/cpuinfo").and_then(|t| parse_cpu_model(&t)),
            mem_kib: read("/proc/meminfo").and_then(|t| field(&t, "MemTotal:")),
            load: read("/proc/loadavg").and_then(|t| parse_loadavg(&t)),
        }
    }
}

/// The first `model name` of /proc/cpuinfo's text.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    let line = cpuinfo.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

/// The 1, 5 and 15 min load averages of /proc/loadavg's text.
pub fn parse_loadavg(loadavg: &str) -> Option<String> {
    let v: Vec<&str> = loadavg.split_whitespace().take(3).collect();
    (v.len() == 3).then(|| v.join(" "))
}

/// `InErrors` of the `Udp:` lines in /proc/net/snmp's text: datagrams the kernel dropped on
/// receipt (full receive buffers and every other cause), machine-wide.
pub fn parse_udp_in_errors(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let at = names.split_whitespace().position(|n| n == "InErrors")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// The machine's UDP receive errors now (None when /proc is unreadable).
pub fn udp_in_errors() -> Option<u64> {
    parse_udp_in_errors(&std::fs::read_to_string("/proc/net/snmp").ok()?)
}

/// The second column of /proc/net/softnet_stat (hex, one line per CPU), summed: packets the
/// kernel dropped because a CPU's input backlog (`net.core.netdev_max_backlog`) was full.
/// Loopback traffic passes that backlog too, and these drops are counted in no UDP counter.
pub fn parse_softnet_dropped(softnet: &str) -> Option<u64> {
    softnet
        .lines()
        .map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .sum()
}

/// The machine's backlog drops now (None when /proc is unreadable).
pub fn softnet_dropped() -> Option<u64> {
    parse_softnet_dropped(&std::fs::read_to_string("/proc/net/softnet_stat").ok()?)
}

/// The gateway through which `ip` is reached in the main IPv4 routing table
/// (`/proc/net/route`): `Some` when its longest-prefix route has one (`RTF_GATEWAY`), `None`
/// when `ip` is on a link of this host, is a loopback address (the local table has those,
/// not this one, so the default route would match them), or has no route there.
pub fn parse_route_gateway(route: &str, ip: std::net::Ipv4Addr) -> Option<std::net::Ipv4Addr> {
    if ip.is_loopback() {
        return None;
    }
    const RTF_UP: u32 = 0x1;
    const RTF_GATEWAY: u32 = 0x2;
    // The kernel prints addresses as the u32 in host byte order of their network-order
    // bytes: little-endian hex on the machines vigil runs on.
    let addr = |hex: &str| {
        u32::from_str_radix(hex, 16)
            .ok()
            .map(|v| u32::from_be_bytes(v.to_le_bytes()))
    };
    let target = u32::from(ip);
    route
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (dest, gw, flags, metric, mask) = (
                addr(f.get(1)?)?,
                addr(f.get(2)?)?,
                u32::from_str_radix(f.get(3)?, 16).ok()?,
                f.get(6)?.parse::<u32>().ok()?,
                addr(f.get(7)?)?,
            );
            (flags & RTF_UP != 0 && target & mask == dest & mask).then_some((
                mask.count_ones(),
                std::cmp::Reverse(metric),
                flags,
                gw,
            ))
        })
        .max_by_key(|&(len, metric, ..)| (len, metric))
        .and_then(|(_, _, flags, gw)| (flags & RTF_GATEWAY != 0).then(|| gw.into()))
}

/// [`parse_route_gateway`] of this host's `/proc/net/route` (`None` if unreadable).
pub fn route_gateway(ip: std::net::Ipv4Addr) -> Option<std::net::Ipv4Addr> {
    parse_route_gateway(&std::fs::read_to_string("/proc/net/route").ok()?, ip)
}

/// `addr` as /proc/net/tcp spells a local or remote address: the IPv4 address as the
/// kernel's native (little-endian) u32 in hex, a colon, the port in hex.
fn proc_tcp_addr(addr: std::net::SocketAddrV4) -> String {
    format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(addr.ip().octets()),
        addr.port()
    )
}

/// The inode of the IPv4 TCP socket whose local end is `local` and remote end `remote`, in
/// /proc/net/tcp's `text`.
pub fn parse_tcp_inode(
    text: &str,
    local: std::net::SocketAddrV4,
    remote: std::net::SocketAddrV4,
) -> Option<u64> {
    let (l, r) = (proc_tcp_addr(local), proc_tcp_addr(remote));
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&l.as_str()) && f.get(2) == Some(&r.as_str()))
            .then(|| f.get(9)?.parse().ok())
            .flatten()
    })
}

/// Whether the connection that reached `listener` from `peer` (both on 127.0.0.0/8) was
/// opened by this process: its socket (local end `peer`) is one of this process's open
/// descriptors. Another local process connecting first to a loopback port meant for this
/// process's own client is told apart so.
pub fn is_own_loopback_peer(peer: std::net::SocketAddr, listener: std::net::SocketAddr) -> bool {
    let (std::net::SocketAddr::V4(peer), std::net::SocketAddr::V4(listener)) = (peer, listener)
    else {
        return false;
    };
    let Some(inode) = std::fs::read_to_string("/proc/net/tcp")
        .ok()
        .and_then(|t| parse_tcp_inode(&t, peer, listener))
    else {
        return false;
    };
    let want = format!("socket:[{inode}]");
    std::fs::read_dir("/proc/self/fd").is_ok_and(|fds| {
        fds.filter_map(Result::ok)
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
    })
}

#[cfg(test)]
mod tests {
    // A path from the crate's root: `layering` reads `super::` as the crate's.
    use crate::procfs::parse_tcp_inode;

    #[test]
    fn a_loopback_connection_is_found_by_its_two_ends() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 424242 1 0000000000000000 20 4 30 10 -1\n   1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 434343 1 0000000000000000 20 4 30 10 -1\n";
        let a: std::net::SocketAddrV4 = "127.0.0.1:40000".parse().unwrap();
        let b: std::net::SocketAddrV4 = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(parse_tcp_inode(text, a, b), Some(424242));
        assert_eq!(parse_tcp_inode(text, b, a), Some(434343));
        let c: std::net::SocketAddrV4 = "127.0.0.2:8080".parse().unwrap();
        assert_eq!(parse_tcp_inode(text, a, c), None);
        assert_eq!(parse_tcp_inode("", a, b), None);
    }
    /// A host on 198.18.0.0/24 with a default route via .1 and a host route to .12 via .1.
    const ROUTE: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t010012C6\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
eth0\t000012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
eth0\t0C0012C6\t010012C6\t0007\t0\t0\t0\tFFFFFFFF\t0\t0\t0\n";

    #[test]
    fn a_route_through_a_gateway_is_told_from_a_link() {
        use std::net::Ipv4Addr;
        let gw = Some(Ipv4Addr::new(198, 18, 0, 1));
        // On the link (the /24 beats the default route).
        assert_eq!(
            parse_route_gateway(ROUTE, Ipv4Addr::new(198, 18, 0, 13)),
            None
        );
        // The /32 host route via .1 beats the /24.
        assert_eq!(
            parse_route_gateway(ROUTE, Ipv4Addr::new(198, 18, 0, 12)),
            gw
        );
        // Elsewhere: the default route's gateway.
        assert_eq!(parse_route_gateway(ROUTE, Ipv4Addr::new(10, 1, 2, 3)), gw);
        // Loopback is on this host whatever the main table's default route says.
        assert_eq!(
            parse_route_gateway(ROUTE, Ipv4Addr::new(127, 0, 0, 3)),
            None
        );
        // Without a default route nothing matches.
        let no_default: String = ROUTE
            .lines()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, l)| format!("{l}\n"))
            .collect();
        assert_eq!(parse_route_gateway(&no_default, Ipv4Addr::LOCALHOST), None);
        assert_eq!(parse_route_gateway("", Ipv4Addr::LOCALHOST), None);
        assert_eq!(
            parse_route_gateway("garbage\nx y z\n", Ipv4Addr::LOCALHOST),
            None
        );
    }

    use super::*;

    #[test]
    fn machine_parsers() {
        let stat = "cpu  100 0 50 800 50 0 7 0 0 0\ncpu0 1 2 3 4\n";
        let c = CpuTimes::parse(stat).unwrap();
        assert_eq!((c.idle, c.total, c.softirq), (850, 1007, 7));
        let mem = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\n";
        assert_eq!(parse_mem_utilisation(mem), Some(0.75));
        assert_eq!(parse_mem_utilisation("MemTotal: 0 kB\n"), None);
        assert_eq!(CpuTimes::parse("intr 1 2"), None);
    }

    #[test]
    fn udp_in_errors_from_snmp() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
                    Udp: 2095 44 301 1330 300\n\
                    UdpLite: InDatagrams NoPorts InErrors\nUdpLite: 0 0 9\n";
        assert_eq!(parse_udp_in_errors(snmp), Some(301));
        assert_eq!(parse_udp_in_errors("Udp: InErrors\n"), None);
    }

    #[test]
    fn cpu_model_load_and_mem_total() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n\
                       processor\t: 1\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n";
        let model = parse_cpu_model(cpuinfo);
        assert_eq!(model.as_deref(), Some("AMD EPYC 7B13 64-Core Processor"));
        assert_eq!(parse_cpu_model("processor : 0\n"), None);
        let load = parse_loadavg("0.52 0.61 0.70 2/345 6789\n");
        assert_eq!(load.as_deref(), Some("0.52 0.61 0.70"));
        assert_eq!(parse_loadavg("0.52\n"), None);
        let meminfo = "MemTotal:       24000000 kB\nMemFree:         100 kB\n";
        assert_eq!(field(meminfo, "MemTotal:"), Some(24_000_000));
    }

    #[test]
    fn backlog_drops_from_softnet_stat() {
        let softnet = "00000016 0000000a 00000000\n000032b3 00000101 00000001\n";
        assert_eq!(parse_softnet_dropped(softnet), Some(10 + 257));
        assert_eq!(parse_softnet_dropped("00000016\n"), None);
        assert_eq!(parse_softnet_dropped("0000 zz\n"), None);
    }

    #[test]
    fn process_stat_with_spaces_in_the_name() {
        let stat = "42 (a b) S 1 2 3 4 5 6 7 8 9 10 30 12 0 0 20 0 5 0 100";
        assert_eq!(parse_pid_stat(stat), Some((42.0, 30.0, 5)));
        assert_eq!(parse_pid_stat("42 (x"), None);
        assert_eq!(field("wchar: 123\nrchar: 4\n", "wchar:"), Some(123));
    }

    #[test]
    fn reads_own_process() {
        let s = current().unwrap();
        assert_eq!(s.pid, std::process::id());
        assert!(s.rss_bytes > 0);
        assert!(s.threads >= 1);
        assert!(s.cpu_seconds >= 0.0);
        assert!(CpuTimes::read().is_some());
    }
}
