//! `gpu-affinity conf topology` and `conf gres` output loaded by real Slurm daemons:
//! four nodes on this machine (`slurmd -N`), placed by a cloud placement export into
//! two blocks that do not follow the node names (pa1 and pb1 share one, pa2 and pb2 the
//! other), so a topology that only followed the names would show wrong groups.
//!
//! - Every series: the tree form, plus a gres.conf and a NodeName layout generated from
//!   a test machine's sysfs fixture over the fake devices (22.05 has no topology/block).
//! - 24.11 (Debian root): the block form; `scontrol show topology` shows the blocks.
//! - 26.05 (Debian root): topology.yaml with a block and a tree topology; slurmctld
//!   reads it (it exits on a bad entry) and shows the blocks.

use gpu_affinity::slurm::version::Series;
use std::path::Path;
use std::process::Command;

use gpu_affinity_tests::{
    ClientOptions, Cluster, ClusterBuilder, NodeShape, SlurmSeries, StepOutput, TaskPlugin,
    fixture, plugin,
};

const NODES: [&str; 4] = ["pa1", "pa2", "pb1", "pb2"];

/// Two network blocks (innermost layer nn-x / nn-y) under one spine, the shape
/// `aws ec2 describe-instance-topology` prints, with an instance of another cluster.
const AWS: &str = r#"{"Instances":[
  {"InstanceId":"i-0a","InstanceType":"p5.48xlarge","NetworkNodes":["nn-spine","nn-agg","nn-x"],"AvailabilityZone":"us-east-2b","ZoneId":"use2-az2"},
  {"InstanceId":"i-0b","InstanceType":"p5.48xlarge","NetworkNodes":["nn-spine","nn-agg","nn-y"],"AvailabilityZone":"us-east-2b","ZoneId":"use2-az2"},
  {"InstanceId":"i-0c","InstanceType":"p5.48xlarge","NetworkNodes":["nn-spine","nn-agg","nn-x"],"AvailabilityZone":"us-east-2b","ZoneId":"use2-az2"},
  {"InstanceId":"i-0d","InstanceType":"p5.48xlarge","NetworkNodes":["nn-spine","nn-agg","nn-y"],"AvailabilityZone":"us-east-2b","ZoneId":"use2-az2"},
  {"InstanceId":"i-0e","InstanceType":"p5.48xlarge","NetworkNodes":["nn-spine","nn-agg2","nn-z"],"AvailabilityZone":"us-east-2b","ZoneId":"use2-az2"}
]}"#;
const NODEMAP: &str = "pa1 i-0a\npa2 i-0b\npb1 i-0c\npb2 i-0d\n";

/// Run the admin command; its stdout, or a panic with its stderr.
fn admin(args: &[&str]) -> String {
    let cli = plugin::admin_cli().expect("build gpu-affinity");
    let out = Command::new(&cli)
        .args(args)
        .output()
        .expect("run gpu-affinity");
    assert!(
        out.status.success(),
        "gpu-affinity {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn topology(form: &str, dir: &Path) -> String {
    let input = dir.join("aws.json");
    let map = dir.join("nodemap");
    std::fs::write(&input, AWS).expect("write input");
    std::fs::write(&map, NODEMAP).expect("write nodemap");
    aws_topology(&input, &map, form, &[])
}

/// `gpu-affinity conf topology --from aws INPUT --nodes MAP --form FORM EXTRA...`.
fn aws_topology(input: &Path, map: &Path, form: &str, extra: &[&str]) -> String {
    let (input, map) = (input.display().to_string(), map.display().to_string());
    let mut args = vec![
        "conf", "topology", "--from", "aws", &input, "--nodes", &map, "--form", form,
    ];
    args.extend_from_slice(extra);
    admin(&args)
}

fn show_topology(cluster: &Cluster) -> String {
    let out = cluster
        .client(
            &["scontrol", "show", "topology"],
            &ClientOptions::bounded(10),
        )
        .expect("run scontrol");
    assert!(out.success(), "scontrol show topology: {out}");
    out.stdout
}

/// The line of `scontrol show topology` naming `unit`, which must list `nodes` (as
/// names or one hostlist) and no other of the cluster's nodes.
fn assert_unit(shown: &str, key: &str, unit: &str, nodes: &[&str]) {
    let line = shown
        .lines()
        .find(|l| l.contains(&format!("{key}={unit} ")))
        .unwrap_or_else(|| panic!("no {key}={unit} in:\n{shown}"));
    let list = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("Nodes="))
        .unwrap_or_else(|| panic!("no Nodes= in {line:?}"));
    let names = gpu_affinity::slurm::hostlist::expand(list).expect("Slurm's hostlist");
    let mut want: Vec<String> = nodes.iter().map(|n| (*n).to_owned()).collect();
    let mut got = names.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want, "{line}");
}

/// Four GPU nodes under the plugin with `default=strict`, the generated block
/// topology.conf (b1 = pa1,pb1; b2 = pa2,pb2) next to slurm.conf and no TopologyPlugin:
/// slurmctld places freely, so only the plugin stands between a strict step and two
/// blocks.
fn strict_block_cluster(test: &str, work: &Path) -> Option<Cluster> {
    let topo = topology("block", work);
    assert!(topo.contains("BlockName=b1 Nodes=pa1,pb1\n"), "{topo}");
    let m = gpu_affinity::sources::fixture::realized(
        &fixture::test_machine("nd-h100-v5-2cpu").expect("test machine"),
    );
    start(
        test,
        ClusterBuilder::new()
            .machine(m)
            .plugin_arg("default", "strict")
            .conf_file("topology.conf", &topo),
    )
}

/// Marker files every task of a step touches, so "refused before any task runs" is
/// checked by the markers that are not there.
struct Marks(std::path::PathBuf);

impl Marks {
    fn new(dir: &Path) -> Marks {
        let marks = dir.join("marks");
        std::fs::create_dir(&marks).expect("marks dir");
        Marks(marks)
    }

    /// The task's command: touch `TAG-NODE`.
    fn touch(&self, tag: &str) -> String {
        format!("touch {}/{tag}-$SLURMD_NODENAME", self.0.display())
    }

    /// The nodes whose tasks ran for `tag`, as `TAG-NODE`, sorted.
    fn ran(&self, tag: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .expect("marks")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("{tag}-")))
            .collect();
        v.sort();
        v
    }
}

/// A GPU step of one task on each of two `nodes` running `command` (a [`Marks::touch`]),
/// srun's `options` first.
fn two_node_step(cluster: &Cluster, options: &[&str], nodes: &str, command: &str) -> StepOutput {
    let mut argv = vec!["srun"];
    argv.extend_from_slice(options);
    argv.extend([
        "-N2",
        "-n2",
        "-w",
        nodes,
        "--gres=gpu:1",
        "sh",
        "-c",
        command,
    ]);
    cluster
        .client(&argv, &ClientOptions::bounded(30))
        .expect("run srun")
}

/// A series that reads topology.yaml (25.05+): the one under test when it does (25.11,
/// 26.05), else 26.05.
fn yaml_series() -> String {
    let series = this_series();
    let reads_yaml = Series::parse(&series).is_some_and(|s| {
        s >= Series {
            major: 25,
            minor: 5,
        }
    });
    if reads_yaml {
        series
    } else {
        "26.05".to_owned()
    }
}

/// The series the cluster will run (the harness's choice), to generate files for.
fn this_series() -> String {
    SlurmSeries::from_env().map_or_else(|_| SlurmSeries::host().name, |s| s.name)
}

/// `conf gres --slurm-series` over the fake devices (NVLinks from the NVML simulator
/// serving `nvml`, where given) and `conf slurm --node-name pa1`'s NodeName line, both
/// from `machine`'s fixture tree: the files an admin generates.
fn generated_node(
    dir: &Path,
    machine: &gpu_affinity::model::Machine,
    series: &str,
    nvml: Option<&Path>,
) -> (String, String) {
    let m = gpu_affinity::sources::fixture::realized(machine);
    let sysfs = dir.join("sysfs");
    fixture::write_sysfs(&m, &sysfs).expect("fixture");
    let sysfs = sysfs.display().to_string();
    let args = [
        "conf",
        "gres",
        "--sysfs-root",
        &sysfs,
        "--dev-prefix",
        "@CLUSTER_DIR@/dev",
        "--slurm-series",
        series,
    ];
    let gres = match nvml {
        None => admin(&args),
        Some(state) => {
            let out = admin_with_nvml(&args, state);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    assert!(
        gres.contains(&format!("# For Slurm {series} (from --slurm-series)")),
        "{gres}"
    );
    let conf = admin(&[
        "conf",
        "slurm",
        "--node-name",
        "pa1",
        "--sysfs-root",
        &sysfs,
    ]);
    let node_line = conf
        .lines()
        .find(|l| l.starts_with("NodeName=pa1 "))
        .unwrap_or_else(|| panic!("no NodeName line in {conf}"))
        .to_owned();
    (gres, node_line)
}

/// Four nodes of `generated_node`'s making, `(series, NodeName line, gres.conf)`, with
/// task/affinity and whatever `more` adds; checks the cluster runs that series.
fn start_generated(
    test: &str,
    (series, node_line, gres): (&str, &str, &str),
    more: impl FnOnce(ClusterBuilder) -> ClusterBuilder,
) -> Option<Cluster> {
    let shape = NodeShape::from_slurmd_c(node_line).expect("slurmd -C form");
    let builder = ClusterBuilder::new()
        .gpus(8)
        .shape(shape)
        .task_plugin(TaskPlugin::Affinity)
        .conf_file("gres.conf", gres);
    let cluster = start(test, more(builder))?;
    assert_eq!(
        cluster.series(),
        series,
        "files made for the series that runs"
    );
    Some(cluster)
}

/// `CUDA_VISIBLE_DEVICES` of a step on `node` with `--gres=gpu:GPUS`, which must run.
fn step_gpus(cluster: &Cluster, node: &str, gpus: u32) -> String {
    let gres = format!("--gres=gpu:{gpus}");
    let args = [
        "srun",
        "-w",
        node,
        &gres,
        "printenv",
        "CUDA_VISIBLE_DEVICES",
    ];
    let out = cluster
        .client(&args, &ClientOptions::bounded(30))
        .expect("run srun");
    assert!(out.success(), "{out}");
    out.stdout.trim().to_owned()
}

fn start(test: &str, builder: ClusterBuilder) -> Option<Cluster> {
    builder
        .nodes(&NODES)
        .start_or_skip(test)
        .unwrap_or_else(|e| panic!("{test}: cannot start the cluster: {e}"))
}

#[test]
fn tree_topology_and_generated_gres_conf_load_on_this_series() {
    // 24.11+ slurmctld set a node INVAL whose gres Cores= split a socket ("doesn't match
    // socket boundaries"). The fixture below folds two NUMA nodes onto this VM's one
    // socket, so the node's slurm.conf layout comes from `conf slurm --node-name` over
    // the same fixture (one socket per NUMA node, as the fixture's packages say), and
    // `conf gres --slurm-series` widens Cores= to those sockets: both files agree.
    let series = this_series();
    let work = tempfile::tempdir().expect("tempdir");
    let topo = topology("tree", work.path());
    // A test machine's fixture (8 GPUs, NUMA0 = CPU 0, NUMA1 = CPU 1, a package each).
    let m = fixture::test_machine("nd-h100-v5-2cpu").expect("test machine");
    let (gres, node_line) = generated_node(work.path(), &m, &series, None);
    assert_eq!(
        node_line,
        "NodeName=pa1 CPUs=2 Boards=1 SocketsPerBoard=2 CoresPerSocket=1 ThreadsPerCore=1 Gres=gpu:8"
    );
    let lines = gres
        .lines()
        .filter(|l| l.starts_with("Name=gpu File=") && l.contains(" Cores="));
    assert_eq!(lines.count(), 8, "{gres}");
    let Some(cluster) = start_generated(
        "tree_topology_and_generated_gres_conf_load_on_this_series",
        (&series, &node_line, &gres),
        |b| {
            b.conf_line("TopologyPlugin=topology/tree")
                .conf_file("topology.conf", &topo)
        },
    ) else {
        return;
    };
    let shown = show_topology(&cluster);
    // Leaves s3_1 (nn-x) and s3_2 (nn-y): the placement, not the names' order.
    assert_unit(&shown, "SwitchName", "s3_1", &["pa1", "pb1"]);
    assert_unit(&shown, "SwitchName", "s3_2", &["pa2", "pb2"]);
    // slurmd took the generated gres.conf: all 8 GPUs, and a step gets two of them.
    assert_eq!(step_gpus(&cluster, "pb2", 2), "0,1");
    let node = cluster
        .client(
            &["scontrol", "-o", "show", "node", "pb2"],
            &ClientOptions::bounded(10),
        )
        .expect("scontrol");
    assert!(node.stdout.contains("Gres=gpu:8"), "{node}");
    // Slurm reads Cores= as it binds: --gpu-bind=closest gives the task on core 0
    // (NUMA 0) the GPUs gres.conf puts there, and the task on core 1 the others.
    let out = cluster
        .client(
            &[
                "srun",
                "-w",
                "pb2",
                "-n2",
                "--cpu-bind=cores",
                "--gres=gpu:8",
                "--gpu-bind=closest",
                "-l",
                "sh",
                "-c",
                "echo $(grep Cpus_allowed_list /proc/self/status | cut -f2) $CUDA_VISIBLE_DEVICES",
            ],
            &ClientOptions::bounded(30),
        )
        .expect("run srun");
    assert!(out.success(), "{out}");
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["0: 0 0,1,2,3", "1: 1 4,5,6,7"], "{out}");
    let log = cluster.log("slurmd-pb2.log");
    assert!(!log.contains("error: gres"), "{log}");
    let out = cluster
        .client(&["srun", "-N4", "hostname"], &ClientOptions::bounded(30))
        .expect("srun -N4");
    assert!(out.success(), "{out}");
}

/// The defect 24.11 found: a node whose two NUMA nodes share one package (this VM's
/// real shape, 1 socket x 2 cores, as on NPS2/SNC2 parts). Per-NUMA `Cores=0` and
/// `Cores=1` split that socket, which 24.11+ slurmctld refuse (the node goes INVAL,
/// measured); the generated file widens each to the whole socket there and keeps the
/// closer per-NUMA lists on 22.05, and the node comes up idle with all 8 GPUs. The
/// lines also carry `Links=` from NVML's GPU pairs, which slurmd and slurmctld take.
#[test]
fn generated_gres_conf_widens_cores_to_the_package_on_24_11_and_later() {
    let series = this_series();
    let work = tempfile::tempdir().expect("tempdir");
    let mut m = fixture::test_machine("nd-h100-v5-2cpu").expect("test machine");
    m.set_packages(vec![m.cpus()]);
    let m = gpu_affinity::sources::fixture::realized(&m);
    // NVLink-bridged pairs (GPU 2k with 2k+1, two links each), as NVML reports them.
    let bus: Vec<String> = m.gpus.iter().map(|g| g.pci.to_string()).collect();
    let nvml = nvml_state(work.path(), "pairs", &m, |i| {
        let peer = &bus[i ^ 1];
        serde_json::json!({"nvlinks": [true, true, false], "nvlink_remote": [peer, peer, peer]})
    });
    let (gres, node_line) = generated_node(work.path(), &m, &series, Some(&nvml));
    assert_eq!(
        node_line,
        "NodeName=pa1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 Gres=gpu:8"
    );
    let cores: Vec<&str> = gres
        .lines()
        .filter_map(|l| l.strip_prefix("Name=gpu File="))
        .map(|l| {
            let cores = l.split("Cores=").nth(1).unwrap_or("none");
            cores.split(' ').next().unwrap_or(cores)
        })
        .collect();
    let want = if series == "22.05" {
        ["0", "0", "0", "0", "1", "1", "1", "1"]
    } else {
        ["0-1"; 8]
    };
    assert_eq!(cores, want, "{gres}");
    let links: Vec<&str> = gres
        .lines()
        .filter_map(|l| l.split(" Links=").nth(1))
        .collect();
    assert_eq!(links.len(), 8, "{gres}");
    assert_eq!(links[0], "-1,2,0,0,0,0,0,0", "{gres}");
    assert_eq!(links[7], "0,0,0,0,0,0,2,-1", "{gres}");
    let Some(cluster) = start_generated(
        "generated_gres_conf_widens_cores_to_the_package_on_24_11_and_later",
        (&series, &node_line, &gres),
        |b| b,
    ) else {
        return;
    };
    // Started means every node registered idle: slurmctld took the Cores= lists.
    assert_eq!(step_gpus(&cluster, "pa1", 8), "0,1,2,3,4,5,6,7");
    let log = cluster.log("slurmctld.log");
    assert!(
        !log.contains("socket boundaries") && !log.contains("Links"),
        "{log}"
    );
    let log = cluster.log("slurmd-pa1.log");
    assert!(
        !log.contains("error: gres") && !log.contains("links"),
        "{log}"
    );
}

#[test]
fn block_topology_conf_loads_on_24_11() {
    let work = tempfile::tempdir().expect("tempdir");
    let topo = topology("block", work.path());
    assert!(topo.contains("BlockName=b1 Nodes=pa1,pb1\n"), "{topo}");
    let Some(cluster) = start(
        "block_topology_conf_loads_on_24_11",
        ClusterBuilder::new()
            .slurm_series("24.11")
            .gpus(0)
            .conf_line("TopologyPlugin=topology/block")
            .conf_file("topology.conf", &topo),
    ) else {
        return;
    };
    let shown = show_topology(&cluster);
    assert_unit(&shown, "BlockName", "b1", &["pa1", "pb1"]);
    assert_unit(&shown, "BlockName", "b2", &["pa2", "pb2"]);
    // A two-node job inside one block runs.
    let out = cluster
        .client(
            &["srun", "-N2", "-w", "pa1,pb1", "hostname"],
            &ClientOptions::bounded(30),
        )
        .expect("srun");
    assert!(out.success(), "{out}");
}

#[test]
fn topology_yaml_loads_on_25_05_and_later() {
    let work = tempfile::tempdir().expect("tempdir");
    let yaml = topology("yaml", work.path());
    let Some(cluster) = start(
        "topology_yaml_loads_on_25_05_and_later",
        ClusterBuilder::new()
            .slurm_series(&yaml_series())
            .gpus(0)
            .conf_file("topology.yaml", &yaml),
    ) else {
        return;
    };
    let shown = show_topology(&cluster);
    assert_unit(&shown, "BlockName", "b1", &["pa1", "pb1"]);
    assert_unit(&shown, "BlockName", "b2", &["pa2", "pb2"]);
    let tree = cluster
        .client(
            &["scontrol", "show", "topology", "tree"],
            &ClientOptions::bounded(10),
        )
        .expect("run scontrol");
    // The second topology of the file, by name: the same groups as switches.
    assert!(tree.success(), "{tree}");
    assert_unit(&tree.stdout, "SwitchName", "s3_1", &["pa1", "pb1"]);
    assert_unit(&tree.stdout, "SwitchName", "s3_2", &["pa2", "pb2"]);
    let out = cluster
        .client(
            &["srun", "-N2", "-w", "pa2,pb2", "hostname"],
            &ClientOptions::bounded(30),
        )
        .expect("srun");
    assert!(out.success(), "{out}");
}

/// The plugin's node-side placement backstop on this series (22.05, no topology/block
/// in slurmctld): the generated block topology.conf next to slurm.conf is what the
/// plugin reads; slurmctld places freely, so only the plugin stands between a strict
/// step and two blocks. Every task touches a marker, so "refused before any task runs"
/// is checked by the markers that are not there.
#[test]
fn strict_refuses_a_step_across_blocks_and_prefer_warns() {
    let work = tempfile::tempdir().expect("tempdir");
    let Some(cluster) = strict_block_cluster(
        "strict_refuses_a_step_across_blocks_and_prefer_warns",
        work.path(),
    ) else {
        return;
    };
    let marks = Marks::new(work.path());
    let ran = |tag: &str| marks.ran(tag);
    let step = |mode: &str, nodes: &str, tag: &str| {
        let mode = format!("--gpu-affinity={mode}");
        two_node_step(&cluster, &[&mode], nodes, &marks.touch(tag))
    };

    // Inside one block (b1 = pa1, pb1): runs under strict.
    let out = step("strict", "pa1,pb1", "in");
    assert!(out.success(), "{out}");
    assert_eq!(ran("in"), ["in-pa1", "in-pb1"], "{out}");
    assert!(!out.stderr.contains("placement"), "{out}");

    // Across blocks: refused before any task runs, the message on srun's stderr.
    let out = step("strict", "pa1,pa2", "across");
    assert!(!out.success() && !out.timed_out(), "{out}");
    assert!(
        out.stderr.contains(
            "gpu-affinity: step spans 2 placement blocks: b1=[pa1] b2=[pa2]; strict placement needs one block (try --switches=1 or --segment)"
        ),
        "{out}"
    );
    assert!(ran("across").is_empty(), "a task ran: {out}");

    // prefer: the same step warns once and runs on both nodes.
    let out = step("prefer", "pa1,pa2", "prefer");
    assert!(out.success(), "{out}");
    assert_eq!(ran("prefer"), ["prefer-pa1", "prefer-pa2"], "{out}");
    let warned = out
        .stderr
        .matches("gpu-affinity: warning: step spans 2 placement blocks")
        .count();
    assert_eq!(warned, 1, "{out}");
}

/// The submit side: srun itself (local_user_init, once the allocation is known) refuses
/// a strict GPU step across blocks before launching anything, with the node backstop's
/// message: no task runs and no slurmd log holds the refusal (the nodes never saw the
/// step). prefer warns once (the node side's warning; srun's check stays silent so the
/// user reads it once) and runs; inside one block runs. Inside a larger allocation srun
/// cannot tell the step's nodes, and the node backstop refuses instead.
#[test]
fn srun_refuses_a_strict_step_across_blocks_before_launch() {
    let work = tempfile::tempdir().expect("tempdir");
    let Some(cluster) = strict_block_cluster(
        "srun_refuses_a_strict_step_across_blocks_before_launch",
        work.path(),
    ) else {
        return;
    };
    let marks = Marks::new(work.path());
    let ran = |tag: &str| marks.ran(tag);
    let touch = |tag: &str| marks.touch(tag);
    let srun = |argv: &[&str]| {
        cluster
            .client(argv, &ClientOptions::bounded(30))
            .expect("run srun")
    };
    let refusal = "gpu-affinity: step spans 2 placement blocks: b1=[pa1] b2=[pa2]; strict placement needs one block (try --switches=1 or --segment)";
    let node_logs = || -> String {
        ["pa1", "pa2", "pb1", "pb2"]
            .iter()
            .map(|n| cluster.log(&format!("slurmd-{n}.log")))
            .collect()
    };

    let t = touch("across");
    let out = srun(&[
        "srun",
        "-N2",
        "-n2",
        "-w",
        "pa1,pa2",
        "--gres=gpu:1",
        "sh",
        "-c",
        &t,
    ]);
    assert!(!out.success() && !out.timed_out(), "{out}");
    assert!(out.stderr.contains(refusal), "{out}");
    assert!(ran("across").is_empty(), "a task ran: {out}");
    assert!(
        !node_logs().contains("step spans"),
        "a node saw the step: {out}"
    );

    // The same request made with -G: srun sees it too.
    let out = srun(&["srun", "-N2", "-n2", "-w", "pa1,pa2", "-G2", "true"]);
    assert!(!out.success() && out.stderr.contains(refusal), "{out}");
    assert!(!node_logs().contains("step spans"), "{out}");

    let t = touch("in");
    let out = srun(&[
        "srun",
        "-N2",
        "-n2",
        "-w",
        "pa1,pb1",
        "--gres=gpu:1",
        "sh",
        "-c",
        &t,
    ]);
    assert!(out.success(), "{out}");
    assert_eq!(ran("in"), ["in-pa1", "in-pb1"], "{out}");

    let t = touch("prefer");
    let out = srun(&[
        "srun",
        "--gpu-affinity=prefer",
        "-N2",
        "-n2",
        "-w",
        "pa1,pa2",
        "--gres=gpu:1",
        "sh",
        "-c",
        &t,
    ]);
    assert!(out.success(), "{out}");
    assert_eq!(ran("prefer"), ["prefer-pa1", "prefer-pa2"], "{out}");
    let warned = out
        .stderr
        .matches("gpu-affinity: warning: step spans 2 placement blocks")
        .count();
    assert_eq!(warned, 1, "{out}");

    // Inside a four-node allocation srun's environment lists the job's nodes, not the
    // step's two: srun leaves it to the nodes, which refuse before any task runs.
    let t = touch("alloc");
    let out = srun(&[
        "salloc",
        "-N4",
        "--gres=gpu:1",
        "srun",
        "-N2",
        "-n2",
        "-w",
        "pa1,pa2",
        "sh",
        "-c",
        &t,
    ]);
    assert!(!out.success() && out.stderr.contains(refusal), "{out}");
    assert!(ran("alloc").is_empty(), "a task ran: {out}");
    assert!(
        node_logs().contains(refusal),
        "the nodes did not refuse: {out}"
    );
}

/// Per-partition topologies (Slurm 25.05+): topology.yaml holds "wide" (the cluster
/// default, flat) and "split" (a tree: leaf switches s1 = pa1,pb1 and s2 = pa2,pb2), and
/// partition `split` selects the second with `Topology=split`. A strict GPU step across
/// leaf switches in `split` is refused, by srun itself and, inside an allocation, by
/// the nodes; the same step in the default partition runs. (A block topology would not
/// do here: slurmctld itself refuses a two-node job across two-node blocks, measured:
/// "Requested node configuration is not available".)
#[test]
fn the_partition_topology_decides_on_25_05_and_later() {
    let yaml = r#"- topology: wide
  cluster_default: true
  flat: true
- topology: split
  tree:
    switches:
    - switch: top
      children: s[1-2]
    - switch: s1
      nodes: pa1,pb1
    - switch: s2
      nodes: pa2,pb2
"#;
    let m = gpu_affinity::sources::fixture::realized(
        &fixture::test_machine("nd-h100-v5-2cpu").expect("test machine"),
    );
    let Some(cluster) = start(
        "the_partition_topology_decides_on_25_05_and_later",
        ClusterBuilder::new()
            .slurm_series(&yaml_series())
            .machine(m)
            .plugin_arg("default", "strict")
            .conf_file("topology.yaml", yaml)
            .slurm_conf_line("PartitionName=split Nodes=pa[1-2],pb[1-2] Topology=split"),
    ) else {
        return;
    };
    let refusal = "gpu-affinity: step spans 2 leaf switches: s1=[pa1] s2=[pa2]; strict placement needs one leaf switch (try --switches=1)";
    let run = |argv: &[&str]| {
        cluster
            .client(argv, &ClientOptions::bounded(60))
            .expect("run client")
    };
    let step = ["-N2", "-n2", "-w", "pa1,pa2", "--gres=gpu:1", "true"];
    let mut split = vec!["srun", "-p", "split"];
    split.extend(step);
    let out = run(&split);
    assert!(!out.success() && out.stderr.contains(refusal), "{out}");
    assert!(
        out.stderr.contains("local_user_init() failed"),
        "srun refused it: {out}"
    );

    let mut default = vec!["srun"];
    default.extend(step);
    let out = run(&default);
    assert!(out.success(), "{out}");

    // Inside a four-node allocation of `split`: the nodes decide, by the same topology.
    let mut alloc = vec!["salloc", "-p", "split", "-N4", "--gres=gpu:1", "srun"];
    alloc.extend(step);
    let out = run(&alloc);
    assert!(!out.success() && out.stderr.contains(refusal), "{out}");
    assert!(
        !out.stderr.contains("local_user_init() failed"),
        "the nodes refused it: {out}"
    );
}

/// The configured switch level (`switch_level`, here from the admin config the plugstack
/// `config=` names, rewritten between steps: every srun and slurmstepd reads it anew):
/// a tree with two leaf switches (l1 = pa1,pb1; l2 = pa2,pb2) under one level-1 switch.
/// Strict at level 0 refuses a step across the leaves before any task runs; at level 1
/// the same step runs. slurmctld has no TopologyPlugin here and places freely.
#[test]
fn switch_level_lets_a_strict_step_span_the_leaves_of_one_switch() {
    let work = tempfile::tempdir().expect("tempdir");
    let config = work.path().join("config.toml");
    std::fs::write(&config, "[plugin]\nswitch_level = 0\n").expect("config");
    let m = gpu_affinity::sources::fixture::realized(
        &fixture::test_machine("nd-h100-v5-2cpu").expect("test machine"),
    );
    let Some(cluster) = start(
        "switch_level_lets_a_strict_step_span_the_leaves_of_one_switch",
        ClusterBuilder::new()
            .machine(m)
            .plugin_arg("default", "strict")
            .plugin_arg("config", &config.display().to_string())
            .conf_file(
                "topology.conf",
                "SwitchName=l1 Nodes=pa1,pb1\nSwitchName=l2 Nodes=pa2,pb2\nSwitchName=s1 Switches=l[1-2]\n",
            ),
    ) else {
        return;
    };
    let marks = Marks::new(work.path());
    let step = |tag: &str| two_node_step(&cluster, &[], "pa1,pa2", &marks.touch(tag));

    let out = step("leaf");
    assert!(!out.success() && !out.timed_out(), "{out}");
    assert!(
        out.stderr.contains(
            "gpu-affinity: step spans 2 leaf switches: l1=[pa1] l2=[pa2]; strict placement needs one leaf switch (try --switches=1)"
        ),
        "{out}"
    );
    assert!(marks.ran("leaf").is_empty(), "a task ran: {out}");

    std::fs::write(&config, "[plugin]\nswitch_level = 1\n").expect("config");
    let out = step("level1");
    assert!(out.success(), "{out}");
    assert_eq!(marks.ran("level1"), ["level1-pa1", "level1-pa2"], "{out}");
    assert!(!out.stderr.contains("placement"), "{out}");
}

/// `gpu-affinity audit` against a running cluster's own config: the slurm.conf the
/// harness wrote (TopologyPlugin=topology/tree) and the generated topology.conf next to
/// it, which slurmctld loaded; the audit places node pb1 in the leaf switch slurmctld
/// shows for it.
#[test]
fn audit_reads_a_running_clusters_config() {
    let work = tempfile::tempdir().expect("tempdir");
    let topo = topology("tree", work.path());
    let Some(cluster) = start(
        "audit_reads_a_running_clusters_config",
        ClusterBuilder::new()
            .gpus(0)
            .conf_line("TopologyPlugin=topology/tree")
            .conf_file("topology.conf", &topo),
    ) else {
        return;
    };
    assert_unit(
        &show_topology(&cluster),
        "SwitchName",
        "s3_1",
        &["pa1", "pb1"],
    );
    let config = work.path().join("config.toml");
    std::fs::write(&config, "").expect("config");
    let cli = plugin::admin_cli().expect("build gpu-affinity");
    let out = Command::new(&cli)
        .args([
            "audit",
            "--workload",
            "pretrain",
            "--machine",
            "p5.48xlarge",
            "--node",
            "pb1",
        ])
        .arg("--slurm-conf")
        .arg(cluster.conf())
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run gpu-affinity audit");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\nPASS  placement.topology "), "{text}");
    assert!(text.contains("\nPASS  placement.node "), "{text}");
    // The harness's partition holds every node; pb1 sits where slurmctld shows it.
    assert!(
        text.contains("\n      partition test: topology default leaf switch s3_1\n"),
        "{text}"
    );
    // The harness's cluster is no cloud product's: self-built, a warning for pretrain.
    assert!(text.contains("\nWARN  cluster.managed "), "{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");
}

/// NVML simulator state for `machine`'s GPUs (bus ids as the fixture tree has them), each
/// GPU given `extra` (fabric, NVLink peers) by its position.
fn nvml_state(
    dir: &Path,
    name: &str,
    machine: &gpu_affinity::model::Machine,
    extra: impl Fn(usize) -> serde_json::Value,
) -> std::path::PathBuf {
    let gpus: Vec<serde_json::Value> = machine
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut gpu = serde_json::json!({"bus_id": g.pci.to_string()});
            if let (Some(o), serde_json::Value::Object(more)) = (gpu.as_object_mut(), extra(i)) {
                o.extend(more);
            }
            gpu
        })
        .collect();
    let path = dir.join(format!("{name}.nvml.json"));
    let state = serde_json::json!({"driver": "570.86.15", "gpus": gpus});
    std::fs::write(&path, state.to_string()).expect("simulator state");
    path
}

/// The admin command with the NVML simulator serving `state`: its output, unchecked.
fn admin_with_nvml(args: &[&str], state: &Path) -> std::process::Output {
    let cli = plugin::admin_cli().expect("build gpu-affinity");
    let sim = plugin::nvml_sim().expect("build the NVML simulator");
    Command::new(&cli)
        .args(args)
        .arg("--nvml-library")
        .arg(&sim)
        .env("NVML_SIM_STATE", state)
        .output()
        .expect("run gpu-affinity")
}

/// GB200-like NVL domains without a cloud API: four nodes' `conf node-facts --json`, NVML
/// (the simulator) putting nvl1/nvl2 in clique 7 and nvl3/nvl4 in clique 9 of one
/// cluster uuid; `conf topology --from nvlink` makes one block per clique. A GPU whose
/// fabric registration is still in progress (state 2) has none, and its node is refused
/// by name. No Slurm daemon: the files are what the other tests load.
#[test]
fn node_facts_from_nvml_cliques_make_nvlink_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let machine = gpu_affinity::catalog::machine("p5.48xlarge").expect("catalog");
    let machine = gpu_affinity::sources::fixture::realized(&machine);
    let root = dir.path().join("sysfs");
    fixture::write_sysfs(&machine, &root).expect("fixture");
    let root = root.display().to_string();
    let uuid = "5a1e0c2d-0000-4000-8000-00000000abcd";
    let facts = |node: &str, clique: u32, state: u8| {
        let sim = nvml_state(
            dir.path(),
            node,
            &machine,
            |_| serde_json::json!({"fabric": {"cluster_uuid": uuid, "clique_id": clique, "state": state}}),
        );
        let out = admin_with_nvml(
            &[
                "conf",
                "node-facts",
                "--json",
                "--hostname",
                node,
                "--sysfs-root",
                &root,
            ],
            &sim,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = dir.path().join(format!("{node}.facts.json"));
        std::fs::write(&path, &out.stdout).expect("facts");
        path.display().to_string()
    };
    let files: Vec<String> = [("nvl1", 7), ("nvl2", 7), ("nvl3", 9), ("nvl4", 9)]
        .iter()
        .map(|(n, c)| facts(n, *c, 3))
        .collect();
    let read = |path: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json")
    };
    let one = read(&files[0]);
    assert_eq!(one["gpus"][0]["fabric"]["cluster_uuid"], uuid, "{one}");
    assert_eq!(one["gpus"][7]["fabric"]["clique_id"], 7, "{one}");
    let nodemap = dir.path().join("nodemap");
    std::fs::write(&nodemap, "nvl1 nvl1\nnvl2 nvl2\nnvl3 nvl3\nnvl4 nvl4\n").expect("map");
    let nodemap = nodemap.display().to_string();
    let mut args = vec!["conf", "topology", "--from", "nvlink", "--nodes", &nodemap];
    args.extend(files.iter().map(String::as_str));
    let topo = admin(&args);
    let blocks: Vec<&str> = topo
        .lines()
        .filter(|l| l.starts_with("BlockName="))
        .collect();
    assert_eq!(
        blocks,
        ["BlockName=b1 Nodes=nvl[1-2]", "BlockName=b2 Nodes=nvl[3-4]"],
        "{topo}"
    );
    // Registration still in progress on nvl5: no fabric, so the node is named.
    let late = facts("nvl5", 9, 2);
    assert!(read(&late)["gpus"][0].get("fabric").is_none(), "{late}");
    let map5 = dir.path().join("nodemap5");
    std::fs::write(&map5, "nvl5 nvl5\n").expect("map");
    let cli = plugin::admin_cli().expect("build gpu-affinity");
    let out = Command::new(&cli)
        .args(["conf", "topology", "--from", "nvlink", "--nodes"])
        .arg(&map5)
        .arg(&late)
        .output()
        .expect("run gpu-affinity");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nvl5") && err.contains("no GPU with a complete NVLink fabric"),
        "{err}"
    );
}

/// Every form this series loads (tree; block from 23.11; topology.yaml from 25.05), as
/// `conf topology` writes it for the series (`--slurm-series`) with `--unplaced isolate`
/// and a smaller block after a larger one: pa1,pb1 on nn-x, pa2 alone on nn-y, pb2
/// without placement data. slurmctld must start with each (24.05/24.11 exit on a block
/// below the base size) and show the units; a job inside the first block runs.
#[test]
fn generated_topologies_with_unplaced_nodes_load_on_this_series() {
    let series = this_series();
    let parsed = Series::parse(&series).expect("MAJOR.MINOR");
    let at_least = |major, minor| parsed >= Series { major, minor };
    let work = tempfile::tempdir().expect("tempdir");
    let input = work.path().join("aws.json");
    let map = work.path().join("nodemap");
    std::fs::write(&input, AWS).expect("write input");
    std::fs::write(&map, "pa2 i-0b\npa1 i-0a\npb1 i-0c\npb2 i-0404\n").expect("nodemap");
    let mut forms = vec!["tree"];
    if at_least(23, 11) {
        forms.push("block");
    }
    if at_least(25, 5) {
        forms.push("yaml");
    }
    for form in forms {
        let text = aws_topology(
            &input,
            &map,
            form,
            &["--unplaced", "isolate", "--slurm-series", &series],
        );
        let (file, key, first, plugin) = match form {
            // Switches are named in NODEMAP order: pa2's leaf first.
            "tree" => ("topology.conf", "SwitchName", "s3_2", "topology/tree"),
            "block" => ("topology.conf", "BlockName", "b1", "topology/block"),
            _ => ("topology.yaml", "BlockName", "b1", ""),
        };
        if form != "tree" {
            assert!(
                text.contains("BlockName=b1 Nodes=pa1,pb1") || text.contains("nodes: pa1,pb1"),
                "{text}"
            );
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            assert!(
                text.contains("BlockSizes=1,2")
                    || lines
                        .windows(3)
                        .any(|w| w == ["block_sizes:", "- 1", "- 2"]),
                "{text}"
            );
        }
        let test = format!("generated_topologies_load_{form}");
        let mut builder = ClusterBuilder::new().gpus(0).conf_file(file, &text);
        if !plugin.is_empty() {
            builder = builder.conf_line(&format!("TopologyPlugin={plugin}"));
        }
        let Some(cluster) = start(&test, builder) else {
            return;
        };
        assert_eq!(
            cluster.series(),
            series,
            "files made for the series that runs"
        );
        let shown = show_topology(&cluster);
        assert_unit(&shown, key, first, &["pa1", "pb1"]);
        assert_unit(&shown, key, "unplaced", &["pb2"]);
        let out = cluster
            .client(
                &["srun", "-N2", "-w", "pa1,pb1", "hostname"],
                &ClientOptions::bounded(30),
            )
            .expect("srun");
        assert!(out.success(), "{form}: {out}");
    }
}

/// A block topology.conf made with the admin's `--block-sizes 2,4`, on the shape of NVIDIA
/// topograph's medium.yaml block case (tests/models/medium.yaml with
/// tests/payloads/test-aws-sim-block.json: capacity blocks under leaves of one spine),
/// loaded by slurmctld 24.11 (topology.conf; the series that checks blocks against the
/// base most strictly) and 26.05 (topology.yaml). One capacity block has three nodes, more than the base: topograph splits
/// such a domain into base-sized blocks, ours keeps it one block (slurm-conf
/// tests/topograph_parity.rs, `domains_larger_than_the_base_stay_one_block`), and this
/// is what slurmctld makes of it.
#[test]
fn admin_block_sizes_load_with_a_domain_above_the_base() {
    let test = "admin_block_sizes_load_with_a_domain_above_the_base";
    let work = tempfile::tempdir().expect("tempdir");
    let instance = |id: &str, leaf: &str, cb: &str| {
        format!(
            r#"{{"InstanceId":"{id}","NetworkNodes":["nn-core","nn-spine","{leaf}"],"CapacityBlockId":"{cb}"}}"#
        )
    };
    let list: Vec<String> = [
        ("i-1a", "nn-c1", "cb-1"),
        ("i-2a", "nn-c1", "cb-1"),
        ("i-3a", "nn-c1", "cb-1"),
        ("i-1b", "nn-c2", "cb-2"),
        ("i-2b", "nn-c2", "cb-2"),
    ]
    .iter()
    .map(|(id, leaf, cb)| instance(id, leaf, cb))
    .collect();
    let input = work.path().join("aws.json");
    let map = work.path().join("nodemap");
    std::fs::write(&input, format!("{{\"Instances\":[{}]}}", list.join(","))).expect("input");
    // Out of network order: placement, not the NODEMAP, orders the blocks.
    std::fs::write(&map, "pb2 i-2b\npa1 i-1a\npb1 i-1b\npa3 i-3a\npa2 i-2a\n").expect("map");
    // 24.11 reads topology.conf; 26.05 the same blocks from topology.yaml.
    for (series, form, file, plugin) in [
        (
            "24.11",
            "block",
            "topology.conf",
            "TopologyPlugin=topology/block",
        ),
        ("26.05", "yaml", "topology.yaml", ""),
    ] {
        let text = aws_topology(
            &input,
            &map,
            form,
            &["--block-sizes", "2,4", "--slurm-series", series],
        );
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        assert!(
            text.contains(
                "BlockName=b1 Nodes=pa[1-3]\nBlockName=b2 Nodes=pb[1-2]\nBlockSizes=2,4\n"
            ) || lines
                .windows(3)
                .any(|w| w == ["block_sizes:", "- 2", "- 4"]),
            "{text}"
        );
        let mut builder = ClusterBuilder::new()
            .slurm_series(series)
            .gpus(0)
            .conf_file(file, &text)
            .nodes(&["pa1", "pa2", "pa3", "pb1", "pb2"]);
        if !plugin.is_empty() {
            builder = builder.conf_line(plugin);
        }
        let Some(cluster) = builder
            .start_or_skip(test)
            .unwrap_or_else(|e| panic!("{test}: cannot start the cluster: {e}"))
        else {
            return;
        };
        let shown = show_topology(&cluster);
        assert_unit(&shown, "BlockName", "b1", &["pa1", "pa2", "pa3"]);
        assert_unit(&shown, "BlockName", "b2", &["pb1", "pb2"]);
        // The base size per block, and the spine's aggregate at size 4, which takes the
        // 3-node block whole.
        assert_eq!(shown.matches("BlockSize=2").count(), 2, "{series}: {shown}");
        assert!(
            shown.lines().any(|l| l.contains("AggregatedBlock=")
                && l.contains("Nodes=pa[1-3],pb[1-2]")
                && l.contains("BlockSize=4")),
            "{series}: {shown}"
        );
        // Jobs of the base size in each block, one on the whole 3-node block (its third
        // node is not lost to the base of 2) and one across the aggregate.
        for (n, nodes) in [
            ("-N2", "pb1,pb2"),
            ("-N2", "pa1,pa2"),
            ("-N3", "pa1,pa2,pa3"),
            ("-N4", "pa1,pa2,pb1,pb2"),
        ] {
            let out = cluster
                .client(
                    &["srun", n, "-w", nodes, "hostname"],
                    &ClientOptions::bounded(30),
                )
                .expect("srun");
            assert!(out.success(), "{series} {n} {nodes}: {out}");
        }
    }
}
