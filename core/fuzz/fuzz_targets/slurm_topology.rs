//! `slurm::topology::parse_conf` (topology.conf, tree or block form) and `parse_yaml`
//! (topology.yaml, Slurm 25.05+); the first byte picks one. Properties: errors are one
//! line; what parses is valid (`validate`), writes, and reads back equal (the round
//! trip `conf topology --write` and the plugin's placement backstop rely on) up to the
//! order of a unit's members: the writer lists them as one sorted hostlist, and a
//! unit's members are a set to Slurm.
#![no_main]

use gpu_affinity::slurm::hostlist::Hostlist;
use gpu_affinity::slurm::topology::{self, Kind, Topology};
use libfuzzer_sys::fuzz_target;

/// Each unit's members sorted and deduplicated.
fn members_as_sets(mut t: Topology) -> Topology {
    let set = |v: &mut Vec<String>| {
        v.sort();
        v.dedup();
    };
    let nodes = |h: &mut Hostlist| {
        let mut v = h.to_vec();
        set(&mut v);
        *h = v.into();
    };
    match &mut t.kind {
        Kind::Tree(switches) => {
            for s in switches {
                set(&mut s.children);
                nodes(&mut s.nodes);
            }
        }
        Kind::Block(b) => b.blocks.iter_mut().for_each(|b| nodes(&mut b.nodes)),
        Kind::Flat => {}
    }
    t
}

fn one_line(e: &impl std::fmt::Display) {
    let line = e.to_string();
    assert!(
        !line.contains(['\n', '\r']),
        "error is not one line: {line:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if pick % 2 == 0 {
        match topology::parse_conf(text) {
            Ok(t) => {
                topology::validate(&t).expect("parsed topology validates");
                let written = topology::write_conf(&t, "").expect("a valid topology writes");
                let again = topology::parse_conf(&written)
                    .unwrap_or_else(|e| panic!("{written:?} does not reparse: {e}"));
                assert_eq!(
                    members_as_sets(again),
                    members_as_sets(t),
                    "{text:?} -> {written:?}"
                );
            }
            Err(e) => one_line(&e),
        }
    } else {
        match topology::parse_yaml(text) {
            Ok(ts) => {
                let written = topology::write_yaml(&ts, "").expect("parsed topologies write");
                let again = topology::parse_yaml(&written)
                    .unwrap_or_else(|e| panic!("{written:?} does not reparse: {e}"));
                let sets = |ts: Vec<Topology>| -> Vec<Topology> {
                    ts.into_iter().map(members_as_sets).collect()
                };
                assert_eq!(sets(again), sets(ts), "{text:?} -> {written:?}");
            }
            Err(e) => one_line(&e),
        }
    }
});
