//! Launch overhead of gpu_affinity.so: `srun -n8` on one local cluster with the plugin
//! on the plugstack (`--gpu-affinity=strict`, a full plan per step; and `off`, the cost
//! of loading it) and without it (plugstack.conf empty), in a rotating order so drift
//! and noise hit every arm alike.
//! Prints the medians and their ratio; the goal is at most 2 % overhead. Not a timed
//! test: run it on a quiet machine.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpu_affinity_tests::fixture;
use gpu_affinity_tests::{ClientOptions, Cluster, ClusterBuilder, Result, Variant, harness_err};

const USAGE: &str = "usage: bench-launch [--runs N] [--tasks N] [--machine NAME] [--debug]

Times `srun -n8 true` with and without gpu_affinity.so on a throwaway local cluster
(alternating, after warm-up) and prints medians and the ratio. Runs as root.";

struct Args {
    runs: usize,
    tasks: u32,
    machine: String,
    variant: Variant,
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    let mut a = Args {
        runs: 30,
        tasks: 8,
        machine: fixture::DEFAULT_MACHINE.to_owned(),
        variant: Variant::Release,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |what: &str| -> std::result::Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{what} needs a number"))
        };
        match arg.as_str() {
            "--runs" => a.runs = num("--runs")?.max(3),
            "--tasks" => {
                a.tasks = u32::try_from(num("--tasks")?)
                    .map_err(|e| e.to_string())?
                    .max(1)
            }
            "--machine" => a.machine = it.next().ok_or("--machine needs a name")?,
            "--debug" => a.variant = Variant::Debug,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    match parse_args() {
        Ok(None) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench-launch: {e}\n{USAGE}");
            ExitCode::from(2)
        }
        Ok(Some(args)) => match run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench-launch: {e}");
                ExitCode::from(1)
            }
        },
    }
}

fn time_step(cluster: &Cluster, argv: &[&str]) -> Result<Duration> {
    let mut cmd = cluster.command(argv, &ClientOptions::bounded(60))?;
    let start = Instant::now();
    let out = cmd.output().map_err(|e| harness_err!("run srun: {e}"))?;
    let took = start.elapsed();
    if !out.status.success() {
        return Err(harness_err!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(took)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn run(a: &Args) -> Result<()> {
    let machine = fixture::fold_cpus(
        &fixture::catalog_machine(&a.machine)?,
        fixture::online_cpus()?,
    );
    let gpus = u32::try_from(machine.gpus.len()).unwrap_or(0);
    let cluster = ClusterBuilder::new()
        .machine(machine)
        .plugin_variant(a.variant)
        .start()?;
    let mut base: Vec<String> = vec!["srun".into()];
    base.extend(cluster.whole_node(a.tasks));
    if gpus == 0 {
        return Err(harness_err!("{} has no GPUs", a.machine));
    }
    let mut strict: Vec<String> = base.clone();
    strict.insert(1, "--gpu-affinity=strict".into());
    let mut off: Vec<String> = base.clone();
    off.insert(1, "--gpu-affinity=off".into());
    for argv in [&mut base, &mut strict, &mut off] {
        argv.push("true".into());
    }
    // (label, plugin on the plugstack, srun argv)
    let arms: [(&str, bool, Vec<&str>); 3] = [
        (
            "without plugin",
            false,
            base.iter().map(String::as_str).collect(),
        ),
        (
            "plugin, strict",
            true,
            strict.iter().map(String::as_str).collect(),
        ),
        (
            "plugin, off",
            true,
            off.iter().map(String::as_str).collect(),
        ),
    ];

    println!(
        "bench-launch: {} ({:?} plugin), {} tasks, {} rounds after 3 warm-up rounds; each round runs\n  \
         `{}`\n  with the plugin on the plugstack as `--gpu-affinity=strict` and `--gpu-affinity=off`\n  \
         and without it, in a rotating order",
        a.machine,
        a.variant,
        a.tasks,
        a.runs,
        arms[0].2.join(" "),
    );
    let mut times: [Vec<Duration>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..a.runs + 3 {
        // Rotate the order so no arm always runs first (on a colder cache) or last.
        for k in 0..arms.len() {
            let i = (round + k) % arms.len();
            let (_, loaded, argv) = &arms[i];
            cluster.write_plugstack(*loaded)?;
            let t = time_step(&cluster, argv)?;
            if round >= 3 {
                times[i].push(t);
            }
        }
    }
    let mut medians = [Duration::ZERO; 3];
    for (i, (label, _, _)) in arms.iter().enumerate() {
        medians[i] = median(&mut times[i]);
        let v = &times[i];
        println!(
            "{label:<15} median {:8.2} ms  (min {:.2}, max {:.2})",
            ms(medians[i]),
            ms(v[0]),
            ms(v[v.len() - 1])
        );
    }
    let ratio = medians[1].as_secs_f64() / medians[0].as_secs_f64();
    let off_ratio = medians[2].as_secs_f64() / medians[0].as_secs_f64();
    println!(
        "ratio strict/without {:.4} ({:+.2} %; goal <= +2 %) {}; off/without {:.4} ({:+.2} %)",
        ratio,
        (ratio - 1.0) * 100.0,
        if ratio <= 1.02 { "OK" } else { "ABOVE GOAL" },
        off_ratio,
        (off_ratio - 1.0) * 100.0
    );
    Ok(())
}
