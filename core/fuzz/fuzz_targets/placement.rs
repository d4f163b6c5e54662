//! `slurm::placement::place` for each source (aws, oci, gcp, nvlink: the first byte picks
//! one) over one placement file and a NODEMAP (the rest, split at the first NUL), so
//! `parse_nodemap` runs on every input. Properties: errors are one line; a placement
//! names every NODEMAP node once, in NODEMAP order, each with a non-empty path; the
//! block and tree topologies made from it validate and write.
#![no_main]

use gpu_affinity::slurm::placement::{self, Source};
use gpu_affinity::slurm::topology;
use libfuzzer_sys::fuzz_target;

const SOURCES: [Source; 4] = [Source::Aws, Source::Oci, Source::Gcp, Source::Nvlink];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (file, nodemap) = text.split_once('\0').unwrap_or((text, ""));
    let source = SOURCES[usize::from(pick) % SOURCES.len()];
    let files = [("input.json".to_string(), file.to_string())];
    match placement::place(source, &files, nodemap) {
        Ok(places) => {
            let map = placement::parse_nodemap(nodemap).expect("place parsed it");
            let nodes: Vec<&str> = places.iter().map(|p| p.node.as_str()).collect();
            let mapped: Vec<&str> = map.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(nodes, mapped);
            assert!(places.iter().all(|p| !p.path.is_empty()), "{places:?}");
            let (blocks, _) = placement::blocks(&places, "block");
            let (tree, _) = placement::tree(&places, "tree");
            for t in [&blocks, &tree] {
                topology::write_conf(t, "").unwrap_or_else(|e| panic!("{t:?}: {e}"));
            }
        }
        Err(e) => {
            let line = e.to_string();
            assert!(
                !line.contains(['\n', '\r']),
                "error is not one line: {line:?}"
            );
        }
    }
});
