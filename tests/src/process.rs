//! Child processes of the tests (clients, publishers): output captured without blocking
//! them, bounded waits, killed on drop.

use crate::poll_until;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Run a command with a time limit; kill it past the limit.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    Captured::spawn(cmd).wait(timeout)
}

/// [`run_with_timeout`] with `input` on the command's stdin (a password, as `vigil ctl`
/// reads them).
pub fn run_with_stdin(cmd: &mut Command, input: &str, timeout: Duration) -> Output {
    Captured::spawn_with(cmd, Some(input)).wait(timeout)
}

/// A child process whose stdout and stderr are drained by threads while it runs: one that
/// prints more than a pipe holds (64 KiB; gst-launch -v does within a few seconds) would
/// otherwise block on its write.
pub struct Captured {
    child: Child,
    stdout: std::thread::JoinHandle<Vec<u8>>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

impl Captured {
    pub fn spawn(cmd: &mut Command) -> Captured {
        Captured::spawn_with(cmd, None)
    }

    /// [`Captured::spawn`] with `input` written to its stdin (then closed).
    pub fn spawn_with(cmd: &mut Command, input: Option<&str>) -> Captured {
        let mut child = cmd
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            use std::io::Write;
            let _ = writeln!(stdin, "{text}");
        }
        fn drain(
            pipe: Option<impl std::io::Read + Send + 'static>,
        ) -> std::thread::JoinHandle<Vec<u8>> {
            std::thread::spawn(move || {
                let mut out = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut out);
                }
                out
            })
        }
        let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
        Captured {
            child,
            stdout,
            stderr,
        }
    }

    /// Sends `sig` to the child (e.g. SIGSTOP to hold a client off the CPU, SIGCONT to let
    /// it go); panics if the kernel refuses.
    pub fn signal(&self, sig: libc::c_int) {
        signal(self.child.id(), sig);
    }

    /// Waits for the child to exit, killing it once `timeout` has passed.
    pub fn wait(mut self, timeout: Duration) -> Output {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().ok().flatten() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break self.child.wait().expect("wait for the killed child");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Output {
            status,
            stdout: self.stdout.join().unwrap_or_default(),
            stderr: self.stderr.join().unwrap_or_default(),
        }
    }
}

/// A background process (publisher) killed on drop.
pub struct Background(pub Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn_background(cmd: &mut Command) -> Background {
    Background(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")),
    )
}

/// Wait (bounded) for a background process to exit; its status and stderr.
pub fn wait_background(bg: &mut Background, timeout: Duration) -> (ExitStatus, String) {
    let status = poll_until(timeout, "background process to exit", || {
        bg.0.try_wait().ok().flatten()
    });
    let mut err = String::new();
    if let Some(mut e) = bg.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (status, err)
}

/// [`wait_background`], but a process still running at `timeout` is killed instead of
/// failing the test: its status is then None (a client with a known hang of its own).
pub fn wait_background_or_kill(
    bg: &mut Background,
    timeout: Duration,
) -> (Option<ExitStatus>, String) {
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = bg.0.try_wait().ok().flatten() {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = bg.0.kill();
            let _ = bg.0.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut e) = bg.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (status, err)
}

/// kill(2) of `sig` to the process `pid` this test spawned (and has not reaped); panics if
/// the kernel refuses.
pub fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        r,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}
