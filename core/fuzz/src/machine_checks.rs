//! Properties every topology parser's machine must have, shared by the `topology`,
//! `nccl_xml`, `hwloc_xml` and `catalog` targets (included with `#[path]`: each target is
//! its own binary, and a library crate just for this would be one more link per build).

use gpu_affinity::fabric::topo_xml;
use gpu_affinity::model::{Machine, class, vendor};
use gpu_affinity::sources::nccl_xml;

/// A parsed machine is one the rest of the suite can use: it validates, and the NCCL
/// topology file the plugin would generate from it (`task_post_fork`) reads back through
/// our own NCCL parser with the same GPUs. Both are cheap next to the parse itself.
pub fn check_machine(machine: &Machine, source: &str) {
    if let Err(e) = machine.validate() {
        panic!("{source}: parser returned a machine that does not validate: {e}");
    }
    // The rendered file says what a GPU is the way NCCL's own files do when they leave
    // out `<gpu>` (NCCL fills it in): a display class and an NVIDIA or absent vendor. Those
    // GPUs must come back; others (a non-NVIDIA GPU, or a `<gpu>` under a function whose
    // class says bridge, which a garbled file can give) rightly read as plain functions.
    // Every kept GPU sits under a <cpu> of its NUMA node, so one without a NUMA node is
    // out of scope too.
    let kept: Vec<_> = machine
        .gpus
        .iter()
        .filter_map(|g| machine.pci_device(g.pci))
        .filter(|d| {
            class::is_gpu(d.class)
                && matches!(d.vendor, vendor::NVIDIA | 0 | nccl_xml::UNKNOWN_ID)
                && machine.numa_of(d.addr).is_some()
        })
        .map(|d| d.addr)
        .collect();
    if kept.is_empty() {
        return;
    }
    let xml = topo_xml::render(machine, &machine.fabric_nics());
    match nccl_xml::parse(&xml) {
        Ok(back) => {
            let missing: Vec<_> = kept
                .iter()
                .filter(|a| !back.gpus.iter().any(|g| g.pci == **a))
                .collect();
            assert!(
                missing.is_empty(),
                "{source}: GPUs {missing:?} lost through the generated NCCL topology file:\n{xml}"
            );
        }
        Err(e) => panic!("{source}: the generated NCCL topology file does not parse: {e}\n{xml}"),
    }
}
