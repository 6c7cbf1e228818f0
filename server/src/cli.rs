//! The `vigil` command line: `serve`, `ctl`, `bench`.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "vigil",
    version,
    about = "Clustered RTSP/RTP media server for video surveillance"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a node. Without --config: defaults plus the bundled demo camera at live/demo.
    Serve {
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Show a running node's state through its admin API.
    Ctl {
        /// Admin API base URL.
        #[arg(long, default_value = "http://127.0.0.1:8080", global = true)]
        api: String,
        /// Print JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        what: crate::ctl::What,
    },
    /// Load generators: measure what a node delivers to many viewers and what it costs.
    Bench {
        #[command(subcommand)]
        what: crate::bench::Bench,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { config } => crate::serve::run(config),
        Command::Ctl { api, json, what } => crate::ctl::run(&api, json, what),
        Command::Bench { what } => crate::bench::run(what),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vigil: {e:#}");
            ExitCode::FAILURE
        }
    }
}
