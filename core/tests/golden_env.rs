//! Golden fabric environments: every catalog machine, and every topology file under
//! ../shared/topologies given the DMI identity of the real instance it was taken from,
//! get one rank per GPU from the strict solver and the environment from
//! `fabric::step_fabric` (built-in profiles, an empty task environment, no vendor
//! topology file on disk). Detection and env are compared with
//! `core/tests/golden-env/*.json`.
//!
//! Regenerate with `GOLDEN_UPDATE=1 cargo nextest run -p gpu-affinity-core --test golden_env`
//! and review the diff against the vendor settings each profile file cites. Independently
//! of the files, every environment is checked here: NCCL_IB_HCA lists exactly the node's
//! fabric devices, UCX_NET_DEVICES exactly the rank's own NICs, and no rank repeats a
//! node-wide key; each file and machine is also written as a fixture tree and read back as
//! the plugin reads a node, which must detect the same and export the same.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::golden::{check_golden, file_stem, shared_topologies, topology_files};
use gpu_affinity::fabric::profiles::Profiles;
use gpu_affinity::fabric::{self, EnvValue, FabricDecision, Origin};
use gpu_affinity::model::{Dmi, Machine, NicKind};
use gpu_affinity::pci::PciAddr;
use gpu_affinity::solver::{Mode, Plan, StepRequest, solve_with_fabric};
use gpu_affinity::{catalog, sources};
use serde_json::{Value, json};

/// Where the plugin would write a generated NCCL topology (the step's temp dir).
/// What `gpu-affinity explain` shows for the plugin's generated file with the default
/// run_dir (the plugin's own path names the job, step and slurmstepd).
const GENERATED_TOPOLOGY: &str = "/run/gpu-affinity/job<JOBID>.<STEPID>.<PID>/nccl-topo.xml";

const AZURE_ASSET_TAG: &str = "7783-7084-3265-9085-8269-3286-77";

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden-env")
}

/// What identity a shared topology file gets: the DMI strings of the real instance it was
/// taken from (PROVENANCE.md names it), its own DMI (hwloc exports carry theirs), or none
/// because it is not a topology at all.
enum Identity {
    Dmi(Dmi),
    Own,
    NotATopology,
}

fn aws(product: &str) -> Identity {
    Identity::Dmi(Dmi {
        sys_vendor: Some("Amazon EC2".into()),
        product_name: Some(product.into()),
        chassis_asset_tag: None,
        board_vendor: Some("Amazon EC2".into()),
    })
}

fn azure() -> Identity {
    Identity::Dmi(Dmi {
        sys_vendor: Some("Microsoft Corporation".into()),
        product_name: Some("Virtual Machine".into()),
        chassis_asset_tag: Some(AZURE_ASSET_TAG.into()),
        board_vendor: Some("Microsoft Corporation".into()),
    })
}

fn oci() -> Identity {
    // The derived catalog gives only the asset tag for OCI bare metal.
    Identity::Dmi(Dmi {
        chassis_asset_tag: Some("OracleCloud.com".into()),
        ..Dmi::default()
    })
}

/// The identity of every known shared file, and the instance family detection must name
/// from it (PROVENANCE.md says which instance each file comes from); a file not listed
/// here fails the test, so a new file gets its real instance's DMI written down before it
/// gets a golden.
fn identity(rel: &str) -> Option<(Identity, Option<&'static str>)> {
    Some(match rel {
        "aws-ofi-nccl/p4d-24xl-topo.xml" => (aws("p4d.24xlarge"), Some("p4d")),
        "aws-ofi-nccl/g5.48xl-topo.xml" => (aws("g5.48xlarge"), Some("g5")),
        // ND H100 v5 and ND H200 v5 share this file: the family, not the instance.
        "azhpc-images/ndv5-topo.xml" => (azure(), Some("ndv5")),
        // ND40rs_v2 and the NC A100 v4 sizes have no profile of their own.
        "azhpc-images/ndv2-topo.xml"
        | "azhpc-images/ncv4-topo.xml"
        | "azurehpc/nc48v4-topo.xml" => (azure(), None),
        "azhpc-images/ncv4-graph.xml" => (Identity::NotATopology, None),
        "oci/oci-hpc-oke.BM.GPU.A100-v2.8.xml" | "oci/oci-hpc.topo-flattened-b4.xml" => {
            (oci(), Some("oci-a100-v2"))
        }
        "oci/oci-hpc.H100-topology-kubernetes.xml" | "oci/oci-hpc.H100-topology.xml" => {
            (oci(), Some("oci-h100"))
        }
        "oci/oci-hpc.topo-flattened.xml" => (oci(), Some("oci-gpu4")),
        "hwloc/32em64t-2n8c2t-pci-normalio.xml" | "hwloc/power8gpudistances.xml" => {
            (Identity::Own, None)
        }
        _ => return None,
    })
}

/// One rank per GPU in Slurm order, every CPU of the machine, strict, over the fabric the
/// profile keeps (as the plugin and `explain` solve).
fn strict_plan(machine: &Machine, profiles: &Profiles) -> Plan {
    let gpus: Vec<PciAddr> = machine
        .gpus_in_slurm_order()
        .iter()
        .map(|g| g.pci)
        .collect();
    let request = StepRequest {
        tasks: gpus.len().max(1) as u32,
        gpus,
        cpus: machine.cpus(),
        gpus_per_task: None,
        mode: Mode::Strict,
    };
    solve_with_fabric(machine, &request, &fabric::fabric_nics(machine, profiles))
}

fn step(machine: &Machine, plan: &Plan, profiles: &Profiles) -> FabricDecision {
    common::step::fabric_of_clean_step(machine, plan, profiles, GENERATED_TOPOLOGY)
}

/// `value` with where it came from, in a form a reviewer reads at a glance.
fn shown(v: &EnvValue) -> Value {
    let origin = match &v.origin {
        Origin::Profile {
            profile, verified, ..
        } => format!(
            "profile {profile}{}",
            if *verified { "" } else { " (unverified)" }
        ),
        Origin::UserSet => "user_set".to_string(),
        Origin::Generated { reason } => format!("generated: {reason}"),
    };
    json!({ "value": v.value, "origin": origin })
}

fn golden_value(source: &str, machine: &Machine, plan: &Plan, f: &FabricDecision) -> Value {
    let d = &f.detection;
    let node: BTreeMap<&str, Value> = f
        .env
        .node
        .iter()
        .map(|(k, v)| (k.as_str(), shown(v)))
        .collect();
    let ranks: Vec<BTreeMap<&str, Value>> = f
        .env
        .ranks
        .iter()
        .map(|r| r.iter().map(|(k, v)| (k.as_str(), shown(v))).collect())
        .collect();
    // The step's fabric (the plan's, as the profile narrowed it) and, for review, the
    // NICs the machine's own rule counts as fabric but the profile leaves out.
    let shown_name =
        |pci: PciAddr, name: Option<&str>| name.map_or(pci.to_string(), str::to_string);
    let fabric_devices: Vec<String> = plan
        .fabric_nics
        .iter()
        .map(|r| shown_name(r.pci, r.name.as_deref()))
        .collect();
    let left_out: Vec<String> = machine
        .fabric_nics()
        .iter()
        .filter(|n| {
            !plan
                .fabric_nics
                .iter()
                .any(|r| r.pci == n.pci && r.name.as_deref() == n.name())
        })
        .map(|n| shown_name(n.pci, n.name()))
        .collect();
    let mut value = json!({
        "source": source,
        "dmi": machine.dmi,
        "detection": {
            "vendor": d.vendor,
            "instance": d.instance,
            "family": d.family,
            "profile": d.profile,
            "evidence": d.evidence,
        },
        "fabric_devices": fabric_devices,
        "plan_refused": plan.refused(),
        "env": { "node": node, "ranks": ranks, "notes": f.env.notes },
        "topology": f.topology,
    });
    if !left_out.is_empty() {
        value["left_out_by_profile"] = json!(left_out);
    }
    value
}

fn names_of(list: &str) -> BTreeSet<String> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The node's fabric devices an HCA list must name: the RDMA names of the plan's fabric
/// NICs. The Azure ND profiles keep InfiniBand only (the Ethernet VF mlx5_an0 carries
/// the VM's TCP traffic, not NCCL's), which is the one narrowing allowed.
fn fabric_rdma_names(machine: &Machine, plan: &Plan, vendor: fabric::Vendor) -> BTreeSet<String> {
    plan.fabric_nics
        .iter()
        .filter(|r| {
            vendor != fabric::Vendor::Azure
                || machine
                    .nics
                    .iter()
                    .find(|n| n.pci == r.pci)
                    .is_some_and(|n| n.kind == NicKind::Infiniband)
        })
        .filter_map(|r| {
            machine
                .nics
                .iter()
                .find(|n| n.pci == r.pci && (r.name.is_none() || n.name() == r.name.as_deref()))
                .and_then(|n| n.rdma.clone())
        })
        .collect()
}

/// Behaviour every environment must have, whatever the golden says.
fn check_env(
    source: &str,
    machine: &Machine,
    plan: &Plan,
    f: &FabricDecision,
    profiles: &Profiles,
) -> Vec<String> {
    let mut bad = Vec::new();
    let env = &f.env;
    let profile_sets = |key: &str| {
        profiles
            .get(&f.detection.profile)
            .is_some_and(|p| p.vars.iter().any(|v| v.key == key))
    };
    let fabric_names = fabric_rdma_names(machine, plan, f.detection.vendor);
    // Left unset only when the node's fabric devices have no RDMA names (vendor files).
    if profile_sets("NCCL_IB_HCA")
        && !fabric_names.is_empty()
        && !env.node.contains_key("NCCL_IB_HCA")
    {
        bad.push(format!(
            "{source}: NCCL_IB_HCA unset though the fabric devices are {fabric_names:?}"
        ));
    }
    if env.ranks.len() != plan.ranks.len() {
        bad.push(format!(
            "{source}: {} rank envs for {} ranks",
            env.ranks.len(),
            plan.ranks.len()
        ));
    }
    if let Some(hca) = env.node.get("NCCL_IB_HCA") {
        // "=" asks NCCL for exact names; "^" would exclude, which a profile never does.
        let list = hca.value.strip_prefix('=').unwrap_or(&hca.value);
        if hca.value.starts_with('^') || names_of(list) != fabric_names {
            bad.push(format!(
                "{source}: NCCL_IB_HCA={} is not the node's fabric devices {fabric_names:?}",
                hca.value
            ));
        }
    }
    // The solver and the env see one fabric: no rank gets a NIC the profile leaves out.
    let profile = profiles.get(&f.detection.profile);
    for rank in &plan.ranks {
        for r in &rank.nics {
            let nic = machine
                .nics
                .iter()
                .find(|n| n.pci == r.pci && (r.name.is_none() || n.name() == r.name.as_deref()));
            let kept = nic.is_some_and(|n| profile.is_none_or(|p| p.fabric.keeps(n)));
            if !plan.fabric_nics.contains(r) || !kept {
                bad.push(format!(
                    "{source}: rank {} got NIC {} {:?}, not in the profile's fabric",
                    rank.rank, r.pci, r.name
                ));
            }
        }
    }
    for (rank, vars) in plan.ranks.iter().zip(&env.ranks) {
        for key in vars.keys() {
            if env.node.contains_key(key) {
                bad.push(format!(
                    "{source}: rank {} repeats node-wide {key}",
                    rank.rank
                ));
            }
        }
        if let Some(ucx) = vars.get("UCX_NET_DEVICES") {
            let want: BTreeSet<String> = rank
                .nics
                .iter()
                .filter_map(|r| {
                    machine
                        .nics
                        .iter()
                        .find(|n| n.pci == r.pci && n.name() == r.name.as_deref())
                })
                .filter_map(|n| {
                    let rdma = n.rdma.as_ref()?;
                    let port = n.ports.first().map_or(1, |p| p.number);
                    Some(format!("{rdma}:{port}"))
                })
                .collect();
            if names_of(&ucx.value) != want {
                bad.push(format!(
                    "{source}: rank {} UCX_NET_DEVICES={} but its NICs are {want:?}",
                    rank.rank, ucx.value
                ));
            }
        }
    }
    // A generated topology is produced exactly when NCCL_TOPO_FILE points at it.
    let points_at_generated = env
        .node
        .get("NCCL_TOPO_FILE")
        .is_some_and(|v| v.value == GENERATED_TOPOLOGY);
    if points_at_generated != f.generated_topology.is_some() {
        bad.push(format!(
            "{source}: NCCL_TOPO_FILE and the generated topology disagree"
        ));
    }
    // aws-ofi-nccl decides the protocol from what it probes; never NCCL_PROTO on EFA.
    if f.detection.vendor == fabric::Vendor::Aws && env.node.contains_key("NCCL_PROTO") {
        bad.push(format!("{source}: NCCL_PROTO exported on AWS"));
    }
    bad
}

/// The machine of a shared file with its real instance's identity, or `None` for a file
/// that is not a topology (checked to be refused as such).
fn shared_machine(rel: &str, path: &Path) -> Option<Machine> {
    let (id, _) = identity(rel).unwrap_or_else(|| {
        panic!(
            "{rel}: unknown shared topology file; add the DMI identity of its real instance \
             to identity() in core/tests/golden_env.rs"
        )
    });
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let parsed = sources::parse_machine_xml(&text);
    match id {
        Identity::NotATopology => {
            assert!(
                matches!(parsed, Err(sources::MachineXmlError::NcclGraph { .. })),
                "{rel}: expected to be refused as an NCCL graph file"
            );
            None
        }
        Identity::Own => Some(parsed.unwrap_or_else(|e| panic!("{rel}: {e}"))),
        Identity::Dmi(dmi) => {
            let mut m = parsed.unwrap_or_else(|e| panic!("{rel}: {e}"));
            m.dmi = dmi;
            Some(m)
        }
    }
}

/// The keys a golden note says were left unset on the node for lack of a fact ("NCCL_IB_HCA
/// not set on this node: {fabric_rdma_names} is empty").
fn unset_for_lack_of_facts(notes: &[String]) -> BTreeSet<&str> {
    notes
        .iter()
        .filter_map(|n| n.split_once(" not set on this node: ").map(|(k, _)| k))
        .collect()
}

/// The file as a fixture tree (what `gpu-affinity fixture --from` writes, read back as the
/// plugin reads a node) must be detected the same and export the same node-wide keys with
/// the same values. The tree may add only keys the file left unset for lack of a name:
/// the fixture names every RDMA device the way the kernel would.
fn check_fixture_round_trip(
    rel: &str,
    machine: &Machine,
    golden: &FabricDecision,
    profiles: &Profiles,
) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("node");
    sources::fixture::write_fixture(machine, &root)
        .unwrap_or_else(|e| panic!("{rel}: writing the fixture: {e}"));
    let tree = sources::sysfs::read_machine(&root)
        .unwrap_or_else(|e| panic!("{rel}: reading the fixture back: {e}"));
    let plan = strict_plan(&tree, profiles);
    let f = step(&tree, &plan, profiles);
    let mut bad = check_env(&format!("{rel} (fixture)"), &tree, &plan, &f, profiles);
    let (a, b) = (&golden.detection, &f.detection);
    if (a.vendor, &a.instance, &a.family, &a.profile)
        != (b.vendor, &b.instance, &b.family, &b.profile)
    {
        bad.push(format!(
            "{rel}: as a fixture tree detected {:?} {:?} {:?} {}, from the file {:?} {:?} {:?} {}",
            b.vendor, b.instance, b.family, b.profile, a.vendor, a.instance, a.family, a.profile
        ));
    }
    let may_add = unset_for_lack_of_facts(&golden.env.notes);
    for (key, value) in &f.env.node {
        match golden.env.node.get(key) {
            Some(want) if want.value != value.value => bad.push(format!(
                "{rel}: as a fixture tree {key}={}, from the file {}",
                value.value, want.value
            )),
            None if !may_add.contains(key.as_str()) => {
                bad.push(format!("{rel}: as a fixture tree also exports {key}"))
            }
            _ => {}
        }
    }
    for key in golden.env.node.keys() {
        if !f.env.node.contains_key(key) {
            bad.push(format!("{rel}: as a fixture tree lacks {key}"));
        }
    }
    bad
}

#[test]
fn shared_topology_files_match_their_golden_env() {
    let files = topology_files();
    assert!(
        files.len() >= 10,
        "expected the shared topology files under {}",
        shared_topologies().display()
    );
    let profiles = Profiles::builtin();
    let mut bad = Vec::new();
    for (rel, path) in files {
        let Some(machine) = shared_machine(&rel, &path) else {
            continue;
        };
        let plan = strict_plan(&machine, &profiles);
        let f = step(&machine, &plan, &profiles);
        bad.extend(check_env(&rel, &machine, &plan, &f, &profiles));
        let family = identity(&rel).and_then(|(_, family)| family);
        if f.detection.family.as_deref() != family {
            bad.push(format!(
                "{rel}: detected family {:?}, the file is from a {family:?} instance",
                f.detection.family
            ));
        }
        bad.extend(check_fixture_round_trip(&rel, &machine, &f, &profiles));
        let value = golden_value(&rel, &machine, &plan, &f);
        bad.extend(check_golden(
            &golden_dir(),
            &format!("topology-{}", file_stem(&rel)),
            &value,
        ));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The vendor's NCCL_IB_HCA for an instance, as the derived catalog records it
/// (`fabric_nic.nccl_ib_hca`, e.g. OCI's nccl.conf for BM.GPU.H200.8).
fn vendor_hca_list(instance: &str) -> Option<String> {
    let path = shared_topologies().join("derived/instance-fabric-catalog.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let dc: Value = serde_json::from_str(&text).expect("derived catalog is JSON");
    dc["instances"].as_array()?.iter().find(|e| {
        e["instance"]
            .as_str()
            .is_some_and(|i| i.split(" / ").any(|n| n == instance))
    })?["fabric_nic"]["nccl_ib_hca"]
        .as_str()
        .map(str::to_string)
}

#[test]
fn catalog_machines_match_their_golden_env() {
    let profiles = Profiles::builtin();
    let mut bad = Vec::new();
    for name in catalog::names() {
        let machine = catalog::machine(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let plan = strict_plan(&machine, &profiles);
        let f = step(&machine, &plan, &profiles);
        bad.extend(check_env(name, &machine, &plan, &f, &profiles));
        // Every catalog machine is a known instance: it must be recognised by name.
        if f.detection.instance.as_deref() != Some(name) {
            bad.push(format!(
                "{name}: detected instance {:?}",
                f.detection.instance
            ));
        }
        // Where the vendor publishes its HCA list for the instance, ours is the same list.
        if let Some(want) = vendor_hca_list(name)
            && f.env.node.get("NCCL_IB_HCA").map(|v| v.value.as_str()) != Some(want.as_str())
        {
            bad.push(format!(
                "{name}: NCCL_IB_HCA {:?}, the vendor's is {want}",
                f.env.node.get("NCCL_IB_HCA").map(|v| &v.value)
            ));
        }
        bad.extend(check_fixture_round_trip(name, &machine, &f, &profiles));
        let value = golden_value(name, &machine, &plan, &f);
        bad.extend(check_golden(
            &golden_dir(),
            &format!("catalog-{}", file_stem(name)),
            &value,
        ));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
