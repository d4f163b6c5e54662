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

/// srun's options that take no value, or only an optional one (which getopt reads only
/// from `--opt=value`, never from the next word), by srun(1): these never take the word
/// after them, so `srun -l ./app --gpus 1` ends srun's options at `./app`.
const NO_VALUE_LONG: &[&str] = &[
    "bcast",
    "compress",
    "contiguous",
    "disable-status",
    "exact",
    "exclusive",
    "external-launcher",
    "help",
    "hold",
    "immediate",
    "kill-on-bad-exit",
    "label",
    "multi-prog",
    "nice",
    "no-allocate",
    "no-kill",
    "oom-kill-step",
    "overcommit",
    "overlap",
    "oversubscribe",
    "preserve-env",
    "propagate",
    "pty",
    "quiet",
    "quit-on-interrupt",
    "reboot",
    "resv-ports",
    "send-libs",
    "spread-job",
    "test-only",
    "unbuffered",
    "usage",
    "use-min-nodes",
    "verbose",
    "version",
    "whole",
    "x11",
];

/// srun's one-letter options that take no value (or an optional one): `-E -h -H -I -k
/// -K -l -O -Q -s -u -v -V -X -Z`. They may be bundled (`-lv`).
const NO_VALUE_SHORT: &str = "EhHIkKlOQsuvVXZ";

/// Whether srun's arguments (`args[0]` is srun itself) or input variables ask for GPUs.
/// Arguments are read up to the user's command (the first word that is not an option
/// and not the value of one), so a command's own `--gpus` is not counted. An explicit
/// "no GPUs" in the arguments (`--gres=none`, `--gpus=0`) beats srun's input variables,
/// as srun's own options beat its environment; a zero count is no request. A wrong "no"
/// only leaves the step to the node side, which decides by the step's GPUs.
pub fn asks_for_gpus(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> bool {
    let mut by_args = None;
    for (opt, value) in options(args) {
        if let Some(asked) = asks(opt, value) {
            by_args = Some(by_args.unwrap_or(false) || asked);
        }
    }
    if let Some(asked) = by_args {
        return asked;
    }
    GPU_COUNT_ENV
        .iter()
        .any(|v| env(v).is_some_and(|x| counts_gpus(&x)))
        || GPU_LIST_ENV
            .iter()
            .any(|v| env(v).is_some_and(|x| names_gpu(&x)))
}

/// The partition srun's own `-p` / `--partition` names (the last one given), or `None`
/// when there is none or it is a list (slurmctld picks one of them).
pub fn partition(args: &[String]) -> Option<String> {
    options(args)
        .filter(|(opt, _)| matches!(*opt, "p" | "partition"))
        .filter_map(|(_, value)| value)
        .last()
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.contains(','))
        .map(str::to_string)
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
        let next = args.get(i + 1).map(String::as_str);
        if let Some(long) = a.strip_prefix("--") {
            match long.split_once('=') {
                Some((k, v)) => out.push((k, Some(v))),
                None if NO_VALUE_LONG.contains(&long) => out.push((long, None)),
                None => {
                    out.push((long, next));
                    i += 1;
                }
            }
        } else {
            // Bundled value-less letters (`-lv`), then at most one that takes a value.
            let letters = &a[1..];
            let mut rest = letters;
            while let Some(c) = rest.chars().next().filter(|c| NO_VALUE_SHORT.contains(*c)) {
                out.push((&rest[..c.len_utf8()], None));
                rest = &rest[c.len_utf8()..];
            }
            if let Some(c) = rest.chars().next() {
                let (k, value) = rest.split_at(c.len_utf8());
                if value.is_empty() {
                    out.push((k, next));
                    i += 1;
                } else {
                    out.push((k, Some(value.trim_start_matches('='))));
                }
            }
        }
        i += 1;
    }
    out.into_iter()
}

/// What one option says about GPUs: `Some(true)` asks, `Some(false)` says none
/// (`--gres=none`, `--gpus=0`), `None` says nothing about them.
fn asks(opt: &str, value: Option<&str>) -> Option<bool> {
    match opt {
        "G" | "gpus" | "gpus-per-node" | "gpus-per-socket" | "gpus-per-task" => {
            Some(value.is_none_or(counts_gpus))
        }
        "gres" | "tres-per-task" => {
            let list = value?;
            if names_gpu(list) {
                Some(true)
            } else {
                (list.trim() == "none").then_some(false)
            }
        }
        _ => None,
    }
}

/// A GPU count (`2`, `h100:2`, `0`) that asks for at least one: an empty or zero count
/// is no request.
fn counts_gpus(count: &str) -> bool {
    let n = count.rsplit(':').next().unwrap_or("").trim();
    !n.is_empty() && n.chars().any(|c| c != '0')
}

/// A gres / TRES list asking for a GPU (`gpu:1`, `gres/gpu:h100:2`, `gpu`), and not
/// `--gres=none` or `gpu:0`.
fn names_gpu(list: &str) -> bool {
    list.split(',').any(|item| {
        let name = item.trim().trim_start_matches("gres/");
        match name.strip_prefix("gpu") {
            Some("") => true,
            Some(rest) if rest.starts_with(':') => {
                let last = rest.rsplit(':').next().unwrap_or("");
                !last.bytes().all(|b| b == b'0') || last.is_empty()
            }
            _ => false,
        }
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
            "srun --exclusive=user --gpus 8 true",
            "srun -l -N 2 -G 1 ./app",
            "srun -lN2 --gres=gpu:h100:1 ./app",
            "srun --mpi pmix --gpus-per-node 1 ./app",
        ] {
            assert!(asks_for_gpus(&args(line), &none), "{line}");
        }
        for line in [
            "srun -N2 true",
            "srun --gres=none true",
            "srun --gres=nic:1 -N2 true",
            "srun -N2 python train.py --gpus 8",
            "srun -N2 -- sh --gpus",
            "srun -N2 -l ./app --gpus-per-task 1",
            "srun --exclusive ./a.out -G 2",
            "srun -lv -O ./a.out -G 2",
            "srun --pty --label bash --gres=gpu:1",
            "srun --gpus=0 true",
            "srun -G0 true",
            "srun --gres=gpu:0 true",
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

    #[test]
    fn the_partition_is_read_from_srun_own_options() {
        let p = |line: &str| partition(&args(line));
        assert_eq!(p("srun -N2 -p gpu ./app").as_deref(), Some("gpu"));
        assert_eq!(p("srun -pgpu -l ./app").as_deref(), Some("gpu"));
        assert_eq!(p("srun --partition=a100 ./app").as_deref(), Some("a100"));
        assert_eq!(p("srun -l ./app -p other"), None);
        assert_eq!(p("srun -p a,b ./app"), None);
        assert_eq!(p("srun -N2 ./app"), None);
    }

    #[test]
    fn explicit_none_in_the_arguments_beats_the_environment() {
        let env = |v: &str| (v == "SLURM_GPUS_PER_NODE").then(|| "1".to_string());
        assert!(!asks_for_gpus(&args("srun -N2 --gres=none true"), &env));
        assert!(!asks_for_gpus(&args("srun -N2 --gpus=0 true"), &env));
        assert!(!asks_for_gpus(
            &args("srun -N2 --gpus-per-node 0 true"),
            &env
        ));
        assert!(asks_for_gpus(&args("srun -N2 --gres=none -G1 true"), &env));
        // A zero count in the environment is no request either.
        let zero = |v: &str| (v == "SLURM_GPUS").then(|| "0".to_string());
        assert!(!asks_for_gpus(&args("srun -N2 true"), &zero));
        let typed = |v: &str| (v == "SLURM_GPUS").then(|| "h100:2".to_string());
        assert!(asks_for_gpus(&args("srun -N2 true"), &typed));
    }
}
