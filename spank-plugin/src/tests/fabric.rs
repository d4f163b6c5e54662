//! The fabric environment: one facade with explain, profiles, force, vendor files.

use super::*;

#[test]
fn a_users_ucx_net_devices_is_kept_on_every_rank() {
    let node = NodeStep::new(AZURE, "strict", &[], &[("UCX_NET_DEVICES", "mlx5_ib7:1")]);
    node.post_fork();
    for local in 0..8 {
        let t = node.task(local).expect("task_init");
        assert_eq!(
            t.var("UCX_NET_DEVICES").as_deref(),
            Some("mlx5_ib7:1"),
            "rank {local}"
        );
        assert!(t.var("GPU_AFFINITY_NICS").is_some());
    }
}

#[test]
fn aws_p5_ranks_get_no_ucx_net_devices() {
    // EFA: the p5 profile leaves UCX to the user (no verbs device UCX could use).
    let node = NodeStep::new("p5.48xlarge", "prefer", &[], &[]);
    node.post_fork();
    for local in 0..8 {
        let t = node.task(local).expect("task_init");
        assert_eq!(t.var("UCX_NET_DEVICES"), None, "rank {local}");
        assert_eq!(t.var("FI_PROVIDER").as_deref(), Some("efa"), "rank {local}");
        assert!(
            !t.var("GPU_AFFINITY_NICS").unwrap_or_default().is_empty(),
            "rank {local} has EFA NICs"
        );
    }
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v.dedup();
    v
}

#[test]
fn azure_gets_a_generated_nccl_topology_that_describes_the_node() {
    let node = NodeStep::new(AZURE, "strict", &[], &[]);
    let topology = node
        .planned()
        .fabric
        .topology
        .clone()
        .expect("the vendor file is absent: a topology is generated");
    let step_dirs = node.run.path().join("gpu-affinity");
    assert_eq!(topology.dir.parent(), Some(step_dirs.as_path()));
    assert!(
        !topology.file.exists(),
        "user_init (as the user) writes nothing"
    );

    node.post_fork();
    let text = std::fs::read_to_string(&topology.file).expect("written by task_post_fork");
    for local in 0..8 {
        let t = node.task(local).expect("task_init");
        assert_eq!(
            t.var("NCCL_TOPO_FILE").as_deref(),
            topology.file.to_str(),
            "rank {local}"
        );
    }
    // The placement read left the links out; the file still carries them, as a full read
    // of the node would give them.
    assert_eq!(node.os.link_reads.get(), 1);
    assert_eq!(
        text,
        gpu_affinity::fabric::topo_xml::render(
            &node.machine,
            &gpu_affinity::fabric::fabric_nics(
                &node.machine,
                &gpu_affinity::fabric::profiles::Profiles::builtin()
            )
        )
    );
    assert!(text.contains("link_speed=\"32.0 GT/s PCIe\""), "{text}");
    // NCCL reads back the node it was written from: the same GPUs and fabric NICs.
    let parsed = gpu_affinity::sources::nccl_xml::parse(&text).expect("NCCL topology XML");
    let gpus = |m: &Machine| sorted(m.gpus.iter().map(|g| g.pci).collect());
    assert_eq!(gpus(&parsed), gpus(&node.machine));
    let ib = |m: &Machine| {
        sorted(
            m.nics
                .iter()
                .filter(|n| n.kind == NicKind::Infiniband)
                .map(|n| n.pci)
                .collect(),
        )
    };
    assert_eq!(ib(&parsed).len(), 8);
    assert_eq!(ib(&parsed), ib(&node.machine));
    for gpu in &node.machine.gpus {
        assert_eq!(
            parsed.numa_of(gpu.pci),
            node.machine.numa_of(gpu.pci),
            "{}",
            gpu.pci
        );
    }

    // slurm_spank_exit removes the step directory, and only it.
    dispatch(&node.plugin, Hook::Exit, &node.host, &node.os, &[]).expect("exit");
    assert!(!topology.dir.exists());
    assert!(step_dirs.is_dir());
}

/// The vendor file decides NCCL_TOPO_FILE for every job on the node: used when it is
/// root's alone, refused (and a topology generated instead) when others can write it.
#[test]
fn a_vendor_topology_file_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    const VENDOR: &str = "/opt/microsoft/ndv5-topo.xml";
    for (mode, used) in [(0o644, true), (0o664, false), (0o666, false)] {
        logger::take();
        let node = NodeStep::with_tree(AZURE, "strict", &[], &[], |root| {
            let catalog = gpu_affinity::catalog::machine(AZURE).expect("catalog");
            let file = root.join(VENDOR.trim_start_matches('/'));
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
            std::fs::write(
                &file,
                gpu_affinity::fabric::topo_xml::render(&catalog, &catalog.fabric_nics()),
            )
            .expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        });
        let planned = node.planned();
        let topo_file = planned
            .fabric
            .env
            .node
            .get("NCCL_TOPO_FILE")
            .map(|v| v.value.clone());
        let logs = logger::take();
        if used {
            assert_eq!(topo_file.as_deref(), Some(VENDOR), "{logs:?}");
            assert!(planned.fabric.topology.is_none());
        } else {
            assert_ne!(topo_file.as_deref(), Some(VENDOR), "mode {mode:o}");
            assert!(planned.fabric.topology.is_some(), "generated instead");
            assert!(
                logs.iter().any(|(_, t)| t.contains(&format!(
                    "ndv5-topo.xml is writable by group or others (mode {mode:04o})"
                ))),
                "{logs:?}"
            );
        }
    }
}

#[test]
fn the_users_nccl_topo_file_wins_and_nothing_is_generated() {
    let node = NodeStep::new(
        AZURE,
        "strict",
        &[],
        &[("NCCL_TOPO_FILE", "/home/me/topo.xml")],
    );
    assert!(node.planned().fabric.topology.is_none());
    node.post_fork();
    let t = node.task(0).expect("task_init");
    assert_eq!(
        t.var("NCCL_TOPO_FILE").as_deref(),
        Some("/home/me/topo.xml")
    );
    assert_eq!(
        std::fs::read_dir(node.run.path()).expect("run").count(),
        0,
        "no step directory"
    );
}

/// A root-owned config file (this user's, in tests) with `[fabric]` settings.
fn config_file(dir: &Path, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("config.toml");
    std::fs::write(&path, text).expect("write config");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    format!("config={}", path.display())
}

#[test]
fn a_users_nccl_ib_hca_wins_unless_the_admin_forces_it() {
    let user = [("NCCL_IB_HCA", "mlx5_7")];
    let node = NodeStep::new(AZURE, "strict", &[], &user);
    node.post_fork();
    let profile_hca = {
        let v = node
            .planned()
            .fabric
            .env
            .node
            .get("NCCL_IB_HCA")
            .expect("rendered");
        assert!(!v.to_export(), "user_set");
        v.value.clone()
    };
    for local in 0..8 {
        let t = node.task(local).expect("task_init");
        assert_eq!(t.var("NCCL_IB_HCA").as_deref(), Some("mlx5_7"));
        // The rest of the profile is still exported.
        assert!(t.var("NCCL_TOPO_FILE").is_some());
    }
    assert_eq!(profile_hca, "mlx5_7");

    let conf = tempfile::tempdir().expect("tempdir");
    let config = config_file(conf.path(), "[fabric]\nforce = [\"NCCL_IB_HCA\"]\n");
    let forced = NodeStep::new(AZURE, "strict", &[config], &user);
    forced.post_fork();
    let t = forced.task(3).expect("task_init");
    let hca = t.var("NCCL_IB_HCA").expect("forced");
    assert_ne!(hca, "mlx5_7");
    // The node's fabric devices, never a per-rank list.
    for nic in forced
        .machine
        .nics
        .iter()
        .filter(|n| n.kind == NicKind::Infiniband)
    {
        let rdma = nic.rdma.as_deref().expect("rdma name");
        assert!(hca.contains(rdma), "{rdma} not in {hca}");
    }
}

#[test]
fn a_bad_force_list_is_a_load_error_naming_it() {
    let conf = tempfile::tempdir().expect("tempdir");
    for (text, needle) in [
        ("[fabric]\nforce = [\"NCCL IB\"]\n", "force = 'NCCL IB'"),
        (
            "[fabric]\nforce = [\"CUDA_VISIBLE_DEVICES\"]\n",
            "force = 'CUDA_VISIBLE_DEVICES'",
        ),
        ("[fabric]\nforced = [\"NCCL_IB_HCA\"]\n", "forced"),
    ] {
        let config = config_file(conf.path(), text);
        let plugin = Plugin::new();
        let host = FakeHost::new(Context::Remote);
        let err = crate::init::init_with_config(
            &plugin,
            &host,
            &[config],
            Path::new("/nonexistent.toml"),
            uid(),
        )
        .expect_err(text);
        assert!(err.0.contains(needle), "{text}: {err}");
    }
}

/// An admin profiles.d with one file, root's (this user's) and 0644.
fn profiles_dir(text: &str) -> (tempfile::TempDir, String, String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().join("profiles.d");
    std::fs::create_dir(&d).expect("mkdir");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let file = d.join("azure-ndv5.toml");
    std::fs::write(&file, text).expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let arg = format!("profiles_dir={}", d.display());
    (dir, arg, file.display().to_string())
}

/// Line 7 has a number where a string belongs.
const MALFORMED: &str = "description = \"site\"\n[match]\nvendor = \"azure\"\n\n[[env]]\nkey = \"NCCL_IB_TC\"\nvalue = 3\nsource = \"site\"\n";

#[test]
fn a_malformed_admin_profile_refuses_the_step_under_strict_naming_file_and_line() {
    let (_keep, arg, file) = profiles_dir(MALFORMED);
    logger::take();
    let node = NodeStep::new(AZURE, "strict", &[arg], &[]);
    let errors: Vec<String> = logger::take()
        .into_iter()
        .filter(|(l, _)| *l == SlurmLevel::Error)
        .map(|(_, t)| t)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!("gpu-affinity: profile {file}:7: ")),
        "{errors:?}"
    );
    assert!(matches!(
        node.plugin.step(),
        Some(StepOutcome::Refused { .. })
    ));
    let err = node.refused(2);
    assert!(
        err.0
            .starts_with(&format!("gpu-affinity: rank 102: profile {file}:7: "))
            && err
                .0
                .ends_with("; use --gpu-affinity=prefer or drain this node"),
        "{err}"
    );
}

#[test]
fn a_malformed_admin_profile_under_prefer_falls_back_to_the_built_in_ones_with_a_warning() {
    let (_keep, arg, file) = profiles_dir(MALFORMED);
    let node = NodeStep::new(AZURE, "prefer", &[arg], &[]);
    node.post_fork();
    logger::take();
    let t = node.task(0).expect("prefer runs");
    assert!(t.var("NCCL_IB_HCA").is_some(), "built-in profile applied");
    let warned = node.os.stderr.borrow();
    assert!(
        warned
            .iter()
            .any(|l| l.starts_with("gpu-affinity: warning: profile ")
                && l.contains(&format!("{file}:7: "))
                && l.ends_with("; using the built-in fabric profiles")),
        "{warned:?}"
    );
}

#[test]
fn an_admin_profile_replaces_the_built_in_one() {
    let text = "description = \"site\"\n[match]\nvendor = \"azure\"\nfamily = [\"ndv5\"]\n\n[[env]]\nkey = \"NCCL_IB_TC\"\nvalue = \"106\"\nsource = \"site network team\"\n";
    let (_keep, arg, _) = profiles_dir(text);
    let node = NodeStep::new(AZURE, "strict", &[arg], &[]);
    node.post_fork();
    let t = node.task(0).expect("task_init");
    assert_eq!(t.var("NCCL_IB_TC").as_deref(), Some("106"));
    assert_eq!(
        t.var("NCCL_IB_HCA"),
        None,
        "the site's profile sets only TC"
    );
}

#[test]
fn an_admin_profiles_dir_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (keep, arg, _) = profiles_dir(MALFORMED);
    let d = keep.path().join("profiles.d");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let node = NodeStep::new(AZURE, "strict", &[arg], &[]);
    let err = node.refused(0);
    assert!(
        err.0.contains("profiles directory")
            && err.0.contains("writable by group or others (mode 0777)"),
        "{err}"
    );
}

/// Fabric detection runs once per step, in init_post_opt: user_init plans the NICs and
/// renders the environment of the profile that detection picked, never detecting again.
/// Swapping the detection init_post_opt left (Azure's) for AWS p5's shows it: the step
/// gets p5's EFA variables on an InfiniBand node.
#[test]
fn user_init_renders_the_profile_init_post_opt_detected() {
    const P5: &str = "aws-p5";
    assert!(
        gpu_affinity::fabric::profiles::Profiles::builtin()
            .get(P5)
            .is_some()
    );
    let node = NodeStep::new(AZURE, "prefer", &[], &[]);
    let Some(Prepared::Ready {
        resolved,
        step_id,
        node: mut inputs,
    }) = node.plugin.prepared().cloned()
    else {
        panic!("init_post_opt left a GPU step to plan");
    };
    assert_ne!(inputs.detection.profile, P5);
    let azure = node.planned().fabric.env.node.get("FI_PROVIDER").cloned();
    assert_eq!(azure, None, "Azure's profile sets no libfabric provider");
    // As if init_post_opt had detected the p5 profile (and kept it alone).
    inputs.detection.profile = P5.into();
    inputs.profiles = gpu_affinity::fabric::profiles::Profiles::builtin().only(P5);
    let plugin = Plugin::new();
    plugin.set_settings(node.plugin.settings());
    plugin.set_option(node.plugin.option());
    plugin.set_prepared(Prepared::Ready {
        resolved,
        step_id,
        node: inputs,
    });
    dispatch(&plugin, Hook::UserInit, &node.host, &node.os, &[]).expect("user_init");
    let Some(StepOutcome::Planned(step)) = plugin.step() else {
        panic!("planned: {:?}", plugin.step());
    };
    assert_eq!(
        step.fabric
            .env
            .node
            .get("FI_PROVIDER")
            .map(|v| v.value.as_str()),
        Some("efa")
    );
}
