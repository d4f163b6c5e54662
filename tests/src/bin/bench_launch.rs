//! Launch overhead of gpu_affinity.so: `srun -n8` on one local cluster with the plugin
//! on the plugstack (`--gpu-affinity=strict`, a full plan per step; and `off`, the cost
//! of loading it) and without it (plugstack.conf empty), in a rotating order so drift
//! and noise hit every arm alike.
//! Prints the medians and their ratio; the goal is at most 2 % overhead. Not a timed
//! test: run it on a quiet machine.
//!
//! Two kinds of step: a fresh launch (srun makes its own job; on 24.11 and later an
//! overcommitting srun needs an allocation, so `salloc -Q -n1 ... srun`, see
//! `Cluster::in_allocation`) and a step inside a held allocation (`salloc --no-shell`,
//! then `srun --jobid`). `--breakdown N` then runs N strict steps with debug logging
//! and prints each hook's time where it ran (srun's stderr at -vv, slurmd.log), from the
//! plugin's own `gpu-affinity: timing:` lines.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use gpu_affinity_tests::bench_stats::{Estimate, Rounds, median};
use gpu_affinity_tests::fixture;
use gpu_affinity_tests::{ClientOptions, Cluster, ClusterBuilder, Result, Variant, harness_err};

const USAGE: &str = "usage: bench-launch [--runs N] [--tasks N] [--machine NAME] [--debug]
                    [--slurm SERIES] [--kind launch|alloc|both|none] [--breakdown N]
                    [--control] [--breakdown-mode strict|prefer|off] [--step-log FILE]

Times `srun -n8 true` with and without gpu_affinity.so on a throwaway local cluster
(alternating, after warm-up) and prints medians and the ratio, for a fresh launch and
for a step inside an allocation (--kind, default both). --slurm picks the series (as
GPU_AFFINITY_SLURM_SERIES does). --breakdown N: N more strict steps with debug logging,
and the plugin's time per hook and phase (--breakdown-mode: their --gpu-affinity, default
strict). --control: a fourth arm with a no-op C SPANK
plugin (tests/bench/control_spank.c: the same option and hooks, no work), what any
plugin costs on this Slurm. --step-log FILE: each timed step as `ARM START END` (ns since
the epoch) for `perf record -a -k CLOCK_REALTIME`, whose samples can then be summed per
arm. Runs as root.";

/// The launch overhead the plugin may add: strict / without at most this.
const GOAL: f64 = 1.02;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Launch,
    Alloc,
}

struct Args {
    runs: usize,
    tasks: u32,
    machine: String,
    variant: Variant,
    series: Option<String>,
    kinds: Vec<Kind>,
    breakdown: usize,
    breakdown_mode: String,
    control: bool,
    step_log: Option<PathBuf>,
}

/// What an arm's plugstack.conf holds.
#[derive(Clone)]
enum Stack {
    Empty,
    GpuAffinity,
    /// The no-op control plugin (`--control`).
    Control(PathBuf),
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    let mut a = Args {
        runs: 30,
        tasks: 8,
        machine: fixture::DEFAULT_MACHINE.to_owned(),
        variant: Variant::Release,
        series: None,
        kinds: vec![Kind::Launch, Kind::Alloc],
        breakdown: 0,
        breakdown_mode: "strict".to_owned(),
        control: false,
        step_log: None,
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
            "--slurm" => a.series = Some(it.next().ok_or("--slurm needs a series")?),
            "--breakdown" => a.breakdown = num("--breakdown")?,
            "--control" => a.control = true,
            "--step-log" => a.step_log = Some(it.next().ok_or("--step-log needs a file")?.into()),
            "--breakdown-mode" => {
                a.breakdown_mode = match it.next().as_deref() {
                    Some(m @ ("strict" | "prefer" | "off")) => m.to_owned(),
                    _ => return Err("--breakdown-mode needs strict, prefer or off".into()),
                }
            }
            "--kind" => {
                a.kinds = match it.next().as_deref() {
                    Some("launch") => vec![Kind::Launch],
                    Some("alloc") => vec![Kind::Alloc],
                    Some("both") => vec![Kind::Launch, Kind::Alloc],
                    Some("none") => Vec::new(),
                    _ => return Err("--kind needs launch, alloc, both or none".into()),
                }
            }
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

/// Now as nanoseconds since the epoch (CLOCK_REALTIME, as `perf record -k` reads it).
fn since_epoch() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// `1.0123 (+1.23 %; 95 % 1.0040-1.0210)`.
fn figure(e: Estimate) -> String {
    format!(
        "{:.4} ({:+.2} %; 95 % {:.4}-{:.4})",
        e.value,
        (e.value - 1.0) * 100.0,
        e.low,
        e.high
    )
}

/// The goal (at most 2 % overhead) against a ratio and its interval.
fn verdict(e: Estimate) -> &'static str {
    match (e.value <= GOAL, e.high <= GOAL) {
        (true, true) => "OK (goal <= 1.02, the interval within it)",
        (true, false) => {
            "OK by the median (goal <= 1.02), but the interval spans the goal: run more rounds"
        }
        (false, _) if e.low <= GOAL => {
            "ABOVE GOAL by the median (<= 1.02), but the interval spans the goal: run more rounds"
        }
        (false, _) => "ABOVE GOAL (<= 1.02), the interval too",
    }
}

fn run(a: &Args) -> Result<()> {
    let machine = fixture::fold_cpus(
        &fixture::catalog_machine(&a.machine)?,
        fixture::online_cpus()?,
    );
    if machine.gpus.is_empty() {
        return Err(harness_err!("{} has no GPUs", a.machine));
    }
    let mut builder = ClusterBuilder::new()
        .machine(machine)
        .plugin_variant(a.variant);
    if let Some(series) = &a.series {
        builder = builder.slurm_series(series);
    }
    if a.breakdown > 0 {
        // The plugin's timing lines are at Slurm's debug level.
        builder = builder.slurmd_debug("debug");
    }
    let cluster = builder.start()?;
    println!(
        "bench-launch: Slurm {} ({}), {} ({:?} plugin), {} tasks",
        cluster.series(),
        version(&cluster),
        a.machine,
        a.variant,
        a.tasks,
    );
    let mut step: Vec<String> = cluster.whole_node(a.tasks);
    step.push("true".into());
    for kind in &a.kinds {
        measure(&cluster, a, *kind, &step)?;
    }
    if a.breakdown > 0 {
        breakdown(&cluster, a.breakdown, &a.breakdown_mode, &step)?;
    }
    Ok(())
}

fn version(cluster: &Cluster) -> String {
    let (x, y, z) = cluster.slurm_version();
    format!("{x}.{y:02}.{z}")
}

/// An allocation held for the bench's in-allocation steps, cancelled on drop.
struct Allocation<'a> {
    cluster: &'a Cluster,
    job: String,
}

impl<'a> Allocation<'a> {
    /// `salloc --no-shell` for one task with the node's CPUs and GPUs (what an
    /// overcommitting step fits in on every series).
    fn hold(cluster: &'a Cluster) -> Result<Allocation<'a>> {
        let mut argv = vec!["salloc".to_owned(), "--no-shell".to_owned()];
        argv.extend(cluster.whole_node_allocation());
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = cluster
            .command(&argv, &ClientOptions::bounded(60))?
            .output()
            .map_err(|e| harness_err!("run salloc: {e}"))?;
        let text = String::from_utf8_lossy(&out.stderr);
        let job = text
            .split("Granted job allocation ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .filter(|j| j.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| harness_err!("salloc --no-shell gave no job id: {}", text.trim()))?;
        Ok(Allocation {
            cluster,
            job: job.to_owned(),
        })
    }
}

impl Drop for Allocation<'_> {
    fn drop(&mut self) {
        if let Ok(mut cmd) = self
            .cluster
            .command(&["scancel", &self.job], &ClientOptions::bounded(30))
        {
            let _ = cmd.output();
        }
    }
}

/// The srun argv of one arm: `mode` (`None`: no option) for `step`, as `kind` runs it.
fn arm_argv(
    cluster: &Cluster,
    kind: Kind,
    job: Option<&str>,
    mode: Option<&str>,
    step: &[String],
) -> Vec<String> {
    let mut argv = vec!["srun".to_owned()];
    if let Some(job) = job {
        argv.push(format!("--jobid={job}"));
    }
    if let Some(mode) = mode {
        argv.push(format!("--gpu-affinity={mode}"));
    }
    argv.extend(step.iter().cloned());
    // 24.11 and later keep an overcommitting srun that makes its own job pending; a
    // fresh launch there is a one-task salloc around it (22.05 runs it as it is).
    if kind == Kind::Launch && cluster.slurm_at_least(23, 2) {
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        return cluster.in_allocation(&refs);
    }
    argv
}

/// The control plugin built for the cluster's series in its directory: the loader
/// checks plugin_version against the daemons' SLURM_VERSION_NUMBER.
fn build_control(cluster: &Cluster) -> Result<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/control_spank.c");
    let out = cluster.dir().join("control_spank.so");
    let (x, y, z) = cluster.slurm_version();
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg(format!(
            "-DCONTROL_PLUGIN_VERSION={:#x}",
            (x << 16) | (y << 8) | z
        ))
        .arg(&source)
        .output()
        .map_err(|e| harness_err!("run cc for {}: {e}", source.display()))?;
    if !built.status.success() {
        return Err(harness_err!(
            "cc {} failed ({}): {}",
            source.display(),
            built.status,
            String::from_utf8_lossy(&built.stderr).trim()
        ));
    }
    Ok(out)
}

fn measure(cluster: &Cluster, a: &Args, kind: Kind, step: &[String]) -> Result<()> {
    let allocation = match kind {
        Kind::Alloc => Some(Allocation::hold(cluster)?),
        Kind::Launch => None,
    };
    let job = allocation.as_ref().map(|al| al.job.as_str());
    // (label, plugstack, srun argv); the first is the baseline of every ratio.
    let mut arms: Vec<(&str, Stack, Vec<String>)> = vec![
        (
            "without plugin",
            Stack::Empty,
            arm_argv(cluster, kind, job, None, step),
        ),
        (
            "plugin, strict",
            Stack::GpuAffinity,
            arm_argv(cluster, kind, job, Some("strict"), step),
        ),
        (
            "plugin, off",
            Stack::GpuAffinity,
            arm_argv(cluster, kind, job, Some("off"), step),
        ),
    ];
    if a.control {
        arms.push((
            "no-op control",
            Stack::Control(build_control(cluster)?),
            arm_argv(cluster, kind, job, Some("off"), step),
        ));
    }
    println!(
        "{}: {} rounds after 3 warm-up rounds; each round runs\n  `{}`\n  with the plugin on \
         the plugstack as `--gpu-affinity=strict` and `--gpu-affinity=off`{}\n  and without \
         it, in a rotating order",
        match kind {
            Kind::Launch => "fresh launch",
            Kind::Alloc => "inside an allocation",
        },
        a.runs,
        arms[0].2.join(" "),
        if a.control {
            ", the no-op control plugin"
        } else {
            ""
        },
    );
    let mut step_log = match &a.step_log {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
                .map_err(|e| harness_err!("open {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); arms.len()];
    for round in 0..a.runs + 3 {
        // Rotate the order so no arm always runs first (on a colder cache) or last.
        for k in 0..arms.len() {
            let i = (round + k) % arms.len();
            let (_, stack, argv) = &arms[i];
            match stack {
                Stack::Empty => cluster.write_plugstack(false)?,
                Stack::GpuAffinity => cluster.write_plugstack(true)?,
                Stack::Control(so) => cluster.write_plugstack_of(so)?,
            }
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let started = since_epoch();
            let t = time_step(cluster, &argv)?;
            if let Some(log) = &mut step_log {
                writeln!(
                    log,
                    "{} {} {}",
                    arms[i].0.replace([' ', ','], "_"),
                    started,
                    since_epoch()
                )
                .map_err(|e| harness_err!("write the step log: {e}"))?;
            }
            if round >= 3 {
                times[i].push(t);
            }
        }
    }
    let secs: Vec<Vec<f64>> = times
        .iter()
        .map(|t| t.iter().map(Duration::as_secs_f64).collect())
        .collect();
    for (i, (label, _, _)) in arms.iter().enumerate() {
        let mut sorted = secs[i].clone();
        let m = median(&mut sorted);
        println!(
            "{label:<15} median {:8.2} ms  (min {:.2}, max {:.2})",
            m * 1e3,
            sorted[0] * 1e3,
            sorted[sorted.len() - 1] * 1e3
        );
    }
    let rounds = Rounds::new(&secs).ok_or_else(|| harness_err!("the arms' rounds differ"))?;
    // The ratio of the arms' medians, and the median of each round's own ratio against
    // the round's step without the plugin: a paired figure, which a slow drift of the
    // machine's load (the same for the steps of a round) leaves out.
    let seed = a.runs as u64;
    let strict = rounds.ratio_of_medians(1, seed);
    println!(
        "ratio strict/without {} {}; off/without {}",
        figure(strict),
        verdict(strict),
        figure(rounds.ratio_of_medians(2, seed))
    );
    println!(
        "paired: median of the rounds' own ratios strict/without {}, off/without {}",
        figure(rounds.paired(1, seed)),
        figure(rounds.paired(2, seed))
    );
    if a.control {
        println!(
            "control: no-op plugin/without {}, paired {}",
            figure(rounds.ratio_of_medians(3, seed)),
            figure(rounds.paired(3, seed))
        );
    }
    Ok(())
}

/// One hook's (or phase's) times over the breakdown's steps, by where it ran.
#[derive(Default)]
struct Figures {
    rows: Vec<(String, Vec<f64>)>,
}

impl Figures {
    fn add(&mut self, key: String, value: f64) {
        match self.rows.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(value),
            None => self.rows.push((key, vec![value])),
        }
    }

    /// `text`'s timing lines (`gpu-affinity: timing: HOOK T ms (PHASE T, ...)`), as `side`.
    fn read(&mut self, side: &str, text: &str) {
        for line in text.lines() {
            let Some(rest) = line.split("gpu-affinity: timing: ").nth(1) else {
                continue;
            };
            // Eight tasks log at once and Slurm writes a line in more than one write(2),
            // so another task's text can land inside this line or cut it short: a line
            // that is not exactly `HOOK T ms` with its phases closed by `)`, each `NAME T`,
            // is dropped whole, never counted in part.
            let (head, phases) = match rest.split_once(" (") {
                Some((h, p)) => match p.strip_suffix(')') {
                    Some(p) => (h, p),
                    None => continue,
                },
                None => (rest, ""),
            };
            let mut words = head.split(' ');
            let (Some(hook), Some(Ok(total)), Some("ms"), None) = (
                words.next(),
                words.next().map(str::parse::<f64>),
                words.next(),
                words.next(),
            ) else {
                continue;
            };
            if !phase_name(hook) {
                continue;
            }
            let parsed: Option<Vec<(&str, f64)>> = phases
                .split(", ")
                .filter(|p| !p.is_empty())
                .map(|phase| {
                    let (name, t) = phase.rsplit_once(' ')?;
                    phase_name(name).then_some((name, t.parse().ok()?))
                })
                .collect();
            let Some(parsed) = parsed else {
                continue;
            };
            self.add(format!("{side} {hook}"), total);
            for (name, t) in parsed {
                self.add(format!("{side} {hook} / {name}"), t);
            }
        }
    }
}

/// What `timing::mark` names a phase (and a hook): words of letters, digits and `._-`.
fn phase_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '.' | '_' | '-'))
}

/// N steps of `mode` with debug logging; each hook's median per call and calls per step,
/// in srun (its stderr at -vv) and on the node (slurmd.log: slurmstepd and the tasks).
fn breakdown(cluster: &Cluster, steps: usize, mode: &str, step: &[String]) -> Result<()> {
    cluster.write_plugstack(true)?;
    let before = cluster.log("slurmd.log").len();
    let mut figures = Figures::default();
    let mut argv = arm_argv(cluster, Kind::Launch, None, Some(mode), step);
    if let Some(srun) = argv.iter().position(|a| a == "srun") {
        argv.insert(srun + 1, "-vv".to_owned());
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    for _ in 0..steps {
        let out = cluster
            .command(&argv, &ClientOptions::bounded(60))?
            .output()
            .map_err(|e| harness_err!("run srun: {e}"))?;
        figures.read("srun", &String::from_utf8_lossy(&out.stderr));
    }
    // slurmstepd's last lines (exit) land a moment after srun returns.
    std::thread::sleep(Duration::from_millis(500));
    let log = cluster.log("slurmd.log");
    figures.read("node", log.get(before..).unwrap_or(""));
    println!(
        "breakdown: {steps} {mode} steps `{}`; per hook and phase where it ran: median ms \
         per call, calls per step",
        argv.join(" ")
    );
    let mut sum = [0.0f64; 2];
    for (key, values) in &mut figures.rows {
        values.sort_by(f64::total_cmp);
        let median = values[values.len() / 2];
        let per_step = values.len() as f64 / steps as f64;
        println!("  {key:<40} {median:8.3} ms  x{per_step:.1}");
        if !key.contains(" / ") {
            sum[usize::from(key.starts_with("node"))] += median * per_step;
        }
    }
    println!(
        "  sum per step: srun {:.3} ms, node {:.3} ms (task hooks run in parallel tasks)",
        sum[0], sum[1]
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timing_line_another_task_wrote_into_or_cut_short_is_dropped_whole() {
        let log = "\
[2026-12-06T03:55:07.099] [21.0] debug:  gpu-affinity: timing: task_init 0.363 ms (affinity 0.061, env set 0.197)
[2026-12-06T03:55:07.100] [21.0] debug:  gpu-affinity: timing: task_init 0.401 ms (affinity 0.070, mempolic[2026-12-06T03:55:07.100] [21.0] gpu-affinity: local rank 4: memory policy not applied fy 0.008)
[2026-12-06T03:55:07.101] [21.0] debug:  gpu-affinity: timing: exit 0.032 ms
[2026-12-06T03:55:07.102] [21.0] debug:  gpu-affinity: timing: task_init 0.412 ms (affinity 0.07
[2026-12-06T03:55:07.102] [21.0] debug:  gpu-affinity: timing: task_init 0.4
[2026-12-06T03:55:07.103] [21.0] debug:  gpu-affinity: timing: exit 0.030 ms[2026-12-06T03:55:07.103] [21.0] debug:  gpu-affinity: local rank 2
";
        let mut figures = Figures::default();
        figures.read("node", log);
        let rows: Vec<(&str, &[f64])> = figures
            .rows
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("node task_init", &[0.363][..]),
                ("node task_init / affinity", &[0.061][..]),
                ("node task_init / env set", &[0.197][..]),
                ("node exit", &[0.032][..]),
            ]
        );
    }
}
