//! Hostlist expansion and compression of 100k names in-process: core's
//! `slurm::hostlist` side by side with libslurm's own hostlist functions
//! (`slurm_hostlist_create` / `_shift` / `_push_host` / `_ranged_string` / `_uniq`),
//! loaded from this machine's libslurm.so (libslurm-dev) in the same process. Checks
//! that both give the same names and the same strings, and prints the medians and the
//! ratio. Not a timed test: run it on a quiet machine.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpu_affinity::slurm::hostlist;
use gpu_affinity_tests::bench_stats;

const USAGE: &str = "usage: bench-hostlist [--runs N] [--libslurm PATH]

Expands and compresses 100k node names with gpu-affinity's hostlist code and with
libslurm's (default /usr/lib/x86_64-linux-gnu/libslurm.so), checks the results are
identical, and prints median times and the ratio.";

const DEFAULT_LIBSLURM: &str = "/usr/lib/x86_64-linux-gnu/libslurm.so";

type Create = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type Destroy = unsafe extern "C" fn(*mut c_void);
type Shift = unsafe extern "C" fn(*mut c_void) -> *mut c_char;
type PushHost = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;
type Ranged = unsafe extern "C" fn(*mut c_void, usize, *mut c_char) -> isize;
type Uniq = unsafe extern "C" fn(*mut c_void);

/// libslurm's hostlist functions (slurm.h), resolved once.
struct Slurm {
    _lib: libloading::Library,
    create: Create,
    destroy: Destroy,
    shift: Shift,
    push_host: PushHost,
    ranged: Ranged,
    uniq: Uniq,
}

impl Slurm {
    fn load(path: &str) -> Result<Slurm, String> {
        // SAFETY: libslurm's initialisers only set up its own state; each symbol is
        // given the signature slurm.h declares for it.
        unsafe {
            let lib = libloading::Library::new(path).map_err(|e| format!("{path}: {e}"))?;
            let get = |name: &[u8]| -> Result<*const c_void, String> {
                lib.get::<*const c_void>(name)
                    .map(|s| *s)
                    .map_err(|e| format!("{path}: {e}"))
            };
            Ok(Slurm {
                create: std::mem::transmute::<*const c_void, Create>(get(
                    b"slurm_hostlist_create\0",
                )?),
                destroy: std::mem::transmute::<*const c_void, Destroy>(get(
                    b"slurm_hostlist_destroy\0",
                )?),
                shift: std::mem::transmute::<*const c_void, Shift>(get(b"slurm_hostlist_shift\0")?),
                push_host: std::mem::transmute::<*const c_void, PushHost>(get(
                    b"slurm_hostlist_push_host\0",
                )?),
                ranged: std::mem::transmute::<*const c_void, Ranged>(get(
                    b"slurm_hostlist_ranged_string\0",
                )?),
                uniq: std::mem::transmute::<*const c_void, Uniq>(get(b"slurm_hostlist_uniq\0")?),
                _lib: lib,
            })
        }
    }

    /// `slurm_hostlist_create(text)` shifted out name by name.
    fn expand(&self, text: &CStr) -> Vec<String> {
        let mut out = Vec::new();
        // SAFETY: a NUL-terminated string in; every shifted name is malloc'd by libslurm
        // and freed here; the list is destroyed once.
        unsafe {
            let hl = (self.create)(text.as_ptr());
            if hl.is_null() {
                return out;
            }
            loop {
                let name = (self.shift)(hl);
                if name.is_null() {
                    break;
                }
                out.push(CStr::from_ptr(name).to_string_lossy().into_owned());
                libc::free(name.cast());
            }
            (self.destroy)(hl);
        }
        out
    }

    /// Names pushed one by one, optionally `uniq`ed (sorted, deduplicated), written as
    /// a ranged string.
    fn compress(&self, names: &[CString], uniq: bool) -> String {
        // SAFETY: an empty list from a NULL string (slurm.h), NUL-terminated names, a
        // buffer of `buf.len()` bytes; the list is destroyed once.
        unsafe {
            let hl = (self.create)(std::ptr::null());
            for n in names {
                (self.push_host)(hl, n.as_ptr());
            }
            if uniq {
                (self.uniq)(hl);
            }
            let mut buf = vec![0u8; 1 << 22];
            let n = (self.ranged)(hl, buf.len(), buf.as_mut_ptr().cast());
            (self.destroy)(hl);
            if n < 0 {
                return String::from("(truncated)");
            }
            CStr::from_ptr(buf.as_ptr().cast())
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// 100k names the way clusters name nodes: 100 racks of 1000, every 97th node missing
/// (holes break ranges), zero-padded numbers, and a few odd names in between.
fn names() -> Vec<String> {
    let mut v = Vec::with_capacity(100_500);
    for rack in 0..100 {
        for n in 0..1010 {
            if n % 97 == 13 {
                continue;
            }
            v.push(format!("gpu-r{rack:02}-n{n:04}"));
        }
        v.push(format!("login{rack}"));
    }
    v.truncate(100_000);
    v
}

fn median(times: Vec<Duration>) -> Duration {
    let mut secs: Vec<f64> = times.iter().map(Duration::as_secs_f64).collect();
    Duration::from_secs_f64(bench_stats::median(&mut secs))
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        let out = f();
        times.push(start.elapsed());
        last = Some(out);
    }
    (median(times), last.expect("at least one run"))
}

fn main() -> ExitCode {
    let mut runs = 11usize;
    let mut lib = DEFAULT_LIBSLURM.to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--runs", Some(n)) if n.parse::<usize>().is_ok_and(|n| n > 0) => {
                runs = n.parse().unwrap_or(11);
            }
            ("--libslurm", Some(p)) => lib = p,
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let slurm = match Slurm::load(&lib) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench-hostlist: {e}");
            return ExitCode::FAILURE;
        }
    };
    let names = names();
    let c_names: Vec<CString> = names
        .iter()
        .map(|n| CString::new(n.as_str()).expect("no NUL in a node name"))
        .collect();
    let mut same = true;
    let mut report = |what: &str, ours: Duration, theirs: Duration, equal: bool| {
        same &= equal;
        println!(
            "{what:<28} gpu-affinity {:>9.2} ms   libslurm {:>9.2} ms   {:>6.1}x   {}",
            ours.as_secs_f64() * 1e3,
            theirs.as_secs_f64() * 1e3,
            theirs.as_secs_f64() / ours.as_secs_f64().max(1e-9),
            if equal { "identical" } else { "DIFFERENT" }
        );
    };

    let (ours_t, ours) = time(runs, || hostlist::compress(&names).expect("valid names"));
    let (theirs_t, theirs) = time(runs, || slurm.compress(&c_names, false));
    report("compress (list order)", ours_t, theirs_t, ours == theirs);
    if ours != theirs {
        eprintln!(
            "ours:     {}...\nlibslurm: {}...",
            &ours[..ours.len().min(200)],
            &theirs[..theirs.len().min(200)]
        );
    }

    let (ours_t, sorted) = time(runs, || hostlist::compress_sorted(&names).expect("valid"));
    let (theirs_t, theirs) = time(runs, || slurm.compress(&c_names, true));
    report("compress sorted (uniq)", ours_t, theirs_t, sorted == theirs);

    let c_text = CString::new(ours.as_str()).expect("no NUL");
    let (ours_t, expanded) = time(runs, || {
        hostlist::expand_bounded(&ours, names.len() as u64).expect("our own list")
    });
    let (theirs_t, theirs) = time(runs, || slurm.expand(&c_text));
    report(
        "expand",
        ours_t,
        theirs_t,
        expanded == theirs && expanded == names,
    );
    println!(
        "{} names, {} bytes as a hostlist, median of {runs} runs",
        names.len(),
        ours.len()
    );
    if same {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
