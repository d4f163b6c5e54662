//! Fake `dcgmi` and nccl-tests `all_reduce_perf` for the tests that run the active
//! tests (active.rs, fault_matrix.rs): the test binary plays them when called by those
//! names (argv[0]), the directory it is linked in picking the behaviour (`pass`, `fail`,
//! `hang`, `garbage`, `helper`; the runner clears the environment, so no variable can), printing the
//! real output formats.

use std::path::Path;
use std::time::Duration;

/// When argv[0] names `dcgmi` or `all_reduce_perf`: play it and exit; else return.
pub fn play_if_called_so() {
    let argv0 = std::env::args().next().unwrap_or_default();
    let path = Path::new(&argv0);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if matches!(name, "dcgmi" | "all_reduce_perf") {
        let mode = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("pass")
            .to_string();
        fake(name, &mode);
    }
}

/// `dcgmi diag -r 2 -j` of DCGM 4.x on two GPUs (keys from DCGM's NvvsJsonStrings.h).
fn dcgm_json(memory_gpu1: &str) -> String {
    let warn = if memory_gpu1 == "Fail" {
        r#", "warnings" : [ { "error_category" : 10, "error_id" : 65, "error_severity" : 2, "warning" : "A memory mismatch was detected on GPU 1, but no error was reported by CUDA or NVML." } ]"#
    } else {
        ""
    };
    format!(
        r#"{{
  "DCGM Diagnostic" : {{
    "test_categories" : [
      {{ "category" : "Deployment",
        "tests" : [ {{ "name" : "software",
          "results" : [ {{ "entity_group" : "GPU", "entity_group_id" : 1, "entity_id" : 0, "status" : "Pass" }},
                        {{ "entity_group" : "GPU", "entity_group_id" : 1, "entity_id" : 1, "status" : "Pass" }} ],
          "test_summary" : {{ "status" : "Pass" }} }} ] }},
      {{ "category" : "Hardware",
        "tests" : [ {{ "name" : "memory",
          "results" : [ {{ "entity_group" : "GPU", "entity_group_id" : 1, "entity_id" : 0, "status" : "Pass" }},
                        {{ "entity_group" : "GPU", "entity_group_id" : 1, "entity_id" : 1, "status" : "{memory_gpu1}"{warn} }} ],
          "test_summary" : {{ "status" : "{memory_gpu1}" }} }} ] }}
    ]
  }},
  "entity_groups" : [ {{ "entity_group" : "GPU", "entity_group_id" : 1, "entities" : [ {{ "entity_id" : 0 }}, {{ "entity_id" : 1 }} ] }} ],
  "metadata" : {{ "version" : "4.2.3", "Driver Version Detected" : "570.124.06" }}
}}"#
    )
}

/// nccl-tests' table for `-b 1G -e 1G -g 8` (src/common.cu's format).
fn nccl_text(busbw: &str, wrong: u32) -> String {
    let verdict = if wrong > 0 { "FAILED" } else { "OK" };
    format!(
        "# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 1073741824 step: 1048576(bytes) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
         #\n# Using devices\n#  Rank  0 Group  0 Pid  41213 on     node-1 device  0 [0x53] NVIDIA H100 80GB HBM3\n#\n\
         #                                                              out-of-place                       in-place\n\
         #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
         #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n\
         \x20 1073741824     268435456     float     sum      -1   4412.3  243.35  {busbw}  {wrong:>5}   4398.7  244.10  {busbw}  {wrong:>5}\n\
         # Out of bounds values : {wrong} {verdict}\n# Avg bus bandwidth    : {busbw} \n#\n"
    )
}

fn fake(name: &str, mode: &str) -> ! {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if mode == "hang" {
        std::thread::sleep(Duration::from_secs(3600));
    }
    if mode == "helper" {
        // Leave a helper behind holding stdout open (the `hang` sibling), then answer as
        // `pass`: the runner must end the helper's group, or its read never ends.
        let argv0 = std::env::args().next().unwrap_or_default();
        let base = Path::new(&argv0).parent().and_then(Path::parent);
        if let Some(base) = base {
            let _ = std::process::Command::new(base.join("hang").join(name))
                .args(&args)
                .spawn();
        }
        fake(name, "pass");
    }
    match name {
        "dcgmi" => {
            if args.len() != 4 || args[0] != "diag" || args[1] != "-r" || args[3] != "-j" {
                eprintln!("dcgmi: unexpected arguments {args:?}");
                std::process::exit(2);
            }
            match mode {
                "pass" => println!("{}", dcgm_json("Pass")),
                "garbage" => println!(
                    "Error: unable to establish a connection to the specified host: localhost"
                ),
                _ => {
                    println!("{}", dcgm_json("Fail"));
                    // dcgmi's status for a failed test (DCGM_ST_NVVS_ERROR as an exit code).
                    std::process::exit(226);
                }
            }
        }
        _ => {
            if args != ["-b", "1G", "-e", "1G", "-g", "8"] {
                eprintln!("all_reduce_perf: unexpected arguments {args:?}");
                std::process::exit(2);
            }
            match mode {
                "pass" => print!("{}", nccl_text("425.86", 0)),
                "garbage" => print!("{}", nccl_text("212.10", 3)),
                _ => print!("{}", nccl_text("98.41", 0)),
            }
        }
    }
    std::process::exit(0);
}
