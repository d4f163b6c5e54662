//! Does an srun ask for GPUs? The submit-side placement check must leave CPU-only steps
//! alone, as the node side does, but srun's SPANK hooks have no item for the step's
//! GPUs. Measured on 22.05: `--gres=gpu:1` leaves no trace in srun's environment;
//! `salloc --gpus-per-node=1` puts `SLURM_GPUS_PER_NODE` there. So the request is read
//! from srun's own arguments and its input variables (srun(1) "INPUT ENVIRONMENT
//! VARIABLES"). A request this cannot see is left to the node side, which decides by
//! the step's GPUs.

/// srun's input variables that carry a GPU count (`-G`, `--gpus-per-*`).
const GPU_COUNT_ENV: [&str; 4] = [
    "SLURM_GPUS",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_SOCKET",
    "SLURM_GPUS_PER_TASK",
];

/// srun's input variables that carry a gres / TRES list (`--gres`, `--tres-per-task`).
const GPU_LIST_ENV: [&str; 2] = ["SLURM_GRES", "SLURM_TRES_PER_TASK"];

/// Whether srun's arguments (`args[0]` is srun itself) or input variables ask for GPUs.
/// Arguments are read up to the user's command where that can be told (the first word
/// that is not an option and does not follow a value-less option word), so a command's
/// own `--gpus` is only counted when srun's options cannot be told from it.
pub fn asks_for_gpus(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> bool {
    let by_env = GPU_COUNT_ENV
        .iter()
        .any(|v| env(v).is_some_and(|x| !x.trim().is_empty()))
        || GPU_LIST_ENV
            .iter()
            .any(|v| env(v).is_some_and(|x| names_gpu(&x)));
    by_env || options(args).any(|(opt, value)| asks(opt, value))
}

/// srun's option words with their values: `--opt=value`, `--opt value`, `-Xvalue`,
/// `-X value`, up to the command.
fn options(args: &[String]) -> impl Iterator<Item = (&str, Option<&str>)> {
    let mut out = Vec::new();
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" || !a.starts_with('-') || a == "-" {
            break;
        }
        // A word after a value-less option word is taken as its value.
        let next = args
            .get(i + 1)
            .map(String::as_str)
            .filter(|n| !n.starts_with('-'));
        if let Some(long) = a.strip_prefix("--") {
            match long.split_once('=') {
                Some((k, v)) => out.push((k, Some(v))),
                None => {
                    out.push((long, next));
                    i += usize::from(next.is_some());
                }
            }
        } else {
            let (k, rest) = a[1..].split_at(a[1..].chars().next().map_or(0, char::len_utf8));
            if rest.is_empty() {
                out.push((k, next));
                i += usize::from(next.is_some());
            } else {
                out.push((k, Some(rest.trim_start_matches('='))));
            }
        }
        i += 1;
    }
    out.into_iter()
}

fn asks(opt: &str, value: Option<&str>) -> bool {
    match opt {
        "G" | "gpus" | "gpus-per-node" | "gpus-per-socket" | "gpus-per-task" => true,
        "gres" | "tres-per-task" => value.is_some_and(names_gpu),
        _ => false,
    }
}

/// A gres / TRES list naming a GPU (`gpu:1`, `gres/gpu:h100:2`, `gpu`), and not
/// `--gres=none`.
fn names_gpu(list: &str) -> bool {
    list.split(',').any(|item| {
        let name = item.trim().trim_start_matches("gres/");
        name == "gpu" || name.starts_with("gpu:")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn gpu_options_in_every_form_are_seen() {
        let none = |_: &str| None;
        for line in [
            "srun -N2 --gres=gpu:1 true",
            "srun -N 2 --gres gpu:h100:2 true",
            "srun -G2 true",
            "srun -G 2 true",
            "srun --gpus-per-task=1 -n2 true",
            "srun --tres-per-task=gres/gpu:1 true",
            "srun --exclusive --gpus 8 true",
        ] {
            assert!(asks_for_gpus(&args(line), &none), "{line}");
        }
        for line in [
            "srun -N2 true",
            "srun --gres=none true",
            "srun --gres=nic:1 -N2 true",
            "srun -N2 python train.py --gpus 8",
            "srun -N2 -- sh --gpus",
        ] {
            assert!(!asks_for_gpus(&args(line), &none), "{line}");
        }
    }

    #[test]
    fn srun_input_variables_count_too() {
        let plain = args("srun -N2 true");
        let env = |v: &str| (v == "SLURM_GPUS_PER_NODE").then(|| "1".to_string());
        assert!(asks_for_gpus(&plain, &env));
        let gres = |v: &str| (v == "SLURM_GRES").then(|| "nic:1".to_string());
        assert!(!asks_for_gpus(&plain, &gres));
        let gres = |v: &str| (v == "SLURM_GRES").then(|| "gpu:2".to_string());
        assert!(asks_for_gpus(&plain, &gres));
    }
}
