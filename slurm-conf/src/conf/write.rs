//! Writing a generated Slurm file in place: atomic, never over a file we did not write.
//!
//! The write is core's one atomic writer (`gpu_affinity::atomic`), its temp file beside
//! the target, so slurmctld and slurmd read the old file or the new one, never half of
//! one. This module adds the policy: a target without our marker line was
//! written by someone else (HyperPod's agent, `azslurm`, an admin) and is replaced only
//! with `--force`.

use std::path::Path;

use gpu_affinity::atomic;
use gpu_affinity::slurm::conf_write::MARKER;
use gpu_affinity::trust;

use crate::CliError;

/// Largest existing file read to look for the marker.
const MAX_EXISTING: u64 = 64 << 20;

pub fn has_marker(text: &str) -> bool {
    text.lines().any(|l| l.trim_end() == MARKER)
}

pub fn write_generated(path: &Path, text: &str, force: bool) -> Result<(), CliError> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_file() => {
            return Err(CliError(format!(
                "{shown} exists and is not a regular file; not replacing it"
            )));
        }
        Ok(_) if !force => {
            let existing = trust::open_regular(path)
                .and_then(|f| trust::read_bounded_text(f, MAX_EXISTING))
                .map_err(|e| CliError(format!("{shown}: {e}")))?;
            if !has_marker(&existing) {
                return Err(CliError(format!(
                    "{shown} was not written by gpu-affinity (no marker line); --force replaces it"
                )));
            }
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(CliError(format!("{shown}: {e}"))),
    }
    // Beside the target: a generated file's dir is not an include dir.
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Slurm daemons run as SlurmUser and read it.
    atomic::write_file(path, dir, text.as_bytes(), 0o644)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn refuses_foreign_files_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("topology.conf");
        std::fs::write(&target, "# written by azslurm\n").expect("write");
        let e = write_generated(&target, &format!("{MARKER}\nx\n"), false).expect_err("foreign");
        assert!(e.0.contains("--force"), "{}", e.0);
        write_generated(&target, &format!("{MARKER}\nx\n"), true).expect("forced");
        write_generated(&target, &format!("{MARKER}\ny\n"), false).expect("ours");
        assert_eq!(
            std::fs::read_to_string(&target).expect("read"),
            format!("{MARKER}\ny\n")
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let mode = std::fs::metadata(&target)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
    }
}
