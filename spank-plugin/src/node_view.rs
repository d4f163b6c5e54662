//! The node as a step's plan sees it, the core's [`NodeView`]: the machine
//! ([`Detail::Placement`] under `sysfs_root`), the fabric detection over it and the
//! profiles (built-in plus the admin's `profiles_dir`), and the one profile that
//! detection picked. Read as root in init_post_opt ([`crate::node`]), through the
//! node's copy in run_dir (`copies.rs`).
//!
//! One copy for all three: the machine alone is 20 KiB of JSON and the full set of
//! profiles 47 KiB, of which a step uses one profile; decoding both and detecting again
//! was 0.5 ms of every step's init_post_opt (issue 21). The copy is current while both
//! the node ([`saved::node_fingerprint`]) and the profiles directory
//! ([`saved::dir_fingerprint`]) are as they were when it was saved, so a hotplug, an
//! edit, a rename or a chmod that makes a profile untrusted is read by the next step.
//! An error is never saved: an unreadable node or an unusable profile is read afresh,
//! and reported, by every step until it is fixed.
//!
//! [`Detail::Placement`]: gpu_affinity::sources::sysfs::Detail::Placement

use std::path::Path;

use gpu_affinity::fabric::NodeView;
use gpu_affinity::fabric::profiles::Profiles;
use gpu_affinity::model::Machine;
use gpu_affinity::saved;
use gpu_affinity::sources::sysfs::Detail;

use crate::copies::Copies;

/// The node's copy of its [`NodeView`] in run_dir.
pub const COPY: &str = "node.json";

/// Why a node could not be viewed: its machine could not be read, or its profiles could
/// not be used (the machine, read already, comes with the reason: prefer carries on
/// with the built-in profiles).
pub enum ViewError {
    Machine(String),
    Profiles {
        reason: String,
        machine: Box<Machine>,
    },
}

/// The reason alone: the machine that comes with a profile error is hundreds of lines.
impl std::fmt::Debug for ViewError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ViewError::Machine(reason) => write!(f, "Machine({reason:?})"),
            ViewError::Profiles { reason, .. } => write!(f, "Profiles({reason:?})"),
        }
    }
}

/// The view read afresh: `read_machine`, then `load_profiles`, then detection.
pub fn read_afresh(
    read_machine: impl FnOnce() -> Result<Machine, String>,
    load_profiles: impl FnOnce() -> Result<Profiles, String>,
) -> Result<NodeView, ViewError> {
    let machine = read_machine().map_err(ViewError::Machine)?;
    match load_profiles() {
        Ok(profiles) => Ok(NodeView::detect(machine, &profiles)),
        Err(reason) => Err(ViewError::Profiles {
            reason,
            machine: Box::new(machine),
        }),
    }
}

/// [`read_afresh`] through the copy: the node under `root` and the profiles in
/// `profiles_dir` (trust-checked for `owner`).
pub fn step_view(
    root: &Path,
    profiles_dir: &Path,
    owner: u32,
    copies: &Copies,
) -> Result<NodeView, ViewError> {
    // Both fingerprints are made before the read (saved.rs: a change that races the
    // read only makes the copy look older than it is).
    let fingerprint = saved::node_fingerprint(root)
        .zip(saved::dir_fingerprint(profiles_dir))
        .map(|(node, dir)| format!("{node}\n{dir}"));
    copies.through(COPY, fingerprint, || {
        read_afresh(
            || crate::sysfs_machine::read_machine(root, Detail::Placement),
            || crate::fabric_env::load_profiles(profiles_dir, owner),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The site's own p5 profile, replacing the built-in one of the same name: the one
    /// detection picks on the p5.48xlarge fixture.
    const PROFILE: &str = "description = \"site\"\n[match]\nvendor = \"aws\"\nfamily = [\"p5\"]\n\n[[env]]\nkey = \"NCCL_DEBUG\"\nvalue = \"INFO\"\nsource = \"site\"\n";
    const FILE: &str = "aws-p5.toml";

    fn me() -> u32 {
        nix::unistd::getuid().as_raw()
    }

    /// A p5.48xlarge fixture tree, a profiles.d with the site's p5 profile and a
    /// run_dir, under a private temp dir (the run_dir walk checks every directory).
    struct Node {
        _t: tempfile::TempDir,
        root: std::path::PathBuf,
        dir: std::path::PathBuf,
        run: std::path::PathBuf,
    }

    impl Node {
        fn new() -> Node {
            let t = tempfile::tempdir().unwrap();
            std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            let root = t.path().join("node");
            let catalog = gpu_affinity::catalog::machine("p5.48xlarge").unwrap();
            gpu_affinity::sources::fixture::write_fixture(&catalog, &root).unwrap();
            let dir = t.path().join("profiles.d");
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join(FILE), PROFILE).unwrap();
            let run = t.path().join("run");
            Node {
                _t: t,
                root,
                dir,
                run,
            }
        }

        /// One step's view: each step has its own way to the copies, as slurmstepd does.
        fn step(&self) -> Result<NodeView, ViewError> {
            step_view(&self.root, &self.dir, me(), &Copies::new(&self.run, me()))
        }

        fn fresh(&self) -> Result<NodeView, ViewError> {
            read_afresh(
                || crate::sysfs_machine::read_machine(&self.root, Detail::Placement),
                || crate::fabric_env::load_profiles(&self.dir, me()),
            )
        }

        /// Write `view` as the copy under the node's current fingerprint.
        fn plant(&self, view: &NodeView) {
            let fingerprint = format!(
                "{}\n{}",
                saved::node_fingerprint(&self.root).unwrap(),
                saved::dir_fingerprint(&self.dir).unwrap()
            );
            std::fs::write(
                self.run.join(COPY),
                saved::to_bytes(&fingerprint, view).unwrap(),
            )
            .unwrap();
        }
    }

    fn reason(e: ViewError) -> String {
        match e {
            ViewError::Machine(r) | ViewError::Profiles { reason: r, .. } => r,
        }
    }

    #[test]
    fn the_copy_serves_until_the_node_or_the_profiles_change() {
        let node = Node::new();
        let fresh = node.fresh().unwrap();
        assert_eq!(fresh.profiles.get("aws-p5").unwrap().description, "site");
        assert_eq!(node.step().unwrap(), fresh);
        let copy = node.run.join(COPY);
        let mode = std::fs::metadata(&copy).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "saved, root's alone");

        // The next step is served the copy: one written behind the fingerprints' back
        // shows it, so a re-read could not pass for it.
        let mut planted = fresh.clone();
        planted.machine.gpus.pop();
        planted.detection.evidence.push("planted".into());
        node.plant(&planted);
        assert_eq!(node.step().unwrap(), planted, "from the copy");

        // A profile edited: read afresh by the next step, and saved.
        std::fs::write(node.dir.join(FILE), PROFILE.replace("INFO", "TRACE")).unwrap();
        let edited = node.step().unwrap();
        assert_eq!(edited, node.fresh().unwrap());
        assert_ne!(edited, fresh);
        assert_eq!(node.step().unwrap(), edited);

        // A NIC unplugged: the same.
        node.plant(&planted);
        let nic = fresh.machine.nics[0].pci.to_string();
        let pci = node.root.join("sys/bus/pci/devices").join(nic);
        std::fs::remove_dir_all(&pci)
            .or_else(|_| std::fs::remove_file(&pci))
            .unwrap();
        let unplugged = node.step().unwrap();
        assert_eq!(unplugged, node.fresh().unwrap());
        assert_ne!(unplugged.machine, fresh.machine);
    }

    #[test]
    fn an_unusable_profile_or_node_is_reported_by_every_step_and_never_saved() {
        let node = Node::new();
        let file = node.dir.join(FILE);
        // Made writable by others: refused with the machine read, by this step and the
        // next.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let Err(ViewError::Profiles { reason, machine }) = node.step() else {
            panic!("an untrusted profile was used");
        };
        assert!(reason.contains(FILE), "{reason}");
        assert_eq!(
            *machine,
            crate::sysfs_machine::read_machine(&node.root, Detail::Placement).unwrap()
        );
        assert_eq!(self::reason(node.step().unwrap_err()), reason);
        assert!(!node.run.join(COPY).exists());

        // A parse error names the file and the line.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&file, "description = \n").unwrap();
        let bad = self::reason(node.step().unwrap_err());
        assert!(bad.contains("aws-p5.toml:1"), "{bad}");
        assert!(!node.run.join(COPY).exists());

        // A node whose topology cannot be read.
        std::fs::write(&file, PROFILE).unwrap();
        let node0 = node.root.join("sys/devices/system/node/node0");
        std::fs::write(node0.join("cpulist"), "not a cpu list\n").unwrap();
        let Err(ViewError::Machine(err)) = node.step() else {
            panic!("an unreadable node was viewed");
        };
        assert_eq!(
            err,
            crate::sysfs_machine::read_machine(&node.root, Detail::Placement).unwrap_err()
        );
        assert!(!node.run.join(COPY).exists());
    }
}
