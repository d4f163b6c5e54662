//! Splitting CPUs between ranks by physical core, so SMT siblings stay in one rank.
//!
//! Cores are plain sorted thread lists here; a `CpuSet` is built only for each share.

use crate::cpuset::CpuSet;
use crate::model::Machine;

/// A physical core's hardware threads, ascending.
pub(super) type Core = Vec<u32>;

/// The machine's physical cores.
pub(super) struct Cores {
    cores: Vec<Core>,
}

impl Cores {
    pub fn new(machine: &Machine) -> Self {
        Self {
            cores: machine
                .cores
                .iter()
                .filter(|c| !c.is_empty())
                .map(|c| c.iter().collect())
                .collect(),
        }
    }

    /// The cores inside `cpus`, each cut down to its threads in `cpus`, ordered by their
    /// first CPU. CPUs no known core covers count as cores of their own (when the source
    /// gives no core list, every CPU does). A CPU two cores claim stays with the first.
    pub fn within(&self, cpus: &CpuSet) -> Vec<Core> {
        let mut covered = CpuSet::new();
        let mut out: Vec<Core> = Vec::new();
        for core in &self.cores {
            let part: Core = core
                .iter()
                .copied()
                .filter(|&cpu| cpus.contains(cpu) && covered.insert(cpu))
                .collect();
            if !part.is_empty() {
                out.push(part);
            }
        }
        if covered.len() < cpus.len() {
            out.extend(
                cpus.iter()
                    .filter(|&cpu| !covered.contains(cpu))
                    .map(|cpu| vec![cpu]),
            );
        }
        out.sort_unstable_by_key(|c| c.first().copied());
        out
    }
}

/// Split `cores` into `parts` shares, as even and disjoint as the CPUs allow: whole cores
/// in contiguous runs when there are at least as many cores as parts, else single threads,
/// else (fewer CPUs than parts) shared threads in turn.
pub(super) fn split(cores: &[Core], parts: usize) -> Vec<CpuSet> {
    if parts == 0 {
        return Vec::new();
    }
    let threads: Vec<Core>;
    let units: &[Core] = if cores.len() >= parts {
        cores
    } else {
        threads = cores.iter().flatten().map(|&cpu| vec![cpu]).collect();
        &threads
    };
    let count = units.len();
    (0..parts)
        .map(|i| {
            if count == 0 {
                CpuSet::new()
            } else if count >= parts {
                units[i * count / parts..(i + 1) * count / parts]
                    .iter()
                    .flatten()
                    .copied()
                    .collect()
            } else {
                units[i * count / parts].iter().copied().collect()
            }
        })
        .collect()
}
