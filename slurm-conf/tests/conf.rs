//! `gpu-affinity conf`, `hostlist` and `explain --matrix` as an admin runs them: exit
//! status, one-line errors naming the entry, --write's marker rule.

use std::process::{Command, Output};

fn cli(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpu-affinity"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run gpu-affinity");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("wait")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn hostlist_round_trips_through_stdin() {
    let names: Vec<String> = (1..=600).map(|i| format!("gpu-st-p5-{i:03}")).collect();
    let out = cli(&["hostlist", "compress"], Some(&names.join("\n")));
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "gpu-st-p5-[001-600]\n");
    let out = cli(&["hostlist", "expand", "gpu-st-p5-[001-600]"], None);
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), names);
    let out = cli(&["hostlist", "expand", "n[1-"], None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn topology_write_keeps_foreign_files_and_names_bad_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = |n: &str| dir.path().join(n).display().to_string();
    std::fs::write(
        d("gcp.json"),
        r#"{"vm-a":"/c1/r1/h1","vm-b":"/c1/r2/h2","vm-c":"not-a-path"}"#,
    )
    .expect("write");
    std::fs::write(d("map"), "n1 vm-a\nn2 vm-b\n").expect("write");
    std::fs::write(
        d("topology.conf"),
        "# written by azslurm\nBlockName=x Nodes=n1\n",
    )
    .expect("write");
    let args = |extra: &[&str]| {
        let mut v = vec![
            "conf".to_string(),
            "topology".into(),
            "--from".into(),
            "gcp".into(),
            d("gcp.json"),
            "--nodes".into(),
            d("map"),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let run = |extra: &[&str]| {
        let a = args(extra);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        cli(&a, None)
    };
    let target = d("topology.conf");
    let out = run(&["--write", &target]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--force"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&target)
            .expect("read")
            .contains("azslurm")
    );
    let out = run(&["--write", &target, "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(&target).expect("read");
    assert!(
        written.contains("BlockName=b1 Nodes=n1\nBlockName=b2 Nodes=n2\n"),
        "{written}"
    );
    // Ours now: replaced without --force, and nothing else left in the directory.
    assert!(
        run(&["--write", &target, "--form", "tree"])
            .status
            .success()
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["gcp.json", "map", "topology.conf"]);

    std::fs::write(d("map"), "n1 vm-a\nn3 vm-c\n").expect("write");
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("instance vm-c") && err.contains("node n3"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn explain_matrix_marks_the_plans_nics() {
    let out = cli(&["explain", "--machine", "BM.GPU.H100.8", "--matrix"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    let row = s
        .lines()
        .find(|l| l.starts_with("GPU0 "))
        .unwrap_or_else(|| panic!("{s}"));
    assert!(row.contains("PIX*") && row.contains("SYS"), "{row}");
}

/// `cargo build -p nvml-sim` into this test's target dir (Cargo cannot depend on a
/// cdylib): the simulator's path.
fn nvml_sim() -> std::path::PathBuf {
    let target = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.to_path_buf()))
        .expect("target dir");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-q", "-p", "nvml-sim"])
        .status()
        .expect("cargo build nvml-sim");
    let lib = target.join("libnvml_sim.so");
    assert!(status.success() && lib.exists(), "{}", lib.display());
    lib
}

/// GB200-like NVL domains without a cloud API: four nodes' `conf node-facts --json`, NVML
/// (the simulator) putting nvl1/nvl2 in clique 7 and nvl3/nvl4 in clique 9 of one cluster
/// uuid; `conf topology --from nvlink` makes one block per clique. A GPU whose fabric is
/// not complete yet (state 2, in progress) has none, and its node is refused by name.
#[test]
fn node_facts_from_nvml_cliques_make_nvlink_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = nvml_sim();
    let machine = gpu_affinity::catalog::machine("p5.48xlarge").expect("catalog");
    let machine = gpu_affinity::sources::fixture::realized(&machine);
    let root = dir.path().join("sysfs");
    gpu_affinity::sources::fixture::write_fixture(&machine, &root).expect("fixture");
    let uuid = "5a1e0c2d-0000-4000-8000-00000000abcd";
    let facts = |node: &str, clique: u32, state: u8| {
        let gpus: Vec<serde_json::Value> = machine
            .gpus
            .iter()
            .map(|g| {
                serde_json::json!({"bus_id": format!("0000{}", g.pci).to_uppercase(),
                    "fabric": {"cluster_uuid": uuid, "clique_id": clique, "state": state}})
            })
            .collect();
        let state_file = dir.path().join(format!("{node}.json"));
        std::fs::write(
            &state_file,
            serde_json::json!({"driver": "570.86.15", "gpus": gpus}).to_string(),
        )
        .expect("sim state");
        let out = Command::new(env!("CARGO_BIN_EXE_gpu-affinity"))
            .args([
                "conf",
                "node-facts",
                "--json",
                "--hostname",
                node,
                "--sysfs-root",
            ])
            .arg(&root)
            .arg("--nvml-library")
            .arg(&sim)
            .env("NVML_SIM_STATE", &state_file)
            .output()
            .expect("node-facts");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let path = dir.path().join(format!("{node}.facts.json"));
        std::fs::write(&path, &out.stdout).expect("facts");
        path.display().to_string()
    };
    let files: Vec<String> = [("nvl1", 7), ("nvl2", 7), ("nvl3", 9), ("nvl4", 9)]
        .iter()
        .map(|(n, c)| facts(n, *c, 3))
        .collect();
    let one: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).expect("read")).expect("json");
    assert_eq!(one["gpus"][0]["fabric"]["cluster_uuid"], uuid, "{one}");
    assert_eq!(one["gpus"][7]["fabric"]["clique_id"], 7, "{one}");
    let nodemap = dir.path().join("nodemap");
    std::fs::write(&nodemap, "nvl1 nvl1\nnvl2 nvl2\nnvl3 nvl3\nnvl4 nvl4\n").expect("map");
    let nodemap = nodemap.display().to_string();
    let mut args = vec!["conf", "topology", "--from", "nvlink", "--nodes", &nodemap];
    args.extend(files.iter().map(String::as_str));
    let out = cli(&args, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let topo = text(&out.stdout);
    let blocks: Vec<&str> = topo
        .lines()
        .filter(|l| l.starts_with("BlockName="))
        .collect();
    assert_eq!(
        blocks,
        ["BlockName=b1 Nodes=nvl[1-2]", "BlockName=b2 Nodes=nvl[3-4]"],
        "{topo}"
    );
    // Registration still in progress on nvl5: no fabric, so the node is named.
    let late = facts("nvl5", 9, 2);
    let late_facts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&late).expect("read")).expect("json");
    assert!(
        late_facts["gpus"][0].get("fabric").is_none(),
        "{late_facts}"
    );
    std::fs::write(dir.path().join("nodemap5"), "nvl5 nvl5\n").expect("map");
    let map5 = dir.path().join("nodemap5").display().to_string();
    let out = cli(
        &[
            "conf", "topology", "--from", "nvlink", "--nodes", &map5, &late,
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("nvl5") && err.contains("no GPU with a complete NVLink fabric"),
        "{err}"
    );
}
