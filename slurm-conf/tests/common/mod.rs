//! What the CLI tests share: running `gpu-affinity` (only this package's tests know where
//! Cargo built it, so the runner lives here, not in the shared test-support crate), and,
//! for the install and recipe tests, fake Slurm prefixes and package builds.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The admin command as this build made it, to be run as a user runs it.
pub fn command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpu-affinity"))
}

/// `gpu-affinity ARGS`, its output collected.
pub fn gpu_affinity(args: &[&str]) -> Output {
    command().args(args).output().expect("run gpu-affinity")
}

/// Every file, dir and link under `root` with its content or target.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut all = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).expect("read_dir").flatten() {
            let p = e.path();
            let t = e.file_type().expect("file type");
            let v = if t.is_symlink() {
                format!("-> {}", fs::read_link(&p).expect("link").display())
            } else if t.is_dir() {
                stack.push(p.clone());
                "dir".to_owned()
            } else {
                fs::read_to_string(&p).unwrap_or_else(|_| "binary".to_owned())
            };
            all.insert(p, v);
        }
    }
    all
}

pub fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

pub fn version_header(prefix: &Path, number: &str) {
    write(
        &prefix.join("include/slurm/slurm_version.h"),
        &format!("#define SLURM_VERSION_NUMBER {number}\n"),
    );
}

/// Fake per-series builds, as the package ships them.
pub fn plugins(root: &Path) -> PathBuf {
    let dir = root.join("plugins");
    for s in ["22.05", "24.11", "25.11", "26.05"] {
        write(
            &dir.join(format!("slurm-{s}/gpu_affinity.so")),
            &format!("build {s}"),
        );
    }
    dir
}

/// A Slurm prefix at `root/rel`: slurm_version.h with `number`, an empty plugin dir `plugin_dir`.
pub fn slurm_prefix(root: &Path, rel: &str, number: &str, plugin_dir: &str) -> PathBuf {
    let prefix = root.join(rel);
    version_header(&prefix, number);
    fs::create_dir_all(prefix.join(plugin_dir)).expect("mkdir");
    prefix
}
