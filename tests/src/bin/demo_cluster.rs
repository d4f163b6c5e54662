//! README command 1: a throwaway local Slurm cluster whose one node has the topology of a
//! catalog machine (default p5.48xlarge), `srun --gpu-affinity=strict -n8 --gres=gpu:8`
//! over the whole node, each rank's binding printed, the cluster stopped.
//!
//! The binding printed is what each task saw in its own environment (GPU_AFFINITY_*,
//! set by the plugin from its plan) and its own /proc/self/status and numa_maps.
//!
//! The node's CPUs: by default the machine's NUMA nodes are folded onto this machine's
//! real CPUs (NUMA node i -> CPU i mod N), so the CPU masks are really applied and read
//! back. `--emulate` instead reports the machine's full CPU count to Slurm
//! (`SlurmdParameters=config_overrides`, task/none): the plan then uses the real
//! machine's CPU lists, which this machine cannot apply, so strict refuses every rank
//! and `--mode prefer` runs them with one warning per rank naming the planned CPUs.

use std::process::ExitCode;

use gpu_affinity::model::Machine;
use gpu_affinity_tests::fixture;
use gpu_affinity_tests::{
    ClientOptions, ClusterBuilder, NodeShape, Result, StepOutput, harness_err,
};

struct Args {
    machine: String,
    mode: String,
    emulate: bool,
    /// `None`: GPU_AFFINITY_SLURM_SERIES, else this machine's own Slurm.
    slurm: Option<String>,
}

const USAGE: &str = "usage: demo-cluster [--machine NAME | --machine-file FILE.toml] [--mode strict|prefer|off] [--emulate] [--slurm SERIES]

Starts a throwaway one-node Slurm cluster (munge, slurmctld, slurmd in a temp dir) whose
node has the topology of a catalog machine, runs one task per GPU with
`srun --gpu-affinity=MODE`, prints each rank's binding, and stops the cluster.
--emulate reports the machine's full CPU count to Slurm instead of folding its NUMA
nodes onto this machine's CPUs (use with --mode prefer: the CPUs do not exist here).
--slurm SERIES runs that Slurm series' daemons (22.05 here; 24.11 and 26.05 from
Debian roots made by scripts/slurm-root; 25.11 from /opt/slurm, SchedMD's source built
by scripts/slurm-from-source) with the plugin built for it.
Runs as root; needs slurmctld, slurmd, slurm-client and munge (scripts/setup-debian).";

fn parse_args() -> std::result::Result<Args, String> {
    let mut args = Args {
        machine: fixture::DEFAULT_MACHINE.to_owned(),
        mode: "strict".to_owned(),
        emulate: false,
        slurm: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--machine" => args.machine = it.next().ok_or("--machine needs a name")?,
            "--machine-file" => {
                args.machine = format!("file:{}", it.next().ok_or("--machine-file needs a path")?)
            }
            "--mode" => args.mode = it.next().ok_or("--mode needs strict, prefer or off")?,
            "--emulate" => args.emulate = true,
            "--slurm" => args.slurm = Some(it.next().ok_or("--slurm needs a series, e.g. 24.11")?),
            "--fold" => args.emulate = false,
            "-h" | "--help" => {
                return Err(String::new());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !matches!(args.mode.as_str(), "strict" | "prefer" | "off") {
        return Err(format!("--mode {:?}: use strict, prefer or off", args.mode));
    }
    Ok(args)
}

fn load(name: &str) -> Result<Machine> {
    match name.strip_prefix("file:") {
        Some(path) => fixture::machine_file(std::path::Path::new(path)),
        None => fixture::catalog_machine(name),
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("demo-cluster: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("demo-cluster: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<bool> {
    let full = load(&args.machine)?;
    let gpus = u32::try_from(full.gpus.len()).unwrap_or(0);
    if gpus == 0 {
        return Err(harness_err!("{} has no GPUs", args.machine));
    }
    let real = fixture::online_cpus()?;
    let (machine, builder, how) = if args.emulate {
        let shape = emulated_shape(&full);
        let how = format!(
            "node reported as {} CPUs (config_overrides, task/none); this machine has {real}",
            shape.cpus()
        );
        (full.clone(), ClusterBuilder::new().shape(shape), how)
    } else {
        let how = format!(
            "{} NUMA nodes folded onto this machine's {real} CPUs so masks are really applied",
            full.numa_nodes.len()
        );
        (fixture::fold_cpus(&full, real), ClusterBuilder::new(), how)
    };

    println!("== gpu-affinity demo: {}", args.machine);
    println!(
        "   {} GPUs, {} fabric NICs, {} NUMA nodes ({})",
        full.gpus.len(),
        full.fabric_nics().len(),
        full.numa_nodes.len(),
        full.numa_nodes
            .iter()
            .map(|n| format!("NUMA {}: CPUs {}", n.id, n.cpus))
            .collect::<Vec<_>>()
            .join("; ")
    );
    println!("   {how}");
    print!("== starting munged, slurmctld, slurmd ... ");
    let started = std::time::Instant::now();
    let builder = match &args.slurm {
        Some(series) => builder.slurm_series(series),
        None => builder,
    };
    let cluster = builder.machine(machine).with_plugin().start()?;
    println!(
        "up in {:.1} s ({})",
        started.elapsed().as_secs_f64(),
        cluster.dir().display()
    );
    let (major, minor, patch) = cluster.slurm_version();
    println!(
        "   Slurm {major}.{minor:02}.{patch} ({}), plugin {}",
        match (cluster.series_root(), cluster.series_install()) {
            (Some(_), _) => "daemons from its Debian root".to_owned(),
            (None, Some(prefix)) => format!("daemons from {}", prefix.display()),
            (None, None) => "this machine's own daemons".to_owned(),
        },
        cluster
            .plugin_path()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );

    let mut srun: Vec<String> = vec![format!("--gpu-affinity={}", args.mode)];
    srun.extend(cluster.whole_node(gpus));
    // As it runs: an overcommitting step inside a one-task job (valid on every series).
    let mut shown = vec!["srun"];
    shown.extend(srun.iter().map(String::as_str));
    println!("== {} <probe>", cluster.in_allocation(&shown).join(" "));
    let srun: Vec<&str> = srun.iter().map(String::as_str).collect();
    let out = cluster.probe(&srun, &ClientOptions::default())?;
    let ok = print_bindings(&out, &full)?;
    drop(cluster);
    println!("== cluster stopped (Slurm {major}.{minor:02}.{patch})");
    Ok(ok)
}

/// Sockets = NUMA nodes, cores and threads from the machine's core list.
fn emulated_shape(m: &Machine) -> NodeShape {
    let sockets = u32::try_from(m.numa_nodes.len().max(1)).unwrap_or(1);
    let cpus = u32::try_from(m.cpus().len()).unwrap_or(1).max(1);
    let threads = m
        .cores
        .first()
        .map(|c| u32::try_from(c.len()).unwrap_or(1))
        .unwrap_or(1)
        .max(1);
    NodeShape::Emulated {
        sockets,
        cores_per_socket: (cpus / sockets / threads).max(1),
        threads_per_core: threads,
    }
}

fn print_bindings(out: &StepOutput, machine: &Machine) -> Result<bool> {
    if !out.success() {
        println!("== the step was refused or failed (exit {:?}):", out.code());
        for line in out.stderr.lines() {
            println!("   {line}");
        }
        return Ok(false);
    }
    let tasks = out.tasks()?;
    let mut unapplied = false;
    // GPU_AFFINITY_MEMS names the NUMA nodes a memory policy was applied to; a node this
    // kernel lacks (the fixture has two, this VM one) is the GPU's node all the same.
    let mut numa_cell = |t: &gpu_affinity_tests::TaskReport| -> String {
        match t.env("GPU_AFFINITY_MEMS") {
            Some(m) if !m.is_empty() => m.to_owned(),
            _ => {
                let node = t
                    .env("GPU_AFFINITY_GPUS")
                    .and_then(|g| g.split(',').next())
                    .and_then(|g| g.parse().ok())
                    .and_then(|g| machine.numa_of(g));
                unapplied = true;
                node.map_or("-".to_owned(), |n| format!("{n}*"))
            }
        }
    };
    let rows: Vec<[String; 7]> = tasks
        .values()
        .map(|t| {
            let get = |k: &str| t.env(k).unwrap_or("-").to_owned();
            [
                t.rank.to_string(),
                format!(
                    "{} ({})",
                    get("GPU_AFFINITY_GPUS"),
                    get("CUDA_VISIBLE_DEVICES")
                ),
                get("GPU_AFFINITY_NICS"),
                get("GPU_AFFINITY_CPUS"),
                numa_cell(t),
                t.cpus.clone(),
                t.mempolicy.clone(),
            ]
        })
        .collect();
    let header = [
        "rank",
        "GPU (CUDA id)",
        "NICs",
        "CPUs",
        "NUMA",
        "applied mask",
        "mem policy",
    ];
    let mut width = header.map(str::len);
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!("{}", line(&header.map(str::to_owned)));
    for r in &rows {
        println!("{}", line(r));
    }
    if unapplied {
        println!(
            "* the GPU's NUMA node; this kernel lacks it, so the plugin applied no memory policy there"
        );
    }
    for l in out.stderr.lines().filter(|l| l.contains("gpu-affinity")) {
        println!("   {l}");
    }
    Ok(true)
}
