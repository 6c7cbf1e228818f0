//! The `vigil` command line: `serve`, `ctl`, `user`, `cluster`. `bench`, `sim` and `lab`
//! are the `vigil-lab` binary's (the dev tools live outside the node crate, issue 24 §3):
//! `vigil bench …` runs `vigil-lab bench …` from the same directory, so scripts and docs
//! keep one spelling.

use clap::{Parser, Subcommand};
use std::ffi::OsString;
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
        #[arg(long, default_value = crate::ctl::doctor::DEFAULT_API, global = true)]
        api: String,
        /// Print JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
        /// The node's config file: the admin token is read from its `[http]` (else from
        /// the VIGIL_API_TOKEN environment variable).
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        what: crate::ctl::What,
    },
    /// The cluster CA and node certificates for node-to-node calls (QUIC, mutual TLS).
    Cluster {
        #[command(subcommand)]
        what: ClusterCmd,
    },
    /// RTSP users in a config file (password hashes, rights per camera pattern).
    User {
        #[command(subcommand)]
        what: crate::user::UserCmd,
    },
    /// Load generators (live, playback, handshake, record): `vigil-lab bench`, run by the
    /// `vigil-lab` binary next to this one.
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// A scenario of the papers' experiments as a discrete-event simulation: `vigil-lab
    /// sim`, run by the `vigil-lab` binary next to this one.
    #[command(disable_help_flag = true)]
    Sim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// A scenario on real node processes (127.0.0.x, or a bed of hosts with `--hosts
    /// netns`): `vigil-lab lab`; `vigil lab chaos …` is `vigil-lab chaos …`, the seeded
    /// fault schedule. Run by the `vigil-lab` binary next to this one.
    #[command(disable_help_flag = true)]
    Lab {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// A shell's completion script for this command line, on stdout. Hidden: packaging
    /// generates them (scripts/package-deb), so they always match this binary's options.
    #[command(hide = true)]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Man pages for this command line into DIR: vigil.1 and one per subcommand
    /// (vigil-serve.1, vigil-ctl-nodes.1, …). Hidden, like `completions`.
    #[command(hide = true)]
    Man {
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum ClusterCmd {
    /// Make a cluster CA: writes OUT/ca.pem and OUT/ca.key.
    Ca {
        #[arg(long)]
        out: PathBuf,
    },
    /// Issue a node certificate signed by the CA in --ca (SAN = the node id as a DNS name,
    /// and every --host): writes OUT/NODE.pem (certificate and CA) and OUT/NODE.key. With
    /// --host it also serves the node's RTSPS/HTTPS listeners (`[tls] cert`/`key`) in a lab.
    Cert {
        #[arg(long)]
        ca: PathBuf,
        #[arg(long)]
        node: String,
        #[arg(long)]
        out: PathBuf,
        /// Another name viewers reach the node by: a DNS name or an IP address (repeat).
        #[arg(long)]
        host: Vec<String>,
        /// How long the certificate is valid, in days from now: a node certificate that
        /// leaks stops working by itself (issue a new one before it ends).
        #[arg(long, default_value_t = rpc_cert_days())]
        days: u32,
    },
    /// Print a certificate's SHA-256 fingerprint, as `[cluster] retired_certs` names it
    /// (retire a node's certificate: add it there on every node and send SIGHUP).
    CertFingerprint { pem: PathBuf },
    /// Sign the registry on the storage root with this config's key: its newest version
    /// that reads whole is written again as the next version, signed. For a registry
    /// written before versions were signed; check what it holds first (it prints it).
    SignRegistry {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Ask a node to place a playback request over QUIC (a check of the certificates):
    /// prints the decision as JSON.
    Place {
        /// The node's QUIC endpoint.
        #[arg(long)]
        addr: std::net::SocketAddr,
        /// The node's id (the name its certificate carries).
        #[arg(long)]
        node: String,
        /// The CA certificate that the node's certificate must chain to.
        #[arg(long)]
        ca_cert: PathBuf,
        /// This client's certificate and key (none: connect without a client certificate).
        #[arg(long, requires = "key")]
        cert: Option<PathBuf>,
        #[arg(long, requires = "cert")]
        key: Option<PathBuf>,
        #[arg(long)]
        camera: String,
        /// Playback position (Unix ms; default now).
        #[arg(long)]
        time_ms: Option<i64>,
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
    },
}

/// `vigil cluster cert --days`' default.
fn rpc_cert_days() -> u32 {
    crate::cluster::rpc::NODE_CERT_DAYS
}

fn cluster(what: ClusterCmd) -> anyhow::Result<()> {
    use crate::cluster::rpc;
    match what {
        ClusterCmd::Ca { out } => rpc::make_ca(&out),
        ClusterCmd::Cert {
            ca,
            node,
            out,
            host,
            days,
        } => rpc::make_node_cert(&ca, &node, &out, &host, days),
        ClusterCmd::CertFingerprint { pem } => {
            println!("{}", rpc::fingerprint_of_file(&pem)?);
            Ok(())
        }
        ClusterCmd::SignRegistry { config } => {
            let config = vigil_conf::Config::load(&config)?;
            let (from, to, registry) = crate::registry::Shell::sign_newest(&config)?;
            println!(
                "signed version {from} as version {to}: {} cameras ({}), {} users ({})",
                registry.cameras.len(),
                registry
                    .cameras
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                registry.users.len(),
                registry
                    .users
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Ok(())
        }
        ClusterCmd::Place {
            addr,
            node,
            ca_cert,
            cert,
            key,
            camera,
            time_ms,
            timeout_ms,
        } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let identity = cert.as_deref().zip(key.as_deref());
                let config = rpc::client_config(&ca_cert, identity)?;
                let req = rpc::RpcRequest::Place {
                    request: rpc::PlaceRequest {
                        from: "vigil-cli".into(),
                        camera,
                        time_ms: time_ms.unwrap_or_else(crate::cluster::now_ms),
                        vbr_bps: crate::cluster::report::DEFAULT_VBR_BPS,
                        live: false,
                    },
                };
                let timeout = std::time::Duration::from_millis(timeout_ms);
                let resp = rpc::call_once(config, addr, &node, &req, timeout).await?;
                match resp {
                    rpc::RpcResponse::Decision(d) => {
                        println!("{}", serde_json::to_string(&d)?);
                        Ok(())
                    }
                    rpc::RpcResponse::Error(e) => Err(anyhow::anyhow!("{node}: {e}")),
                    other => Err(anyhow::anyhow!("{node} answered {other:?}")),
                }
            })
        }
    }
}

/// The completion script for `shell`, written to `out`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut cmd, "vigil", out);
}

/// The man pages (section 1) into `out`, a directory made if missing: vigil.1 and one per
/// subcommand but the development tools', whose binary (`vigil-lab`) is not installed with
/// the node and whose page `vigil-lab.1` would pass for that binary's.
pub fn man_pages(out: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    fn write(cmd: clap::Command, out: &std::path::Path) -> std::io::Result<()> {
        let subs = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && !DEV_TOOLS.contains(&s.get_name()))
            .cloned()
            .collect::<Vec<_>>();
        for sub in subs {
            write(sub, out)?;
        }
        clap_mangen::Man::new(cmd).generate_to(out).map(|_| ())
    }
    const DEV_TOOLS: [&str; 3] = ["bench", "sim", "lab"];
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // As clap_mangen::generate_to: built, so each subcommand's name reads `vigil-serve`.
    let mut cmd = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    cmd.build();
    write(cmd, out).with_context(|| format!("writing man pages into {}", out.display()))
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { config } => crate::serve::run(config),
        // Doctor reports a broken config as a finding: it must not fail on reading the token.
        Command::Ctl {
            api,
            json,
            config,
            what: crate::ctl::What::Doctor,
        } => crate::ctl::doctor::run(&api, config.as_deref(), json),
        // Verify reads the storage root and the key from the config, not the API.
        Command::Ctl {
            config,
            what:
                crate::ctl::What::Audit {
                    cmd: crate::ctl::audit::AuditCmd::Verify { node },
                },
            ..
        } => crate::ctl::audit::verify(config.as_deref(), node.as_deref()),
        Command::Ctl {
            api,
            json,
            config,
            what,
        } => crate::ctl::token(config.as_deref())
            .and_then(|token| crate::ctl::run(&api, token.as_deref(), json, what)),
        Command::Bench { args } => crate::devtools::exec("bench", args),
        Command::Cluster { what } => cluster(what),
        Command::User { what } => crate::user::run(what),
        Command::Sim { args } => crate::devtools::exec("sim", args),
        // `vigil lab chaos …` is the lab's fault schedule (`vigil-lab chaos`), not a scenario.
        Command::Completions { shell } => {
            completions(shell, &mut std::io::stdout());
            Ok(())
        }
        Command::Man { out } => man_pages(&out),
        Command::Lab { args } => match args.first().and_then(|a| a.to_str()) {
            Some("chaos") => crate::devtools::exec("chaos", args[1..].to_vec()),
            _ => crate::devtools::exec("lab", args),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vigil: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_and_man_pages_cover_the_public_subcommands() {
        let mut bash = Vec::new();
        completions(clap_complete::Shell::Bash, &mut bash);
        let bash = String::from_utf8(bash).expect("a UTF-8 script");
        for sub in ["serve", "ctl", "cluster", "user"] {
            assert!(
                bash.contains(&format!("vigil__subcmd__{sub})")),
                "{sub}: {bash}"
            );
        }
        let dir = std::env::temp_dir().join(format!("vigil-man-{}", std::process::id()));
        man_pages(&dir).expect("man pages");
        for page in ["vigil.1", "vigil-serve.1", "vigil-ctl.1", "vigil-user.1"] {
            let text = std::fs::read_to_string(dir.join(page)).unwrap_or_default();
            assert!(text.contains(".TH"), "{page}: {text}");
        }
        assert!(
            !dir.join("vigil-man.1").exists(),
            "hidden subcommands get no page"
        );
        assert!(
            !dir.join("vigil-lab.1").exists(),
            "the dev tools' binary is not installed"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
