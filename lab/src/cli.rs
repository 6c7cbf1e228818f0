//! The `vigil-lab` command line: `lab`, `bench`, `sim`. `vigil lab|bench|sim` run this
//! binary with the same arguments (`vigil_server::devtools`), so either spelling works.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "vigil-lab",
    version,
    about = "vigil's experiment and benchmark tools: scenarios on real nodes, load generators, simulations"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Load generators: measure what a node delivers to many viewers and what it costs.
    Bench {
        #[command(subcommand)]
        what: crate::bench::Bench,
    },
    /// Run a scenario of the papers' experiments as a discrete-event simulation on the
    /// scheduling code (seed-vod, seed-gateway, seed-feedback, seed-feedback-burst,
    /// seed-planner, scale-20, scale-100, scale-1000, or a scenario file): writes a report folder (report.md, sessions.csv, PNG plots).
    Sim {
        /// A built-in scenario name or a path to a scenario TOML file.
        scenario: String,
        /// Report folder (default: a new folder under ./reports).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Seed of the workload and the policies' draws (default: the scenario's).
        #[arg(long)]
        seed: Option<u64>,
        /// Run without the storage emulation (`[storage.emulate]`): reads cost what this
        /// machine's disk costs (the simulation: nothing).
        #[arg(long)]
        no_emulation: bool,
    },
    /// A seeded fault schedule against five nodes on a bed of hosts (network namespaces,
    /// needs root): kills, pauses, partitions, loss, a full share, operator actions; the
    /// checker's table per event, and a failure naming the seed when an invariant broke.
    Chaos(crate::chaos::ChaosArgs),
    /// Run a vod scenario (seed-vod-lab, or a scenario file) on real processes: starts the
    /// nodes on 127.0.0.x, writes the recordings, runs every policy on the same seeded
    /// clients and writes a report folder with the calibration against `vigil sim`.
    Lab {
        /// A built-in scenario name or a path to a scenario TOML file.
        scenario: String,
        /// Report folder (default: a new folder under ./reports).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Seed of the workload and the policies' draws (default: the scenario's).
        #[arg(long)]
        seed: Option<u64>,
        /// Run without the storage emulation (`[storage.emulate]`): reads cost what this
        /// machine's disk costs (the simulation: nothing).
        #[arg(long)]
        no_emulation: bool,
        /// Worker threads of the clients' runtime.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Where the nodes run: on 127.0.0.x of this machine's loopback, or each in a
        /// network namespace of its own with the clients on another (`netns`, needs root;
        /// vod scenarios).
        #[arg(long, value_enum, default_value_t = crate::lab::Hosts::Loopback)]
        hosts: crate::lab::Hosts,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench { what } => crate::bench::run(what),
        Command::Sim {
            scenario,
            out,
            seed,
            no_emulation,
        } => crate::sim::run(&scenario, out, seed, no_emulation),
        Command::Chaos(args) => crate::chaos::main(args),
        Command::Lab {
            scenario,
            out,
            seed,
            no_emulation,
            threads,
            hosts,
        } => crate::lab::run(&scenario, out, seed, no_emulation, threads, hosts),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vigil-lab: {e:#}");
            ExitCode::FAILURE
        }
    }
}
