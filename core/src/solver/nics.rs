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
/// Each GPU's candidates are the NICs tied at its best nearness; GPUs with the same
/// candidate set form a group. Groups are served nearest first, and each hands out its
/// candidates by load (how many GPUs already hold a NIC), least-loaded first, ties by PCI
/// order, so the split stays as even as it can across every GPU that ties at those NICs,
/// whichever group they came from:
///
/// - with at least as many least-loaded candidates as GPUs, each GPU gets its own
///   contiguous share of them (1 GPU + 4 NICs -> all four, 2 + 4 -> two each, 2 + 2 ->
///   one each; a GPU equally near a NIC a nearer GPU holds and a free one takes the free
///   one);
/// - with fewer, each GPU gets one NIC, the GPUs spread over the candidates by load (2
///   GPUs + 1 NIC -> shared; 4 GPUs tied at 1 free NIC and 3 NICs other GPUs hold -> one
///   GPU on each).
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
    let mut load = vec![0usize; nics.len()];
    for ((_, tied), mut members) in groups {
        members.sort_by_key(|&g| gpus[g].addr);
        let slots = slots(&tied, members.len(), &mut load);
        let (count, size) = (slots.len(), members.len());
        for (i, &g) in members.iter().enumerate() {
            for &n in &slots[i * count / size..(i + 1) * count / size] {
                out[g].push(NicChoice {
                    nic: n,
                    nearness: nearness(&gpus[g], &nics[n]),
                });
            }
        }
    }
    out
}

/// The NICs (indices into the fabric list, in PCI order, a NIC once per GPU it goes to)
/// that `size` GPUs tied at `tied` take, with `load` raised for each. At least `size`
/// slots; the caller cuts them into `size` contiguous shares.
fn slots(tied: &[usize], size: usize, load: &mut [usize]) -> Vec<usize> {
    let least = tied.iter().map(|&n| load[n]).min().unwrap_or(0);
    let idle: Vec<usize> = tied.iter().copied().filter(|&n| load[n] == least).collect();
    if idle.len() >= size {
        for &n in &idle {
            load[n] += 1;
        }
        return idle;
    }
    // Fewer least-loaded NICs than GPUs: one NIC per GPU, each to the NIC with the lowest
    // load so far (ties by PCI order); then grouped by NIC so GPUs next to each other in
    // PCI order share one.
    let mut given = vec![0usize; tied.len()];
    for _ in 0..size {
        let Some(pick) = (0..tied.len()).min_by_key(|&i| (load[tied[i]], i)) else {
            break;
        };
        load[tied[pick]] += 1;
        given[pick] += 1;
    }
    tied.iter()
        .zip(given)
        .flat_map(|(&n, times)| std::iter::repeat_n(n, times))
        .collect()
}
