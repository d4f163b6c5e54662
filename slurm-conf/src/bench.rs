//! `gpu-affinity bench`: discovery and solver figures, printed, never asserted.
//!
//! Discovery: the sysfs reader on a fixture tree of the default catalog machine (a p5-class
//! node: 8 GPUs, 32 NICs, 192 CPUs), at `Detail::Full` (`explain`) and at
//! `Detail::Placement` (what the SPANK plugin reads once per step), side by side with
//! `HWLOC_FSROOT=DIR lstopo --of xml` on the same tree, alternating. Solver: one plan for
//! 8 GPUs and for 64 GPUs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use gpu_affinity::catalog;
use gpu_affinity::cpuset::CpuSet;
use gpu_affinity::fabric::profiles::{self, Profiles};
use gpu_affinity::fabric::{self, StepInputs};
use gpu_affinity::model::{Machine, NumaNode};
use gpu_affinity::solver::{self, Mode, StepRequest};
use gpu_affinity::sources;
use gpu_affinity::sources::sysfs::Detail;
use gpu_affinity_node::bounded::{self, Keep, RunError};

use crate::CliError;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Repetitions per measurement.
    #[arg(long, default_value_t = 21)]
    runs: usize,
    /// Catalog machine to build the discovery tree from.
    #[arg(long, default_value = catalog::DEFAULT_MACHINE)]
    machine: String,
    /// Time discovery on this tree instead of a fixture (`/` on a GPU node: the real
    /// sysfs, where reading a PCIe link attribute reads the device's config space).
    #[arg(long, value_name = "DIR", conflicts_with = "machine")]
    sysfs_root: Option<PathBuf>,
    /// Time only the placement check (what srun's local_user_init and the node backstop
    /// run for a multi-node GPU step) on these topology files (topology.conf, or .yaml),
    /// for the step node list `--step-nodes`.
    #[arg(long, value_name = "FILE")]
    placement_check: Vec<PathBuf>,
    /// The step's node list for `--placement-check`.
    #[arg(long, value_name = "HOSTLIST", default_value = "gpu-[00001-00002]")]
    step_nodes: String,
}

/// lstopo gets this long per run before the bench gives up on it.
const LSTOPO_TIMEOUT: Duration = Duration::from_secs(30);

pub fn run(args: &Args) -> Result<(), CliError> {
    let runs = args.runs.max(1);
    if !args.placement_check.is_empty() {
        for path in &args.placement_check {
            placement_check(path, &args.step_nodes, runs)?;
        }
        return Ok(());
    }
    // The fixture directory lives until the end of the bench.
    let mut fixture = None;
    let (root, machine, name) = match &args.sysfs_root {
        Some(root) => (
            root.clone(),
            sources::sysfs::read_machine(root)?,
            root.display().to_string(),
        ),
        None => {
            let machine = catalog::machine(&args.machine)?;
            let dir = fixture.insert(tempfile::tempdir()?);
            sources::fixture::write_fixture(&machine, dir.path())?;
            (dir.path().to_path_buf(), machine, args.machine.clone())
        }
    };
    let dir = root.as_path();
    println!(
        "machine {name}: {} GPUs, {} NICs, {} CPUs",
        machine.gpus.len(),
        machine.nics.len(),
        machine.cpus().len()
    );

    const DETAILS: [(Detail, &str); 2] = [(Detail::Full, "full"), (Detail::Placement, "placement")];
    let mut ours: [Vec<Duration>; 2] = Default::default();
    let mut hwloc = Vec::with_capacity(runs);
    for _ in 0..runs {
        for ((detail, _), times) in DETAILS.iter().zip(&mut ours) {
            let start = Instant::now();
            sources::sysfs::read_machine_with(dir, *detail)?;
            times.push(start.elapsed());
        }
        hwloc.push(time_lstopo(dir)?);
    }
    // Best-of next to the median: on a shared machine the fastest run is the one least
    // disturbed by others.
    let hwloc = Summary::of(&mut hwloc);
    println!(
        "discovery  HWLOC_FSROOT lstopo --of xml  median {:>8.3} ms  best {:>8.3} ms",
        ms(hwloc.median),
        ms(hwloc.best)
    );
    for ((_, label), times) in DETAILS.iter().zip(&mut ours) {
        let s = Summary::of(times);
        println!(
            "discovery  gpu-affinity {label:<9}        median {:>8.3} ms  best {:>8.3} ms   \
             lstopo/this median {:>6.1}x  best {:>6.1}x (goal >= 20x)",
            ms(s.median),
            ms(s.best),
            ms(hwloc.median) / ms(s.median),
            ms(hwloc.best) / ms(s.best)
        );
    }

    step_work(dir, runs)?;

    for copies in [1, 8] {
        let big = replicate(&machine, copies);
        let request = StepRequest {
            gpus: big.gpus_in_slurm_order().iter().map(|g| g.pci).collect(),
            cpus: big.cpus(),
            tasks: big.gpus.len() as u32,
            gpus_per_task: None,
            mode: Mode::Strict,
        };
        let mut times: Vec<Duration> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(solver::solve(&big, &request));
                start.elapsed()
            })
            .collect();
        println!(
            "solver     {:>3} GPUs, {:>3} tasks         median {:>10.3} ms",
            big.gpus.len(),
            request.tasks,
            ms(median(&mut times))
        );
    }
    bench_hostlist(runs)
}

/// Hostlist compress and expand of 100k names in-process (the names of a large cloud
/// cluster), checking the round trip. libslurm's own functions are not called here:
/// this crate has no FFI (issue 10's side-by-side comparison is left).
fn bench_hostlist(runs: usize) -> Result<(), CliError> {
    use gpu_affinity::slurm::hostlist;
    let names: Vec<String> = (1..=100_000).map(|i| format!("gpu-st-p5-{i:06}")).collect();
    let text = hostlist::compress(&names)?;
    if hostlist::expand_bounded(&text, 1 << 20)? != names {
        return Err(CliError("hostlist round trip differs".into()));
    }
    let mut c: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(hostlist::compress(&names).ok());
            start.elapsed()
        })
        .collect();
    let mut e: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(hostlist::expand_bounded(&text, 1 << 20).ok());
            start.elapsed()
        })
        .collect();
    println!(
        "hostlist   compress 100k names           median {:>10.3} ms",
        ms(median(&mut c))
    );
    println!(
        "hostlist   expand   100k names           median {:>10.3} ms",
        ms(median(&mut e))
    );
    Ok(())
}

/// What the SPANK plugin computes once per step in user_init, part by part: the built-in
/// fabric profiles parsed, the placement read of the tree, the plan for one rank per GPU
/// over the profile's fabric NICs and the fabric environment (no vendor topology file, as on the fixture tree).
fn step_work(root: &Path, runs: usize) -> Result<(), CliError> {
    let mut times: [Vec<Duration>; 4] = Default::default();
    // Parsing the embedded TOML files, what `Profiles::builtin` saves (not in the sum).
    let mut parse_times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        std::hint::black_box(profiles::load(&profiles::embedded())?);
        parse_times.push(start.elapsed());
        let start = Instant::now();
        let profiles = Profiles::builtin();
        times[0].push(start.elapsed());
        let start = Instant::now();
        let machine = sources::sysfs::read_machine_with(root, Detail::Placement)?;
        times[1].push(start.elapsed());
        let request = StepRequest {
            gpus: machine
                .gpus_in_slurm_order()
                .iter()
                .map(|g| g.pci)
                .collect(),
            cpus: machine.cpus(),
            tasks: machine.gpus.len() as u32,
            gpus_per_task: None,
            mode: Mode::Strict,
        };
        let start = Instant::now();
        let fabric_nics = fabric::fabric_nics(&machine, &profiles);
        let plan = solver::solve_with_fabric(&machine, &request, &fabric_nics);
        times[2].push(start.elapsed());
        let existing = |_: &str| None;
        let vendor_topology = |_: &str| None;
        let inputs = StepInputs {
            profiles: &profiles,
            existing: &existing,
            forced: &[],
            vendor_topology: &vendor_topology,
            generated_topology_path: "/run/gpu-affinity/nccl-topo.xml",
        };
        let start = Instant::now();
        std::hint::black_box(fabric::step_fabric(&machine, &plan, &inputs));
        times[3].push(start.elapsed());
    }
    let labels = [
        "profiles (built-in, parsed)",
        "discovery (placement)",
        "solve (profile fabric + plan)",
        "step_fabric (env)",
    ];
    let mut total = Duration::ZERO;
    for (label, t) in labels.iter().zip(&mut times) {
        let s = Summary::of(t);
        total += s.median;
        println!(
            "step       {label:<28} median {:>8.3} ms  best {:>8.3} ms",
            ms(s.median),
            ms(s.best)
        );
    }
    println!(
        "step       user_init work, sum of medians {:>8.3} ms",
        ms(total)
    );
    let s = Summary::of(&mut parse_times);
    println!(
        "step       {:<28} median {:>8.3} ms  best {:>8.3} ms  (for comparison: the TOML parse builtin() skips)",
        "profiles (parsed from TOML)",
        ms(s.median),
        ms(s.best)
    );
    copies(root, runs)
}

/// What a step pays instead of discovery, the profile parse and detection while the
/// node's copy in run_dir is current (the plugin's `node_view.rs`): the fingerprints,
/// and the JSON read back (the file read itself not included). Beside it, what the two
/// copies it replaced cost: the machine and every profile, detection made again.
fn copies(root: &Path, runs: usize) -> Result<(), CliError> {
    use gpu_affinity::fabric::{NodeView, detect_with};
    use gpu_affinity::saved;
    let machine = sources::sysfs::read_machine_with(root, Detail::Placement)?;
    let profiles = Profiles::builtin();
    let detection = detect_with(&machine, &profiles);
    let view = NodeView::detect(machine.clone(), &profiles);
    let fingerprint = saved::node_fingerprint(root).ok_or("no node fingerprint")?;
    let node_copy = saved::to_bytes(&fingerprint, &view)?;
    let machine_copy = saved::to_bytes(&fingerprint, &machine)?;
    let profiles_copy = saved::to_bytes(&fingerprint, &profiles)?;
    let mut times: [Vec<Duration>; 4] = Default::default();
    for _ in 0..runs {
        let start = Instant::now();
        std::hint::black_box(saved::node_fingerprint(root));
        times[0].push(start.elapsed());
        let start = Instant::now();
        let back = saved::value_if_current::<NodeView>(&node_copy, &fingerprint);
        times[1].push(start.elapsed());
        if back.as_ref() != Some(&view) {
            return Err(CliError("the node's copy does not read back".into()));
        }
        let start = Instant::now();
        let machine_back = saved::value_if_current::<Machine>(&machine_copy, &fingerprint);
        let profiles_back = saved::value_if_current::<Profiles>(&profiles_copy, &fingerprint);
        let again = machine_back
            .as_ref()
            .zip(profiles_back.as_ref())
            .map(|(m, p)| detect_with(m, p));
        times[2].push(start.elapsed());
        if again.as_ref() != Some(&detection) {
            return Err(CliError(
                "the machine's and profiles' copies do not read back".into(),
            ));
        }
        let start = Instant::now();
        std::hint::black_box(detect_with(&machine, &profiles));
        times[3].push(start.elapsed());
    }
    let labels = [
        "node fingerprint".to_string(),
        format!("node copy ({} KiB JSON)", node_copy.len() / 1024),
        format!(
            "was: machine {} + profiles {} KiB, detected",
            machine_copy.len() / 1024,
            profiles_copy.len() / 1024
        ),
        "detection alone".to_string(),
    ];
    for (label, t) in labels.iter().zip(&mut times) {
        let s = Summary::of(t);
        println!(
            "copies     {label:<28} median {:>8.3} ms  best {:>8.3} ms",
            ms(s.median),
            ms(s.best)
        );
    }
    Ok(())
}

/// The placement check on one topology file, as both sides run it: read it
/// trust-checked (`read::locate_topology` over `read::read_topology`, as srun's
/// `placement::submit` and the node's `placement::backstop` do), pick the cluster's
/// topology, expand the step's node list and find its units (`step_span`). srun reads the
/// file as the user and slurmstepd as root; the work is the same.
fn placement_check(path: &Path, step_nodes: &str, runs: usize) -> Result<(), CliError> {
    use gpu_affinity::slurm::{read, step_span};
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(path)?.uid();
    let size = std::fs::metadata(path)?.len();
    let mut times: [Vec<Duration>; 2] = Default::default();
    let mut span = None;
    for _ in 0..runs {
        let start = Instant::now();
        let read = read::locate_topology(Some(path), None, &|p| read::read_topology(p, owner))
            .map_err(CliError)?;
        let parsed = start.elapsed();
        let Some((_, topologies)) = read else {
            return Err(CliError(format!("{} does not exist", path.display())));
        };
        let nodes = step_span::step_nodes(step_nodes).map_err(CliError)?;
        let found = step_span::partition_topology(&topologies, None)
            .map(|t| step_span::span_within(t, &nodes, 0));
        let total = start.elapsed();
        times[0].push(parsed);
        times[1].push(total);
        span = Some(found);
    }
    let read = Summary::of(&mut times[0]);
    let total = Summary::of(&mut times[1]);
    println!(
        "placement check  {} ({} KiB), step {step_nodes}: read+parse median {:>7.3} ms, \
         whole check median {:>7.3} ms  best {:>7.3} ms (goal <= 5 ms per side); {:?}",
        path.display(),
        size / 1024,
        ms(read.median),
        ms(total.median),
        ms(total.best),
        span.flatten()
            .map(|s| step_span::reason(&s).unwrap_or_else(|| "fits".into()))
    );
    Ok(())
}

fn time_lstopo(root: &Path) -> Result<Duration, CliError> {
    let start = Instant::now();
    let mut cmd = Command::new("lstopo");
    cmd.args(["--of", "xml", "-"]).env("HWLOC_FSROOT", root);
    // Only the time counts: the XML is read and dropped.
    let keep = Keep {
        stdout: 0,
        stderr: 0,
    };
    let ran = bounded::run(&mut cmd, "lstopo", LSTOPO_TIMEOUT, keep).map_err(|e| match e {
        RunError::Spawn { source, .. } => CliError(format!(
            "cannot run lstopo (install Debian package hwloc): {source}"
        )),
        e => CliError(e.to_string()),
    })?;
    if ran.status.success() {
        Ok(start.elapsed())
    } else {
        Err(CliError(format!(
            "lstopo failed on {}: {}",
            root.display(),
            ran.status
        )))
    }
}

/// `copies` side-by-side copies of a machine, each in its own PCI domains, NUMA ids and
/// CPU range: a stand-in for a 64-GPU node the catalog does not have.
fn replicate(machine: &Machine, copies: u32) -> Machine {
    let numa_span = machine
        .numa_nodes
        .iter()
        .map(|n| n.id + 1)
        .max()
        .unwrap_or(1);
    let cpu_span = machine.cpus().iter().max().map_or(1, |c| c + 1);
    let domain_span = machine
        .pci
        .iter()
        .map(|d| d.addr.domain + 1)
        .max()
        .unwrap_or(1);
    let mut out = Machine {
        dmi: machine.dmi.clone(),
        ..Machine::default()
    };
    for k in 0..copies {
        let shift_cpus = |set: &CpuSet| set.iter().map(|c| c + k * cpu_span).collect::<CpuSet>();
        let shift_addr = |mut a: gpu_affinity::pci::PciAddr| {
            a.domain += k * domain_span;
            a
        };
        out.numa_nodes
            .extend(machine.numa_nodes.iter().map(|n| NumaNode {
                id: n.id + k * numa_span,
                cpus: shift_cpus(&n.cpus),
            }));
        out.cores.extend(machine.cores.iter().map(shift_cpus));
        out.pci.extend(machine.pci.iter().cloned().map(|mut d| {
            d.addr = shift_addr(d.addr);
            d.parent = d.parent.map(shift_addr);
            d.root = d.root.map(|r| format!("{r}.{k}"));
            d.numa_node = d.numa_node.map(|n| n + k * numa_span);
            d
        }));
        out.gpus.extend(machine.gpus.iter().cloned().map(|mut g| {
            g.pci = shift_addr(g.pci);
            g.minor = g.minor.map(|m| m + k * machine.gpus.len() as u32);
            g
        }));
        out.nics.extend(machine.nics.iter().cloned().map(|mut n| {
            n.pci = shift_addr(n.pci);
            n.rdma = n.rdma.map(|r| format!("{r}.{k}"));
            n
        }));
    }
    out
}

/// Median and fastest of a series.
struct Summary {
    median: Duration,
    best: Duration,
}

impl Summary {
    fn of(samples: &mut [Duration]) -> Summary {
        Summary {
            best: best(samples),
            median: median(samples),
        }
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn best(samples: &[Duration]) -> Duration {
    samples.iter().min().copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
