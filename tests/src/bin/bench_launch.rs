//! Launch overhead of gpu_affinity.so: `srun -n8` on one local cluster with the plugin
//! on the plugstack (`--gpu-affinity=strict`, a full plan per step) and without it
//! (plugstack.conf empty), alternating so drift and noise hit both sides alike.
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
    let mut with: Vec<String> = base.clone();
    with.insert(1, "--gpu-affinity=strict".into());
    base.push("true".into());
    with.push("true".into());
    let base: Vec<&str> = base.iter().map(String::as_str).collect();
    let with: Vec<&str> = with.iter().map(String::as_str).collect();

    println!(
        "bench-launch: {} ({:?} plugin), `{}` vs `{}`, {} alternating pairs after 3 warm-up pairs",
        a.machine,
        a.variant,
        base.join(" "),
        with.join(" "),
        a.runs
    );
    let (mut plain, mut plugin) = (Vec::new(), Vec::new());
    for i in 0..a.runs + 3 {
        // Swap which side goes first every pair, so neither always runs on a warmer cache.
        let order = if i % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for loaded in order {
            cluster.write_plugstack(loaded)?;
            let t = time_step(&cluster, if loaded { &with } else { &base })?;
            if i >= 3 {
                if loaded {
                    plugin.push(t)
                } else {
                    plain.push(t)
                }
            }
        }
    }
    let (mp, mw) = (median(&mut plain), median(&mut plugin));
    let ratio = mw.as_secs_f64() / mp.as_secs_f64();
    println!(
        "without plugin: median {:8.2} ms  (min {:.2}, max {:.2})",
        ms(mp),
        ms(plain[0]),
        ms(plain[plain.len() - 1])
    );
    println!(
        "with plugin:    median {:8.2} ms  (min {:.2}, max {:.2})",
        ms(mw),
        ms(plugin[0]),
        ms(plugin[plugin.len() - 1])
    );
    println!(
        "ratio {:.4} ({:+.2} %; goal <= +2 %) {}",
        ratio,
        (ratio - 1.0) * 100.0,
        if ratio <= 1.02 { "OK" } else { "ABOVE GOAL" }
    );
    Ok(())
}
