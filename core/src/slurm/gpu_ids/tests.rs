use super::*;
use crate::model::Gpu;
use crate::slurm::gres_conf;

/// A machine with GPUs at bus 0x10.. whose minors are `minors` (in PCI order).
fn machine(minors: &[Option<u32>]) -> Machine {
    Machine {
        gpus: minors
            .iter()
            .enumerate()
            .map(|(i, minor)| Gpu {
                pci: pci(i),
                minor: *minor,
                model: None,
            })
            .collect(),
        ..Machine::default()
    }
}

fn pci(i: usize) -> PciAddr {
    format!("0000:{:02x}:00.0", 0x10 + i).parse().expect("pci")
}

fn numbered(m: &Machine, text: &str) -> SlurmGpus {
    let conf = gres_conf::parse(text).expect("valid gres.conf");
    SlurmGpus::number(m, Some(&conf.node_gpus("n1")), &minor_from_name)
}

fn positions(m: &Machine, s: &SlurmGpus) -> Vec<Option<usize>> {
    s.ids
        .iter()
        .map(|p| p.and_then(|p| m.gpus.iter().position(|g| g.pci == p)))
        .collect()
}

const IDENTITY: [Option<u32>; 8] = [
    Some(0),
    Some(1),
    Some(2),
    Some(3),
    Some(4),
    Some(5),
    Some(6),
    Some(7),
];

#[test]
fn manual_files_number_in_written_order_not_by_minor() {
    let m = machine(&IDENTITY);
    // The layout: ids 0..3 are nvidia5, 4, 7, 6.
    let s = numbered(
        &m,
        "Name=gpu File=/dev/nvidia5\nName=gpu File=/dev/nvidia4\nName=gpu File=/dev/nvidia7\nName=gpu File=/dev/nvidia6\n",
    );
    assert_eq!(positions(&m, &s), vec![Some(5), Some(4), Some(7), Some(6)]);
    assert_eq!(s.map(&[0, 1]).expect("valid"), vec![pci(5), pci(4)]);
    assert!(matches!(
        s.map(&[4]),
        Err(GpuIdError::OutOfRange {
            id: 4,
            count: 4,
            ..
        })
    ));
}

#[test]
fn subsets_holes_ranges_and_other_nodes() {
    let m = machine(&IDENTITY);
    // A hole (nvidia2 lost), a range, a line for another node, a Name= line that Slurm
    // reads before the NodeName= lines above it.
    let s = numbered(
        &m,
        "NodeName=n[1-2] Name=gpu File=/dev/nvidia[0-1]\nNodeName=n9 Name=gpu File=/dev/nvidia[2-3]\n\
         NodeName=n1 Name=gpu File=/dev/nvidia[3-7]\nName=gpu File=/dev/nvidia6\n",
    );
    // Name= first (nvidia6), then the NodeName=n1 lines; duplicates are Slurm's problem.
    assert_eq!(
        positions(&m, &s),
        vec![
            Some(6),
            Some(0),
            Some(1),
            Some(3),
            Some(4),
            Some(5),
            Some(6),
            Some(7)
        ]
    );
}

#[test]
fn minors_that_do_not_follow_pci_order_are_followed() {
    // A node whose driver numbered minors against PCI order.
    let m = machine(&[Some(3), Some(2), Some(1), Some(0)]);
    let s = numbered(&m, "Name=gpu File=/dev/nvidia[0-3]\n");
    assert_eq!(positions(&m, &s), vec![Some(3), Some(2), Some(1), Some(0)]);
    // AutoDetect=nvml numbers by NVML index, i.e. PCI order, whatever the minors.
    let s = numbered(&m, "AutoDetect=nvml\nName=gpu File=/dev/nvidia[0-3]\n");
    assert_eq!(positions(&m, &s), vec![Some(0), Some(1), Some(2), Some(3)]);
    // AutoDetect=nvidia by device file name: minor order.
    let s = numbered(&m, "AutoDetect=nvidia\n");
    assert_eq!(positions(&m, &s), vec![Some(3), Some(2), Some(1), Some(0)]);
}

#[test]
fn autodetect_after_a_lost_gpu_renumbers_the_rest() {
    // GPU at position 2 fell off the bus: the machine shows 7, NVML numbers them 0..6.
    let mut m = machine(&IDENTITY);
    m.gpus.remove(2);
    let s = numbered(&m, "AutoDetect=nvml\n");
    assert_eq!(s.ids.len(), 7);
    assert_eq!(s.map(&[2]).expect("valid"), vec![pci(3)]);
    // Files restrict autodetection; a configured device it cannot see sorts last.
    let s = numbered(&m, "AutoDetect=nvml\nName=gpu File=/dev/nvidia[7,2,0]\n");
    assert_eq!(s.ids, vec![Some(pci(0)), Some(pci(7)), None]);
    let e = s.map(&[2]).expect_err("nvidia2 is gone");
    assert!(e.to_string().contains("/dev/nvidia2"), "{e}");
    assert!(e.to_string().contains("line 2"), "{e}");
}

#[test]
fn per_node_autodetect_and_no_gres_conf() {
    let m = machine(&[Some(1), Some(0)]);
    let s = numbered(&m, "NodeName=n1 AutoDetect=nvml Name=gpu\n");
    assert_eq!(positions(&m, &s), vec![Some(0), Some(1)]);
    let s = SlurmGpus::number(&m, None, &minor_from_name);
    assert_eq!(positions(&m, &s), vec![Some(1), Some(0)]);
    // No minors known: minor N is taken to be the N-th GPU in PCI order.
    let m = machine(&[None, None, None]);
    let s = numbered(&m, "Name=gpu File=/dev/nvidia[2,0]\n");
    assert_eq!(positions(&m, &s), vec![Some(2), Some(0)]);
}

#[test]
fn step_gpus_are_bounded_deduplicated_and_never_echoed() {
    assert_eq!(
        parse_step_gpus("0,1,4-6", 8).expect("valid"),
        vec![0, 1, 4, 5, 6]
    );
    assert_eq!(
        parse_step_gpus("3,1,3,1-2", 8).expect("valid"),
        vec![3, 1, 2]
    );
    let huge = ["0-4095"; 18_000].join(",");
    let e = parse_step_gpus(&huge, 8).expect_err("too long");
    assert_eq!(e, StepGpusError::TooLong { len: huge.len() });
    let e = parse_step_gpus("0-4095", 8).expect_err("too many");
    assert_eq!(e, StepGpusError::TooMany { max: 32, gpus: 8 });
    let many = ["0-7"; 5].join(",");
    assert!(matches!(
        parse_step_gpus(&many, 8),
        Err(StepGpusError::TooMany { .. })
    ));
    let e = parse_step_gpus("0,1\nerror: FORGED", 8).expect_err("syntax");
    assert!(!e.to_string().contains("FORGED"), "{e}");
    assert!(parse_step_gpus("0", 0).is_ok());
}

#[test]
fn task_binding_replays_slurm() {
    let step = [4, 5, 6, 7];
    let ids = |b: &str, local: bool, t: u32| task_gpus(Some(b), &step, local, t);
    assert_eq!(task_gpus(None, &step, false, 0), TaskGpus::Step);
    assert_eq!(ids("gpu:per_task:1", false, 2), TaskGpus::Ids(vec![6]));
    // 24.11 and 26.05 spell the TRES in full (measured).
    assert_eq!(ids("gres/gpu:per_task:1", true, 2), TaskGpus::Ids(vec![6]));
    assert_eq!(ids("gres/gpu:map_gpu:3,1", true, 0), TaskGpus::Ids(vec![7]));
    assert_eq!(ids("gpu:per_task:2", true, 1), TaskGpus::Ids(vec![6, 7]));
    // More tasks than GPUs: Slurm falls back to the step's first GPU.
    assert_eq!(ids("gpu:per_task:1", false, 5), TaskGpus::Ids(vec![4]));
    // map_gpu values: global ids without confinement, step positions with it.
    assert_eq!(ids("gpu:map_gpu:7,5", false, 0), TaskGpus::Ids(vec![7]));
    assert_eq!(ids("gpu:map_gpu:3,1", true, 0), TaskGpus::Ids(vec![7]));
    assert_eq!(ids("gpu:map_gpu:3,1", true, 1), TaskGpus::Ids(vec![5]));
    assert_eq!(ids("gpu:map_gpu:3,1", true, 2), TaskGpus::Ids(vec![7]));
    assert_eq!(ids("gpu:map_gpu:0*2,2", true, 1), TaskGpus::Ids(vec![4]));
    assert_eq!(
        ids("gpu:verbose,mask_gpu:0x3", true, 0),
        TaskGpus::Ids(vec![4, 5])
    );
    assert_eq!(
        ids("gpu:mask_gpu:0x30", false, 0),
        TaskGpus::Ids(vec![4, 5])
    );
    assert!(matches!(ids("gpu:closest", false, 0), TaskGpus::Unknown(_)));
    assert!(matches!(
        ids("gpu:single:1", false, 0),
        TaskGpus::Unknown(_)
    ));
    assert!(matches!(
        ids("gpu:map_gpu:x", false, 0),
        TaskGpus::Unknown(_)
    ));
    assert_eq!(
        task_gpus(Some("nic:closest"), &step, false, 0),
        TaskGpus::Step
    );
}

#[test]
fn natural_order_and_names() {
    assert_eq!(natural_cmp("/dev/nvidia2", "/dev/nvidia10"), Ordering::Less);
    assert_eq!(
        natural_cmp("/dev/nvidia10", "/dev/nvidia10"),
        Ordering::Equal
    );
    assert_eq!(minor_from_name("/dev/nvidia12"), Some(12));
    assert_eq!(minor_from_name("/dev/nvidia-caps"), None);
}

/// Found by the `gpu_ids` fuzz target: map/mask multipliers whose sum passes u64 (user
/// text from `--gpu-bind`) overflowed (a panic in debug builds, a wrong GPU in release).
#[test]
fn huge_bind_multipliers_do_not_overflow() {
    let bind = "gpu:map_gpu:1*18446744073709551615,0*2";
    assert_eq!(
        task_gpus(Some(bind), &[0, 1], false, 0),
        TaskGpus::Ids(vec![1])
    );
    assert_eq!(
        task_gpus(Some(bind), &[0, 1], false, u32::MAX),
        TaskGpus::Ids(vec![1])
    );
}
