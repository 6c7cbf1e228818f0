//! A test bed of hosts on this machine (issue 25 §1): one Linux network namespace per node,
//! viewer or camera farm, each with its own address on a shared Ethernet segment, so the
//! cluster runs as it is deployed — separate network stacks, real sockets between them,
//! faults made by the kernel (packet loss, partitions, a link down, a rate limit, a small
//! MTU) and set by the harness, never by the node; delay by `tc netem`, or where the kernel
//! has no qdisc that delays, by the bed's delay line on the host's link
//! ([`crate::delay_line`]).
//!
//! Layout: a "switch" namespace holds a Linux bridge; each host is a namespace whose
//! `eth0` is one end of a veth pair, the other end a port of the bridge. Addresses come
//! from the benchmarking range 198.18.0.0/15 (RFC 2544), `198.18.0.10` on; no namespace has
//! a route anywhere else, and the machine's own namespace is not touched at all: the test
//! reaches a host by running a command in it ([`Bed::command`]) or a closure on a thread
//! moved into it ([`Bed::within`], `setns(2)`).
//!
//! Every namespace is named `vb<pid>x<n>-<role>`: removed on drop, and a later bed removes
//! those of a process that no longer runs, so a crashed run leaves nothing behind.
//!
//! Hand-written on `ip`, `nft`, `tc` and `ethtool` (iproute2, nftables, ethtool): the crates that wrap netlink
//! (`rtnetlink`, `netns-rs`) would bring an async runtime and still no nftables, and these
//! commands are what an operator reproducing a failure types.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::delay_line::DelayLine;

/// Why the bed could not be built or a fault not set.
#[derive(Debug, thiserror::Error)]
pub enum BedError {
    /// The machine cannot host namespaces here (not root, no CAP_NET_ADMIN, no `ip`).
    #[error("network namespaces unavailable: {0}")]
    Unavailable(String),
    /// A fault this kernel cannot make (e.g. `tc netem` not built in).
    #[error("{what} unsupported on this kernel: {reason}")]
    Unsupported { what: &'static str, reason: String },
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
}

/// One host of the bed.
#[derive(Debug, Clone)]
pub struct Host {
    /// The namespace's name (`ip netns exec NAME …`).
    pub ns: String,
    /// What it is (`node1`, `viewer`…), for messages.
    pub role: String,
    pub ip: Ipv4Addr,
    /// Its bridge port in the switch namespace (the link's far end).
    port: String,
}

/// A set of hosts on one segment; see the module doc.
pub struct Bed {
    prefix: String,
    switch: String,
    hosts: Vec<Host>,
    /// Delay lines in force, by the port they stand in for.
    lines: Mutex<HashMap<String, DelayLine>>,
}

/// How [`Bed::delay`] delayed a host's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayBy {
    /// `tc netem` on the host's link.
    Netem,
    /// The bed's delay line ([`crate::delay_line`]): this kernel has no qdisc that delays.
    DelayLine,
}

/// Beds made by this process (each gets its own prefix).
static BEDS: AtomicU32 = AtomicU32::new(0);

fn run(args: &[&str]) -> Result<Output, BedError> {
    let command = args.join(" ");
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| BedError::Command {
            command: command.clone(),
            stderr: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(BedError::Command {
            command,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// Runs `args` inside namespace `ns`.
fn run_in(ns: &str, args: &[&str]) -> Result<Output, BedError> {
    let mut all = vec!["ip", "netns", "exec", ns];
    all.extend_from_slice(args);
    run(&all)
}

/// Names of the namespaces on this machine.
fn namespaces() -> Vec<String> {
    match std::fs::read_dir("/run/netns") {
        Ok(d) => d
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Removes the namespaces of earlier beds whose process is gone.
fn remove_stale() {
    for ns in namespaces() {
        let Some(pid) = ns
            .strip_prefix("vb")
            .and_then(|r| r.split('x').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run(&["ip", "netns", "del", &ns]);
        }
    }
}

impl Bed {
    /// A bed with no host yet, or why this machine cannot have one.
    pub fn new() -> Result<Bed, BedError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(BedError::Unavailable(
                "not root (namespaces and veth pairs need CAP_NET_ADMIN)".into(),
            ));
        }
        remove_stale();
        let n = BEDS.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("vb{}x{n}", std::process::id());
        let switch = format!("{prefix}-sw");
        run(&["ip", "netns", "add", &switch]).map_err(|e| BedError::Unavailable(e.to_string()))?;
        let bed = Bed {
            prefix,
            switch,
            hosts: Vec::new(),
            lines: Mutex::new(HashMap::new()),
        };
        run_in(&bed.switch, &["ip", "link", "add", "br0", "type", "bridge"])?;
        run_in(&bed.switch, &["ip", "link", "set", "br0", "up"])?;
        Ok(bed)
    }

    /// Adds a host named `role` with the next address (198.18.0.10, .11, …).
    pub fn add_host(&mut self, role: &str) -> Result<Host, BedError> {
        let i = self.hosts.len();
        let ip = Ipv4Addr::new(198, 18, 0, 10 + u8::try_from(i).unwrap_or(u8::MAX - 10));
        let ns = format!("{}-{role}", self.prefix);
        let port = format!("p{i}");
        run(&["ip", "netns", "add", &ns])?;
        let host = Host {
            ns: ns.clone(),
            role: role.to_string(),
            ip,
            port: port.clone(),
        };
        self.hosts.push(host.clone());
        let sw = self.switch.clone();
        run_in(
            &sw,
            &[
                "ip", "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ],
        )?;
        run_in(&sw, &["ip", "link", "set", &port, "master", "br0"])?;
        run_in(&sw, &["ip", "link", "set", &port, "up"])?;
        let cidr = format!("{ip}/24");
        run_in(&ns, &["ip", "addr", "add", &cidr, "dev", "eth0"])?;
        run_in(&ns, &["ip", "link", "set", "eth0", "up"])?;
        // A veth pair would carry a 64 KB GSO buffer past any MTU on the way (segmented only
        // in the receiver's stack): segment at the sender instead, as a NIC does, so the
        // bridge sees the frames a real link would and drops those over a port's MTU. And
        // checksum at the sender: a frame a delay line copies out of the link must carry
        // its checksums, not the "to be filled in" of a checksum offload.
        run_in(
            &ns,
            &[
                "ethtool",
                "-K",
                "eth0",
                "gso",
                "off",
                "tso",
                "off",
                "tx-udp-segmentation",
                "off",
                "tx",
                "off",
            ],
        )?;
        run_in(&ns, &["ip", "link", "set", "lo", "up"])?;
        // Each host's own filter table, where the faults go (empty: nothing dropped).
        run_in(&ns, &["nft", "add", "table", "inet", "bed"])?;
        for (chain, hook) in [("in", "input"), ("out", "output")] {
            let spec = format!("{{ type filter hook {hook} priority 0; }}");
            run_in(&ns, &["nft", "add", "chain", "inet", "bed", chain, &spec])?;
        }
        Ok(host)
    }

    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// `program` to run inside `host` (`ip netns exec`; the program replaces `ip`, so its
    /// pid is the program's).
    pub fn command(&self, host: &Host, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &host.ns]).arg(program);
        c
    }

    /// Runs `f` on a thread that entered `host`'s network namespace: its sockets are the
    /// host's (an HTTP call to a node, a probe).
    pub fn within<T: Send>(&self, host: &Host, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                enter(&host.ns);
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    /// [`Bed::within`] on a thread of its own, not waited for: a client that runs while the
    /// test does something else (moves its session, cuts a link).
    pub fn spawn_within<T: Send + 'static>(
        &self,
        host: &Host,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let ns = host.ns.clone();
        std::thread::spawn(move || {
            enter(&ns);
            f()
        })
    }

    /// Drops `percent` % of the packets `host` sends (each packet between two hosts of
    /// which one is lossy crosses the loss once). 0 removes it.
    pub fn loss(&self, host: &Host, percent: f64) -> Result<(), BedError> {
        self.set_loss(host, ("out", "oif"), percent)
    }

    /// Drops `percent` % of the packets `host` receives (a lossy access line to a viewer).
    /// 0 removes it.
    pub fn loss_in(&self, host: &Host, percent: f64) -> Result<(), BedError> {
        self.set_loss(host, ("in", "iif"), percent)
    }

    /// The loss rule of `chain` (matching `eth0` by `dir`, `oif` or `iif`), replaced.
    fn set_loss(
        &self,
        host: &Host,
        (chain, dir): (&str, &str),
        percent: f64,
    ) -> Result<(), BedError> {
        self.clear_chain(host, chain, "loss")?;
        if percent > 0.0 {
            let per_mille = ((percent * 10.0).round() as u32).min(1000).to_string();
            run_in(
                &host.ns,
                &[
                    "nft", "add", "rule", "inet", "bed", chain, dir, "eth0", "numgen", "random",
                    "mod", "1000", "<", &per_mille, "counter", "drop", "comment", "\"loss\"",
                ],
            )?;
        }
        Ok(())
    }

    /// Packets [`Bed::loss`] and [`Bed::loss_in`] have dropped on `host` so far (proof that
    /// the fault was there).
    pub fn lost(&self, host: &Host) -> Result<u64, BedError> {
        let mut text = String::new();
        for chain in ["in", "out"] {
            let out = run_in(&host.ns, &["nft", "list", "chain", "inet", "bed", chain])?;
            text.push_str(&String::from_utf8_lossy(&out.stdout));
        }
        Ok(text
            .lines()
            .filter(|l| l.contains("comment \"loss\""))
            .filter_map(|l| {
                let after = l.split("counter packets ").nth(1)?;
                after.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum())
    }

    /// One `Ip:` counter of `host`'s stack (`/proc/net/snmp` in its namespace), e.g.
    /// `ReasmReqds`: IP fragments it had to reassemble (a datagram too big for a link on
    /// the way).
    pub fn ip_counter(&self, host: &Host, name: &str) -> Result<u64, BedError> {
        let out = run_in(&host.ns, &["cat", "/proc/net/snmp"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
        let (names, values) = (ip.next().unwrap_or(""), ip.next().unwrap_or(""));
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.parse().ok())
            .ok_or_else(|| BedError::Command {
                command: format!("Ip: {name} in {}'s /proc/net/snmp", host.ns),
                stderr: "no such counter".into(),
            })
    }

    /// Cuts every packet between the hosts of `a` and those of `b`, both ways (each side
    /// still reaches its own hosts). [`Bed::heal`] undoes it.
    pub fn partition(&self, a: &[&Host], b: &[&Host]) -> Result<(), BedError> {
        let set = |hs: &[&Host]| {
            let ips: Vec<String> = hs.iter().map(|h| h.ip.to_string()).collect();
            format!("{{ {} }}", ips.join(", "))
        };
        for (side, other) in [(a, b), (b, a)] {
            let other = set(other);
            for h in side {
                for (chain, dir) in [("in", "saddr"), ("out", "daddr")] {
                    run_in(
                        &h.ns,
                        &[
                            "nft",
                            "add",
                            "rule",
                            "inet",
                            "bed",
                            chain,
                            "ip",
                            dir,
                            &other,
                            "drop",
                            "comment",
                            "\"partition\"",
                        ],
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Removes every partition.
    pub fn heal(&self) -> Result<(), BedError> {
        for h in &self.hosts {
            self.clear_chain(h, "in", "partition")?;
            self.clear_chain(h, "out", "partition")?;
        }
        Ok(())
    }

    /// Takes `host`'s link down (`up = false`) or back up, at the switch: the host sees its
    /// carrier go, like a pulled cable.
    pub fn link(&self, host: &Host, up: bool) -> Result<(), BedError> {
        let state = if up { "up" } else { "down" };
        run_in(&self.switch, &["ip", "link", "set", &host.port, state]).map(|_| ())
    }

    /// Limits what `host` receives to `bits_per_sec` (a token bucket on its link's far end,
    /// queueing up to 200 ms, then dropping: a slow access line).
    pub fn downlink_rate(&self, host: &Host, bits_per_sec: u64) -> Result<(), BedError> {
        let rate = format!("{bits_per_sec}bit");
        run_in(
            &self.switch,
            &[
                "tc", "qdisc", "replace", "dev", &host.port, "root", "tbf", "rate", &rate, "burst",
                "32kbit", "latency", "200ms",
            ],
        )
        .map(|_| ())
    }

    /// Limits what `host` sends to `bits_per_sec` (a token bucket on its own `eth0`, with
    /// room for 4 s of it): packets wait in the host's queue, charged to the sockets that
    /// sent them, as behind a NIC slower than the sender, and none is dropped there.
    /// [`Bed::undelay`] removes it.
    pub fn uplink_rate(&self, host: &Host, bits_per_sec: u64) -> Result<(), BedError> {
        let rate = format!("{bits_per_sec}bit");
        let limit = (bits_per_sec / 2).max(64 * 1024).to_string();
        run_in(
            &host.ns,
            &[
                "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", &rate, "burst",
                "32kbit", "limit", &limit,
            ],
        )
        .map(|_| ())
    }

    /// Sets the MTU of `host`'s link (both ends).
    pub fn mtu(&self, host: &Host, mtu: u32) -> Result<(), BedError> {
        let mtu = mtu.to_string();
        run_in(
            &self.switch,
            &["ip", "link", "set", &host.port, "mtu", &mtu],
        )?;
        run_in(&host.ns, &["ip", "link", "set", "eth0", "mtu", &mtu]).map(|_| ())
    }

    /// Adds `delay` ± `jitter` to what `host` sends: by `tc netem` where the kernel has
    /// it, else by the bed's delay line on the host's link (this machine's kernel has no
    /// qdisc that delays; [`crate::delay_line`]). Either way every packet the host sends
    /// waits that long before it reaches the segment; [`Bed::undelay`] removes it.
    pub fn delay(
        &self,
        host: &Host,
        delay: Duration,
        jitter: Duration,
    ) -> Result<DelayBy, BedError> {
        self.undelay(host)?;
        let (d, j) = (
            format!("{}us", delay.as_micros()),
            format!("{}us", jitter.as_micros()),
        );
        let netem = run_in(
            &host.ns,
            &[
                "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", &d, &j,
            ],
        );
        match netem {
            Ok(_) => return Ok(DelayBy::Netem),
            Err(BedError::Command { stderr, .. }) if stderr.contains("unknown") => {}
            Err(e) => return Err(e),
        }
        let tap = format!("d{}", host.port);
        let line = std::thread::scope(|s| {
            s.spawn(|| {
                enter(&self.switch);
                DelayLine::start(&host.port, &tap, delay, jitter)
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
        .map_err(|e| BedError::Command {
            command: format!("a delay line on {} ({})", host.port, host.role),
            stderr: e.to_string(),
        })?;
        // The TAP takes the port's place on the bridge; the port stays the host's link.
        run_in(&self.switch, &["ip", "link", "set", &tap, "master", "br0"])?;
        run_in(&self.switch, &["ip", "link", "set", &tap, "up"])?;
        run_in(&self.switch, &["ip", "link", "set", &host.port, "nomaster"])?;
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(host.port.clone(), line);
        Ok(DelayBy::DelayLine)
    }

    /// Removes what [`Bed::delay`] added to `host` (nothing when there is none).
    pub fn undelay(&self, host: &Host) -> Result<(), BedError> {
        let line = self
            .lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&host.port);
        match line {
            Some(line) => {
                // Its TAP goes with it; the port goes back on the bridge.
                drop(line);
                run_in(
                    &self.switch,
                    &["ip", "link", "set", &host.port, "master", "br0"],
                )?;
            }
            None => {
                // No netem there is not an error (nothing to remove).
                let _ = run_in(&host.ns, &["tc", "qdisc", "del", "dev", "eth0", "root"]);
            }
        }
        Ok(())
    }

    /// Deletes the rules of `chain` commented `tag` in `host`'s table.
    fn clear_chain(&self, host: &Host, chain: &str, tag: &str) -> Result<(), BedError> {
        let out = run_in(
            &host.ns,
            &["nft", "-a", "list", "chain", "inet", "bed", chain],
        )?;
        let text = String::from_utf8_lossy(&out.stdout);
        let needle = format!("comment \"{tag}\"");
        for line in text.lines().filter(|l| l.contains(&needle)) {
            let Some(handle) = line.rsplit("# handle ").next().map(str::trim) else {
                continue;
            };
            run_in(
                &host.ns,
                &[
                    "nft", "delete", "rule", "inet", "bed", chain, "handle", handle,
                ],
            )?;
        }
        Ok(())
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        // The lines' threads stop before their links go.
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clear();
        for h in &self.hosts {
            let _ = run(&["ip", "netns", "del", &h.ns]);
        }
        let _ = run(&["ip", "netns", "del", &self.switch]);
    }
}

/// Moves the calling thread into namespace `ns` of a bed (a thread the bed made for it).
fn enter(ns: &str) {
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
    enter_netns(&file).unwrap_or_else(|e| panic!("setns into {ns}: {e}"));
}

/// Moves the calling thread into the network namespace `file` names.
fn enter_netns(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor of a namespace file; it affects only this thread.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
