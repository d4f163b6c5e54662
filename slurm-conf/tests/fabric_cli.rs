//! The fabric part of `gpu-affinity explain`, run as an admin runs it: a fixture tree built
//! with `gpu-affinity fixture` from a real topology file and the DMI strings of the
//! instance it came from, then `explain --sysfs-root DIR --json`. Once per vendor, the
//! detected vendor, instance and node-wide keys must equal the golden env the core test
//! `golden_env` keeps for that file (core/tests/golden-env/).

mod common;

use std::path::Path;
use std::process::Output;

use gpu_affinity_test_support::{shared_topologies, without_fabric_env};
use serde_json::Value;

const AZURE_ASSET_TAG: &str = "7783-7084-3265-9085-8269-3286-77";

fn golden(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/golden-env")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run the core golden_env test)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The command with a clean fabric environment plus `user_env` (the user's own settings).
fn gpu_affinity(args: &[&str], user_env: &[(&str, &str)]) -> Output {
    let mut cmd = common::command();
    without_fabric_env(&mut cmd).env_remove("LD_LIBRARY_PATH");
    cmd.envs(user_env.iter().copied());
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
    json_of(&explain_run(source, &[], user_env))
}

/// Write the fixture tree and run `explain --json` with `extra` arguments on it.
fn explain_run(source: &Source<'_>, extra: &[&str], user_env: &[(&str, &str)]) -> Output {
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
    let mut explain = vec!["explain", "--sysfs-root", out_arg.as_str(), "--json"];
    explain.extend(extra);
    gpu_affinity(&explain, user_env)
}

fn json_of(out: &Output) -> Value {
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

/// The admin config of the force tests.
const FORCE_IFNAME: &str = "[fabric]\nforce = [\"NCCL_SOCKET_IFNAME\"]\n";

/// An admin file in a temp dir, mode `mode`; returns its path and owner uid (the test's
/// own: root in CI, passed to explain's hidden `--trusted-owner` so the check is the
/// real one for any user).
fn admin_file(dir: &Path, name: &str, text: &str, mode: u32) -> (String, String) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write admin file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    let uid = std::fs::metadata(&path).expect("metadata").uid();
    (path.to_string_lossy().into_owned(), uid.to_string())
}

/// `[fabric] force` in the admin config: explain shows the profile's value even where
/// the user set their own, exactly as the plugin exports it; without the config the
/// user's value stays.
#[test]
fn a_forced_variable_shows_the_profile_value_over_the_users() {
    let source = Source::Machine("BM.GPU.H100.8");
    let key = "NCCL_SOCKET_IFNAME";
    let user = [(key, "user-choice0")];
    let conf = tempfile::tempdir().expect("tempdir");
    let (config, uid) = admin_file(conf.path(), "config.toml", FORCE_IFNAME, 0o644);
    let with_config = ["--config", config.as_str(), "--trusted-owner", uid.as_str()];

    let plain = explain_tree(&source, &[]);
    let profile_value = &plain["env"]["node"][key]["value"];
    assert!(profile_value.is_string(), "the OCI profile sets {key}");
    assert_ne!(profile_value, "user-choice0");

    let unforced = explain_tree(&source, &user);
    assert_eq!(unforced["env"]["node"][key]["origin"], "user_set");

    let forced = json_of(&explain_run(&source, &with_config, &user));
    let value = &forced["env"]["node"][key];
    assert_eq!(&value["value"], profile_value, "{value}");
    assert_eq!(value["origin"], "profile", "{value}");
    assert_eq!(value["forced"], true, "{value}");
    // Nothing else changes.
    for (other, v) in forced["env"]["node"].as_object().expect("node") {
        if other != key {
            assert_eq!(v, &plain["env"]["node"][other], "{other}");
        }
    }
}

/// The config's `profiles_dir` is where explain takes admin profiles from, `--profiles-dir`
/// wins over it, and both are held to the plugin's ownership rule.
#[test]
fn the_configs_profiles_dir_is_used_and_checked() {
    use std::os::unix::fs::PermissionsExt;
    let source = Source::Machine("BM.GPU.H100.8");
    let tmp = tempfile::tempdir().expect("tempdir");
    let site = tmp.path().join("profiles.d");
    std::fs::create_dir(&site).expect("mkdir");
    std::fs::set_permissions(&site, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (_, uid) = admin_file(
        &site,
        "site-oci.toml",
        "description = \"site\"\npriority = 100\n[match]\nvendor = \"oci\"\n\n[[env]]\nkey = \"NCCL_IB_TC\"\nvalue = \"106\"\nsource = \"site network team\"\n",
        0o644,
    );
    let (config, _) = admin_file(
        tmp.path(),
        "config.toml",
        &format!("[fabric]\nprofiles_dir = \"{}\"\n", site.display()),
        0o644,
    );
    let args = ["--config", config.as_str(), "--trusted-owner", uid.as_str()];
    let json = json_of(&explain_run(&source, &args, &[]));
    assert_eq!(json["profile"], "site-oci");
    assert_eq!(json["env"]["node"]["NCCL_IB_TC"]["value"], "106");

    // The flag wins over the config: an empty directory means built-ins only.
    let empty = tmp.path().join("empty.d");
    std::fs::create_dir(&empty).expect("mkdir");
    std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let empty_arg = empty.to_string_lossy().into_owned();
    let mut flag = args.to_vec();
    flag.extend(["--profiles-dir", empty_arg.as_str()]);
    assert_eq!(
        json_of(&explain_run(&source, &flag, &[]))["profile"],
        "oci-h100"
    );

    // A profiles directory others can write is refused like in the plugin.
    std::fs::set_permissions(&site, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = explain_run(&source, &args, &[]);
    refused(&out, "writable by group or others (mode 0777)");
}

/// A config anyone could change, or one with a bad key, is one line and exit 1.
#[test]
fn an_untrusted_or_bad_config_is_refused() {
    let source = Source::Machine("BM.GPU.H100.8");
    let conf = tempfile::tempdir().expect("tempdir");
    let (config, uid) = admin_file(conf.path(), "config.toml", FORCE_IFNAME, 0o666);
    let args = ["--config", config.as_str(), "--trusted-owner", uid.as_str()];
    refused(
        &explain_run(&source, &args, &[]),
        &format!("config {config} is writable by group or others (mode 0666); refusing it"),
    );
    // Not the owner the plugin demands.
    let (config, uid) = admin_file(conf.path(), "config.toml", "", 0o644);
    let other = (uid.parse::<u32>().expect("uid") + 1).to_string();
    let args = [
        "--config",
        config.as_str(),
        "--trusted-owner",
        other.as_str(),
    ];
    refused(&explain_run(&source, &args, &[]), "not root; refusing it");

    let (config, _) = admin_file(conf.path(), "config.toml", "[fabric]\nforced = []\n", 0o644);
    let args = ["--config", config.as_str(), "--trusted-owner", uid.as_str()];
    refused(
        &explain_run(&source, &args, &[]),
        &format!("config {config}:2: unknown key 'forced' in [fabric]"),
    );
    let missing = conf.path().join("absent.toml");
    let missing = missing.to_string_lossy();
    refused(
        &explain_run(&source, &["--config", &missing], &[]),
        &format!("config {missing}: "),
    );
}

fn refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("gpu-affinity: ") && stderr.contains(needle),
        "{needle}: {stderr}"
    );
}

/// The vendor NCCL topology file is looked up under `--sysfs-root`, as the plugin looks
/// under `sysfs_root=`: a tree carrying a fitting /opt/microsoft/ndv5-topo.xml is told to
/// use it; one carrying a file with swapped NUMA masks, or one others can write, is
/// refused and gets a generated one.
#[test]
fn the_vendor_topology_file_is_read_under_the_sysfs_root() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("node");
    let out = gpu_affinity(
        &[
            "fixture",
            "--machine",
            "Standard_ND96isr_H100_v5",
            "--out",
            &tree.to_string_lossy(),
        ],
        &[],
    );
    ok(&out, "fixture");
    let machine = gpu_affinity::catalog::machine("Standard_ND96isr_H100_v5").expect("catalog");
    let vendor_dir = tree.join("opt/microsoft");
    std::fs::create_dir_all(&vendor_dir).expect("mkdir");
    let vendor_file = vendor_dir.join("ndv5-topo.xml");
    std::fs::write(
        &vendor_file,
        gpu_affinity::fabric::topo_xml::render(&machine, &machine.fabric_nics()),
    )
    .expect("write");

    // The vendor file is a root-side input: it must be the trusted owner's (this test's).
    let uid = std::fs::metadata(&vendor_file)
        .expect("stat")
        .uid()
        .to_string();
    let explain = || {
        let out = gpu_affinity(
            &[
                "explain",
                "--sysfs-root",
                &tree.to_string_lossy(),
                "--json",
                "--trusted-owner",
                &uid,
            ],
            &[],
        );
        ok(&out, "explain");
        json_of(&out)
    };
    let json = explain();
    assert_eq!(json["topology"]["decision"], "use", "{}", json["topology"]);
    assert_eq!(
        json["env"]["node"]["NCCL_TOPO_FILE"]["value"],
        "/opt/microsoft/ndv5-topo.xml"
    );

    // The same file with the two NUMA nodes' CPU masks swapped (the pre-2025 image bug).
    let mut swapped = machine.clone();
    let (a, b) = (
        swapped.numa_nodes[0].cpus.clone(),
        swapped.numa_nodes[1].cpus.clone(),
    );
    swapped.numa_nodes[0].cpus = b;
    swapped.numa_nodes[1].cpus = a;
    std::fs::write(
        &vendor_file,
        gpu_affinity::fabric::topo_xml::render(&swapped, &swapped.fabric_nics()),
    )
    .expect("write");
    let json = explain();
    assert_eq!(
        json["topology"]["decision"], "refuse",
        "{}",
        json["topology"]
    );
    assert_ne!(
        json["env"]["node"]["NCCL_TOPO_FILE"]["value"],
        "/opt/microsoft/ndv5-topo.xml"
    );

    // A fitting file that others can write is not used either: the plugin's trust rule.
    std::fs::write(
        &vendor_file,
        gpu_affinity::fabric::topo_xml::render(&machine, &machine.fabric_nics()),
    )
    .expect("write");
    std::fs::set_permissions(&vendor_file, std::fs::Permissions::from_mode(0o664)).expect("chmod");
    let json = explain();
    assert_ne!(json["topology"]["decision"], "use", "{}", json["topology"]);
    assert_ne!(
        json["env"]["node"]["NCCL_TOPO_FILE"]["value"],
        "/opt/microsoft/ndv5-topo.xml"
    );
}
