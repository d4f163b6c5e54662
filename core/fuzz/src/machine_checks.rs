//! Properties every topology parser's machine must have, shared by the `topology`,
//! `nccl_xml`, `hwloc_xml` and `catalog` targets (included with `#[path]`: each target is
//! its own binary, and a library crate just for this would be one more link per build).

use gpu_affinity::fabric::topo_xml;
use gpu_affinity::model::Machine;
use gpu_affinity::sources::nccl_xml;

/// A parsed machine is one the rest of the suite can use: it validates, and the NCCL
/// topology file the plugin would generate from it (`task_post_fork`) reads back through
/// our own NCCL parser with the same GPUs. Both are cheap next to the parse itself.
pub fn check_machine(machine: &Machine, source: &str) {
    if let Err(e) = machine.validate() {
        panic!("{source}: parser returned a machine that does not validate: {e}");
    }
    let xml = topo_xml::render(machine);
    // The rendered file holds every GPU under a <cpu> of its NUMA node; a machine whose
    // GPUs have no NUMA node renders them nowhere NCCL's format can place, which the
    // parser then rightly refuses. Only machines where every GPU is placed must round-trip.
    if machine.gpus.is_empty()
        || machine
            .gpus
            .iter()
            .any(|g| machine.numa_of(g.pci).is_none())
    {
        return;
    }
    match nccl_xml::parse(&xml) {
        Ok(back) => {
            let mut want: Vec<_> = machine.gpus.iter().map(|g| g.pci).collect();
            let mut got: Vec<_> = back.gpus.iter().map(|g| g.pci).collect();
            want.sort();
            got.sort();
            assert_eq!(
                want, got,
                "{source}: GPUs changed through the generated NCCL topology file:\n{xml}"
            );
        }
        Err(e) => panic!("{source}: the generated NCCL topology file does not parse: {e}\n{xml}"),
    }
}
