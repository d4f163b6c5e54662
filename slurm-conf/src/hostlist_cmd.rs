//! `gpu-affinity hostlist expand|compress`: core's hostlist code for admins and
//! benchmarks. Arguments, or whitespace-separated words on stdin when there are none.

use std::io::Read;

use clap::{Args as ClapArgs, Subcommand};
use gpu_affinity::slurm::hostlist;

use crate::conf::SeriesArgs;
use crate::{CliError, emit};

/// The most names one run may expand: a whole cloud cluster and then some, still a
/// bounded allocation for a hostile `n[0-4294967295]`.
pub const MAX_NAMES: u64 = 1 << 22;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(subcommand)]
    op: Op,
}

#[derive(Subcommand, Debug)]
enum Op {
    /// Print every name of the hostlists, one per line, in the order written.
    Expand {
        /// Hostlists (`gpu-st-p5-[001-512,600]`); stdin when none.
        hostlists: Vec<String>,
    },
    /// Print the names as one hostlist (`expand` gives them back in the same order).
    Compress {
        /// Sort and deduplicate first (the shortest hostlist for a set of names).
        #[arg(long)]
        sort: bool,
        /// The series that reads the list back (22.05-23.02: nothing after a bracket).
        #[command(flatten)]
        series: SeriesArgs,
        /// Names; stdin when none.
        names: Vec<String>,
    },
}

fn words(args: &[String]) -> Result<Vec<String>, CliError> {
    if !args.is_empty() {
        return Ok(args.to_vec());
    }
    let mut text = String::new();
    std::io::stdin()
        .lock()
        .take(1 << 30)
        .read_to_string(&mut text)
        .map_err(|e| CliError(format!("stdin: {e}")))?;
    Ok(text.split_whitespace().map(str::to_string).collect())
}

pub fn run(args: &Args) -> Result<(), CliError> {
    match &args.op {
        Op::Expand { hostlists } => {
            let mut out = String::new();
            let mut total = 0u64;
            for h in words(hostlists)? {
                let names = hostlist::expand_bounded(&h, MAX_NAMES - total)
                    .map_err(|e| CliError(format!("hostlist {:?}: {e}", trim(&h))))?;
                total += names.len() as u64;
                for n in names {
                    out.push_str(&n);
                    out.push('\n');
                }
            }
            emit(&out)
        }
        Op::Compress {
            sort,
            series,
            names,
        } => {
            let names = words(names)?;
            let (form, _) = series.hostlist_form()?;
            let text = if *sort {
                hostlist::compress_sorted_for(&names, form)
            } else {
                hostlist::compress_for(&names, form)
            }?;
            emit(&format!("{text}\n"))
        }
    }
}

/// Quote at most 80 characters of a user's text back.
fn trim(s: &str) -> String {
    s.chars().take(80).collect()
}
