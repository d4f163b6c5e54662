//! `slurm::gres_conf::parse` and what the plugin and `explain` do with its result:
//! `node_gpus` for a node the file names and one it does not, `SlurmGpus::number` over
//! them, and `minor_from_name` on every device file; also `constrain_devices` (cgroup.conf,
//! same line syntax). Properties: an error is one line and names a line of the text; every
//! record's line is a line of the text; a node's devices are the files of the records that
//! apply to it, so never more than the file lists.
#![no_main]

use gpu_affinity::model::Machine;
use gpu_affinity::slurm::gpu_ids::{SlurmGpus, minor_from_name};
use gpu_affinity::slurm::{gres_conf, hostlist};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = gres_conf::constrain_devices(text);
    // Lines as Slurm counts them: a trailing newline does not start another.
    let lines = text.lines().count().max(1);
    match gres_conf::parse(text) {
        Ok(conf) => {
            let mut files = 0;
            let mut node = None;
            for r in &conf.records {
                assert!(
                    (1..=lines).contains(&r.line),
                    "record at line {} of {lines}",
                    r.line
                );
                files += r.files.len();
                if node.is_none() {
                    node = r
                        .nodes
                        .as_deref()
                        .and_then(|n| hostlist::expand(n).ok())
                        .and_then(|n| n.into_iter().next());
                }
            }
            let machine = Machine::default();
            for name in [node.as_deref().unwrap_or("n1"), "not-a-node-of-this-file"] {
                let gpus = conf.node_gpus(name);
                let listed: usize = gpus.devices.iter().map(|d| d.files.len()).sum();
                assert!(listed <= files, "{name}: {listed} device files of {files}");
                for d in &gpus.devices {
                    assert!((1..=lines).contains(&d.line));
                    for f in &d.files {
                        let _ = minor_from_name(f);
                    }
                }
                let numbered = SlurmGpus::number(&machine, Some(&gpus), &minor_from_name);
                assert_eq!(numbered.ids.len(), numbered.files.len());
            }
        }
        Err(e) => {
            let line = e.to_string();
            assert!(
                !line.contains(['\n', '\r']),
                "error is not one line: {line:?}"
            );
            assert!(
                (1..=lines).contains(&e.line()),
                "error at line {} of {lines}",
                e.line()
            );
        }
    }
});
