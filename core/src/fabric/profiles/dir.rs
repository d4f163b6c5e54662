//! The admin's profile directory: the trusted reader the front ends call and the
//! unchecked one underneath. The only I/O of the profiles.

use std::path::Path;

use super::{ProfileError, Profiles, embedded, load};
use crate::trust::{self, TrustError};

/// The directory front ends read admin profiles from by default.
pub const DEFAULT_PROFILE_DIR: &str = "/etc/gpu-affinity/profiles.d";
/// An admin profile file is a page of TOML; anything near this is not one.
const MAX_PROFILE_BYTES: u64 = 1 << 20;
/// Read every `*.toml` file of an admin profile directory as (path, contents), sorted
/// by name. A missing directory is no profiles, not an error. Nothing here checks who
/// owns the files: root-side callers use [`load_trusted`].
pub fn read_profile_dir(dir: &Path) -> Result<Vec<(String, String)>, ProfileError> {
    read_dir_with(dir, &|path| {
        trust::open_regular(path)
            .and_then(|file| trust::read_bounded_text(file, MAX_PROFILE_BYTES))
            .map_err(|e| ProfileError::Read {
                path: path.display().to_string(),
                message: e.to_string(),
            })
    })
}

/// The built-in profiles plus the admin's from `dir`, where the directory and every file
/// in it must belong to `owner` (root; tests pass their own uid) and be writable by no
/// one else (Invariant 2). A missing directory means built-ins only. The one loader for
/// the plugin and `gpu-affinity explain`, so both see the same profiles.
pub fn load_trusted(dir: &Path, owner: u32) -> Result<Profiles, ProfileError> {
    let mut files = Vec::new();
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(TrustError::Io {
                what: "profiles directory".into(),
                path: dir.display().to_string(),
                message: e.to_string(),
            }
            .into());
        }
        Ok(meta) => {
            trust::check_trusted(&meta, "profiles directory", dir, owner)?;
            // The directory is root's alone, so the files listed now are the files read;
            // each is still checked through the handle its bytes come from.
            files.extend(read_dir_with(dir, &|path| {
                Ok(trust::read_trusted_text(
                    path,
                    "profile",
                    owner,
                    MAX_PROFILE_BYTES,
                )?)
            })?);
        }
    }
    load(&[embedded(), files].concat())
}

/// The `*.toml` files of `dir`, sorted by name, each read by `read`.
fn read_dir_with(
    dir: &Path,
    read: &dyn Fn(&Path) -> Result<String, ProfileError>,
) -> Result<Vec<(String, String)>, ProfileError> {
    let read_err = |e: std::io::Error| ProfileError::Read {
        path: dir.display().to_string(),
        message: e.to_string(),
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read_err(e)),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(read_err)?.path();
        if path.extension().is_some_and(|x| x == "toml") && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| Ok((p.display().to_string(), read(&p)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::profiles::EMBEDDED;

    #[test]
    fn a_fifo_named_like_a_profile_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("site.toml");
        trust::fifo::make(&fifo);
        let d = dir.path().to_path_buf();
        // Listed as a profile only when it is a file; read through the non-blocking opener
        // either way, which refuses it.
        let files = trust::fifo::returns(&fifo, move || read_profile_dir(&d)).unwrap();
        assert!(files.is_empty(), "{files:?}");
        let err = trust::fifo::returns(&fifo, {
            let fifo = fifo.clone();
            move || {
                trust::open_regular(&fifo)
                    .and_then(|f| trust::read_bounded_text(f, MAX_PROFILE_BYTES))
            }
        })
        .expect_err("a FIFO");
        assert!(err.to_string().contains("a FIFO"), "{err}");
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_PROFILE_BYTES as usize + 1]).unwrap();
        let err = read_profile_dir(dir.path()).expect_err("too large");
        assert!(err.to_string().contains("larger than"), "{err}");
    }

    #[test]
    fn missing_dir_is_empty_and_files_are_read_sorted() {
        assert!(
            read_profile_dir(Path::new("/nonexistent/gpu-affinity"))
                .unwrap()
                .is_empty()
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.toml"), "description = \"b\"\n[match]\n").unwrap();
        std::fs::write(dir.path().join("a.toml"), "description = \"a\"\n[match]\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let files = read_profile_dir(dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        assert!(files[0].0.ends_with("a.toml"));
        let p = load(&files).unwrap();
        assert!(p.get("a").is_some() && p.get("b").is_some());
    }

    #[test]
    fn load_trusted_takes_root_files_and_refuses_what_others_can_change() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let chmod = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("profiles.d");
        assert_eq!(load_trusted(&dir, 0).unwrap(), Profiles::builtin());
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o755);
        let file = dir.join("site.toml");
        std::fs::write(&file, "description = \"site\"\n[match]\n").unwrap();
        chmod(&file, 0o644);
        let owner = std::fs::metadata(&file).unwrap().uid();
        let p = load_trusted(&dir, owner).unwrap();
        assert_eq!(p.get("site").map(|p| p.description.as_str()), Some("site"));
        assert_eq!(p.iter().count(), EMBEDDED.len() + 1);

        let refused = |want: String| {
            let e = load_trusted(&dir, owner).unwrap_err();
            assert!(matches!(e, ProfileError::Untrusted(_)), "{e:?}");
            assert_eq!(e.to_string(), want);
        };
        chmod(&file, 0o666);
        refused(format!(
            "profile {} is writable by group or others (mode 0666); refusing it",
            file.display()
        ));
        chmod(&file, 0o644);
        chmod(&dir, 0o775);
        refused(format!(
            "profiles directory {} is writable by group or others (mode 0775); refusing it",
            dir.display()
        ));
        chmod(&dir, 0o755);
        let e = load_trusted(&dir, owner + 1).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "profiles directory {} is owned by uid {owner}, not root; refusing it",
                dir.display()
            )
        );
    }
}
