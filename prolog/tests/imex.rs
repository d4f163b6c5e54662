//! `gpu.imex` end to end through the real reader: this test binary plays
//! `nvidia-imex-ctl` when called by that name (argv[0]; the directory it is linked in picks
//! the domain: `up`, `degraded`, `down`, `peers`, `unconfigured`, `stopped`, `hang`,
//! `garbage`), printing what NVIDIA's tool prints (`-q`: the daemon state's word; `-N -j`:
//! the domain's JSON). DOWN must drain, DEGRADED and a daemon waiting for its peers warn,
//! and every reading that could not be taken (not configured, missing, hung, garbage)
//! skip with a one-line reason, in bounded time, never a drain.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpu_affinity::health::xid::XidPolicy;
use gpu_affinity::health::{
    CheckId, Expect, Gap, Inputs, PassState, Report, Scope, Status, Verdict, evaluate, imex::Imex,
};
use gpu_affinity_node::imex::read_imex;
use gpu_affinity_test_support::imex_domain_json as domain_json;

#[path = "common/harness.rs"]
mod harness;

fn main() {
    play_if_called_so();
    harness::main("imex", run_cases);
}

/// When argv[0] names `nvidia-imex-ctl`: play it and exit; else return.
fn play_if_called_so() {
    let argv0 = std::env::args().next().unwrap_or_default();
    let path = Path::new(&argv0);
    if path.file_name().and_then(|n| n.to_str()) != Some("nvidia-imex-ctl") {
        return;
    }
    let mode = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("up")
        .to_string();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let domain = args.iter().any(|a| a == "-N");
    let (out, code) = match (mode.as_str(), domain) {
        ("hang", _) => {
            std::thread::sleep(Duration::from_secs(3600));
            (String::new(), 1)
        }
        ("unconfigured", _) => (
            "Failed to read node configuration file /etc/nvidia-imex/nodes_config.cfg\n".into(),
            255,
        ),
        ("stopped", _) => {
            eprintln!("Query Status returned error code: 14");
            (String::new(), 1)
        }
        ("peers", false) => ("WAITING_FOR_PEERS\n".into(), 0),
        ("garbage", true) => ("IMEX domain: ??\n<not json>\n".into(), 1),
        (_, false) => ("READY\n".into(), 0),
        ("degraded", true) => (domain_json("DEGRADED", "UNAVAILABLE"), 0),
        ("down" | "peers", true) => (domain_json("DOWN", "UNAVAILABLE"), 0),
        (_, true) => (domain_json("UP", "READY"), 0),
    };
    print!("{out}");
    std::process::exit(code);
}

/// Every other input skipped: the verdict is gpu.imex's alone.
fn report(imex: Result<Imex, Gap>) -> Report {
    let inputs = Inputs {
        imex,
        ..harness::skipped_inputs()
    };
    evaluate(
        &inputs,
        &Expect::default(),
        &XidPolicy::embedded(),
        &Scope::default(),
        &PassState::default(),
    )
    .0
}

fn run_cases() -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let me = std::env::current_exe().expect("exe");
    let owner = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&me).expect("exe owner").uid()
    };
    let link = |mode: &str| -> PathBuf {
        let d = dir.path().join(mode);
        std::fs::create_dir_all(&d).expect("mode dir");
        let p = d.join("nvidia-imex-ctl");
        if !p.exists() {
            std::os::unix::fs::symlink(&me, &p).expect("fake program");
        }
        p
    };
    let bound = Duration::from_secs(5);
    let hang = Duration::from_millis(1500);
    // (case, program, bound, verdict, reason prefix, gpu.imex status, evidence contains)
    let missing = dir.path().join("nowhere/nvidia-imex-ctl");
    let cases: Vec<(&str, PathBuf, Duration, Verdict, &str, Status, &str)> = vec![
        (
            "domain UP",
            link("up"),
            bound,
            Verdict::Ok,
            "",
            Status::Pass,
            "IMEX domain UP, daemon READY, 2 members",
        ),
        (
            "domain DEGRADED",
            link("degraded"),
            bound,
            Verdict::Warn,
            "gpu-affinity: GPU_IMEX domain=DEGRADED",
            Status::Fail,
            "1 of 2 members not READY: gb200-r1-t2 UNAVAILABLE",
        ),
        (
            "domain DOWN",
            link("down"),
            bound,
            Verdict::Drain,
            "gpu-affinity: GPU_IMEX domain=DOWN",
            Status::Fail,
            "IMEX domain DOWN (daemon READY)",
        ),
        (
            "daemon waiting for peers",
            link("peers"),
            bound,
            Verdict::Warn,
            "gpu-affinity: GPU_IMEX daemon=WAITING_FOR_PEERS",
            Status::Fail,
            "IMEX daemon WAITING_FOR_PEERS, not READY",
        ),
        (
            "not configured",
            link("unconfigured"),
            bound,
            Verdict::Ok,
            "",
            Status::Skip,
            "IMEX is not configured on this node",
        ),
        (
            "daemon not running",
            link("stopped"),
            bound,
            Verdict::Ok,
            "",
            Status::Skip,
            "-q printed nothing (exit status: 1; Query Status returned error code: 14)",
        ),
        (
            "program missing",
            missing,
            bound,
            Verdict::Ok,
            "",
            Status::Skip,
            "No such file or directory",
        ),
        (
            "hanging",
            link("hang"),
            hang,
            Verdict::Ok,
            "",
            Status::Skip,
            "no answer within 1500 ms",
        ),
        (
            "garbage domain",
            link("garbage"),
            bound,
            Verdict::Ok,
            "",
            Status::Skip,
            "output is not JSON",
        ),
    ];
    let mut failures = 0;
    for (name, program, each, verdict, reason, status, evidence) in cases {
        let t = Instant::now();
        let r = report(read_imex(&program, each, owner));
        let took = t.elapsed();
        let o = r
            .checks
            .iter()
            .find(|c| c.id == CheckId::GpuImex)
            .expect("gpu.imex reported");
        let ok = r.verdict == verdict
            && r.reason().starts_with(reason)
            && (!reason.is_empty() || r.reason().is_empty())
            && o.status == status
            && o.evidence.contains(evidence)
            && !o.evidence.contains('\n')
            && took <= each + Duration::from_secs(1);
        println!(
            "{:<26} {:<6} {:>6} ms  {:?}: {}{}",
            name,
            r.verdict.as_str(),
            took.as_millis(),
            o.status,
            o.evidence,
            if ok { "" } else { "   <-- FAILED" }
        );
        failures += usize::from(!ok);
    }
    // Group- or other-writable: never run (a job user could swap it).
    let loose = dir.path().join("loose");
    std::fs::create_dir_all(&loose).expect("loose");
    let copy = loose.join("nvidia-imex-ctl");
    std::fs::copy(&me, &copy).expect("copy");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let r = report(read_imex(&copy, bound, owner));
    let skipped = r
        .checks
        .iter()
        .any(|c| c.id == CheckId::GpuImex && c.status == Status::Skip);
    let ok = r.verdict == Verdict::Ok && skipped;
    println!(
        "{:<26} {:<6} {}{}",
        "writable by others",
        r.verdict.as_str(),
        r.summary(),
        if ok { "" } else { "   <-- FAILED" }
    );
    failures + usize::from(!ok) + whole_process(&link)
}

/// The real binaries with `[fabric] imex_ctl` naming the fake: the reader runs in the pass
/// beside the others, and the JSON report carries gpu.imex's verdict. `--dry-run` and no
/// Slurm clients: nothing is drained, only decided.
fn whole_process(link: &dyn Fn(&str) -> PathBuf) -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    for d in ["dev", "proc"] {
        std::fs::create_dir_all(root.join(d)).expect("dirs");
    }
    std::fs::write(root.join("dev/kmsg"), "6,1,100,-;Linux version 6.1\n").expect("kmsg");
    std::fs::write(root.join("proc/mounts"), "/dev/sda1 / ext4 rw 0 0\n").expect("mounts");
    let mut failures = 0;
    for (program, mode, verdict, reason, status, limit) in [
        ("health", "up", "ok", "", "pass", 5),
        (
            "health",
            "down",
            "drain",
            "gpu-affinity: GPU_IMEX domain=DOWN",
            "fail",
            5,
        ),
        (
            "prolog",
            "peers",
            "warn",
            "gpu-affinity: GPU_IMEX daemon=WAITING_FOR_PEERS",
            "fail",
            5,
        ),
        // Each command's bound is half of IMEX_BOUND_MS: the pass still ends in time.
        ("health", "hang", "ok", "", "skip", 12),
    ] {
        let cfg = dir.path().join(format!("{program}-{mode}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "root = \"{}\"\nstate_dir = \"{}\"\n[gpu]\nnvml = false\n[fabric]\nimex_ctl = \"{}\"\n\
                 [slurm]\nbin_dir = \"{}\"\n",
                root.display(),
                dir.path().join(format!("state-{mode}")).display(),
                link(mode).display(),
                dir.path().join("no-slurm").display(),
            ),
        )
        .expect("config");
        let bin = match program {
            "prolog" => env!("CARGO_BIN_EXE_gpu-affinity-prolog"),
            _ => env!("CARGO_BIN_EXE_gpu-affinity-health"),
        };
        let t = Instant::now();
        let out = std::process::Command::new(bin)
            .args(["--json", "--dry-run", "--config"])
            .arg(&cfg)
            .env("SLURMD_NODENAME", "n1")
            .env_remove("SLURM_JOB_GPUS")
            .output()
            .expect("run binary");
        let took = t.elapsed();
        let text = String::from_utf8_lossy(&out.stdout);
        let json: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_default();
        let imex = json["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["id"] == "gpu.imex"))
            .cloned()
            .unwrap_or_default();
        let ok = json["verdict"] == verdict
            && json["reason"] == reason
            && imex["status"] == status
            && took <= Duration::from_secs(limit);
        println!(
            "{:<26} {:<6} {:>6} ms  gpu.imex {}: {}{}",
            format!("{program}: {mode}"),
            json["verdict"].as_str().unwrap_or("?"),
            took.as_millis(),
            imex["status"].as_str().unwrap_or("?"),
            imex["evidence"].as_str().unwrap_or(""),
            if ok {
                String::new()
            } else {
                format!(
                    "   <-- FAILED ({})",
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            }
        );
        failures += usize::from(!ok);
    }
    failures
}
