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

/// `conf gres` picks its `Cores=` rule from `--slurm-series`, else the Slurm under
/// `--slurm-prefix` (its slurm_version.h), else the form every series accepts; a bad
/// series is one line.
#[test]
fn gres_series_comes_from_the_flag_the_local_slurm_or_a_safe_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("p5");
    let out = cli(
        &[
            "fixture",
            "--machine",
            "p5.48xlarge",
            "--out",
            &tree.display().to_string(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let prefix = dir.path().join("slurm");
    std::fs::create_dir_all(prefix.join("include/slurm")).expect("mkdir");
    std::fs::write(
        prefix.join("include/slurm/slurm_version.h"),
        "#define SLURM_VERSION_NUMBER 0x180b05\n",
    )
    .expect("header");
    let gres = |extra: &[&str]| {
        let mut args = vec!["conf", "gres", "--sysfs-root"];
        let tree = tree.display().to_string();
        args.push(&tree);
        args.extend_from_slice(extra);
        cli(&args, None)
    };
    let local = gres(&["--slurm-prefix", &prefix.display().to_string()]);
    assert!(local.status.success(), "{}", text(&local.stderr));
    let header = format!(
        "# For Slurm 24.11 (from {}): Cores= widened to whole sockets.",
        prefix.join("include/slurm/slurm_version.h").display()
    );
    assert!(
        text(&local.stdout).contains(&header),
        "{}",
        text(&local.stdout)
    );
    let none = gres(&["--slurm-prefix", "/nonexistent"]);
    assert!(
        text(&none.stdout).contains("# No Slurm found: Cores= in the form every series accepts"),
        "{}",
        text(&none.stdout)
    );
    let flag = gres(&["--slurm-series", "26.05"]);
    assert!(
        text(&flag.stdout).contains("# For Slurm 26.05 (from --slurm-series): Cores= widened to one whole socket, else all cores."),
        "{}",
        text(&flag.stdout)
    );
    // p5: a package per NUMA node, so every form is the NUMA node's cores.
    let cores = |o: &Output| -> Vec<String> {
        text(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("Name=gpu"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(cores(&local), cores(&none));
    assert_eq!(cores(&local).len(), 8);
    let bad = gres(&["--slurm-series", "24"]);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(
        text(&bad.stderr),
        "gpu-affinity: --slurm-series \"24\": give MAJOR.MINOR, e.g. 24.11\n"
    );
}
