//! `--gpu-affinity=MODE[,verbose]` and its environment twin `SLURM_GPU_AFFINITY`.
//!
//! Slurm forwards an option given to srun (or sbatch/salloc, through the batch
//! environment) to slurmstepd and calls the callback there again with `remote = 1`.
//! `SLURM_GPU_AFFINITY` is read by srun/sbatch from the user's shell and by slurmstepd
//! from the job environment; the option wins over the variable.

use crate::guard::Failure;
use crate::host::OptionSpec;
use crate::mode::{BadValue, OptionValue, UserChoice};

pub const OPTION: OptionSpec = OptionSpec {
    name: "gpu-affinity",
    arginfo: "MODE",
    usage: "Bind each task to its GPU and the NICs, cores and memory nearest it: \
            strict (refuse a bad placement), prefer (best effort, warn) or off; \
            add ',verbose' to print each rank's binding. Default from the site; \
            also read from SLURM_GPU_AFFINITY.",
};

/// The environment twin of the option.
pub const ENV_TWIN: &str = "SLURM_GPU_AFFINITY";

/// The option callback's logic: what to remember, and the hook's result. A bad value
/// is an error, so srun/sbatch exit with "Invalid --gpu-affinity argument" before
/// launching anything; the logged line lists the allowed values.
pub fn parse_option(optarg: Option<&str>, remote: bool) -> (OptionValue, Result<(), Failure>) {
    match UserChoice::parse(optarg.unwrap_or("")) {
        Ok(choice) => (OptionValue::Given(choice), Ok(())),
        Err(bad) => {
            let origin = if remote {
                " (forwarded to this node)"
            } else {
                ""
            };
            (OptionValue::Invalid, Err(Failure(format!("{bad}{origin}"))))
        }
    }
}

/// The user's choice: the option if given (`option`, as the callback left it), else the
/// twin variable from `env`.
pub fn user_choice(
    option: OptionValue,
    env: impl FnOnce(&str) -> Option<String>,
) -> Result<Option<UserChoice>, Failure> {
    match option {
        OptionValue::Given(choice) => Ok(Some(choice)),
        OptionValue::Invalid => Err(Failure(
            BadValue("(invalid --gpu-affinity value)".into()).to_string(),
        )),
        OptionValue::NotGiven => match env(ENV_TWIN) {
            None => Ok(None),
            Some(text) => UserChoice::parse(&text)
                .map(Some)
                .map_err(|bad| Failure(format!("{bad} (from {ENV_TWIN})"))),
        },
    }
}
