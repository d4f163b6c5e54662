//! The fabric part of `gpu-affinity explain`, run as an admin runs it: a fixture tree built
//! with `gpu-affinity fixture` from a real topology file and the DMI strings of the
//! instance it came from, then `explain --sysfs-root DIR --json`. Once per vendor, the
//! detected vendor, instance and node-wide keys must equal the golden env the core test
//! `golden_env` keeps for that file (core/tests/golden-env/).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const AZURE_ASSET_TAG: &str = "7783-7084-3265-9085-8269-3286-77";

fn shared_topologies() -> PathBuf {
    match std::env::var_os("GPU_AFFINITY_SHARED").map(PathBuf::from) {
        Some(shared) if shared.join("topologies").is_dir() => shared.join("topologies"),
        Some(dir) => dir,
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/topologies"),
    }
}

fn golden(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/golden-env")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run the core golden_env test)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The command with a clean fabric environment: the NCCL/UCX/libfabric variables of
/// whoever runs the tests would otherwise count as the user's own and change the output.
fn gpu_affinity(args: &[&str], user_env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpu-affinity"));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if ["NCCL_", "UCX_", "FI_"].iter().any(|p| key.starts_with(p)) {
            cmd.env_remove(key.as_ref());
        }
    }
    cmd.env_remove("LD_LIBRARY_PATH");
    for (key, value) in user_env {
        cmd.env(key, value);
    }
    cmd.args(args).output().expect("run gpu-affinity")
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How to build a fixture: from a shared file with DMI strings, or a catalog machine.
enum Source<'a> {
    File { rel: &'a str, dmi: &'a [&'a str] },
    Machine(&'a str),
}

/// Write the fixture tree and return `explain --json` on it.
fn explain_tree(source: &Source<'_>, user_env: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("node");
    let out_arg = out_dir.to_string_lossy().into_owned();
    let file;
    let mut args = vec!["fixture"];
    match source {
        Source::File { rel, dmi } => {
            file = shared_topologies().join(rel).to_string_lossy().into_owned();
            args.extend(["--from", file.as_str()]);
            args.extend(dmi.iter().copied());
        }
        Source::Machine(name) => args.extend(["--machine", name]),
    }
    args.extend(["--out", out_arg.as_str()]);
    ok(&gpu_affinity(&args, &[]), "fixture");
    let out = gpu_affinity(
        &["explain", "--sysfs-root", out_arg.as_str(), "--json"],
        user_env,
    );
    // Exit 2 (strict refusal) still prints the JSON; only a crash or bad input is wrong.
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "explain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "explain --json printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Keys the golden says were left unset for lack of a name (the file names no RDMA
/// device; the fixture names them as the kernel would, so the tree may set them).
fn unset_for_lack_of_facts(golden: &Value) -> Vec<String> {
    golden["env"]["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str()?.split_once(" not set on this node: "))
        .map(|(k, _)| k.to_string())
        .collect()
}

fn check_against_golden(what: &str, json: &Value, golden: &Value) {
    assert_eq!(
        json["vendor"], golden["detection"]["vendor"],
        "{what}: vendor"
    );
    assert_eq!(
        json["instance"], golden["detection"]["instance"],
        "{what}: instance"
    );
    assert_eq!(
        json["profile"], golden["detection"]["profile"],
        "{what}: profile"
    );
    let node = json["env"]["node"].as_object().expect("env.node");
    let want = golden["env"]["node"].as_object().expect("golden env.node");
    let extra_ok = unset_for_lack_of_facts(golden);
    for (key, value) in want {
        let have = node
            .get(key)
            .unwrap_or_else(|| panic!("{what}: explain lacks {key}"));
        // explain looks for the vendor topology file on this machine's own disk; on an
        // image that has it (an Azure ND build host) the decision differs by design.
        if key == "NCCL_TOPO_FILE" && json["topology"] != golden["topology"] {
            eprintln!("{what}: NCCL_TOPO_FILE not compared: {}", json["topology"]);
            continue;
        }
        assert_eq!(have["value"], value["value"], "{what}: {key}");
        assert_ne!(have["origin"], "user_set", "{what}: {key}");
    }
    for key in node.keys() {
        assert!(
            want.contains_key(key) || extra_ok.contains(key),
            "{what}: explain also exports {key}"
        );
    }
    assert_eq!(
        json["env"]["ranks"].as_array().map(Vec::len),
        golden["env"]["ranks"].as_array().map(Vec::len),
        "{what}: one env per rank"
    );
    // The node-wide HCA list is the node's fabric devices, never a per-rank list.
    if let Some(hca) = node.get("NCCL_IB_HCA") {
        let names: Vec<&str> = json["fabric_nics"]
            .as_array()
            .expect("fabric_nics")
            .iter()
            .filter_map(|n| n["name"].as_str())
            .collect();
        let list = hca["value"].as_str().expect("value");
        let mut listed: Vec<&str> = list.trim_start_matches('=').split(',').collect();
        let mut names = names;
        listed.sort_unstable();
        names.sort_unstable();
        assert_eq!(listed, names, "{what}: NCCL_IB_HCA is the fabric devices");
    }
}

#[test]
fn explain_on_fixture_trees_matches_the_golden_env_per_vendor() {
    let aws = [
        "--dmi-vendor",
        "Amazon EC2",
        "--dmi-product",
        "p4d.24xlarge",
    ];
    let azure = [
        "--dmi-vendor",
        "Microsoft Corporation",
        "--dmi-product",
        "Virtual Machine",
        "--dmi-asset-tag",
        AZURE_ASSET_TAG,
    ];
    let oci = ["--dmi-asset-tag", "OracleCloud.com"];
    let cases = [
        (
            Source::File {
                rel: "aws-ofi-nccl/p4d-24xl-topo.xml",
                dmi: &aws,
            },
            "topology-aws-ofi-nccl_p4d-24xl-topo.xml",
        ),
        (
            Source::File {
                rel: "azhpc-images/ndv5-topo.xml",
                dmi: &azure,
            },
            "topology-azhpc-images_ndv5-topo.xml",
        ),
        (
            Source::File {
                rel: "oci/oci-hpc.H100-topology.xml",
                dmi: &oci,
            },
            "topology-oci_oci-hpc.H100-topology.xml",
        ),
        // Google publishes no topology file for A3 (PROVENANCE.md, known gaps): the
        // catalog machine stands in, DMI included.
        (Source::Machine("a3-highgpu-8g"), "catalog-a3-highgpu-8g"),
    ];
    for (source, name) in &cases {
        let json = explain_tree(source, &[]);
        check_against_golden(name, &json, &golden(name));
    }
}

/// A user's own setting wins: explain shows it as user-set with the user's value, on
/// every vendor whose profile sets it.
#[test]
fn a_users_own_setting_shows_as_user_set() {
    let cases = [
        (Source::Machine("BM.GPU.H100.8"), "NCCL_SOCKET_IFNAME"),
        (
            Source::Machine("Standard_ND96isr_H100_v5"),
            "NCCL_SOCKET_IFNAME",
        ),
        (Source::Machine("a3-highgpu-8g"), "NCCL_SOCKET_IFNAME"),
        // AWS profiles leave the socket interface to aws-ofi-nccl; the provider is theirs.
        (Source::Machine("p5.48xlarge"), "FI_PROVIDER"),
    ];
    for (source, key) in &cases {
        let Source::Machine(machine) = source else {
            unreachable!("machines only")
        };
        let plain = explain_tree(source, &[]);
        assert_eq!(
            plain["env"]["node"][key]["origin"], "profile",
            "{machine}: the profile sets {key}"
        );
        let json = explain_tree(source, &[(key, "user-choice0")]);
        let value = &json["env"]["node"][key];
        assert_eq!(value["value"], "user-choice0", "{machine}: {key}: {value}");
        assert_eq!(value["origin"], "user_set", "{machine}: {key}: {value}");
        // Everything else is still the profile's.
        for (other, v) in json["env"]["node"].as_object().expect("node") {
            if other != key {
                assert_eq!(v, &plain["env"]["node"][other], "{machine}: {other}");
            }
        }
    }
}
