//! Core's hostlists against real Slurm's: `scontrol show hostnames` (expand) and
//! `scontrol show hostlist` (compress) of the series under test
//! (`GPU_AFFINITY_SLURM_SERIES`, else this machine's 22.05), on a few thousand generated
//! cases. Both commands work without a running cluster; they only need a slurm.conf.
//!
//! Properties:
//! - expand: where core reads a list, Slurm reads the same names in the same order;
//!   where they differ, core refused it (what Slurm misreads: blanks in brackets,
//!   `n[1-]`) or Slurm refused it (text after a bracket before 23.11);
//! - compress: what core writes for the series (`hostlist::Form::for_series`), in list
//!   order and sorted, Slurm expands back to exactly the names.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpu_affinity::slurm::hostlist::{self, Form};
use gpu_affinity_tests::SlurmSeries;

/// A small deterministic generator (xorshift): `next(n)` is below `n`.
fn generator(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n.max(1)
    }
}

struct Scontrol {
    series: SlurmSeries,
    program: PathBuf,
    conf: PathBuf,
}

/// What Slurm made of a list: its names, or None where it said "Invalid hostlist".
impl Scontrol {
    fn new(dir: &Path) -> Scontrol {
        let series = SlurmSeries::from_env().expect("the series under test");
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            "ClusterName=hl\nSlurmctldHost=localhost\nNodeName=dummy\nPartitionName=p Nodes=dummy\n",
        )
        .expect("write slurm.conf");
        // The series' own scontrol: a source-built one's bin/, else /usr/bin's (on the
        // host, or inside the series' Debian root).
        let program = series.install.as_ref().map_or_else(
            || PathBuf::from("/usr/bin/scontrol"),
            |p| p.join("bin/scontrol"),
        );
        Scontrol {
            series,
            program,
            conf,
        }
    }

    fn run(&self, what: &str, arg: &str) -> Option<String> {
        let mut cmd: Command = self.series.command(&self.program, None);
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SLURM_CONF", &self.conf)
            .args(["show", what, arg]);
        let out = cmd.output().expect("run scontrol");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("fatal"),
            "scontrol show {what} {arg:?}: {stderr}"
        );
        if stderr.contains("Invalid hostlist") {
            return None;
        }
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn hostnames(&self, list: &str) -> Option<Vec<String>> {
        self.run("hostnames", list)
            .map(|s| s.lines().map(str::to_owned).collect())
    }

    fn hostlist(&self, names: &[String]) -> Option<String> {
        self.run("hostlist", &names.join(","))
            .map(|s| s.trim_end().to_owned())
    }

    fn form(&self) -> Form {
        let (major, minor) = self
            .series
            .name
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .expect("MAJOR.MINOR");
        Form::for_series(major, minor)
    }
}

/// One generated hostlist: names, brackets (1-4 a name, Slurm's order matters from 3),
/// zero padding, text after the last bracket, and the separators Slurm reads (comma,
/// space, tab, empty pieces), with now and then a blank inside brackets or `n[1-]`.
fn hostlist_case(next: &mut impl FnMut(u64) -> u64) -> String {
    const PREFIXES: [&str; 6] = ["n", "gpu-st-p5-", "r", "a-b", "", "x9y"];
    const SEPARATORS: [&str; 6] = [",", ",", " ", "\t", ",,", ", "];
    let mut out = String::new();
    for piece in 0..=next(3) {
        if piece > 0 {
            out.push_str(SEPARATORS[next(6) as usize]);
        }
        let brackets = if next(5) == 0 { 0 } else { 1 + next(4) };
        out.push_str(PREFIXES[next(6) as usize]);
        if brackets == 0 {
            out.push_str(&format!("host{}", next(20)));
        }
        for b in 0..brackets {
            if b > 0 {
                out.push_str(["a", "b-", "_"][next(3) as usize]);
            }
            out.push('[');
            for part in 0..=next(2) {
                if part > 0 {
                    out.push(',');
                }
                let w = next(4) as usize;
                let lo = next(12);
                let hi = lo + next(4);
                match next(100) {
                    0 => out.push_str(&format!(" {lo}")),
                    1 => out.push_str(&format!("{lo}-")),
                    _ if next(2) == 0 => out.push_str(&format!("{lo:0w$}")),
                    _ => out.push_str(&format!("{lo:0w$}-{hi:0w$}")),
                }
            }
            out.push(']');
        }
        if brackets > 0 && next(6) == 0 {
            out.push_str(["-ib", "x", ".e"][next(3) as usize]);
        }
    }
    if next(10) == 0 {
        out.push(',');
    }
    out
}

/// One generated list of names to compress: grouped runs, holes, repeats, padding,
/// names with text after their number, names without numbers.
fn names_case(next: &mut impl FnMut(u64) -> u64) -> Vec<String> {
    const PREFIXES: [&str; 5] = ["n", "gpu-st-p5-", "r1n", "a-b", "c"];
    const SUFFIXES: [&str; 4] = ["", "", "-ib", "x"];
    let mut names = Vec::new();
    for _ in 0..=next(4) {
        let p = PREFIXES[next(5) as usize];
        let s = SUFFIXES[next(4) as usize];
        let w = next(4) as usize;
        let mut v = next(30);
        for _ in 0..=next(8) {
            names.push(if next(15) == 0 {
                format!("{p}login{s}")
            } else {
                format!("{p}{v:0w$}{s}")
            });
            v += match next(6) {
                0 => 0,
                1 => 2 + next(5),
                _ => 1,
            };
        }
    }
    if next(3) == 0 {
        // Interleave groups.
        let n = names.len();
        for i in 0..n / 2 {
            names.swap(i, n - 1 - i);
        }
    }
    names
}

#[test]
fn hostlists_agree_with_scontrol() {
    let dir = tempfile::Builder::new()
        .prefix("gpu-affinity-hostlist")
        .tempdir_in("/tmp")
        .expect("temp dir");
    let slurm = Scontrol::new(dir.path());
    let form = slurm.form();
    let mut next = generator(0x51_7cc1_b727_220a);
    let (mut same, mut we_refused, mut slurm_refused) = (0u32, 0u32, 0u32);
    for _ in 0..4000 {
        let list = hostlist_case(&mut next);
        let ours = hostlist::expand(&list);
        let theirs = slurm.hostnames(&list);
        match (ours, theirs) {
            (Ok(a), Some(b)) => {
                assert_eq!(a, b, "expand {list:?}");
                same += 1;
            }
            (Ok(a), None) => {
                // Slurm refuses only what it cannot read; before 23.11 that includes
                // text after a bracket, which core reads as 23.11 does.
                assert_eq!(
                    form,
                    Form::NumberLast,
                    "Slurm refused {list:?}, core read {a:?}"
                );
                slurm_refused += 1;
            }
            (Err(e), theirs) => {
                assert!(!e.to_string().contains('\n'), "{e}");
                // Core refuses only what Slurm misreads: a blank in brackets (padding
                // to Slurm) and an open range `n[1-]` (Slurm: n1); where Slurm refuses
                // too, anything.
                let misread = matches!(e, hostlist::HostlistError::BlankInBrackets(_))
                    || list.contains("-]")
                    || list.contains("-,");
                assert!(
                    theirs.is_none() || misread,
                    "core refused {list:?} ({e}); Slurm read {theirs:?}"
                );
                we_refused += 1;
            }
        }
    }
    let (mut read_back, mut as_slurm_writes) = (0u32, 0u32);
    let cases = 1000;
    for _ in 0..cases {
        let names = names_case(&mut next);
        for text in [
            hostlist::compress_for(&names, form).expect("valid names"),
            hostlist::compress_sorted_for(&names, form).expect("valid names"),
        ] {
            let back = slurm.hostnames(&text);
            let want = hostlist::expand(&text).expect("core reads its own list");
            assert_eq!(back.as_ref(), Some(&want), "Slurm reads back {text:?}");
            read_back += 1;
        }
        let ours = hostlist::compress_for(&names, form).expect("valid names");
        assert_eq!(
            hostlist::expand(&ours).expect("own list"),
            names,
            "round trip"
        );
        if slurm.hostlist(&names).as_deref() == Some(ours.as_str()) {
            as_slurm_writes += 1;
        }
    }
    eprintln!(
        "Slurm {}: expand: {same} lists read the same, {we_refused} refused by core, \
         {slurm_refused} refused by Slurm only; compress: {read_back} lists read back \
         exactly, {as_slurm_writes} of {cases} in list order written as `scontrol show \
         hostlist` writes them",
        slurm.series.name
    );
    assert!(same > 2500, "too few cases compared: {same}");
}
