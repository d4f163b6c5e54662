//! Discovery time of a p5-class fixture tree against `HWLOC_FSROOT=DIR lstopo` on the
//! same tree. Ignored by default (timing on shared CI machines is noise); run with
//! `cargo test -p gpu-affinity-core --release --test discovery_speed -- --ignored --nocapture`.

mod common;

use std::time::{Duration, Instant};

use gpu_affinity::sources::fixture::{realized, write_fixture};
use gpu_affinity::sources::sysfs::read_machine;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[test]
#[ignore = "benchmark: run explicitly with --ignored"]
fn p5_discovery_against_lstopo() {
    let m = common::p5_class();
    assert_eq!(
        (m.gpus.len(), m.fabric_nics().len(), m.cpus().len()),
        (8, 32, 192)
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    write_fixture(&m, &root).unwrap();
    assert_eq!(read_machine(&root).unwrap(), realized(&m));
    let ours = median(
        (0..31)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(read_machine(&root).unwrap());
                t.elapsed()
            })
            .collect(),
    );
    let theirs = median(
        (0..11)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(common::hwloc::lstopo_xml(&root));
                t.elapsed()
            })
            .collect(),
    );
    let ratio = theirs.as_secs_f64() / ours.as_secs_f64();
    println!("p5-class discovery: read_machine {ours:?}, lstopo {theirs:?}, ratio {ratio:.1}x");
    assert!(
        ratio >= 20.0,
        "discovery only {ratio:.1}x faster than lstopo"
    );
}
