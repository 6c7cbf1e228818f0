//! `vigil bench | sim | lab`: the experiment and benchmark tools are the `vigil-lab` binary
//! (crate `lab/`), not part of the node a user installs. These commands stay so that one
//! spelling works in scripts and docs: they replace this process with the `vigil-lab`
//! binary found next to this one, passing the arguments through unchanged.

use anyhow::Context;
use std::ffi::OsString;
use std::path::PathBuf;

/// The `vigil-lab` binary's file name.
pub const LAB_BIN: &str = "vigil-lab";

/// The `vigil-lab` binary in the directory of the running `vigil` (cargo puts every
/// workspace binary of a profile in one directory).
fn lab_bin() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("locating the running vigil binary")?;
    let dir = me
        .parent()
        .context("the running vigil binary has no directory")?;
    Ok(dir.join(LAB_BIN))
}

/// Runs `vigil-lab <tool> <args…>` in place of this process; `VIGIL_BIN` tells it which
/// `vigil` to start as nodes (this one). Returns only on failure.
pub fn exec(tool: &str, args: Vec<OsString>) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let bin = lab_bin()?;
    if !bin.is_file() {
        anyhow::bail!(
            "`vigil {tool}` runs the {LAB_BIN} binary, which is not built: {} does not exist \
             (build it with `cargo build --bin {LAB_BIN}`, adding --release for a release \
             build, or run `cargo run --bin {LAB_BIN} -- {tool} …`)",
            bin.display()
        );
    }
    let me = std::env::current_exe().context("locating the running vigil binary")?;
    let err = std::process::Command::new(&bin)
        .arg(tool)
        .args(args)
        .env("VIGIL_BIN", me)
        .exec();
    Err(err).with_context(|| format!("running {}", bin.display()))
}
