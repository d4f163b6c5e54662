//! `gpu-affinity conf topology` flags as an admin runs them: `--block-sizes` (good lists
//! kept, bad ones refused by Slurm's rule in one line), `--cluster-default` and
//! `--unplaced refuse`. On every refusal nothing is printed or written.

mod common;

use std::path::Path;

use gpu_affinity::slurm::topology::{self, Kind};

/// Three leaves under two spines: 2, 1 and 1 nodes (so the smallest block is 1); the
/// m5.large has no NetworkNodes (AWS lists it with an empty list).
const AWS: &str = r#"{"Instances":[
  {"InstanceId":"i-1","InstanceType":"p5.48xlarge","NetworkNodes":["nn-a","nn-b1","nn-c1"]},
  {"InstanceId":"i-2","InstanceType":"p5.48xlarge","NetworkNodes":["nn-a","nn-b1","nn-c1"]},
  {"InstanceId":"i-3","InstanceType":"p5.48xlarge","NetworkNodes":["nn-a","nn-b1","nn-c2"]},
  {"InstanceId":"i-4","InstanceType":"p5.48xlarge","NetworkNodes":["nn-a","nn-b2","nn-c3"]},
  {"InstanceId":"i-9","InstanceType":"m5.large","NetworkNodes":[]}
]}"#;

const GPUS: &str = "gpu1 i-1\ngpu2 i-2\ngpu3 i-3\ngpu4 i-4\n";

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(dir: &Path, nodemap: &str, more: &[&str]) -> Run {
    let input = dir.join("aws.json");
    let map = dir.join("nodemap");
    std::fs::write(&input, AWS).expect("write input");
    std::fs::write(&map, nodemap).expect("write nodemap");
    let (input, map) = (input.display().to_string(), map.display().to_string());
    let mut args = vec![
        "conf",
        "topology",
        "--from",
        "aws",
        &input,
        "--nodes",
        &map,
        "--slurm-series",
        "24.11",
    ];
    args.extend_from_slice(more);
    let out = common::gpu_affinity(&args);
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A refusal: exit 1, nothing on stdout, one line on stderr containing `says`.
fn refused(r: &Run, says: &str) {
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.starts_with("gpu-affinity: "), "{}", r.stderr);
    assert!(r.stderr.contains(says), "want {says:?}: {}", r.stderr);
}

fn block_sizes(text: &str, form: &str) -> Vec<u32> {
    let all = if form == "yaml" {
        topology::parse_yaml(text).expect("yaml")
    } else {
        vec![topology::parse_conf(text).expect("conf")]
    };
    all.into_iter()
        .find_map(|t| match t.kind {
            Kind::Block(b) => Some(b.sizes),
            _ => None,
        })
        .expect("a block topology")
}

#[test]
fn block_sizes_given_are_written_as_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Without the flag: Slurm's default levels from the smallest block (1 node), up to
    // the first that spans the three blocks.
    let r = run(dir.path(), GPUS, &["--form", "block"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(block_sizes(&r.stdout, "block"), [1, 2, 4]);
    for (list, want) in [
        ("1", &[1][..]),
        ("1,2", &[1, 2]),
        ("1,4", &[1, 4]),
        // 2^15 base blocks: the largest level slurmctld takes.
        ("1,32768", &[1, 32768]),
    ] {
        for form in ["block", "yaml"] {
            let r = run(dir.path(), GPUS, &["--form", form, "--block-sizes", list]);
            assert_eq!(r.code, Some(0), "{list} {form}: {}", r.stderr);
            assert!(r.stderr.is_empty(), "{list} {form}: {}", r.stderr);
            assert_eq!(block_sizes(&r.stdout, form), want, "{list} {form}");
        }
    }
}

#[test]
fn block_sizes_against_slurms_rule_are_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (list, says) in [
        // Each size a power-of-two multiple of the first (slurmctld: "Invalid BlockSizes").
        ("1,3", "block size 3 is not a power-of-two multiple"),
        ("4,2", "block size 2 is not a power-of-two multiple"),
        ("2,6", "block size 6 is not a power-of-two multiple"),
        // Past 2^15 base blocks.
        ("1,65536", "block size 65536 is not a power-of-two multiple"),
        // A block below the base: 24.05 and 24.11 exit on it.
        ("2,4", "fewer than the smallest block size 2"),
    ] {
        for form in ["block", "yaml"] {
            let r = run(dir.path(), GPUS, &["--form", form, "--block-sizes", list]);
            refused(&r, says);
        }
    }
    // Not a list of numbers: clap's own refusal (usage error), naming the flag.
    for list in ["x", "1,a", "1,-2"] {
        let r = run(dir.path(), GPUS, &["--block-sizes", list]);
        assert_eq!(r.code, Some(2), "{list}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{list}");
        assert!(r.stderr.contains("--block-sizes"), "{list}: {}", r.stderr);
    }
    // The tree form has no BlockSizes.
    let r = run(dir.path(), GPUS, &["--form", "tree", "--block-sizes", "1"]);
    refused(&r, "--block-sizes needs --form block or yaml");
}

#[test]
fn a_refused_block_size_writes_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("topology.conf");
    let t = target.display().to_string();
    let r = run(
        dir.path(),
        GPUS,
        &["--form", "block", "--block-sizes", "1,3", "--write", &t],
    );
    refused(&r, "not a power-of-two multiple");
    assert!(!target.exists());
    let r = run(
        dir.path(),
        GPUS,
        &["--form", "block", "--block-sizes", "1,2", "--write", &t],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let text = std::fs::read_to_string(&target).expect("written");
    assert_eq!(block_sizes(&text, "block"), [1, 2]);
}

#[test]
fn cluster_default_marks_exactly_the_chosen_topology() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (flag, want) in [
        (None, "block"),
        (Some("block"), "block"),
        (Some("tree"), "tree"),
        (Some("flat"), "flat"),
    ] {
        let mut args = vec!["--form", "yaml"];
        if let Some(f) = flag {
            args.extend(["--cluster-default", f]);
        }
        let r = run(dir.path(), GPUS, &args);
        assert_eq!(r.code, Some(0), "{flag:?}: {}", r.stderr);
        let all = topology::parse_yaml(&r.stdout).expect("yaml");
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["block", "tree", "flat"], "{flag:?}");
        let defaults: Vec<&str> = all
            .iter()
            .filter(|t| t.cluster_default)
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(defaults, [want], "{flag:?}\n{}", r.stdout);
        assert!(
            all.iter()
                .any(|t| t.name == "flat" && matches!(t.kind, Kind::Flat)),
            "{flag:?}"
        );
    }
    let r = run(
        dir.path(),
        GPUS,
        &["--form", "yaml", "--cluster-default", "mesh"],
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("--cluster-default"), "{}", r.stderr);
}

#[test]
fn unplaced_refuse_names_the_node_and_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("topology.conf");
    let t = target.display().to_string();
    // Not in the AWS data at all (a CPU or login node of another account).
    let login = format!("{GPUS}login1 i-77\n");
    for form in ["tree", "block", "yaml"] {
        for refuse in [&[][..], &["--unplaced", "refuse"]] {
            let mut args = vec!["--form", form, "--write", &t];
            args.extend_from_slice(refuse);
            let r = run(dir.path(), &login, &args);
            refused(&r, "node login1: instance i-77 is not in the aws data");
            assert!(!target.exists(), "{form}");
        }
    }
    // In the data without NetworkNodes (a type without topology, or not running yet).
    let cpu = format!("{GPUS}cpu1 i-9\n");
    let r = run(dir.path(), &cpu, &["--unplaced", "refuse"]);
    refused(
        &r,
        "instance i-9: no NetworkNodes (type without topology, or not running) (node cpu1)",
    );
    // The same nodes isolated: one warning line each, the file made.
    let both = format!("{GPUS}cpu1 i-9\nlogin1 i-77\n");
    let r = run(
        dir.path(),
        &both,
        &["--form", "tree", "--unplaced", "isolate"],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let warned: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(warned.len(), 2, "{}", r.stderr);
    assert!(
        warned[0].starts_with("gpu-affinity: node cpu1 isolated (unplaced): "),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout.contains("SwitchName=unplaced Nodes=cpu1,login1"),
        "{}",
        r.stdout
    );
}
