//! The one flow the three binaries share: config -> lock -> gather (bounded, in parallel)
//! -> core's evaluation -> core's drain decision -> scontrol (unless --dry-run) -> one line
//! (or --json) -> exit through `std::process::exit`, which also ends abandoned reader threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpu_affinity::config::{self, Config, DEFAULT_CONFIG};
use gpu_affinity::health::active::{AllReduce, DcgmDiag};
use gpu_affinity::health::drain::{Action, DrainPolicy, Handoff, decide};
use gpu_affinity::health::parse::{NodeRow, gres_gpu_count};
use gpu_affinity::health::xid::KernelLog;
use gpu_affinity::health::xid::{POLICY_PATH, XidPolicy};
use gpu_affinity::health::{
    CheckpointProbe, Class, DEFAULT_LEFTOVER_MEMORY_MIB, Expect, Gap, Gathered, Inputs,
    KMSG_BOUND_MS, MountProbe, NVML_BOUND_MS, NvmlData, PassState, Report, STORAGE_BOUND_MS,
    SYSFS_BOUND_MS, Scope, Status, SysfsData, Verdict,
};
use gpu_affinity::pci::PciAddr;
use gpu_affinity::slurm::gpu_ids::{SlurmGpus, parse_step_gpus};
use gpu_affinity::slurm::read::{device_minor, gres_conf_path, read_gres_conf};
use gpu_affinity::trust::read_trusted_text;

use crate::bounded::{self, Pending};
use crate::readers::{self, MountProber, RealProber};
use crate::slurm::Slurm;
use crate::state;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    Prolog,
    Epilog,
    Health,
}

impl Program {
    pub fn name(self) -> &'static str {
        match self {
            Program::Prolog => "gpu-affinity-prolog",
            Program::Epilog => "gpu-affinity-epilog",
            Program::Health => "gpu-affinity-health",
        }
    }
}

/// The node programs' command line (their man pages' SYNOPSIS).
#[derive(clap::Parser, Debug, Default)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// Print the verdicts as JSON.
    #[arg(long)]
    pub json: bool,
    /// Check and report; drain or resume nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The admin config (default /etc/gpu-affinity/config.toml; root-owned).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Time N whole-process dry-run passes of this binary (median, min, max).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub bench: Option<u32>,
    /// Print the version and the Slurm series of the installed plugin.
    #[arg(short = 'V', long)]
    pub version: bool,
}

impl Program {
    /// One line for `--help`.
    pub fn about(self) -> &'static str {
        match self {
            Program::Prolog => {
                "Slurm Prolog=: check the node before a job; drain a failing node with a reason the suite owns"
            }
            Program::Epilog => {
                "Slurm Epilog=: check the node after a job; drain it when a check fails"
            }
            Program::Health => {
                "Slurm HealthCheckProgram=: check the node between jobs; resume a node the suite drained once it passes again"
            }
        }
    }
}

/// The command line of `program` (`--help`, `--version` included).
pub fn command(program: Program) -> clap::Command {
    <Args as clap::CommandFactory>::command()
        .name(program.name())
        // Not argv[0]: recipes link the prolog into prolog.d under another name.
        .bin_name(program.name())
        .about(program.about())
}

/// Parse `argv` (program name first). `Err`: clap's error, which prints `--help` too.
pub fn parse_args<I, T>(program: Program, argv: I) -> Result<Args, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = command(program).try_get_matches_from(argv)?;
    <Args as clap::FromArgMatches>::from_arg_matches(&matches)
}

/// The whole run's bound: every reader runs in parallel under its own bound, then sinfo
/// and scontrol under theirs; past this the watchdog ends the process.
const OVERALL: Duration = Duration::from_secs(30);
/// How long a run waits for another one to finish before it reports and exits.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// `SLURMD_NODENAME`, else the short hostname, checked as a Slurm node name
/// ([`is_node_name`]) before it goes anywhere (argv, a log line, a name).
pub fn node_name() -> Result<String, String> {
    let (from, name) = match std::env::var("SLURMD_NODENAME") {
        Ok(n) if !n.trim().is_empty() => ("SLURMD_NODENAME", n.trim().to_string()),
        _ => (
            "the hostname",
            gpu_affinity::slurm::read::short_hostname().unwrap_or_default(),
        ),
    };
    if is_node_name(&name) {
        Ok(name)
    } else {
        Err(format!(
            "{from} {:?} is not a Slurm node name (letters, digits, '-', '_', '.', at most 64)",
            name.chars().take(64).collect::<String>()
        ))
    }
}

/// A Slurm node name as slurm.conf's NodeName= holds one: 1-64 ASCII letters, digits,
/// `-`, `_`, `.`, not starting with `-` or `.` (so never `..`, `/`, a space or a newline).
pub fn is_node_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !name.starts_with(['-', '.'])
}

/// How Slurm numbers this node's GPUs: core's one mapping (the plugin's too) over the
/// gres.conf slurmd reads — `[slurm] gres_conf`, else next to `[slurm] conf`, else next
/// to the `SLURM_CONF` slurmd passes its prolog/epilog (its own `-f` file, or the
/// configless conf-cache), else /etc/slurm. No gres.conf there: minor order, what
/// `File=/dev/nvidia[0-N]` gives.
pub fn slurm_gpus(
    machine: &gpu_affinity::model::Machine,
    cfg: &Config,
    node: &str,
) -> Result<SlurmGpus, String> {
    let gres_conf = cfg.slurm.gres_conf.as_deref();
    let slurm_conf = cfg
        .slurm
        .conf
        .clone()
        .or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from));
    let path = gres_conf.map_or_else(|| gres_conf_path(slurm_conf.as_deref()), Path::to_path_buf);
    let conf = read_gres_conf(&path, state::owner()).map_err(|e| e.to_string())?;
    if conf.is_none() && gres_conf.is_some() {
        return Err(format!(
            "gres.conf {} ([slurm] gres_conf) does not exist",
            path.display()
        ));
    }
    let node_gpus = conf.map(|c| c.node_gpus(node));
    Ok(SlurmGpus::number(machine, node_gpus.as_ref(), &|f| {
        device_minor(f)
    }))
}

/// The ids dcgm-exporter's HPC job mapping files are named by. Its hpcMapper
/// (internal/pkg/transformation/hpc.go) keeps files whose name parses as an integer and
/// matches each name against a metric's `gpu` label, DCGM's GPU id, which is the NVML
/// index: PCI bus order, not Slurm's gres index (the two differ when gres.conf lists
/// devices out of bus order) and not the /dev/nvidiaN minor.
pub fn dcgm_gpu_ids(machine: &gpu_affinity::model::Machine, pci: &[PciAddr]) -> Vec<u32> {
    let mut bus: Vec<PciAddr> = machine.gpus.iter().map(|g| g.pci).collect();
    bus.sort();
    pci.iter()
        .filter_map(|p| bus.iter().position(|b| b == p))
        .filter_map(|i| u32::try_from(i).ok())
        .collect()
}

/// A job's GPUs: Slurm's ids and the PCI addresses they name, in the same order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobGpus {
    pub ids: Vec<u32>,
    pub pci: Vec<PciAddr>,
}

/// The job's GPUs from `SLURM_JOB_GPUS`: Slurm's gres indices (positions in slurmd's
/// device list, never /dev/nvidiaN minors; docs/slurm-series.md "Slurm's GPU ids"), parsed
/// bounded and mapped through `numbering`. `Ok(None)`: the job has no GPUs. `Err`: a line
/// for the log; the caller then checks every GPU, a wider scope rather than a wrong one.
pub fn job_gpus(numbering: &SlurmGpus, env: Option<&str>) -> Result<Option<JobGpus>, String> {
    let Some(env) = env.map(str::trim).filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    let ids =
        parse_step_gpus(env, numbering.ids.len()).map_err(|e| format!("SLURM_JOB_GPUS: {e}"))?;
    let pci = numbering
        .map(&ids)
        .map_err(|e| format!("SLURM_JOB_GPUS: {e}"))?;
    Ok(Some(JobGpus { ids, pci }))
}

/// `root`: the filesystem root the checks read; "/" unset.
fn root_of(c: &Config) -> PathBuf {
    c.root.clone().unwrap_or_else(|| PathBuf::from("/"))
}

/// `state_dir`, else [`state::DEFAULT_STATE_DIR`].
fn state_dir_of(c: &Config) -> PathBuf {
    c.state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(state::DEFAULT_STATE_DIR))
}

fn expect_of(c: &Config) -> Expect {
    let (gpu, fabric) = (&c.gpu, &c.fabric);
    Expect {
        gpus: gpu.expected,
        fabric_nics: fabric.expected_nics,
        fabric_nics_from: None,
        port_rate_gbps: fabric.port_rate_gbps,
        persistence: gpu.persistence,
        driver: gpu.driver.clone(),
        flap_strikes: fabric
            .flap_strikes
            .unwrap_or(gpu_affinity::config::FabricConfig::FLAP_STRIKES),
        leftover_memory_mib: gpu
            .leftover_memory_mib
            .map_or(DEFAULT_LEFTOVER_MEMORY_MIB, u64::from),
        checkpoint_floor_mbps: c.storage.checkpoint().and_then(|p| p.floor_mbps),
        all_reduce_floor_gbps: c.active.all_reduce_floor_gbps,
        limits: c.counters.limits(),
    }
}

/// The configured active tests, where this program may run them (see
/// [`crate::active::allowed`]), one after the other, each under `[active] timeout_s`; the
/// watchdog's deadline grows by what they may take.
fn active_tests(
    program: Program,
    cfg: &Config,
    node: &str,
    rows: Option<&[NodeRow]>,
    sysfs: &Gathered<SysfsData>,
) -> (Gathered<DcgmDiag>, Gathered<AllReduce>) {
    let a = &cfg.active;
    let dcgmi = a.dcgmi.as_ref().filter(|_| a.dcgm_diag_level > 0);
    if dcgmi.is_none() && a.all_reduce_perf.is_none() {
        let why = "no [active] test configured";
        return (Err(Gap::Skipped(why.into())), Err(Gap::Skipped(why.into())));
    }
    let state = rows
        .and_then(|r| r.iter().find(|row| row.name == node))
        .map(|row| row.state.as_str());
    let gate = match program {
        Program::Epilog => Err("the epilog never runs them".to_string()),
        _ => crate::active::allowed(a.in_prolog, program == Program::Prolog, state),
    };
    let bound = Duration::from_secs(u64::from(
        a.timeout_s
            .unwrap_or(gpu_affinity::config::DEFAULT_ACTIVE_TIMEOUT_S),
    ));
    let owner = state::owner();
    let dcgm = match (dcgmi, &gate) {
        (None, _) => Err(Gap::Skipped("no [active] dcgmi / dcgm_diag_level".into())),
        (Some(_), Err(why)) => Err(Gap::Skipped(why.clone())),
        (Some(p), Ok(())) => {
            bounded::extend_watchdog(bound);
            log_line(
                program,
                &format!("running {} diag -r {}", p.display(), a.dcgm_diag_level),
            );
            crate::active::dcgm_diag(p, a.dcgm_diag_level, bound, owner)
        }
    };
    let gpus = sysfs.as_ref().map_or(0, |s| {
        u32::try_from(s.machine.gpus.len()).unwrap_or(u32::MAX)
    });
    let reduce = match (&a.all_reduce_perf, &gate) {
        (None, _) => Err(Gap::Skipped("no [active] all_reduce_perf".into())),
        (Some(_), Err(why)) => Err(Gap::Skipped(why.clone())),
        (Some(_), Ok(())) if gpus == 0 => Err(Gap::Skipped("no GPU found".into())),
        (Some(p), Ok(())) => {
            bounded::extend_watchdog(bound);
            log_line(program, &format!("running {} on {gpus} GPUs", p.display()));
            crate::active::all_reduce(p, gpus, bound, owner)
        }
    };
    (dcgm, reduce)
}

fn policy_of(c: &Config) -> DrainPolicy {
    let d = DrainPolicy::default();
    DrainPolicy {
        max_share: c.drain.max_share.unwrap_or(d.max_share),
        resume_after: c.drain.resume_after.unwrap_or(d.resume_after),
        handoff: c.drain.handoff.unwrap_or(d.handoff),
    }
}

fn xid_policy() -> Result<XidPolicy, String> {
    let path = Path::new(POLICY_PATH);
    if !path.exists() {
        return Ok(XidPolicy::embedded());
    }
    let text = read_trusted_text(path, "XID policy", state::owner(), 1 << 20)
        .map_err(|e| e.to_string())?;
    XidPolicy::parse(&text).map_err(|e| format!("{POLICY_PATH}: {e}"))
}

/// Everything a run produced, for printing and tests.
pub struct Outcome {
    pub report: Report,
    pub action: Action,
    pub applied: Result<(), String>,
    pub elapsed: Duration,
}

/// The readers of one pass but sysfs (which the pass waits for first: the job's GPUs
/// are read from it), started together, each under its own bound.
struct Readers {
    /// `None`: `[gpu] nvml = false`.
    nvml: Option<Pending<NvmlData>>,
    kmsg: Pending<KernelLog>,
    /// `None`: not this program's probe, or no `[storage] checkpoint_dir`.
    checkpoint: Option<Pending<CheckpointProbe>>,
    mounts: Pending<Vec<MountProbe>>,
    /// `None`: no `[fabric] imex_ctl`.
    imex: Option<Pending<gpu_affinity::health::imex::Imex>>,
}

/// Gather all inputs with their bounds (in parallel) and evaluate. The phases, in order:
/// start the readers, ask sinfo meanwhile, scope the pass to the job's GPUs, run the
/// active tests, collect the readers, evaluate, and record what the next pass needs.
pub fn pass(
    program: Program,
    cfg: &Config,
    node: &str,
    prober: Arc<dyn MountProber>,
    slurm: Option<&Slurm>,
    prev: &PassState,
) -> (Report, Option<Vec<NodeRow>>, PassState, Option<Vec<u32>>) {
    let root = root_of(cfg);
    let (prev, btime) = this_boot(&root, prev);
    let prev = &prev;
    let now = unix_now();
    let job = job_id();
    let (sysfs, readers) = start_readers(program, cfg, &root, prober);
    // sinfo runs alongside the readers: its answer (gres count, node state) is needed anyway.
    let rows = slurm.map(|s| s.rows());
    let sysfs = sysfs.wait();
    let (scope, indices) = scope_of(program, cfg, node, &sysfs, job.as_deref(), prev);
    let rows = node_rows(program, rows);
    let gres_gpus = rows
        .as_ref()
        .and_then(|r| r.iter().find(|row| row.name == node))
        .and_then(|row| gres_gpu_count(&row.gres));
    let active = active_tests(program, cfg, node, rows.as_deref(), &sysfs);
    let (inputs, kmsg_at) = collect(cfg, readers, sysfs, gres_gpus, active, now);
    let scope = mig_scope(program, scope, &inputs.nvml);
    let (mut report, mut next) = evaluate(program, cfg, &inputs, &scope, prev);
    escalate(&mut report, &mut next, btime, now);
    let next = record(program, job.as_deref(), kmsg_at, &report, prev, next);
    (report, rows, next, indices)
}

/// The previous pass's state as this boot sees it (job marks are kmsg sequence numbers of
/// one boot: see `PassState::in_boot`), and when this boot started (for repair
/// escalation), if /proc/stat says.
fn this_boot(root: &Path, prev: &PassState) -> (PassState, Option<u64>) {
    let bound = Duration::from_millis(SYSFS_BOUND_MS);
    let r = root.to_path_buf();
    let boot = bounded::within(bound, move || readers::read_boot_id(&r));
    let r = root.to_path_buf();
    let btime = bounded::within(bound, move || Ok(readers::read_btime(&r)));
    (
        prev.clone().in_boot(boot.ok().flatten().as_deref()),
        btime.ok().flatten(),
    )
}

/// The pass's clock, unix seconds: counter rates and escalation windows.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A node failing again soon after a boot needs more than another reboot: this boot is
/// remembered, and the deciding repair escalated by the boots seen.
fn escalate(report: &mut Report, next: &mut PassState, btime: Option<u64>, now: u64) {
    if let Some(b) = btime {
        next.boots.record(b);
    }
    gpu_affinity::health::repair::escalate(report, &next.boots, now);
}

/// Start every reader of the pass in its own thread, under its own bound: sysfs's, and
/// the others.
fn start_readers(
    program: Program,
    cfg: &Config,
    root: &Path,
    prober: Arc<dyn MountProber>,
) -> (Pending<SysfsData>, Readers) {
    let ms = Duration::from_millis;
    let r = root.to_path_buf();
    let sysfs = bounded::start(ms(SYSFS_BOUND_MS), move || readers::read_sysfs(&r));
    let nvml = if cfg.gpu.nvml == Some(false) {
        None
    } else {
        let lib = cfg.nvml.library.clone();
        Some(bounded::start(ms(NVML_BOUND_MS), move || {
            crate::nvml::read_nvml(lib.as_deref())
        }))
    };
    let r = root.to_path_buf();
    let kmsg = bounded::start(ms(KMSG_BOUND_MS), move || readers::read_kmsg(&r));
    // Writing a checkpoint-sized file is for the passes between jobs, not every job's
    // prolog or epilog.
    let checkpoint = match (&cfg.storage.checkpoint(), program) {
        (Some(c), Program::Health) => {
            let (r, c, p) = (root.to_path_buf(), c.clone(), prober.clone());
            Some(bounded::start(ms(STORAGE_BOUND_MS), move || {
                readers::probe_checkpoint(&r, &c, p.as_ref())
            }))
        }
        _ => None,
    };
    let mounts = {
        let (r, wanted) = (root.to_path_buf(), cfg.storage.mount.clone());
        bounded::start(ms(STORAGE_BOUND_MS + 500), move || {
            Ok(readers::read_mounts(
                &r,
                &wanted,
                prober,
                ms(STORAGE_BOUND_MS),
            ))
        })
    };
    let imex = cfg.fabric.imex_ctl.clone().map(|p| {
        use gpu_affinity::health::imex::IMEX_BOUND_MS;
        let owner = state::owner();
        // Two commands, half the bound each; the wait allows for starting them.
        bounded::start(ms(IMEX_BOUND_MS + 500), move || {
            crate::imex::read_imex(&p, ms(IMEX_BOUND_MS / 2), owner)
        })
    });
    (
        sysfs,
        Readers {
            nvml,
            kmsg,
            checkpoint,
            mounts,
            imex,
        },
    )
}

/// Wait for the readers (each by its own deadline) and put the pass's inputs together;
/// also where the kernel log stood (its last sequence number), for the job's mark.
fn collect(
    cfg: &Config,
    readers: Readers,
    sysfs: Gathered<SysfsData>,
    gres_gpus: Option<u32>,
    (dcgm_diag, all_reduce): (Gathered<DcgmDiag>, Gathered<AllReduce>),
    now: u64,
) -> (Inputs, Option<u64>) {
    let kmsg = readers.kmsg.wait();
    let kmsg_at = kmsg.as_ref().ok().and_then(|k| k.last_seq);
    let kmsg_notes = kmsg.as_ref().map(|k| k.notes.clone()).unwrap_or_default();
    let inputs = Inputs {
        sysfs,
        nvml: readers
            .nvml
            .map_or(Err(Gap::Skipped("[gpu] nvml = false".into())), |p| p.wait()),
        xids: kmsg.map(|k| k.xids),
        kmsg_notes,
        mounts: readers.mounts.wait().unwrap_or_default(),
        checkpoint: match readers.checkpoint {
            Some(c) => c.wait(),
            None if cfg.storage.checkpoint_dir.is_none() => {
                Err(Gap::Skipped("no [storage] checkpoint_dir".into()))
            }
            None => Err(Gap::Skipped("the health program's pass only".into())),
        },
        gres_gpus,
        dcgm_diag,
        all_reduce,
        imex: readers
            .imex
            .map_or(Err(Gap::Skipped("no [fabric] imex_ctl".into())), |p| {
                p.wait()
            }),
        now,
    };
    (inputs, kmsg_at)
}

/// Which checks run, on which GPUs, and the job's GPUs as DCGM numbers them (for the
/// job mapping files). The prolog and epilog check the job's GPUs only; GPUs that
/// cannot be mapped widen the pass to every GPU, never narrow it.
fn scope_of(
    program: Program,
    cfg: &Config,
    node: &str,
    sysfs: &Gathered<SysfsData>,
    job: Option<&str>,
    prev: &PassState,
) -> (Scope, Option<Vec<u32>>) {
    let mut scope = Scope {
        fast_only: program == Program::Prolog,
        gpus: None,
        after_job: program == Program::Epilog,
        // The epilog judges what the job's time added to the kernel log; without its
        // prolog's mark (no prolog, lost state) everything since boot counts.
        xids_after: match (program, job) {
            (Program::Epilog, Some(job)) => prev.job_kmsg.get(job).copied(),
            _ => None,
        },
    };
    let mut indices = None;
    if program != Program::Health
        && let Ok(s) = sysfs
    {
        let env = std::env::var("SLURM_JOB_GPUS").ok();
        match slurm_gpus(&s.machine, cfg, node).and_then(|n| job_gpus(&n, env.as_deref())) {
            Ok(Some(job)) => {
                indices = Some(dcgm_gpu_ids(&s.machine, &job.pci));
                scope.gpus = Some(job.pci);
            }
            Ok(None) => {}
            Err(e) => log_line(program, &format!("{e}; checking every GPU")),
        }
    }
    (scope, indices)
}

/// On a node with a GPU in MIG mode Slurm's ids count MIG devices
/// ([`crate::metrics::slurm_devices`]), so the GPUs [`scope_of`] took them for are redone
/// once NVML has answered: the GPUs the job's MIG devices are on, or every GPU where the
/// ids name none of them.
fn mig_scope(program: Program, mut scope: Scope, nvml: &Gathered<NvmlData>) -> Scope {
    let Some(Some(layout)) = crate::nvml::pass_mig_layout() else {
        return scope;
    };
    let env = std::env::var("SLURM_JOB_GPUS").ok();
    let env = env.as_deref().map(str::trim).filter(|e| !e.is_empty());
    let (Some(env), Ok(nvml)) = (env, nvml) else {
        return scope;
    };
    if program == Program::Health || layout.iter().all(Option::is_none) {
        return scope;
    }
    // The NVML index of the GPU behind each of Slurm's ids.
    let owner: Vec<usize> = layout
        .iter()
        .enumerate()
        .flat_map(|(i, g)| std::iter::repeat_n(i, g.as_ref().map_or(1, Vec::len)))
        .collect();
    let gpus = parse_step_gpus(env, owner.len()).ok().and_then(|ids| {
        ids.iter()
            .map(|&id| nvml.gpus.get(*owner.get(id as usize)?)?.pci)
            .collect::<Option<Vec<PciAddr>>>()
    });
    match gpus {
        Some(mut gpus) => {
            gpus.sort();
            gpus.dedup();
            scope.gpus = Some(gpus);
        }
        None => {
            log_line(
                program,
                "SLURM_JOB_GPUS: not this node's GPU and MIG devices; checking every GPU",
            );
            scope.gpus = None;
        }
    }
    scope
}

/// sinfo's rows, or none (logged) when it failed or did not run.
fn node_rows(program: Program, rows: Option<Result<Vec<NodeRow>, String>>) -> Option<Vec<NodeRow>> {
    match rows {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            log_line(program, &format!("sinfo: {e}"));
            None
        }
        None => None,
    }
}

/// Core's evaluation under the XID policy in force and the admin's expectations (the
/// detected catalog machine's, where the config leaves them out).
fn evaluate(
    program: Program,
    cfg: &Config,
    inputs: &Inputs,
    scope: &Scope,
    prev: &PassState,
) -> (Report, PassState) {
    let policy = xid_policy().unwrap_or_else(|e| {
        log_line(program, &format!("{e}; using the embedded XID policy"));
        XidPolicy::embedded()
    });
    let expect = match &inputs.sysfs {
        Ok(s) => gpu_affinity::health::expect::from_model(expect_of(cfg), &s.machine),
        Err(_) => expect_of(cfg),
    };
    gpu_affinity::health::evaluate(inputs, &expect, &policy, scope, prev)
}

/// What the next pass needs of this one: the prolog marks where the kernel log stood at
/// the job's start, the epilog takes the mark out, the health program counts clean passes.
fn record(
    program: Program,
    job: Option<&str>,
    kmsg_at: Option<u64>,
    report: &Report,
    prev: &PassState,
    mut next: PassState,
) -> PassState {
    if let Some(job) = job {
        match (program, kmsg_at) {
            (Program::Prolog, Some(seq)) => next.mark_job(job, seq),
            (Program::Epilog, _) => {
                next.job_kmsg.remove(job);
            }
            _ => {}
        }
    }
    if program == Program::Health {
        next.clean_passes = if report.verdict == Verdict::Drain {
            0
        } else {
            prev.clean_passes.saturating_add(1)
        };
    }
    next
}

/// `SLURM_JOB_ID` as slurmd gives the prolog and epilog: a decimal job id, else none.
fn job_id() -> Option<String> {
    std::env::var("SLURM_JOB_ID")
        .ok()
        .map(|j| j.trim().to_string())
        .filter(|j| !j.is_empty() && j.len() <= 20 && j.bytes().all(|b| b.is_ascii_digit()))
}

/// One line to the program's log (stderr, which slurmd keeps); a closed stderr drops it
/// rather than panicking, as [`say`] does for stdout.
fn log_line(program: Program, line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{}: {line}", program.name());
}

/// `--bench N`: run this very binary N times as a whole process (`--dry-run --json`, so
/// nothing changes on the node), each under its own watchdog, and report median, p90, min
/// and max wall time: what HealthCheckProgram costs the node, process start and NVML load
/// included. The goal (issue 9) is a median of at most 50 ms.
fn bench(program: Program, args: &Args, runs: u32) -> ! {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            log_line(program, &format!("bench: cannot find this binary: {e}"));
            std::process::exit(2);
        }
    };
    let mut times = Vec::with_capacity(runs as usize);
    let mut failed = 0u32;
    for _ in 0..runs {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(["--dry-run", "--json"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(c) = &args.config {
            cmd.arg("--config").arg(c);
        }
        let t = Instant::now();
        // Each child ends itself within OVERALL (its watchdog), so a plain wait is bounded.
        match cmd.status() {
            Ok(s) if s.success() || program != Program::Health => {
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            _ => failed += 1,
        }
    }
    times.sort_by(f64::total_cmp);
    let median = match times.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => times[n / 2],
        n => (times[n / 2 - 1] + times[n / 2]) / 2.0,
    };
    let (min, max) = (
        times.first().copied().unwrap_or(f64::NAN),
        times.last().copied().unwrap_or(f64::NAN),
    );
    // Nearest rank: the pass 90% of passes are no slower than (the tail a busy node sees).
    let p90 = times
        .get((times.len() * 9).div_ceil(10).saturating_sub(1))
        .copied()
        .unwrap_or(f64::NAN);
    if args.json {
        say(format_args!(
            "{}",
            serde_json::json!({"runs": runs, "failed": failed, "median_ms": median, "p90_ms": p90, "min_ms": min, "max_ms": max})
        ));
    } else {
        say(format_args!(
            "{}: {runs} whole-process passes: median {median:.1} ms, p90 {p90:.1} ms, min {min:.1} ms, max {max:.1} ms ({failed} failed; goal: median <= 50 ms)",
            program.name()
        ));
    }
    std::process::exit(i32::from(failed > 0));
}

/// The binaries' `main`: never returns.
pub fn main(program: Program) -> ! {
    let started = Instant::now();
    let args = match parse_args(program, std::env::args_os()) {
        Ok(a) => a,
        // --help, a usage error: clap prints it (stdout or stderr) and exits 0 or 2.
        Err(e) => e.exit(),
    };
    if args.version {
        let text = crate::version::text(program.name(), Path::new("/"));
        say(format_args!("{}", text.trim_end()));
        std::process::exit(0);
    }
    // Before the watchdog: a bench outlives one pass's bound (each pass has its own).
    if let Some(runs) = args.bench {
        bench(program, &args, runs);
    }
    // Exit non-zero only from the prolog/epilog's own decision; a watchdog exit is a bug and
    // says so, with 0 for the health program (HealthCheckProgram's status is not a verdict).
    bounded::watchdog(
        OVERALL,
        program.name(),
        if program == Program::Health { 0 } else { 1 },
    );
    let cfg = match config::locate(args.config.as_deref(), Path::new(DEFAULT_CONFIG)) {
        Some(path) => match config::read_trusted(&path, state::owner()) {
            Ok(c) => c,
            Err(e) => {
                // A broken config must not drain the fleet: report, change nothing.
                log_line(program, &format!("{e}; changing nothing"));
                std::process::exit(if program == Program::Health { 0 } else { 1 });
            }
        },
        None => Config::default(),
    };
    let node = match node_name() {
        Ok(n) => n,
        Err(e) => {
            // Like a broken config: report, change nothing.
            log_line(program, &format!("{e}; changing nothing"));
            std::process::exit(if program == Program::Health { 0 } else { 1 });
        }
    };
    let shared = shared_state(&cfg);
    if let Err(e) = &shared {
        log_line(
            program,
            &format!("{e}; running the checks without the shared state"),
        );
    }
    let prev = shared
        .as_ref()
        .map(|(dir, _)| state::load(dir))
        .unwrap_or_default();
    let slurm = Slurm::new(cfg.slurm.bin_dir.clone(), cfg.slurm.conf.clone());
    match (slurm.bin_dir(), slurm.fallback()) {
        (Err(why), _) => log_line(program, why),
        (Ok(dir), Some(how)) => log_line(
            program,
            &format!("Slurm clients: {} ({how})", dir.display()),
        ),
        (Ok(_), None) => {}
    }
    let (report, rows, next, indices) = pass(
        program,
        &cfg,
        &node,
        Arc::new(RealProber),
        Some(&slurm),
        &prev,
    );
    let policy = policy_of(&cfg);
    let action = decide(
        &report,
        rows.as_deref(),
        &node,
        &policy,
        next.clean_passes,
        program == Program::Health,
    );
    let applied = if args.dry_run {
        Ok(())
    } else {
        slurm.apply(&node, &action)
    };
    let mut next = next;
    if matches!(action, Action::Resume) && applied.is_ok() {
        next.clean_passes = 0;
    }
    if matches!(action, Action::HeldBack(_)) {
        next.drains_held_back = next.drains_held_back.saturating_add(1);
    }
    if !args.dry_run {
        if let Ok((dir, _lock)) = &shared
            && let Err(e) = state::save(dir, &next)
        {
            log_line(program, &e);
        }
        side_effects(
            program,
            &cfg,
            &report,
            &action,
            next.drains_held_back,
            shared
                .is_ok()
                .then(|| mapping_files(program, &cfg, indices.as_deref()))
                .flatten()
                .as_deref(),
            started.elapsed(),
        );
    }
    // The hand-off runs after the state is saved and the lock released: Azure's three
    // requests may take 3 x (timeout_s + 2) s, and an epilog kept waiting past LOCK_WAIT
    // would run without the shared state (its job's mapping left behind). Its memory
    // (each drain reported once) is then written back under the lock; OCI's record needs
    // none.
    if program == Program::Health
        && !args.dry_run
        && (shared.is_ok() || policy.handoff == Handoff::Oci)
    {
        let had_state = shared.is_ok();
        drop(shared);
        let log = |line: &str| log_line(program, line);
        let decided = crate::report::Decided {
            report: &report,
            action: &action,
            applied: &applied,
            now: unix_now(),
        };
        let mut reported = next.handoff.clone();
        crate::report::hand_off(&cfg, &decided, &mut reported, &log);
        if had_state && reported != next.handoff {
            save_handoff(&cfg, reported, &log);
        }
    }
    let outcome = Outcome {
        report,
        action,
        applied,
        elapsed: started.elapsed(),
    };
    print(program, &args, &node, &outcome);
    std::process::exit(exit_code(program, &outcome, args.dry_run));
}

/// The state dir (trust-checked, made when absent) and the run lock over it. Either
/// failing (a symlinked or user-writable state dir, a lock another process holds past
/// LOCK_WAIT) never means "healthy": the pass runs all its checks and applies its
/// verdict without the shared state (no previous pass, no job mark, nothing saved, no
/// dcgm mapping change, which needs the lock).
fn shared_state(cfg: &Config) -> Result<(gpu_affinity::safe_dir::SafeDir, state::RunLock), String> {
    let dir = state::open_dir(&state_dir_of(cfg))?;
    let lock = state::lock(&dir, LOCK_WAIT)?;
    Ok((dir, lock))
}

/// Write the hand-off's memory into the saved state, under the run lock again (another
/// program may have saved its pass meanwhile: only `handoff` is replaced).
fn save_handoff(
    cfg: &Config,
    reported: gpu_affinity::health::handoff::Reported,
    log: &dyn Fn(&str),
) {
    match shared_state(cfg) {
        Ok((dir, _lock)) => {
            let mut state = state::load(&dir);
            state.handoff = reported;
            if let Err(e) = state::save(&dir, &state) {
                log(&e);
            }
        }
        Err(e) => log(&format!(
            "{e}; the hand-off's memory is not saved (reported again next pass)"
        )),
    }
}

/// The job's dcgm mapping files (prolog and epilog, with a mapping dir): by GPU, or by
/// MIG device where the node has MIG ([`crate::metrics::job_files`]), from the MIG layout
/// the pass's NVML read took; without one (NVML off, hung or failed) by GPU.
fn mapping_files(program: Program, cfg: &Config, gpus: Option<&[u32]>) -> Option<Vec<String>> {
    if program == Program::Health || cfg.metrics.dcgm_job_mapping_dir.is_none() {
        return None;
    }
    let layout = match crate::nvml::pass_mig_layout() {
        Some(Some(l)) => Some(l.as_slice()),
        Some(None) => {
            log_line(
                program,
                "dcgm job mapping: NVML's MIG layout could not be read; mapping whole GPUs",
            );
            None
        }
        None => None,
    };
    let env = std::env::var("SLURM_JOB_GPUS").ok();
    let (files, note) = crate::metrics::job_files(gpus, layout, env.as_deref());
    if let Some(note) = note {
        log_line(program, &format!("dcgm job mapping: {note}"));
    }
    files
}

fn side_effects(
    program: Program,
    cfg: &Config,
    report: &Report,
    action: &Action,
    held_back: u64,
    gpus: Option<&[String]>,
    elapsed: Duration,
) {
    // A prolog that fails (a drain the breaker did not hold back) runs no job: it leaves
    // no mapping behind, and takes out one a rerun of the same job made.
    let failing = program == Program::Prolog
        && report.verdict == Verdict::Drain
        && !matches!(action, Action::HeldBack(_));
    if let (Some(dir), Some(gpus), Some(job)) = (&cfg.metrics.dcgm_job_mapping_dir, gpus, job_id())
    {
        let done = gpu_affinity::safe_dir::open(
            dir,
            "dcgm job mapping dir",
            gpu_affinity::safe_dir::Rule::Trusted,
            state::owner(),
            None,
        )
        .map_err(|e| e.to_string())
        .and_then(|dir| match program {
            Program::Prolog if !failing => crate::metrics::map_jobs(&dir, gpus, &job),
            Program::Prolog | Program::Epilog => crate::metrics::unmap_jobs(&dir, gpus, &job),
            Program::Health => Ok(()),
        });
        if let Err(e) = done {
            log_line(program, &format!("dcgm job mapping: {e}"));
        }
    }
    if program == Program::Health
        && let Some(path) = &cfg.metrics.textfile
    {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let text = crate::metrics::textfile(report, elapsed.as_secs_f64(), now, held_back);
        if let Err(e) = state::write_output(path, "textfile", text.as_bytes(), 0o644) {
            log_line(program, &format!("metrics: {e}"));
        }
    }
}

/// The prolog/epilog fail (so Slurm keeps the job off the node) on a drain verdict unless the
/// breaker held the drain back. That includes a node whose state could not be read (sinfo
/// failed, or the node is not in its answer): the suite cannot drain it then, so the failed
/// prolog makes Slurm drain it under its own reason ("Prolog error") rather than run the
/// job on a faulty node; fail closed. The health program always exits 0.
fn exit_code(program: Program, o: &Outcome, dry_run: bool) -> i32 {
    if program == Program::Health || dry_run || o.report.verdict != Verdict::Drain {
        return 0;
    }
    match &o.action {
        Action::HeldBack(_) => 0,
        _ => 1,
    }
}

/// The JSON report: exactly `{"verdict","reason","checks":[{"id","class","status","evidence"}]}`.
/// The decision rides along as a `drain.decision` check, so a held-back drain shows in JSON.
pub fn json(o: &Outcome) -> serde_json::Value {
    let mut checks: Vec<serde_json::Value> = o
        .report
        .checks
        .iter()
        .map(|c| serde_json::json!({"id": c.id, "class": c.class, "status": c.status, "evidence": c.evidence}))
        .collect();
    let (status, evidence) = match (&o.action, &o.applied) {
        (_, Err(e)) => (Status::Fail, format!("{}: {e}", describe(&o.action))),
        (Action::HeldBack(why), _) => (Status::Fail, why.clone()),
        (a, Ok(())) => (Status::Pass, describe(a)),
    };
    checks.push(serde_json::json!({"id": "drain.decision", "class": Class::Warn, "status": status, "evidence": evidence}));
    serde_json::json!({"verdict": o.report.verdict, "reason": o.report.reason(), "checks": checks})
}

fn describe(a: &Action) -> String {
    match a {
        Action::Set { state, reason } => format!("set state={state} reason={reason}"),
        Action::Resume => "resumed".into(),
        Action::Leave(why) => why.to_string(),
        Action::HeldBack(why) => why.clone(),
    }
}

fn print(program: Program, args: &Args, node: &str, o: &Outcome) {
    if let Action::HeldBack(why) = &o.action {
        log_line(program, &format!("NOT DRAINING {node}: {why}"));
    }
    if let Err(e) = &o.applied {
        log_line(program, &format!("scontrol: {e}"));
    }
    if let Action::Leave(why) = &o.action
        && why.state_unknown()
        && o.report.verdict == Verdict::Drain
        && program != Program::Health
    {
        log_line(
            program,
            &format!("cannot drain {node} ({why}): failing so that Slurm keeps the job off it"),
        );
    }
    if args.json {
        say(format_args!("{}", json(o)));
    } else {
        say(format_args!(
            "{}: {node} {} -> {}{} [{} ms]",
            program.name(),
            o.report.summary(),
            describe(&o.action),
            if args.dry_run { " (dry run)" } else { "" },
            o.elapsed.as_millis()
        ));
    }
}

/// One line to stdout. A reader that closed the pipe (`--json | head`) wants no more:
/// the write error is dropped, never a panic, and the verdict and exit status stand.
fn say(line: std::fmt::Arguments) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_affinity::slurm::gpu_ids::minor_from_name;
    use gpu_affinity::slurm::gres_conf;

    /// The shipped sample with every setting uncommented, read as the binaries read it,
    /// is what they do with no config at all.
    #[test]
    fn the_shipped_sample_uncommented_is_the_defaults() {
        use gpu_affinity::sample_config;
        use std::os::unix::fs::MetadataExt;
        let text = sample_config::uncommented(sample_config::TEXT).expect("sample convention");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).expect("write");
        let owner = std::fs::metadata(&path).expect("stat").uid();
        let c = config::read_trusted(&path, owner).expect("the uncommented sample is read");
        let none = Config::default();
        assert_eq!(expect_of(&c), expect_of(&none));
        assert_eq!(policy_of(&c), policy_of(&none));
        assert_eq!(root_of(&c), root_of(&none));
        assert_eq!(state_dir_of(&c), state_dir_of(&none));
        assert_eq!(
            c.nvml.library.as_deref(),
            Some(Path::new(crate::nvml::DEFAULT_LIBRARY))
        );
        assert_eq!(c.gpu.nvml, Some(true));
        // `[active]`: off, as without a config; the bound shown is the one applied.
        let a = &c.active;
        assert_eq!((a.dcgm_diag_level, a.in_prolog), (0, false));
        assert_eq!(
            a.timeout_s,
            Some(gpu_affinity::config::DEFAULT_ACTIVE_TIMEOUT_S)
        );
        assert_eq!((&a.dcgmi, &a.all_reduce_perf), (&None, &None));
    }

    /// The options a man page's SYNOPSIS names (`\-\-json`, `\-V`).
    fn synopsis_options(page: &str) -> Vec<String> {
        let synopsis = page
            .split_once(".SH SYNOPSIS")
            .and_then(|(_, rest)| rest.split_once("\n.SH "))
            .map(|(s, _)| s)
            .expect("SYNOPSIS");
        let mut found: Vec<String> = synopsis
            .split(|c: char| c.is_whitespace() || "[]{}|".contains(c))
            .filter_map(|w| w.strip_prefix("\\-"))
            .map(|w| {
                let w = w.replace("\\-", "-");
                format!(
                    "-{}",
                    w.trim_matches(|c: char| !(c.is_alphanumeric() || c == '-'))
                )
            })
            .collect();
        found.sort();
        found.dedup();
        found
    }

    #[test]
    fn each_man_page_synopsis_is_the_command_line() {
        let pages = [
            (
                Program::Prolog,
                include_str!("../../packaging/man/gpu-affinity-prolog.8"),
            ),
            (
                Program::Epilog,
                include_str!("../../packaging/man/gpu-affinity-epilog.8"),
            ),
            (
                Program::Health,
                include_str!("../../packaging/man/gpu-affinity-health.8"),
            ),
        ];
        for (program, page) in pages {
            let mut cmd = command(program);
            cmd.build();
            let mut options: Vec<String> = cmd
                .get_arguments()
                .flat_map(|a| {
                    let long = a.get_long().map(|l| format!("--{l}"));
                    let short = a.get_short().map(|c| format!("-{c}"));
                    long.into_iter().chain(short)
                })
                .collect();
            options.sort();
            assert_eq!(synopsis_options(page), options, "{}", program.name());
            assert!(page.contains(&format!(
                ".B /usr/libexec/gpu-affinity/{}\n",
                program.name()
            )));
        }
    }

    #[test]
    fn the_command_line_parses_as_the_man_pages_say() {
        let a = parse_args(
            Program::Prolog,
            ["p", "--json", "--config=/etc/x.toml", "--dry-run"],
        )
        .expect("args");
        assert!(a.json && a.dry_run && !a.version);
        assert_eq!(a.config.as_deref(), Some(Path::new("/etc/x.toml")));
        let a =
            parse_args(Program::Health, ["h", "--bench", "30", "--config", "/c"]).expect("args");
        assert_eq!(a.bench, Some(30));
        assert!(
            parse_args(Program::Epilog, ["e", "-V"])
                .expect("args")
                .version
        );
        for bad in [
            &["e", "--bench", "0"][..],
            &["e", "--bogus"],
            &["e", "--config"],
        ] {
            let e = parse_args(Program::Epilog, bad.iter().copied()).expect_err("refused");
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
        let help = parse_args(Program::Prolog, ["p", "--help"]).expect_err("help");
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        let help = help.to_string();
        assert!(help.contains("gpu-affinity-prolog [OPTIONS]"), "{help}");
    }

    fn numbering(gres: &str) -> (gpu_affinity::model::Machine, SlurmGpus) {
        let m = gpu_affinity::catalog::machine("p5.48xlarge").expect("catalog");
        let conf = gres_conf::parse(gres).expect("gres.conf");
        let n = SlurmGpus::number(&m, Some(&conf.node_gpus("n1")), &minor_from_name);
        (m, n)
    }

    #[test]
    fn job_gpus_are_gres_indices_not_minors() {
        // File= order 7,6,5,...: Slurm's GPU 0 is /dev/nvidia7 (measured on 22.05).
        let (m, n) = numbering("Name=gpu File=/dev/nvidia[7,6,5,4,3,2,1,0]\n");
        let order = m.gpus_in_slurm_order();
        let job = job_gpus(&n, Some("0,1")).expect("maps").expect("some");
        assert_eq!(job.ids, vec![0, 1]);
        assert_eq!(job.pci, vec![order[7].pci, order[6].pci]);
        let job = job_gpus(&n, Some("6-7")).expect("maps").expect("some");
        assert_eq!(job.pci, vec![order[1].pci, order[0].pci]);
    }

    #[test]
    fn dcgm_mapping_files_are_named_by_nvml_index() {
        // Slurm's GPUs 0,1 are /dev/nvidia7 and 6 here: the highest buses, NVML 7 and 6.
        let (m, n) = numbering("Name=gpu File=/dev/nvidia[7,6,5,4,3,2,1,0]\n");
        let job = job_gpus(&n, Some("0,1")).expect("maps").expect("some");
        assert_eq!(dcgm_gpu_ids(&m, &job.pci), vec![7, 6]);
        let (_, n) = numbering("Name=gpu File=/dev/nvidia[0-7]\n");
        let job = job_gpus(&n, Some("2")).expect("maps").expect("some");
        assert_eq!(dcgm_gpu_ids(&m, &job.pci), vec![2]);
    }

    #[test]
    fn job_gpus_without_gpus_or_with_bad_ids() {
        let (_, n) = numbering("Name=gpu File=/dev/nvidia[0-7]\n");
        assert_eq!(job_gpus(&n, None), Ok(None));
        assert_eq!(job_gpus(&n, Some(" ")), Ok(None));
        assert!(job_gpus(&n, Some("8")).is_err(), "out of range");
        assert!(job_gpus(&n, Some("0,x")).is_err(), "syntax");
        assert!(job_gpus(&n, Some(&"1,".repeat(5000))).is_err(), "bounded");
    }
}
