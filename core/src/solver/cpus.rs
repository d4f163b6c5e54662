//! Splitting CPUs between ranks by physical core, so SMT siblings stay in one rank.

use crate::cpuset::CpuSet;
use crate::model::Machine;

/// The machine's physical cores as sets of hardware threads.
pub(super) struct Cores {
    cores: Vec<CpuSet>,
}

impl Cores {
    pub fn new(machine: &Machine) -> Self {
        Self {
            cores: machine
                .cores
                .iter()
                .filter(|c| !c.is_empty())
                .cloned()
                .collect(),
        }
    }

    /// The cores inside `cpus`, each cut down to its threads in `cpus`, ordered by their
    /// first CPU. CPUs no known core covers count as cores of their own (when the source
    /// gives no core list, every CPU does).
    pub fn within(&self, cpus: &CpuSet) -> Vec<CpuSet> {
        let mut covered = CpuSet::new();
        let mut out: Vec<CpuSet> = Vec::new();
        for core in &self.cores {
            let part: CpuSet = core
                .iter()
                .filter(|&cpu| cpus.contains(cpu) && !covered.contains(cpu))
                .collect();
            if !part.is_empty() {
                part.iter().for_each(|cpu| {
                    covered.insert(cpu);
                });
                out.push(part);
            }
        }
        out.extend(
            cpus.difference(&covered)
                .iter()
                .map(|cpu| std::iter::once(cpu).collect()),
        );
        out.sort_by_key(CpuSet::first);
        out
    }
}

/// Split `cores` into `parts` shares, as even and disjoint as the CPUs allow: whole cores
/// in contiguous runs when there are at least as many cores as parts, else single threads,
/// else (fewer CPUs than parts) shared threads in turn.
pub(super) fn split(cores: &[CpuSet], parts: usize) -> Vec<CpuSet> {
    if parts == 0 {
        return Vec::new();
    }
    let units: Vec<CpuSet> = if cores.len() >= parts {
        cores.to_vec()
    } else {
        cores
            .iter()
            .flat_map(|c| c.iter())
            .map(|cpu| std::iter::once(cpu).collect())
            .collect()
    };
    let count = units.len();
    (0..parts)
        .map(|i| {
            if count == 0 {
                CpuSet::new()
            } else if count >= parts {
                units[i * count / parts..(i + 1) * count / parts]
                    .iter()
                    .fold(CpuSet::new(), |acc, u| acc.union(u))
            } else {
                units[i * count / parts].clone()
            }
        })
        .collect()
}
