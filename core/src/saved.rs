//! Copies of what a root-side program read from the node, for the next process to use
//! while the node is unchanged.
//!
//! slurmstepd is a new process for every step, so everything the plugin reads from the
//! node it reads again per step: about 280 sysfs files for the machine, and every
//! profile's TOML. A copy is the value as JSON behind a first line, its *fingerprint*:
//! a short text that cheaply says which node state the value was read from. The reader
//! makes the fingerprint *before* it reads the value, so a change that races the read
//! only makes the copy look older than it is (the next step reads afresh), never newer.
//!
//! - [`node_fingerprint`]: what changes a [`Detail::Placement`] machine without a
//!   reboot: PCI functions appear or go (hotplug, unbind), RDMA and network devices,
//!   the NVIDIA driver's GPU list, CPUs and NUMA nodes online. Also the boot, the
//!   build and the root's identity (a fixture tree replaced by another).
//! - [`dir_fingerprint`]: a directory of admin files (profiles.d): the directory's and
//!   every entry's stat stamp (owner, mode, size, times), so an edit, a rename or a
//!   chmod that makes a file untrusted all change it. (Two writes of the same size
//!   within one tick of the kernel's coarse timestamps look alike; editors and package
//!   managers replace a file, which gives it a new inode.)
//!
//! Where copies live, and who may write them, is the caller's (the plugin keeps them
//! root's alone in its run_dir).
//!
//! [`Detail::Placement`]: crate::sources::sysfs::Detail::Placement

use std::fs::Metadata;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Bumped when what a fingerprint covers changes: older copies then never match.
const FORMAT: u32 = 1;

/// A copy is a machine description or a set of profiles: tens of KiB. Anything near
/// this is not one of ours.
pub const MAX_SAVED_BYTES: u64 = 4 << 20;

/// Most entries a listing in a fingerprint takes (a node has a few hundred PCI
/// functions); past it the fingerprint is `None` and the caller reads afresh.
const MAX_ENTRIES: usize = 16 * 1024;

/// The copy's bytes: the fingerprint as one JSON string line, then the value's JSON.
pub fn to_bytes<T: Serialize>(fingerprint: &str, value: &T) -> Result<Vec<u8>, String> {
    let mut bytes = serde_json::to_vec(fingerprint).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    serde_json::to_writer(&mut bytes, value).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The copy's value when it was saved under `fingerprint`; `None` for another
/// fingerprint or anything malformed (the caller reads afresh).
pub fn value_if_current<T: DeserializeOwned>(bytes: &[u8], fingerprint: &str) -> Option<T> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let (header, value) = (&bytes[..newline], &bytes[newline + 1..]);
    if header != serde_json::to_vec(fingerprint).ok()?.as_slice() {
        return None;
    }
    // One UTF-8 check of the whole value, then serde_json's str reader: from_slice
    // checks every string on its own, and those checks were an eighth of a step's
    // decode of the node's copy (perf, `gpu-affinity bench`).
    serde_json::from_str(std::str::from_utf8(value).ok()?).ok()
}

/// The identity of one filesystem object: what a rewrite, a chmod or a replacement
/// changes (device, inode, mode, owner, size, modification and change times).
fn stamp(meta: &Metadata) -> String {
    format!(
        "{}:{}:{:o}:{}:{}:{}.{}:{}.{}",
        meta.dev(),
        meta.ino(),
        meta.mode(),
        meta.uid(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    )
}

/// The sorted names in `dir`; an absent directory lists as `-`. `None`: past
/// [`MAX_ENTRIES`] or unreadable.
fn listing(dir: &Path) -> Option<String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some("-".into()),
        Err(_) => return None,
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(entry.ok()?.file_name().to_string_lossy().into_owned());
        if names.len() > MAX_ENTRIES {
            return None;
        }
    }
    names.sort_unstable();
    Some(names.join(","))
}

/// A small text file's content (cpu/online, boot_id), through the one non-blocking,
/// regular-files-only open (a FIFO in a replayed tree never hangs a step); absent reads
/// as `-`.
fn small_text(path: &Path) -> Option<String> {
    match crate::trust::open_regular(path) {
        Ok(f) => Some(
            crate::trust::read_bounded_text(f, 4096)
                .ok()?
                .trim()
                .to_string(),
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some("-".into()),
        Err(_) => None,
    }
}

/// The fingerprint of the machine under sysfs root `root`, as [`Detail::Placement`]
/// discovery reads it (see the module doc): 9 reads instead of about 280. `None` when
/// something could not be read (the caller reads afresh and saves nothing).
///
/// The listings catch what discovery's answer depends on and a running node can
/// change: a PCI function, an RDMA or network device, a GPU of the NVIDIA driver, a
/// CPU or NUMA node brought on- or offline. What a listing cannot show (a device's
/// attributes) does not change while the device stays; the kernel's boot id covers
/// the rest. The root's own stamp and that of its PCI directory tell one fixture tree
/// from another made at the same path.
///
/// [`Detail::Placement`]: crate::sources::sysfs::Detail::Placement
pub fn node_fingerprint(root: &Path) -> Option<String> {
    let mut parts = vec![
        format!("format {FORMAT} {}", env!("CARGO_PKG_VERSION")),
        format!("root {}", root.display()),
        // The live kernel's boot, whatever the root: a tree replayed after a reboot is
        // read afresh too.
        format!(
            "boot {}",
            small_text(Path::new("/proc/sys/kernel/random/boot_id"))?
        ),
    ];
    for dir in ["", "sys/bus/pci/devices"] {
        let meta = std::fs::symlink_metadata(root.join(dir)).ok()?;
        parts.push(format!("stamp {dir} {}", stamp(&meta)));
    }
    for dir in [
        "sys/bus/pci/devices",
        "sys/class/infiniband",
        "sys/class/net",
        "proc/driver/nvidia/gpus",
        "sys/devices/system/node",
    ] {
        parts.push(format!("list {dir} {}", listing(&root.join(dir))?));
    }
    for file in [
        "sys/devices/system/cpu/online",
        "sys/devices/system/node/online",
    ] {
        parts.push(format!("text {file} {}", small_text(&root.join(file))?));
    }
    Some(parts.join("\n"))
}

/// The fingerprint of the admin files in `dir` (profiles.d): its own stamp and every
/// entry's (a symlink's target's too), by name. An absent directory has one of its own.
/// `None` when it could not be read whole (the caller reads afresh and saves nothing).
pub fn dir_fingerprint(dir: &Path) -> Option<String> {
    let mut parts = vec![
        format!("format {FORMAT} {}", env!("CARGO_PKG_VERSION")),
        format!("dir {}", dir.display()),
    ];
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            parts.push("absent".into());
            return Some(parts.join("\n"));
        }
        Err(_) => return None,
    };
    parts.push(format!("self {}", stamp(&meta)));
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let path = entry.path();
        let own = std::fs::symlink_metadata(&path).ok()?;
        // A symlink's target can change under the same link: stamp what it leads to.
        let target = match own.file_type().is_symlink() {
            true => std::fs::metadata(&path).map(|m| stamp(&m)).ok(),
            false => None,
        };
        entries.push(format!(
            "entry {} {} {}",
            entry.file_name().to_string_lossy(),
            stamp(&own),
            target.as_deref().unwrap_or("-")
        ));
        if entries.len() > MAX_ENTRIES {
            return None;
        }
    }
    entries.sort_unstable();
    parts.extend(entries);
    Some(parts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_copy_reads_back_under_its_own_fingerprint_only() {
        let value = vec!["a".to_string(), "b\nc".to_string()];
        let bytes = to_bytes("fp \"1\"\nline two", &value).unwrap();
        assert_eq!(
            value_if_current::<Vec<String>>(&bytes, "fp \"1\"\nline two"),
            Some(value)
        );
        assert_eq!(value_if_current::<Vec<String>>(&bytes, "fp 2"), None);
        // Truncated, or not ours at all: no value, no panic.
        assert_eq!(
            value_if_current::<Vec<String>>(&bytes[..bytes.len() - 3], "fp \"1\"\nline two"),
            None
        );
        assert_eq!(value_if_current::<Vec<String>>(b"", "x"), None);
        assert_eq!(value_if_current::<Vec<String>>(b"\"x\"\n{", "x"), None);
    }

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for dir in [
            "sys/bus/pci/devices/0000:00:01.0",
            "sys/class/infiniband/mlx5_0",
            "sys/class/net/eth0",
            "sys/devices/system/node/node0",
            "sys/devices/system/cpu",
        ] {
            fs::create_dir_all(t.path().join(dir)).unwrap();
        }
        fs::write(t.path().join("sys/devices/system/cpu/online"), "0-7\n").unwrap();
        t
    }

    #[test]
    fn the_node_fingerprint_changes_with_what_discovery_depends_on() {
        let t = tree();
        let root = t.path();
        let first = node_fingerprint(root).unwrap();
        assert_eq!(node_fingerprint(root).unwrap(), first, "stable");
        // Each change below changes it; undone, it is the same again.
        type Change<'a> = (&'a str, &'a dyn Fn(), &'a dyn Fn());
        let changes: [Change; 4] = [
            (
                "a PCI function unplugged",
                &|| fs::remove_dir(root.join("sys/bus/pci/devices/0000:00:01.0")).unwrap(),
                &|| fs::create_dir(root.join("sys/bus/pci/devices/0000:00:01.0")).unwrap(),
            ),
            (
                "an RDMA device gone",
                &|| fs::remove_dir(root.join("sys/class/infiniband/mlx5_0")).unwrap(),
                &|| fs::create_dir(root.join("sys/class/infiniband/mlx5_0")).unwrap(),
            ),
            (
                "a CPU offline",
                &|| fs::write(root.join("sys/devices/system/cpu/online"), "0-6\n").unwrap(),
                &|| fs::write(root.join("sys/devices/system/cpu/online"), "0-7\n").unwrap(),
            ),
            (
                "a GPU of the NVIDIA driver",
                &|| fs::create_dir_all(root.join("proc/driver/nvidia/gpus/0000:01:00.0")).unwrap(),
                &|| fs::remove_dir_all(root.join("proc")).unwrap(),
            ),
        ];
        for (what, change, undo) in changes {
            change();
            let changed = node_fingerprint(root).unwrap();
            undo();
            assert_ne!(changed, first, "{what}");
        }
        // Another tree at another path, or the same path made anew.
        let other = tree();
        assert_ne!(node_fingerprint(other.path()).unwrap(), first);
    }

    #[test]
    fn the_dir_fingerprint_changes_with_an_edit_a_chmod_or_a_new_file() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("profiles.d");
        let absent = dir_fingerprint(&dir).unwrap();
        fs::create_dir(&dir).unwrap();
        let empty = dir_fingerprint(&dir).unwrap();
        assert_ne!(absent, empty);
        fs::write(dir.join("a.toml"), "x").unwrap();
        let one = dir_fingerprint(&dir).unwrap();
        assert_ne!(one, empty);
        assert_eq!(dir_fingerprint(&dir).unwrap(), one, "stable");
        // Another size: two writes of the same size within one clock tick of the
        // kernel's timestamps look the same (editors replace the file: a new inode).
        fs::write(dir.join("a.toml"), "yy").unwrap();
        let edited = dir_fingerprint(&dir).unwrap();
        assert_ne!(edited, one, "an edit");
        fs::set_permissions(dir.join("a.toml"), fs::Permissions::from_mode(0o666)).unwrap();
        assert_ne!(dir_fingerprint(&dir).unwrap(), edited, "a chmod");
        // A symlink whose target is edited.
        fs::write(t.path().join("target.toml"), "1").unwrap();
        std::os::unix::fs::symlink(t.path().join("target.toml"), dir.join("b.toml")).unwrap();
        let linked = dir_fingerprint(&dir).unwrap();
        fs::write(t.path().join("target.toml"), "22").unwrap();
        assert_ne!(dir_fingerprint(&dir).unwrap(), linked, "a symlink's target");
    }
}
