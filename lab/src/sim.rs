//! `vigil sim`: a scenario run in virtual time by `vigil-sim`, its report folder written.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// A folder name under `./reports` that does not exist yet (`mode`: sim or lab).
fn default_out(scenario: &str, mode: &str, seed: u64, emulate: bool) -> PathBuf {
    let stem = Path::new(scenario)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("scenario")
        .to_string();
    let plain = if emulate { "" } else { "-no-emulation" };
    let base = PathBuf::from("reports").join(format!("{stem}-{mode}-seed{seed}{plain}"));
    let mut dir = base.clone();
    let mut n = 2;
    while dir.exists() {
        dir = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    dir
}

/// A run's scenario (seed overridden), report folder and the command that reproduces it
/// (`mode`: sim or lab), said on stderr. `no_emulation` turns the scenario's storage
/// emulation off.
pub(crate) fn prepare(
    mode: &str,
    scenario: &str,
    out: Option<PathBuf>,
    seed: Option<u64>,
    no_emulation: bool,
) -> anyhow::Result<(vigil_sim::scenario::Scenario, PathBuf, String)> {
    let mut sc = vigil_sim::scenario::load(scenario)?;
    if let Some(seed) = seed {
        sc.seed = seed;
    }
    if no_emulation {
        sc.storage.emulate = false;
    }
    let out = out.unwrap_or_else(|| default_out(scenario, mode, sc.seed, sc.storage.emulate));
    let command = format!(
        "vigil {mode} {scenario} --seed {}{} --out {}",
        sc.seed,
        if sc.storage.emulate {
            ""
        } else {
            " --no-emulation"
        },
        out.display()
    );
    eprintln!(
        "vigil {mode}: {} ({} arms: {}), seed {}, {} nodes",
        sc.name,
        sc.policies.len(),
        sc.policies.join(", "),
        sc.seed,
        sc.nodes.count
    );
    Ok((sc, out, command))
}

pub fn run(
    scenario: &str,
    out: Option<PathBuf>,
    seed: Option<u64>,
    no_emulation: bool,
) -> anyhow::Result<()> {
    let (sc, out, command) = prepare("sim", scenario, out, seed, no_emulation)?;
    let report = vigil_sim::simulate(&sc, &command)?;
    let written = report
        .write(&out)
        .with_context(|| format!("writing the report to {}", out.display()))?;
    if let Some(t) = report.tables.iter().find(|t| t.title == "Simulator speed") {
        eprint!("{}", t.markdown());
    }
    println!("{}", written.dir.join("report.md").display());
    Ok(())
}
