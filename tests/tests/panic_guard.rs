//! The panic guard in a real slurmstepd: a plugin built with the `panic-test` feature
//! panics inside the hook plugstack `test_panic=HOOK` names. The step must end (no hang,
//! no core dump), no task may run past a failed hook, slurmd and slurmctld must survive,
//! and the next normal step must run and be bound.

mod common;

use common::{ND_H100_V5, check_step, machine, probe_whole_node, start};
use gpu_affinity_tests::{ClientOptions, ClusterBuilder, Variant};
use std::time::Duration;

/// Remote hooks the plugin's `panic-test` build can panic in.
const HOOKS: &[&str] = &["init", "init_post_opt", "user_init", "task_init", "exit"];

#[test]
fn a_panic_in_any_hook_fails_cleanly_and_the_next_step_runs() {
    let m = machine(ND_H100_V5);
    let builder = ClusterBuilder::new().plugin_variant(Variant::PanicTest);
    let Some(mut cluster) = start("panic_guard", &m, builder) else {
        return;
    };
    let opts = ClientOptions::bounded(30);
    for hook in HOOKS {
        cluster
            .write_plugstack_with(&[("test_panic", hook)])
            .expect("plugstack");
        let log_before = cluster.log("slurmd.log").len();
        let out = probe_whole_node(&cluster, Some("strict"), 8, &opts);
        assert!(!out.timed_out(), "panic in {hook}: srun hung: {out}");
        assert_ne!(
            out.code(),
            Some(134),
            "panic in {hook} aborted a process: {out}"
        );
        // The guard caught the panic and logged its message (the trigger's own text).
        // slurmstepd runs slurm_spank_exit after srun has its tasks' results, so the
        // line may land a moment after srun returns (seen on a loaded 2-core machine
        // with 24.11): wait for it, bounded.
        let logged = |c: &gpu_affinity_tests::Cluster| {
            c.log("slurmd.log")
                .get(log_before..)
                .unwrap_or_default()
                .contains(&format!("test_panic={hook}"))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !logged(&cluster) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            logged(&cluster),
            "no logged panic for {hook}{}",
            cluster.log_tails()
        );
        if *hook == "exit" {
            // slurm_spank_exit runs after the tasks: they ran, bound.
            check_step(&m, &out, "strict", 1);
        } else {
            // A hook before exec failed: no task may run (least of all unbound). Slurm
            // reports the failed launch on srun's stderr; 22.05 still exits 0 when
            // init/init_post_opt/user_init fail, 1 when task_init does.
            let ran = out.tasks().expect("probe").len();
            assert_eq!(ran, 0, "panic in {hook}: tasks ran anyway: {out}");
            assert!(
                out.stderr.contains("fail"),
                "panic in {hook}: no failure on srun's stderr: {out}"
            );
        }
        // srun's exit code, per series: a failed task_init fails the step everywhere;
        // init, init_post_opt and user_init failures exit 0 on 22.05 and 1 from 23.11
        // on (measured on 22.05, 24.11, 26.05); exit runs after a successful step.
        let expected = match *hook {
            "exit" => 0,
            "task_init" => 1,
            _ if cluster.slurm_at_least(23, 11) => 1,
            _ => 0,
        };
        assert_eq!(
            out.code(),
            Some(expected),
            "panic in {hook} on Slurm {}: {out}",
            cluster.series()
        );
        assert!(
            cluster.daemons_alive(),
            "panic in {hook} took a daemon down{}",
            cluster.log_tails()
        );
        cluster
            .wait_idle(Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("after a panic in {hook}: {e}"));

        cluster.write_plugstack_with(&[]).expect("plugstack");
        let out = probe_whole_node(&cluster, Some("strict"), 8, &opts);
        check_step(&m, &out, "strict", 1);
    }
    let cores: Vec<_> = std::fs::read_dir(cluster.dir().join("work"))
        .expect("work dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("core"))
        .collect();
    assert!(cores.is_empty(), "core files left: {cores:?}");
}

/// The guard's unwinder is linked into the plugin (spank-plugin/build/unwinder.rs): the
/// .so needs libc alone (and the loader), so srun and slurmstepd never load libgcc_s.so.1
/// for it (its load was most of what loading the plugin cost a process), and every symbol
/// it leaves to the loader is glibc's or Slurm's own. The panic test above runs the same
/// build, so a panic caught by this unwinder in a real slurmstepd is tested there.
#[test]
fn the_plugin_needs_libc_alone() {
    let tool = |name: &str, args: &[&str], so: &std::path::Path| {
        let out = std::process::Command::new(name)
            .args(args)
            .arg(so)
            .output()
            .unwrap_or_else(|e| panic!("run {name} (binutils): {e}"));
        assert!(out.status.success(), "{name} {args:?} {}", so.display());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for variant in [Variant::Debug, Variant::PanicTest] {
        let so = gpu_affinity_tests::plugin::plugin(variant).expect("build the plugin");
        // The build's own word on what it linked (build/unwinder.rs, exported as
        // `gpu_affinity_unwinder`). A builder who names their own linker keeps that
        // toolchain's unwinder by choice: skipped, saying so. Any other reason (no GCC libgcc_eh.a here, the
        // script not written) is a failure: GCC, which the suite builds with, has it.
        let unwinder = linked_unwinder(&so);
        if unwinder == "the toolchain's (the build names its own linker)" {
            eprintln!("skip: {} was built with {unwinder}", so.display());
            continue;
        }
        assert_eq!(unwinder, "static libgcc_eh", "{variant:?} {}", so.display());
        let dynamic = tool("readelf", &["-d"], &so);
        let needed: Vec<&str> = dynamic
            .lines()
            .filter(|l| l.contains("(NEEDED)"))
            .filter_map(|l| l.split('[').nth(1)?.split(']').next())
            .collect();
        // The dynamic loader itself may be named (`__tls_get_addr`, `_dl_find_object`).
        assert!(
            needed.contains(&"libc.so.6")
                && needed
                    .iter()
                    .all(|n| *n == "libc.so.6" || n.starts_with("ld-linux")),
            "{variant:?} {} needs {needed:?}:\n{dynamic}",
            so.display()
        );
        // Left to the loader: glibc's versioned symbols, weak ones, and the Slurm API
        // slurmstepd and srun provide. Anything else would fail only at dlopen.
        let undefined = tool("nm", &["-D", "--undefined-only"], &so);
        let strays: Vec<&str> = undefined
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let (kind, name) = (words.next()?, words.next()?);
                let ok = kind == "w"
                    || name.contains("@GLIBC_")
                    || name.starts_with("spank_")
                    || name.starts_with("slurm_");
                (!ok).then_some(name)
            })
            .collect();
        assert!(
            strays.is_empty(),
            "{variant:?} {}: undefined {strays:?}",
            so.display()
        );
    }
}

/// The text after `gpu-affinity unwinder: ` in the library, up to its NUL.
fn linked_unwinder(so: &std::path::Path) -> String {
    const MARKER: &[u8] = b"gpu-affinity unwinder: ";
    let bytes = std::fs::read(so).unwrap_or_else(|e| panic!("read {}: {e}", so.display()));
    let at = bytes
        .windows(MARKER.len())
        .position(|w| w == MARKER)
        .unwrap_or_else(|| panic!("{} carries no `gpu-affinity unwinder:` text", so.display()));
    let text = &bytes[at + MARKER.len()..];
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    String::from_utf8_lossy(&text[..end]).into_owned()
}
