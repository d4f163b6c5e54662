//! `config::parse`: the admin's /etc/gpu-affinity/config.toml. Properties: no panic, and
//! an error is one line (front ends print it as one line on srun's stderr, in the Slurm
//! log and as a refusal reason; a value's own newline must not split it).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match gpu_affinity::config::parse(text) {
        Ok(config) => {
            // Validation promises these; a parse that lets one through is a bug.
            for dir in [
                &config.plugin.sysfs_root,
                &config.plugin.run_dir,
                &config.fabric.profiles_dir,
            ]
            .into_iter()
            .flatten()
            {
                assert!(dir.is_absolute(), "{dir:?} accepted as a directory");
            }
            for key in &config.fabric.force {
                assert!(!gpu_affinity::plugin_env::plugin_owned(key), "{key}");
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
