//! `gpu-affinity`: the admin command of the gpu-affinity suite.
//!
//! Subcommands: `explain` (what the plugin will do on a node), `audit` (the reference
//! checklist), `fixture` (write a fake
//! sysfs tree for a machine), `machines` (the embedded catalog), `bench` (discovery and
//! solver figures), `conf` (Slurm configuration), `hostlist` (expand/compress),
//! `install` / `uninstall` (plugin link and plugstack snippet).
//! Exit status: 0 success, 1 bad input, 2 strict violations (`audit`: 1 a failed
//! finding, 2 bad input).

mod audit;
mod bench;
mod conf;
mod explain;
mod fixture;
mod hostlist_cmd;
mod install;
mod machine_source;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "gpu-affinity",
    version,
    about = "GPU, NIC and NUMA placement for Slurm GPU nodes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the per-rank binding the plugin would apply on a node, and why.
    Explain(explain::Args),
    /// Audit a node and its cluster config against the reference checklist
    /// (exit 0 pass/warn, 1 a finding failed, 2 bad input).
    Audit(audit::Args),
    /// Write a fake sysfs/procfs tree describing a machine (for tests and demos).
    Fixture(fixture::Args),
    /// List the machines of the embedded catalog.
    Machines,
    /// Print discovery and solver timings (a benchmark, not a test).
    Bench(bench::Args),
    /// Link the plugin build for this Slurm's series and write its plugstack snippet.
    Install(install::Args),
    /// Undo exactly what `install` did for a Slurm prefix.
    Uninstall(install::Args),
    /// Generate Slurm configuration: topology, gres, plugstack, slurm.conf lines.
    Conf(conf::Args),
    /// Expand or compress Slurm hostlists.
    Hostlist(hostlist_cmd::Args),
}

/// A failure the user can act on: printed as one line, exit status 1.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

/// Write to stdout; a closed pipe (`gpu-affinity explain | head`) is not an error.
pub fn emit(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Explain(args) => explain::run(&args),
        // Its own exit codes: 2 for bad input, 1 is a failed finding.
        Command::Audit(args) => return audit::run(&args),
        Command::Fixture(args) => fixture::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Machines => {
            machine_source::print_catalog();
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(args) => bench::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Install(args) => install::install(&args).map(|()| ExitCode::SUCCESS),
        Command::Uninstall(args) => install::uninstall(&args).map(|()| ExitCode::SUCCESS),
        Command::Conf(args) => conf::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Hostlist(args) => hostlist_cmd::run(&args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(CliError(message)) => {
            eprintln!("gpu-affinity: {message}");
            ExitCode::from(1)
        }
    }
}
