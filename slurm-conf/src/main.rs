//! `gpu-affinity`: the admin command of the gpu-affinity suite.
//!
//! Subcommands: `explain` (what the plugin will do on a node), `audit` (the reference
//! checklist), `fixture` (write a fake
//! sysfs tree for a machine), `machines` (the embedded catalog), `bench` (discovery and
//! solver figures), `conf` (Slurm configuration), `hostlist` (expand/compress),
//! `install` / `uninstall` (plugin link and plugstack snippet).
//! Exit status: 0 success, 1 bad input, 2 strict violations (`audit`: 1 a failed
//! finding, 2 bad input).

// No FFI here: unsafe code stays in the modules that call C.
#![deny(unsafe_code)]

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
    about = "GPU, NIC and NUMA placement for Slurm GPU nodes",
    disable_version_flag = true,
    arg_required_else_help = true
)]
struct Cli {
    /// Print the version and the Slurm series of the installed plugin.
    #[arg(short = 'V', long)]
    version: bool,
    #[command(subcommand)]
    command: Option<Command>,
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
    let command = match cli.command {
        Some(command) if !cli.version => command,
        // No arguments at all print the help (arg_required_else_help): this is --version.
        _ => {
            print!(
                "{}",
                gpu_affinity_node::version::text("gpu-affinity", std::path::Path::new("/"))
            );
            return ExitCode::SUCCESS;
        }
    };
    let result = match command {
        Command::Explain(args) => explain::run(&args),
        // Its own exit codes: 2 for bad input, 1 is a failed finding.
        Command::Audit(args) => return audit::run(&args),
        Command::Fixture(args) => fixture::run(&args).map(|()| ExitCode::SUCCESS),
        // Through emit: `gpu-affinity machines | head` closes the pipe early.
        Command::Machines => emit(&machine_source::catalog_listing()).map(|()| ExitCode::SUCCESS),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// gpu-affinity(1)'s SYNOPSIS names every command and top-level option clap has.
    #[test]
    fn the_man_page_synopsis_is_the_command_line() {
        let page = include_str!("../../packaging/man/gpu-affinity.1");
        let synopsis = page
            .split_once(".SH SYNOPSIS")
            .and_then(|(_, rest)| rest.split_once("\n.SH "))
            .map(|(s, _)| s)
            .expect("SYNOPSIS");
        let words: Vec<&str> = synopsis
            .split(|c: char| c.is_whitespace() || "[]{}|".contains(c))
            .collect();
        let cli = Cli::command();
        for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
            assert!(words.contains(&sub.get_name()), "{}", sub.get_name());
        }
        for word in ["\\-h", "\\-\\-help", "\\-V", "\\-\\-version"] {
            assert!(words.contains(&word), "{word}");
        }
        let named = words.iter().filter(|w| w.starts_with("\\-")).count();
        // Those four, and srun's --gpu-affinity.
        assert_eq!(named, 5, "{words:?}");
    }

    #[test]
    fn version_needs_no_command_and_wins_over_one() {
        let cli = Cli::try_parse_from(["gpu-affinity", "--version"]).expect("--version");
        assert!(cli.version && cli.command.is_none());
        let cli = Cli::try_parse_from(["gpu-affinity", "-V", "machines"]).expect("-V machines");
        assert!(cli.version);
        assert!(Cli::try_parse_from(["gpu-affinity"]).is_err());
    }
}
