use std::path::PathBuf;

use super::*;
use crate::catalog;
use crate::health::parse::mounts;
use crate::slurm::slurm_conf;
use crate::slurm::topology::parse_conf;

fn no_slurm() -> Slurm {
    Slurm {
        conf_path: PathBuf::from("/etc/slurm/slurm.conf"),
        conf_real_path: None,
        conf: Ok(None),
        topology: Ok(None),
        node: None,
        switch_level: 0,
    }
}

fn run(machine: &Machine, workload: Workload, slurm: Slurm, storage: Storage<'_>) -> Report {
    let profiles = Profiles::builtin();
    let none = |_: &str| None;
    audit(&Inputs {
        workload,
        machine,
        profiles: &profiles,
        forced: &[],
        vendor_topology: &none,
        storage,
        slurm,
    })
}

fn status<'r>(report: &'r Report, id: &str) -> &'r Finding {
    report
        .findings
        .iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("no {id} in {report:?}"))
}

const NO_STORAGE: Storage<'static> = Storage {
    configured: &[],
    mounts: None,
};

#[test]
fn the_weighting_follows_the_bottleneck_table() {
    use Status::{Fail, Info, Warn};
    assert_eq!(Workload::Pretrain.weight(Area::Fabric), Fail);
    assert_eq!(Workload::Finetune.weight(Area::Fabric), Warn);
    assert_eq!(Workload::Inference.weight(Area::Fabric), Info);
    for w in [Workload::Pretrain, Workload::Finetune, Workload::Inference] {
        assert_eq!(w.weight(Area::Numa), Fail, "{w:?}");
        assert_eq!(Workload::parse(w.as_str()), Some(w));
    }
    assert_eq!(Workload::Pretrain.weight(Area::Storage), Fail);
    assert_eq!(Workload::Inference.weight(Area::Storage), Warn);
    assert_eq!(Status::Fail.lowered(), Warn);
    assert_eq!(Status::Warn.lowered(), Info);
    assert_eq!(Workload::parse("training"), None);
}

#[test]
fn a_node_without_fabric_fails_pretrain_and_is_noted_for_inference() {
    let mut m = catalog::machine("p5.48xlarge").expect("catalog");
    m.nics.clear();
    let pre = run(&m, Workload::Pretrain, no_slurm(), NO_STORAGE);
    assert_eq!(status(&pre, "fabric.nics").status, Status::Fail);
    assert_eq!(pre.worst(), Status::Fail);
    let inf = run(&m, Workload::Inference, no_slurm(), NO_STORAGE);
    assert_eq!(status(&inf, "fabric.nics").status, Status::Info);
    assert_eq!(status(&inf, "plan.gpu_numa").status, Status::Pass);
}

#[test]
fn a_nic_moved_off_its_gpus_numa_node_fails_both_alignment_checks() {
    let mut m = catalog::machine("standard_nd96isr_h100_v5").expect("catalog");
    let aligned = run(&m, Workload::Pretrain, no_slurm(), NO_STORAGE);
    assert_eq!(status(&aligned, "fabric.numa").status, Status::Pass);
    assert_eq!(status(&aligned, "plan.gpu_nic").status, Status::Pass);
    // Every fabric NIC onto NUMA node 0: node 1's GPUs are left without one.
    let nics: Vec<_> = m.fabric_nics().iter().map(|n| n.pci).collect();
    for d in m.pci.iter_mut().filter(|d| nics.contains(&d.addr)) {
        d.numa_node = Some(0);
    }
    let r = run(&m, Workload::Pretrain, no_slurm(), NO_STORAGE);
    let numa = status(&r, "fabric.numa");
    assert_eq!(numa.status, Status::Fail);
    assert!(
        numa.evidence
            .iter()
            .any(|e| e.starts_with("NUMA node 1 (GPUs ")),
        "{numa:?}"
    );
    let plan = status(&r, "plan.gpu_nic");
    assert_eq!(plan.status, Status::Fail);
    assert!(
        plan.evidence.iter().all(|e| e.starts_with("rank ")),
        "{plan:?}"
    );
}

#[test]
fn storage_mounts_are_checked_for_presence_and_type() {
    let m = catalog::machine("p5.48xlarge").expect("catalog");
    let configured = [
        MountConfig {
            path: "/fsx".into(),
            fstype: Some("lustre".into()),
            write: false,
        },
        MountConfig {
            path: "/data".into(),
            fstype: Some("nfs4".into()),
            write: false,
        },
    ];
    let table = mounts("fsx@tcp:/x /fsx lustre rw 0 0\nhost:/d /data nfs rw 0 0\n");
    let r = run(
        &m,
        Workload::Pretrain,
        no_slurm(),
        Storage {
            configured: &configured,
            mounts: Some(&table),
        },
    );
    let s = status(&r, "storage.mounts");
    assert_eq!(s.status, Status::Fail);
    // The problems first, then what is there.
    assert_eq!(s.evidence, ["/data is nfs, expected nfs4", "/fsx lustre"]);
    assert!(s.summary.starts_with("1 of 2 configured"), "{s:?}");
    let r = run(&m, Workload::Pretrain, no_slurm(), NO_STORAGE);
    assert_eq!(status(&r, "storage.mounts").status, Status::Warn, "advice");
}

#[test]
fn placement_is_requested_and_covers_the_node_per_partition() {
    let m = catalog::machine("p5.48xlarge").expect("catalog");
    let conf = slurm_conf::parse(
        "TopologyPlugin=topology/block\ninclude slurm_parallelcluster.conf\n\
         PartitionName=gpu Nodes=h[1-4] Default=YES\nPartitionName=cpu Nodes=c1\n",
    )
    .expect("conf");
    let topo = parse_conf("BlockName=b1 Nodes=h[1-2]\nBlockName=b2 Nodes=h3\n").expect("topo");
    let slurm = |node: &str, conf: SlurmConf| Slurm {
        conf_path: PathBuf::from("/opt/slurm/etc/slurm.conf"),
        conf_real_path: None,
        conf: Ok(Some(conf)),
        topology: Ok(Some((
            PathBuf::from("/opt/slurm/etc/topology.conf"),
            vec![topo.clone()],
        ))),
        node: Some(node.into()),
        switch_level: 0,
    };
    let r = run(
        &m,
        Workload::Pretrain,
        slurm("h2", conf.clone()),
        NO_STORAGE,
    );
    assert_eq!(status(&r, "placement.topology").status, Status::Pass);
    let node = status(&r, "placement.node");
    assert_eq!(node.status, Status::Pass);
    assert_eq!(node.evidence, ["partition gpu: topology default block b1"]);
    let managed = status(&r, "cluster.managed");
    assert_eq!(managed.summary, "managed: AWS ParallelCluster");

    let r = run(
        &m,
        Workload::Pretrain,
        slurm("h4", conf.clone()),
        NO_STORAGE,
    );
    assert_eq!(status(&r, "placement.node").status, Status::Fail);

    // topology.conf without the plugin line: slurmctld ignores it.
    let bare = slurm_conf::parse("PartitionName=gpu Nodes=h[1-4]\n").expect("conf");
    let r = run(&m, Workload::Finetune, slurm("h2", bare), NO_STORAGE);
    let t = status(&r, "placement.topology");
    assert_eq!(t.status, Status::Warn);
    assert!(t.summary.contains("slurmctld ignores it"), "{t:?}");
    assert!(
        t.evidence
            .iter()
            .any(|e| e.contains("gpu-affinity conf topology")),
        "self-built advice: {t:?}"
    );
    assert_eq!(status(&r, "cluster.managed").status, Status::Info);
}

/// With the plugin's `switch_level`, the node's unit is the switch of that level a step
/// may span, as the plugin checks it.
#[test]
fn the_node_unit_follows_the_plugins_switch_level() {
    let m = catalog::machine("p5.48xlarge").expect("catalog");
    let conf = slurm_conf::parse("TopologyPlugin=topology/tree\nPartitionName=gpu Nodes=h[1-4]\n")
        .expect("conf");
    let topo = parse_conf(
        "SwitchName=l1 Nodes=h[1-2]\nSwitchName=l2 Nodes=h[3-4]\nSwitchName=s1 Switches=l[1-2]\n",
    )
    .expect("topo");
    for (level, want) in [
        (0, "partition gpu: topology default leaf switch l2"),
        (1, "partition gpu: topology default level-1 switch s1"),
    ] {
        let slurm = Slurm {
            conf_path: PathBuf::from("/etc/slurm/slurm.conf"),
            conf_real_path: None,
            conf: Ok(Some(conf.clone())),
            topology: Ok(Some((
                PathBuf::from("/etc/slurm/topology.conf"),
                vec![topo.clone()],
            ))),
            node: Some("h3".into()),
            switch_level: level,
        };
        let r = run(&m, Workload::Pretrain, slurm, NO_STORAGE);
        let node = status(&r, "placement.node");
        assert_eq!(node.status, Status::Pass, "{node:?}");
        assert_eq!(node.evidence, [want]);
    }
}

#[test]
fn the_text_report_has_one_line_per_finding_and_the_counts() {
    let m = catalog::machine("p5.48xlarge").expect("catalog");
    let r = run(&m, Workload::Inference, no_slurm(), NO_STORAGE);
    let text = render(&r);
    assert!(
        text.starts_with("workload inference: memory bandwidth"),
        "{text}"
    );
    for f in &r.findings {
        assert!(text.contains(f.id), "{text}");
    }
    assert!(text.trim_end().ends_with(&format!(
        "summary: {} pass, {} info, {} warn, {} fail",
        r.counts()[0].1,
        r.counts()[1].1,
        r.counts()[2].1,
        r.counts()[3].1
    )));
    assert_ne!(r.worst(), Status::Fail, "{text}");
}
