//! The active tests end to end through the real runner: this test binary plays `dcgmi` and
//! nccl-tests' `all_reduce_perf` when called by those names (argv[0]; the directory it is
//! linked in picks the behaviour: `pass`, `fail`, `hang`, `garbage`), printing the real
//! output formats. Each failure must drain naming the failed test, each hang must be a
//! bounded warning, a missing program a warning with its reason.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpu_affinity::health::xid::XidPolicy;
use gpu_affinity::health::{
    Expect, Gap, Inputs, PassState, Report, Scope, Verdict, active::AllReduce, active::DcgmDiag,
    evaluate,
};
use gpu_affinity_node::active;

#[path = "common/fakes.rs"]
mod fakes;
#[path = "common/harness.rs"]
mod harness;

fn main() {
    fakes::play_if_called_so();
    harness::main("active", run_cases);
}

/// Every other input skipped: the report is the active checks' alone.
fn report(dcgm: Result<DcgmDiag, Gap>, reduce: Result<AllReduce, Gap>) -> Report {
    let inputs = Inputs {
        dcgm_diag: dcgm,
        all_reduce: reduce,
        ..harness::skipped_inputs()
    };
    let expect = Expect {
        all_reduce_floor_gbps: Some(350.0),
        ..Expect::default()
    };
    evaluate(
        &inputs,
        &expect,
        &XidPolicy::embedded(),
        &Scope::default(),
        &PassState::default(),
    )
    .0
}

fn none<T>() -> Result<T, Gap> {
    Err(Gap::Skipped("not run".into()))
}

fn run_cases() -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let me = std::env::current_exe().expect("exe");
    let owner = std::fs::metadata(&me).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid()
    });
    let owner = owner.expect("exe owner");
    let link = |mode: &str, name: &str| -> PathBuf {
        let d = dir.path().join(mode);
        std::fs::create_dir_all(&d).expect("mode dir");
        let p = d.join(name);
        if !p.exists() {
            std::os::unix::fs::symlink(&me, &p).expect("fake program");
        }
        p
    };
    let bound = Duration::from_secs(5);
    let hang_bound = Duration::from_millis(1500);
    let timed = |name: &'static str,
                 verdict: Verdict,
                 reason: &str,
                 limit: Duration,
                 f: &dyn Fn() -> Report| {
        let t = Instant::now();
        let r = f();
        let took = t.elapsed();
        let ok = r.verdict == verdict && r.reason().starts_with(reason) && took <= limit;
        println!(
            "{:<28} {:<6} {:>6} ms  {}{}",
            name,
            r.verdict.as_str(),
            took.as_millis(),
            r.summary(),
            if ok { "" } else { "   <-- FAILED" }
        );
        usize::from(!ok)
    };
    let mut failures = 0;
    let dcgm = |mode: &str, b: Duration| active::dcgm_diag(&link(mode, "dcgmi"), 2, b, owner);
    let reduce =
        |mode: &str, b: Duration| active::all_reduce(&link(mode, "all_reduce_perf"), 8, b, owner);
    failures += timed("dcgmi passing", Verdict::Ok, "", bound, &|| {
        report(dcgm("pass", bound), none())
    });
    failures += timed(
        "dcgmi memory failing",
        Verdict::Drain,
        "gpu-affinity: GPU_DCGM_DIAG test=memory entity=GPU_1",
        bound,
        &|| report(dcgm("fail", bound), none()),
    );
    failures += timed(
        "dcgmi hanging",
        Verdict::Warn,
        "gpu-affinity: GPU_DCGM_DIAG_TIMEOUT",
        hang_bound + Duration::from_secs(1),
        &|| report(dcgm("hang", hang_bound), none()),
    );
    // A helper left running with the pipe open is killed with the program's group.
    failures += timed("dcgmi leaving a helper", Verdict::Ok, "", bound, &|| {
        report(dcgm("helper", bound), none())
    });
    failures += timed(
        "dcgmi without host engine",
        Verdict::Warn,
        "gpu-affinity: GPU_DCGM_DIAG_NOT_RUN",
        bound,
        &|| report(dcgm("garbage", bound), none()),
    );
    failures += timed(
        "dcgmi missing",
        Verdict::Warn,
        "gpu-affinity: GPU_DCGM_DIAG_NOT_RUN",
        bound,
        &|| {
            let missing = dir.path().join("nowhere/dcgmi");
            report(active::dcgm_diag(&missing, 2, bound, owner), none())
        },
    );
    failures += timed("all_reduce passing", Verdict::Ok, "", bound, &|| {
        report(none(), reduce("pass", bound))
    });
    failures += timed(
        "all_reduce below floor",
        Verdict::Drain,
        "gpu-affinity: GPU_ALLREDUCE_SLOW busbw=98.4 floor=350",
        bound,
        &|| report(none(), reduce("fail", bound)),
    );
    failures += timed(
        "all_reduce wrong values",
        Verdict::Drain,
        "gpu-affinity: GPU_ALLREDUCE_WRONG wrong=3",
        bound,
        &|| report(none(), reduce("garbage", bound)),
    );
    failures += timed(
        "all_reduce hanging",
        Verdict::Warn,
        "gpu-affinity: GPU_ALLREDUCE_SLOW_TIMEOUT",
        hang_bound + Duration::from_secs(1),
        &|| report(none(), reduce("hang", hang_bound)),
    );
    // Group- or other-writable: never run (a job user could swap it).
    let loose = dir.path().join("loose");
    std::fs::create_dir_all(&loose).expect("loose");
    let copy = loose.join("dcgmi");
    std::fs::copy(&me, &copy).expect("copy");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    failures += timed(
        "dcgmi writable by others",
        Verdict::Warn,
        "gpu-affinity: GPU_DCGM_DIAG_NOT_RUN",
        bound,
        &|| report(active::dcgm_diag(&copy, 2, bound, owner), none()),
    );
    failures
}
