//! Choosing each GPU's fabric NIC(s): the nearest ones by the PCI tree, split evenly
//! between the step's GPUs that are equally near to them.

use std::collections::BTreeMap;

use super::locality::{Nearness, Place, nearness};

/// One NIC given to one GPU, and how near it is.
#[derive(Clone, Debug)]
pub(super) struct NicChoice<'m> {
    /// Index into the fabric NIC list.
    pub nic: usize,
    pub nearness: Nearness<'m>,
}

/// A candidate set: the nearness key its NICs tie at, and the NICs.
type GroupKey = ((u8, usize), Vec<usize>);

/// For every step GPU (same order as `gpus`), the NICs it gets.
///
/// Each GPU's candidates are the NICs tied at its best nearness. GPUs with the same
/// candidate set form a group that splits the set evenly: with at least as many NICs as
/// GPUs each GPU gets its own contiguous share (1 GPU + 4 NICs -> all four, 2 + 4 -> two
/// each); with fewer, GPUs share them in turn (2 GPUs + 1 NIC -> shared). Groups are served
/// nearest first, and a later group avoids NICs an earlier, nearer group already holds
/// when it has others equally near, so one NIC is not doubly loaded without need.
pub(super) fn choose<'m>(gpus: &[Place<'m>], nics: &[Place<'m>]) -> Vec<Vec<NicChoice<'m>>> {
    let mut out: Vec<Vec<NicChoice<'m>>> = vec![Vec::new(); gpus.len()];
    if nics.is_empty() {
        return out;
    }

    // Per GPU: the nearness key to every NIC, and the NICs tied at the best key. Only keys
    // here; the full nearness (with its reason) is built for the NICs actually given.
    let mut groups: BTreeMap<GroupKey, Vec<usize>> = BTreeMap::new();
    let mut keys = Vec::with_capacity(nics.len());
    for (g, gpu) in gpus.iter().enumerate() {
        keys.clear();
        keys.extend(nics.iter().map(|n| nearness(gpu, n).key()));
        let Some(best) = keys.iter().min().copied() else {
            continue;
        };
        let tied: Vec<usize> = (0..nics.len()).filter(|&n| keys[n] == best).collect();
        groups.entry((best, tied)).or_default().push(g);
    }

    // BTreeMap order: nearest key first, then by candidate set, so the result is stable.
    let mut claimed = vec![false; nics.len()];
    for ((_, tied), mut members) in groups {
        members.sort_by_key(|&g| gpus[g].addr);
        let free: Vec<usize> = tied.iter().copied().filter(|&n| !claimed[n]).collect();
        let candidates = if free.is_empty() { tied } else { free };
        let (count, size) = (candidates.len(), members.len());
        for (i, &g) in members.iter().enumerate() {
            let share: Vec<usize> = if count >= size {
                candidates[i * count / size..(i + 1) * count / size].to_vec()
            } else {
                vec![candidates[i * count / size]]
            };
            for n in share {
                claimed[n] = true;
                out[g].push(NicChoice {
                    nic: n,
                    nearness: nearness(&gpus[g], &nics[n]),
                });
            }
        }
    }
    out
}
