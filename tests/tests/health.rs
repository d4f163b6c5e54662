//! The health binaries under a real Slurm: slurmd runs them as `Prolog=` and
//! `HealthCheckProgram=` against a p5.48xlarge fixture tree (`root` in the admin config),
//! faults are injected into that tree, and `sinfo`/`scontrol` say what happened. Each test
//! prints what it measured (exit codes, reasons, sinfo's columns) for the report.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpu_affinity::model::Machine;
use gpu_affinity_tests::{ClientOptions, Cluster, ClusterBuilder, HealthSetup};

const HEALTHY_KMSG: &str = "6,1,100,-;Linux version 6.1\n";

/// A node's fixture tree and admin config, in a root-owned dir the daemons can read.
struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
    machine: Machine,
}

/// `slurm_conf`: the cluster's, for `[slurm] conf` (slurmd gives HealthCheckProgram no
/// SLURM_CONF); the config is written before the cluster exists, so the path is fixed up
/// by [`Node::point_at`].
fn node(resume_after: u32) -> Node {
    node_with(resume_after, "", "")
}

/// [`node`] with more `[drain]` keys (`drain`) and more tables after `[slurm]` (`tail`);
/// `@DIR@` in `tail` is the node's root-owned temp dir (the fixture's and the state's parent).
fn node_with(resume_after: u32, drain: &str, tail: &str) -> Node {
    let dir = tempfile::Builder::new()
        .prefix("gpu-affinity-health.")
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("mode");
    let root = dir.path().join("root");
    let machine = gpu_affinity::catalog::machine("p5.48xlarge").expect("catalog");
    gpu_affinity::sources::fixture::write_fixture(&machine, &root).expect("fixture");
    for d in ["dev", "proc"] {
        std::fs::create_dir_all(root.join(d)).expect("dirs");
    }
    std::fs::write(root.join("dev/kmsg"), HEALTHY_KMSG).expect("kmsg");
    std::fs::write(root.join("proc/mounts"), "/dev/sda1 / ext4 rw 0 0\n").expect("mounts");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "root = \"{}\"\nstate_dir = \"{}\"\n[gpu]\nexpected = 8\nnvml = false\n\
             [drain]\nresume_after = {resume_after}\n{drain}[slurm]\nconf = \"@SLURM_CONF@\"\n{tail}",
            root.display(),
            dir.path().join("state").display(),
            tail = tail.replace("@DIR@", &dir.path().display().to_string()),
        ),
    )
    .expect("config");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).expect("mode");
    Node {
        _dir: dir,
        root,
        config,
        machine,
    }
}

impl Node {
    /// Name the started cluster's slurm.conf in the admin config.
    fn point_at(&self, c: &Cluster) {
        let text = std::fs::read_to_string(&self.config).expect("config");
        let text = text.replace("@SLURM_CONF@", &c.conf().display().to_string());
        std::fs::write(&self.config, text).expect("config");
    }
}

impl Node {
    /// No `[slurm] conf`: the programs find slurm.conf as slurmd tells them (its
    /// `SLURM_CONF`, the conf-cache on a configless node).
    fn without_slurm_conf(&self) {
        let text = std::fs::read_to_string(&self.config).expect("config");
        let text = text.replace("conf = \"@SLURM_CONF@\"\n", "");
        std::fs::write(&self.config, text).expect("config");
    }
}

/// The cluster's first node's `sinfo %E` (the reason as set, without scontrol's
/// `[user@time]` tail) and `%T` state.
fn reason_state(c: &Cluster) -> (String, String) {
    reason_state_of(c, c.node())
}

/// [`reason_state`] of any node (empty reason for none).
fn reason_state_of(c: &Cluster, node: &str) -> (String, String) {
    let reason = c.node_reason_of(node).expect("node reason");
    // sinfo's compact state words (`drained`, `idle`); one row per partition, they agree.
    let state = sinfo(c, &["-h", "-N", "-n", node, "-o", "%T"]);
    let state = state.lines().next().unwrap_or_default().trim().to_owned();
    (reason, state)
}

/// slurmd runs the suite's prolog with this node's config.
fn prolog_only(n: &Node) -> HealthSetup {
    HealthSetup {
        config: n.config.clone(),
        prolog: true,
        epilog: false,
        health_interval: None,
    }
}

/// An XID 79 (fallen off the bus) kmsg record for the node's first GPU (Slurm's GPU 0),
/// logged after [`HEALTHY_KMSG`], and the drain reason it gives.
fn xid79_record(n: &Node) -> (String, String) {
    let bus = n.machine.gpus[0].pci.to_string();
    let short = &bus[..bus.len() - 2];
    (
        format!("4,2,200,-;NVRM: Xid (PCI:{short}): 79, pid=77, name=python"),
        format!("gpu-affinity: GPU_XID_79 gpu={bus}"),
    )
}

/// Log [`xid79_record`] in the fixture's kernel log; the reason it gives.
fn inject_xid79(n: &Node) -> String {
    let (record, reason) = xid79_record(n);
    std::fs::write(n.root.join("dev/kmsg"), format!("{HEALTHY_KMSG}{record}\n")).expect("kmsg");
    reason
}

/// A one-GPU job that prints RAN-ON-BAD-NODE if it runs (it must not, after a drain).
fn srun_a_gpu_job(c: &Cluster) -> gpu_affinity_tests::StepOutput {
    c.client(
        &["srun", "-n1", "--gres=gpu:1", "echo", "RAN-ON-BAD-NODE"],
        &ClientOptions::bounded(30),
    )
    .expect("srun")
}

fn start(test: &str, setup: HealthSetup) -> Option<Cluster> {
    ClusterBuilder::new()
        .health_programs(setup)
        .start_or_skip(test)
        .expect("cluster")
}

fn sinfo(c: &Cluster, args: &[&str]) -> String {
    let mut argv = vec!["sinfo"];
    argv.extend_from_slice(args);
    let out = c.client(&argv, &ClientOptions::bounded(10)).expect("sinfo");
    assert!(out.success(), "{out}");
    out.stdout
}

fn scontrol(c: &Cluster, args: &[&str]) {
    let mut argv = vec!["scontrol"];
    argv.extend_from_slice(args);
    let out = c
        .client(&argv, &ClientOptions::bounded(10))
        .expect("scontrol");
    assert!(out.success(), "{out}");
}

/// Run a health binary the way slurmd does (root, `SLURMD_NODENAME`, the cluster's
/// `SLURM_CONF`) and return its exit code and output.
fn run_direct(c: &Cluster, program: &str, config: &Path) -> (i32, String) {
    run_direct_on(c, c.node(), program, config)
}

/// [`run_direct`] as `node`'s slurmd would run it.
fn run_direct_on(c: &Cluster, node: &str, program: &str, config: &Path) -> (i32, String) {
    let bin = c.dir().join("lib").join(program);
    // Run by hand, no slurmd is its parent to name the install, and the node-wide scan
    // can meet other tests' slurmds of other series (and refuse): say it, as an admin
    // running it by hand on such a node would. Inside a series' Debian root its clients
    // are the root's /usr/bin.
    let clients = c
        .series_install()
        .map_or_else(|| PathBuf::from("/usr/bin"), |prefix| prefix.join("bin"));
    let text = std::fs::read_to_string(config).expect("config");
    let line = format!("bin_dir = \"{}\"\n", clients.display());
    // Into the config's [slurm] table, or a new one: never silently left out.
    let text = if text.contains("[slurm]\n") {
        text.replacen("[slurm]\n", &format!("[slurm]\n{line}"), 1)
    } else {
        assert!(
            !text.contains("[slurm]"),
            "a [slurm] table not on its own line"
        );
        format!("{text}\n[slurm]\n{line}")
    };
    let by_hand = config.with_extension("by-hand.toml");
    std::fs::write(&by_hand, text).expect("config");
    let (bin, config) = (bin.to_string_lossy(), by_hand.to_string_lossy());
    // As the cluster's clients run: inside the series' Debian root when it has one, so
    // the prolog's sinfo/scontrol are that series' own (22.05's client cannot talk to a
    // 24.11 slurmctld).
    let opts = ClientOptions::bounded(30).env("SLURMD_NODENAME", node);
    let out = c
        .command(&[&bin, "--config", &config], &opts)
        .expect("command")
        .output()
        .expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn wait_reason(
    c: &Cluster,
    want: impl Fn(&str, &str) -> bool,
    limit: Duration,
) -> (String, String) {
    wait_reason_of(c, c.node(), want, limit)
}

/// Poll `node` until `want(state, reason)` or `limit`; the last (state, reason).
fn wait_reason_of(
    c: &Cluster,
    node: &str,
    want: impl Fn(&str, &str) -> bool,
    limit: Duration,
) -> (String, String) {
    let t = Instant::now();
    loop {
        let (reason, state) = reason_state_of(c, node);
        if want(&state, &reason) || t.elapsed() > limit {
            return (state, reason);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn prolog_failure_drains_with_the_suites_reason() {
    // With the dcgm-exporter mapping on: a prolog that fails runs no job, so it leaves no
    // mapping behind (issue 19).
    let n = node_with(2, "", "[metrics]\ndcgm_job_mapping_dir = \"@DIR@/dcgm\"\n");
    let dcgm = n._dir.path().join("dcgm");
    std::fs::create_dir(&dcgm).expect("mapping dir");
    let setup = prolog_only(&n);
    let Some(c) = start("prolog_failure_drains_with_the_suites_reason", setup) else {
        return;
    };
    n.point_at(&c);
    // A healthy node: the job runs.
    let ok = c
        .client(&["srun", "-n1", "hostname"], &ClientOptions::bounded(30))
        .expect("srun");
    assert!(ok.success(), "healthy prolog: {ok}");
    let reason = inject_xid79(&n);
    let bad = srun_a_gpu_job(&c);
    eprintln!(
        "MEASURED srun after prolog failure: exit {:?}; stderr: {}",
        bad.code(),
        bad.stderr.trim()
    );
    assert!(!bad.success(), "the job must not run: {bad}");
    assert!(!bad.stdout.contains("RAN-ON-BAD-NODE"), "{bad}");
    eprintln!(
        "MEASURED prolog output:\n{}",
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-prolog.out")).unwrap_or_default()
    );
    assert_eq!(
        mapping_files(&dcgm),
        Vec::<String>::new(),
        "a failed prolog maps no job"
    );
    let show = c
        .client(
            &["scontrol", "-o", "show", "node", c.node()],
            &ClientOptions::bounded(10),
        )
        .expect("scontrol");
    let at = show.stdout.find("Reason=").unwrap_or(0);
    eprintln!(
        "MEASURED scontrol -o show node: {}",
        show.stdout[at..].trim()
    );
    assert!(
        show.stdout[at..].starts_with(&format!("Reason={reason} [root@")),
        "scontrol prints the reason unquoted, then [user@time]: {show}"
    );
    let (got, state) = reason_state(&c);
    eprintln!("MEASURED sinfo %E|%T: {got}|{state}");
    assert_eq!(got, reason);
    assert!(state.starts_with("drain"), "{state}");
    let r = sinfo(&c, &["-R"]);
    eprintln!("MEASURED sinfo -R:\n{r}");
    // sinfo -R's default format is `%20E %9u %19H %N` (22.05): the reason is cut at 20
    // characters, so only the prefix and the code's start show; -l and %E show it whole.
    assert!(r.contains("gpu-affinity: GPU_XI"), "{r}");
    let long = sinfo(&c, &["-R", "-l"]);
    eprintln!("MEASURED sinfo -R -l:\n{long}");
    let full = sinfo(&c, &["-R", "-h", "-o", "%E"]);
    assert_eq!(full.trim(), reason, "sinfo -R -o %E");
    let wide = sinfo(&c, &["-h", "-N", "-o", "%N|%P|%T|%G|%E"]);
    eprintln!("MEASURED sinfo -h -N -o %N|%P|%T|%G|%E: {wide}");
    assert!(
        wide.trim_end().ends_with(&reason),
        "%E must be unpadded, untruncated: {wide}"
    );
    let out =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-prolog.out")).unwrap_or_default();
    eprintln!("MEASURED prolog output:\n{out}");
    assert!(out.contains("exit 1"), "{out}");
    let env =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-prolog.env")).unwrap_or_default();
    eprintln!(
        "MEASURED prolog env: SLURM_CONF {}; SLURM_JOB_GPUS {:?}",
        if env.contains("SLURM_CONF=") {
            "set"
        } else {
            "unset"
        },
        env.lines().find(|l| l.starts_with("SLURM_JOB_GPUS="))
    );
}

#[test]
fn an_admins_reason_is_kept() {
    let n = node(2);
    let setup = prolog_only(&n);
    let Some(c) = start("an_admins_reason_is_kept", setup) else {
        return;
    };
    n.point_at(&c);
    let admin = "admin: fan 3 replaced, do not use";
    scontrol(
        &c,
        &[
            "update",
            &format!("nodename={}", c.node()),
            "state=drain",
            &format!("reason={admin}"),
        ],
    );
    inject_xid79(&n);
    let (code, out) = run_direct(&c, "gpu-affinity-prolog", &n.config);
    eprintln!(
        "MEASURED prolog on an admin-drained node: exit {code}: {}",
        out.trim()
    );
    assert_eq!(code, 1, "a drain verdict still fails the prolog: {out}");
    let (reason, state) = reason_state(&c);
    eprintln!("MEASURED after: {state} {reason}");
    assert_eq!(reason, admin, "admin reason changed");
    assert!(state.starts_with("drain"), "{state}");
}

#[test]
fn health_program_resumes_its_own_drain_and_leaves_an_admins() {
    let n = node(2);
    let setup = HealthSetup {
        config: n.config.clone(),
        prolog: false,
        epilog: false,
        health_interval: Some(2),
    };
    let Some(c) = start(
        "health_program_resumes_its_own_drain_and_leaves_an_admins",
        setup,
    ) else {
        return;
    };
    n.point_at(&c);
    let reason = inject_xid79(&n);
    // slurmd's own HealthCheckProgram drains the node...
    let (state, got) = wait_reason(&c, |_, r| r == reason, Duration::from_secs(30));
    eprintln!("MEASURED health drain: State={state} Reason={got}");
    assert!(got.starts_with(&reason), "{got:?}");
    // ...and, the fault gone, resumes it after resume_after (2) clean passes.
    std::fs::write(n.root.join("dev/kmsg"), HEALTHY_KMSG).expect("kmsg");
    let t = Instant::now();
    let (state, got) = wait_reason(&c, |s, _| s == "idle", Duration::from_secs(40));
    eprintln!(
        "MEASURED resume after {:?}: State={state} Reason={got:?}",
        t.elapsed()
    );
    assert_eq!(state, "idle", "not resumed: {got}");
    // An admin's drain is left alone across passes.
    let admin = "admin: memtest";
    scontrol(
        &c,
        &[
            "update",
            &format!("nodename={}", c.node()),
            "state=drain",
            &format!("reason={admin}"),
        ],
    );
    let passes = |c: &Cluster| runs_of(c, "gpu-affinity-health");
    let before = passes(&c);
    wait_runs(
        &c,
        "gpu-affinity-health",
        before + 3,
        Duration::from_secs(30),
    );
    let (got, state) = reason_state(&c);
    eprintln!(
        "MEASURED {} health passes later: State={state} Reason={got}",
        passes(&c) - before
    );
    assert!(passes(&c) >= before + 3, "slurmd ran too few health passes");
    assert!(state.starts_with("drain") && got == admin, "{state} {got}");
    let out =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-health.out")).unwrap_or_default();
    eprintln!(
        "MEASURED health output (tail):\n{}",
        out.lines().rev().take(6).collect::<Vec<_>>().join("\n")
    );
}

/// The fleet circuit breaker under a real slurmctld: the node shares a partition with four
/// node records that have no slurmd (slurmctld knows them, sinfo lists them), one of which
/// already carries the suite's reason. 1 of 5 is at `max_share` (0.1 by default, and
/// 20% >= 10%), so the failing prolog holds the drain back, says so, and lets the job run.
#[test]
fn the_circuit_breaker_holds_back_a_drain_past_max_share() {
    let n = node(2);
    let setup = prolog_only(&n);
    let test = "the_circuit_breaker_holds_back_a_drain_past_max_share";
    let Some(c) = ClusterBuilder::new()
        .health_programs(setup)
        .slurm_conf_line("NodeName=peer[1-4] NodeAddr=127.0.0.1 Port=1 CPUs=1 State=UNKNOWN")
        .slurm_conf_line("PartitionName=fleet Nodes=ALL MaxTime=INFINITE State=UP")
        .start_or_skip(test)
        .expect("cluster")
    else {
        return;
    };
    n.point_at(&c);
    scontrol(
        &c,
        &[
            "update",
            "nodename=peer1",
            "state=drain",
            "reason=gpu-affinity: GPU_XID_79 gpu=0000:53:00.0",
        ],
    );
    let rows = sinfo(&c, &["-h", "-N", "-o", "%N|%P|%T|%G|%E"]);
    eprintln!("MEASURED fleet sinfo:\n{rows}");
    inject_xid79(&n);
    let job = c
        .client(
            &["srun", "-w", c.node(), "-n1", "echo", "RAN"],
            &ClientOptions::bounded(30),
        )
        .expect("srun");
    let out =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-prolog.out")).unwrap_or_default();
    eprintln!("MEASURED held-back prolog: {job}\n{out}");
    assert!(job.success() && job.stdout.contains("RAN"), "{job}");
    assert!(
        out.contains("NOT DRAINING") && out.contains("circuit breaker"),
        "{out}"
    );
    let (reason, state) = reason_state(&c);
    assert!(reason.is_empty() || reason == "none", "{reason}");
    assert!(!state.starts_with("drain"), "{state}");
}

/// The fleet circuit breaker with several real slurmds (`slurmd -N`, one partition of four
/// nodes sharing one fixture tree, so a fault is every node's and only the node a job runs
/// on checks it). `max_share = 0.5`: one node drained with the suite's prefix by scontrol,
/// then a real prolog failure drains a second (1 of 4 = 25% < 50%); a third node's failing
/// prolog then finds 2 of 4 (50% >= 50%), holds its drain back and runs the job. With the
/// fault gone, the health program run as the second node's slurmd would run it resumes
/// that node alone: the scontrol-drained node with the suite's reason, a node an admin
/// drained, and the held-back node stay as they were.
#[test]
fn the_circuit_breaker_counts_real_slurmd_nodes_and_resume_stays_on_its_node() {
    const NODES: [&str; 4] = ["hb1", "hb2", "hb3", "hb4"];
    let test = "the_circuit_breaker_counts_real_slurmd_nodes_and_resume_stays_on_its_node";
    let n = node_with(1, "max_share = 0.5\n", "");
    let Some(c) = ClusterBuilder::new()
        .nodes(&NODES)
        .health_programs(prolog_only(&n))
        .start_or_skip(test)
        .expect("cluster")
    else {
        return;
    };
    n.point_at(&c);
    let by_scontrol = "gpu-affinity: NIC_PORT_DOWN nic=rdmap79s0/1";
    scontrol(
        &c,
        &[
            "update",
            "nodename=hb4",
            "state=drain",
            &format!("reason={by_scontrol}"),
        ],
    );
    let reason = inject_xid79(&n);
    let srun_on = |node: &str| {
        c.client(
            &["srun", "-w", node, "-n1", "--gres=gpu:1", "echo", "RAN"],
            &ClientOptions::bounded(30),
        )
        .expect("srun")
    };
    // Below the share: the prolog drains its node, and the job does not run there.
    let job = srun_on("hb2");
    eprintln!("MEASURED hb2 (1 of 4 drained): {job}");
    assert!(!job.success() && !job.stdout.contains("RAN"), "{job}");
    let (got, state) = reason_state_of(&c, "hb2");
    assert_eq!(got, reason, "hb2's reason");
    assert!(state.starts_with("drain"), "hb2: {state}");
    // At the share: held back, said loudly, the job runs.
    let job = srun_on("hb3");
    let log =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-prolog.out")).unwrap_or_default();
    eprintln!("MEASURED hb3 (2 of 4 drained): {job}\nprolog log:\n{log}");
    assert!(job.success() && job.stdout.contains("RAN"), "{job}");
    assert!(
        log.contains("NOT DRAINING hb3: circuit breaker: 2 of 4 nodes in test"),
        "{log}"
    );
    let (got, state) = reason_state_of(&c, "hb3");
    assert!(
        got.is_empty() && !state.starts_with("drain"),
        "hb3: {state} {got}"
    );
    let rows = sinfo(&c, &["-h", "-N", "-o", "%N|%P|%T|%E"]);
    eprintln!("MEASURED fleet after the breaker:\n{rows}");
    // An admin's drain on the fourth node; then the fault goes away.
    let admin = "admin: reseat cable";
    scontrol(
        &c,
        &[
            "update",
            "nodename=hb1",
            "state=drain",
            &format!("reason={admin}"),
        ],
    );
    std::fs::write(n.root.join("dev/kmsg"), HEALTHY_KMSG).expect("kmsg");
    let (code, out) = run_direct_on(&c, "hb2", "gpu-affinity-health", &n.config);
    eprintln!(
        "MEASURED health on hb2 (resume_after 1): exit {code}: {}",
        out.trim()
    );
    assert_eq!(code, 0, "{out}");
    // A resumed node is `idle*` (not responding) until its slurmd registers again:
    // slurmctld asks a node leaving DRAIN to re-register (about 1 s here). Should that
    // request be missed on a loaded machine, the next comes with slurmctld's ping, every
    // SlurmdTimeout / 3 = 100 s by default: wait past one.
    let t = Instant::now();
    let (state, got) = wait_reason_of(&c, "hb2", |s, _| s == "idle", Duration::from_secs(120));
    eprintln!(
        "MEASURED hb2 idle {:?} after its resume: {state} reason {got:?}",
        t.elapsed()
    );
    assert_eq!(state, "idle", "hb2 resumed");
    // 24.11 without an accounting plugin keeps the reason across a resume (measured; see
    // core::health::drain); 22.05 and 26.05 clear it.
    assert!(got.is_empty() || got == reason, "hb2's reason: {got}");
    let after: Vec<(String, String)> = NODES.iter().map(|n| reason_state_of(&c, n)).collect();
    eprintln!("MEASURED after hb2's health pass: {after:?}");
    assert_eq!(after[0].0, admin, "hb1's admin reason kept");
    assert!(
        after[0].1.starts_with("drain"),
        "hb1 still drained: {after:?}"
    );
    assert_eq!(
        after[3].0, by_scontrol,
        "hb4 left to its own health program"
    );
    assert!(
        after[3].1.starts_with("drain"),
        "hb4 still drained: {after:?}"
    );
    assert_eq!(after[2].1, "idle", "hb3 untouched: {after:?}");
    // The fault back: hb2, in service again, no longer counts (even with a leftover
    // reason), so hb3's prolog finds 1 of 4 and drains.
    inject_xid79(&n);
    let job = srun_on("hb3");
    assert!(!job.success(), "{job}");
    let (got, state) = reason_state_of(&c, "hb3");
    eprintln!("MEASURED hb3 after hb2's resume: {state} {got}");
    assert_eq!(got, reason, "hb3's reason");
    assert!(state.starts_with("drain"), "hb3: {state}");
}

/// How many runs of `program` slurmd has finished (its wrapper logs `exit N` after each).
fn runs_of(c: &Cluster, program: &str) -> usize {
    std::fs::read_to_string(c.dir().join(format!("log/{program}.out")))
        .unwrap_or_default()
        .matches("exit ")
        .count()
}

/// Wait until slurmd has finished `count` runs of `program` (srun returns before the
/// epilog ends); false when `limit` passed first.
fn wait_runs(c: &Cluster, program: &str, count: usize, limit: Duration) -> bool {
    let t = Instant::now();
    while runs_of(c, program) < count {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    true
}

/// The dcgm-exporter mapping files in `dir` (`name: content`).
fn mapping_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .expect("mapping dir")
        .filter_map(Result::ok)
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            format!("{}: {}", e.file_name().to_string_lossy(), text.trim())
        })
        .collect();
    files.sort();
    files
}

/// `Epilog=` the real gpu-affinity-epilog, with the prolog, which writes the dcgm-exporter
/// job mapping the epilog removes. A clean job leaves the node idle and no mapping; a job
/// during which the driver logs an XID on the job's GPU (the job itself appends the record
/// to the fixture's kernel log, after the prolog read it) drains the node after the job
/// with the suite's reason, and its mapping is removed too.
#[test]
fn epilog_drains_on_a_fault_during_the_job_and_removes_the_job_mapping() {
    let n = node_with(2, "", "[metrics]\ndcgm_job_mapping_dir = \"@DIR@/dcgm\"\n");
    let dcgm = n._dir.path().join("dcgm");
    std::fs::create_dir(&dcgm).expect("mapping dir");
    let setup = HealthSetup {
        config: n.config.clone(),
        prolog: true,
        epilog: true,
        health_interval: None,
    };
    let test = "epilog_drains_on_a_fault_during_the_job_and_removes_the_job_mapping";
    let Some(c) = start(test, setup) else {
        return;
    };
    n.point_at(&c);
    // The job prints the mapping as dcgm-exporter would read it while the job runs.
    let show = format!(
        "echo JOB=$SLURM_JOB_ID; for f in {}/*; do echo \"map $(basename $f): $(cat $f)\"; done",
        dcgm.display()
    );
    let job_on_one_gpu = |script: &str| {
        c.client(
            &["srun", "-n1", "--gres=gpu:1", "sh", "-c", script],
            &ClientOptions::bounded(30),
        )
        .expect("srun")
    };
    let clean = job_on_one_gpu(&show);
    eprintln!("MEASURED clean job: {clean}");
    assert!(clean.success(), "{clean}");
    let id = clean
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("JOB="))
        .expect("job id")
        .trim()
        .to_owned();
    // Slurm's GPU 0 is the fixture's first GPU, the lowest bus: DCGM / NVML index 0.
    assert!(
        clean.stdout.contains(&format!("map 0: {id}")),
        "the prolog's mapping: {clean}"
    );
    assert!(wait_runs(
        &c,
        "gpu-affinity-epilog",
        1,
        Duration::from_secs(30)
    ));
    assert_eq!(
        mapping_files(&dcgm),
        Vec::<String>::new(),
        "mapping removed"
    );
    let (reason, state) = reason_state(&c);
    assert!(reason.is_empty() && state == "idle", "{state} {reason}");

    // The fault appears during the job: the prolog passed, the epilog drains.
    let (record, reason) = xid79_record(&n);
    let kmsg = n.root.join("dev/kmsg");
    let fault = format!("{show}; echo '{record}' >> {}", kmsg.display());
    let job = job_on_one_gpu(&fault);
    eprintln!("MEASURED job with a fault during it: {job}");
    assert!(job.success(), "the job itself ran: {job}");
    assert!(wait_runs(
        &c,
        "gpu-affinity-epilog",
        2,
        Duration::from_secs(30)
    ));
    let (state, got) = wait_reason(
        &c,
        |s, r| s.starts_with("drain") && !r.is_empty(),
        Duration::from_secs(30),
    );
    let log =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-epilog.out")).unwrap_or_default();
    eprintln!("MEASURED after the epilog: State={state} Reason={got}\nepilog log:\n{log}");
    let ctld = c.log("slurmctld.log");
    eprintln!(
        "MEASURED slurmctld on the epilog:\n{}",
        ctld.lines()
            .filter(|l| l.contains("pilog") || l.contains("reason"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        got, reason,
        "the suite's reason, not Slurm's `Epilog error`"
    );
    assert!(state.starts_with("drain"), "{state}");
    assert_eq!(
        mapping_files(&dcgm),
        Vec::<String>::new(),
        "mapping removed"
    );
}

/// A configless node (`slurmd --conf-server`, as HyperPod and slurm-gcp run them): the
/// prolog gets no `[slurm] conf`, finds slurm.conf and gres.conf in the conf-cache
/// through the `SLURM_CONF` slurmd gives it, and takes the Slurm clients of the running
/// slurmd's install (on a 25.11 cluster under /opt/slurm with Debian's 22.05 clients in
/// /usr/bin too, those in /opt/slurm/bin): an XID drains with the suite's reason.
#[test]
fn a_configless_nodes_prolog_drains_with_the_suites_reason() {
    let n = node(2);
    n.without_slurm_conf();
    let Some(c) = ClusterBuilder::new()
        .configless()
        .health_programs(prolog_only(&n))
        .start_or_skip("a_configless_nodes_prolog_drains_with_the_suites_reason")
        .expect("cluster")
    else {
        return;
    };
    let cache = c.conf_cache(c.node()).expect("conf-cache");
    assert!(cache.join("slurm.conf").is_file(), "{}", c.log_tails());
    if c.series_install().is_some() {
        // The trap this guards against: another series' clients first in the usual
        // prefixes (Debian's 22.05 here), which cannot talk to this slurmctld.
        assert!(
            std::path::Path::new("/usr/bin/sinfo").is_file(),
            "the 25.11 pass runs beside Debian's 22.05 clients in /usr/bin"
        );
    }
    let ok = c
        .client(&["srun", "-n1", "hostname"], &ClientOptions::bounded(30))
        .expect("srun");
    assert!(ok.success(), "healthy prolog: {ok}");
    let env =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-prolog.env")).unwrap_or_default();
    eprintln!("MEASURED configless prolog environment:\n{env}");
    let named = env
        .lines()
        .find_map(|l| l.strip_prefix("SLURM_CONF="))
        .map(PathBuf::from);
    assert_eq!(
        named,
        Some(cache.join("slurm.conf")),
        "slurmd names its conf-cache: {env}"
    );
    let reason = inject_xid79(&n);
    let bad = srun_a_gpu_job(&c);
    assert!(
        !bad.success() && !bad.stdout.contains("RAN-ON-BAD-NODE"),
        "{bad}"
    );
    let (state, got) = wait_reason(&c, |_, r| !r.is_empty(), Duration::from_secs(10));
    let out =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-prolog.out")).unwrap_or_default();
    assert_eq!(got, reason, "{state}; prolog said:\n{out}");
    assert!(state.starts_with("drain"), "{state}");
}

/// The trap issue 16 found, in real daemons: a node of a 25.11 cluster whose prolog is
/// pointed at Debian's 22.05 clients in /usr/bin (`[slurm] bin_dir`, as an admin might set
/// it from habit). Those clients cannot talk to this slurmctld, so with XID 79 in the log
/// the prolog cannot read or drain the node; it must fail, never exit 0, so that Slurm
/// keeps the job off the node and drains it under its own reason.
#[test]
fn a_prolog_given_another_series_clients_fails_closed() {
    let n = node_with(2, "", "bin_dir = \"/usr/bin\"\n");
    let Some(c) = start(
        "a_prolog_given_another_series_clients_fails_closed",
        prolog_only(&n),
    ) else {
        return;
    };
    n.point_at(&c);
    if c.series_install().is_none() || !Path::new("/usr/bin/sinfo").is_file() {
        eprintln!(
            "SKIP a_prolog_given_another_series_clients_fails_closed: needs a source-built \
             series with Debian's clients of another series in /usr/bin (the 25.11 pass)"
        );
        return;
    }
    let reason = inject_xid79(&n);
    let bad = srun_a_gpu_job(&c);
    assert!(
        !bad.success() && !bad.stdout.contains("RAN-ON-BAD-NODE"),
        "the job must not run: {bad}"
    );
    let (state, got) = wait_reason(&c, |_, r| !r.is_empty(), Duration::from_secs(10));
    let out =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-prolog.out")).unwrap_or_default();
    eprintln!("MEASURED State={state} Reason={got}\nprolog said:\n{out}");
    assert!(state.starts_with("drain"), "{state}; prolog said:\n{out}");
    // 22.05's scontrol cannot set the suite's reason here: slurmctld's own stands.
    assert_ne!(got, reason);
    assert_eq!(got, "Prolog error", "measured on 25.11.7");
    assert!(
        out.contains("failing so that Slurm keeps the job off it"),
        "{out}"
    );
    assert!(out.trim_end().ends_with("exit 1"), "{out}");
}

/// HealthCheckProgram on a configless node: slurmd gives it no SLURM_CONF and there is no
/// slurm.conf in the clients' default place, so the clients find the cluster as Slurm's
/// own commands do, through the `/run/slurm/conf` link slurmd makes to its conf-cache
/// (read_config.c `_establish_config_source`, slurmd.c `_handle_slash_run`). The health
/// program drains with the suite's reason and resumes the node once it is clean.
#[test]
fn a_configless_nodes_health_program_drains_and_resumes() {
    let n = node(2);
    n.without_slurm_conf();
    let Some(c) = ClusterBuilder::new()
        .configless()
        .health_programs(HealthSetup {
            config: n.config.clone(),
            prolog: false,
            epilog: false,
            health_interval: Some(2),
        })
        .start_or_skip("a_configless_nodes_health_program_drains_and_resumes")
        .expect("cluster")
    else {
        return;
    };
    // A Debian root's slurmd makes the link inside its root.
    let run = c
        .series_root()
        .unwrap_or(Path::new("/"))
        .join("run/slurm/conf");
    let link = std::fs::read_link(run).unwrap_or_default();
    eprintln!("MEASURED /run/slurm/conf -> {}", link.display());
    assert_eq!(
        Some(link),
        c.conf_cache(c.node()),
        "slurmd links its conf-cache"
    );
    let reason = inject_xid79(&n);
    let (state, got) = wait_reason(&c, |_, r| r == reason, Duration::from_secs(30));
    let out =
        std::fs::read_to_string(c.dir().join("log/gpu-affinity-health.out")).unwrap_or_default();
    eprintln!("MEASURED configless health drain: State={state} Reason={got}");
    assert_eq!(got, reason, "{state}; health said:\n{out}");
    std::fs::write(n.root.join("dev/kmsg"), HEALTHY_KMSG).expect("kmsg");
    let (state, got) = wait_reason(&c, |s, _| s == "idle", Duration::from_secs(40));
    assert_eq!(state, "idle", "not resumed: {got}");
}
