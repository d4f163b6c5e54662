//! One node of a step over a catalog machine, shared by the end-to-end and fabric tests.

use super::*;

/// The catalog machine most fabric and step-directory tests run on.
pub(super) const AZURE: &str = "standard_nd96isr_h100_v5";

/// One node of a full-node step over a catalog machine: the machine written as a sysfs
/// tree and read back by the core's sysfs reader, a private run_dir, the plugin after
/// init and user_init, and the step's host.
pub(super) struct NodeStep {
    pub(super) _fixture: tempfile::TempDir,
    pub(super) run: tempfile::TempDir,
    pub(super) machine: Machine,
    pub(super) plugin: Plugin,
    pub(super) host: FakeHost,
    pub(super) os: FakeOs,
}

impl NodeStep {
    /// `args`: extra plugstack arguments; `env`: the user's own job environment.
    pub(super) fn new(name: &str, choice: &str, args: &[String], env: &[(&str, &str)]) -> NodeStep {
        Self::with_tree(name, choice, args, env, |_| {})
    }

    /// [`NodeStep::new`], with `add` putting more files into the node's tree (its sysfs
    /// root) before the step reads it.
    pub(super) fn with_tree(
        name: &str,
        choice: &str,
        args: &[String],
        env: &[(&str, &str)],
        add: impl FnOnce(&Path),
    ) -> NodeStep {
        let catalog = gpu_affinity::catalog::machine(name).expect("catalog machine");
        let fixture = tempfile::tempdir().expect("tempdir");
        gpu_affinity::sources::fixture::write_fixture(&catalog, fixture.path()).expect("fixture");
        add(fixture.path());
        let machine =
            crate::sysfs_machine::read_machine(fixture.path(), Detail::Full).expect("sysfs reader");
        let gpu_count = machine.gpus.len();
        assert_eq!(gpu_count, 8, "{name}");

        let run = tempfile::tempdir().expect("run_dir");
        let mut argv = vec![
            format!("sysfs_root={}", fixture.path().display()),
            format!("run_dir={}", run.path().join("gpu-affinity").display()),
        ];
        argv.extend(args.iter().cloned());
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let plugin = remote_plugin(&argv);
        option_callback::on_option(&plugin, Some(choice), true).expect("mode");
        let ids: Vec<String> = (0..gpu_count).map(|i| i.to_string()).collect();
        let ids = ids.join(",");
        let mut host =
            gpu_host(&[("SLURM_STEP_GPUS", &ids), ("CUDA_VISIBLE_DEVICES", &ids)]).with_env(env);
        host.local_tasks = gpu_count as u32;
        let units = if machine.cores.is_empty() {
            machine.cpus().len()
        } else {
            machine.cores.len()
        };
        host.alloc_cores = Some(format!("0-{}", units - 1));
        let numa: Vec<u32> = machine.numa_nodes.iter().map(|n| n.id).collect();
        let os = FakeOs::new(Ok(machine.clone()), &machine.cpus().to_string(), &numa);
        prepare_step(&plugin, &host, &os);
        NodeStep {
            _fixture: fixture,
            run,
            machine,
            plugin,
            host,
            os,
        }
    }

    pub(super) fn planned(&self) -> &StepPlan {
        match self.plugin.step() {
            Some(StepOutcome::Planned(p)) => p,
            other => panic!("not planned: {other:?}"),
        }
    }

    /// slurmstepd after the fork: task_post_fork for every task (it writes once).
    pub(super) fn post_fork(&self) {
        for local in 0..self.host.local_tasks {
            dispatch(
                &self.plugin,
                Hook::TaskPostFork,
                &self.host.task(local, local),
                &self.os,
                &[],
            )
            .expect("task_post_fork");
        }
    }

    pub(super) fn task(&self, local: u32) -> Result<FakeHost, crate::guard::Failure> {
        let t = self.host.task(local, 100 + local);
        dispatch(&self.plugin, Hook::TaskInit, &t, &self.os, &[]).map(|()| t)
    }

    /// task_init of a task that must fail, with its one line.
    pub(super) fn refused(&self, local: u32) -> crate::guard::Failure {
        match self.task(local) {
            Ok(_) => panic!("task {local} was not refused"),
            Err(f) => f,
        }
    }
}
