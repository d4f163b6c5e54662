//! What the tests over the shared topology files share (golden.rs, golden_env.rs,
//! fixture_real_data.rs): finding the files, and comparing (or, with GOLDEN_UPDATE=1,
//! rewriting) a golden JSON file.

use std::path::{Path, PathBuf};

pub use gpu_affinity_test_support::shared_topologies;

/// Every `*.xml` under the shared topologies, relative path first, sorted.
pub fn topology_files() -> Vec<(String, PathBuf)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "xml") {
                out.push(path);
            }
        }
    }
    let root = shared_topologies();
    let mut files = Vec::new();
    walk(&root, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .expect("under root")
                .to_string_lossy()
                .replace('\\', "/");
            (rel, p)
        })
        .collect()
}

/// A golden file's name for a source path or machine name: anything but ASCII letters,
/// digits, '.' and '-' becomes '_'.
pub fn file_stem(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Compare (or with GOLDEN_UPDATE=1 rewrite) `dir/name.json`; returns a mismatch line.
pub fn check_golden(dir: &Path, name: &str, value: &serde_json::Value) -> Option<String> {
    let path = dir.join(format!("{name}.json"));
    let text = serde_json::to_string_pretty(value).expect("serialises") + "\n";
    if std::env::var_os("GOLDEN_UPDATE").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(dir).expect("create golden dir");
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return None;
    }
    match std::fs::read_to_string(&path) {
        Ok(want) if want == text => None,
        Ok(_) => Some(format!(
            "{} differs (GOLDEN_UPDATE=1 to regenerate, then review the diff)",
            path.display()
        )),
        Err(e) => Some(format!(
            "{}: {e} (GOLDEN_UPDATE=1 to create it)",
            path.display()
        )),
    }
}
