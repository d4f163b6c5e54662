//! Link GCC's static unwinder into gpu_affinity.so instead of loading libgcc_s.so.1.
//!
//! Rust's std on `*-linux-gnu` asks the linker for `-lgcc_s`, the shared unwinder that
//! the panic guard's `catch_unwind` needs. srun and slurmstepd do not load libgcc_s
//! themselves, so every process that loads the plugin (srun, and each step's
//! slurmstepd) pays for loading it: 0.12-0.14 ms on the project's VM, most of it its
//! constructor `__cpu_indicator_init`, which probes the CPU with `cpuid` (a trap to the
//! hypervisor on a VM; docs/measurements.md).
//! The packaged build (`cargo zigbuild`) links zig's unwinder into the .so already;
//! this gives a native build the same: a linker script named `libgcc_s.so` in OUT_DIR,
//! searched before the compiler's own directories, that names `cc`'s `libgcc_eh.a`
//! (position-independent, its symbols hidden, as `gcc -shared -static-libgcc` uses it)
//! and `libgcc.a` after it, as the system's own `libgcc_s.so` script names `-lgcc`
//! (rustc links with `-nodefaultlibs`). The unwinder finds every object's unwind tables
//! as the shared one does.
//!
//! The glibc a native build needs: GCC 12 and later built on glibc 2.35 and later find
//! unwind tables with `_dl_find_object` (GLIBC_2.35), so a build made on such a host
//! (Debian 12, Ubuntu 22.04) loads where glibc is 2.35 or newer, as any program built
//! there may need. The packages (glibc 2.28, docs/packaging.md) are the build for
//! older images such as AL2023 (2.34) and EL8/EL9.
//!
//! Only for a native Linux gnu build with the default linker (`cc`): a cross build, or
//! one whose linker is set (cargo zigbuild sets it; `-C linker=` in RUSTFLAGS too),
//! keeps what its toolchain does. No `libgcc_eh.a` (a `cc` that is not GCC): libgcc_s as
//! before, with a build warning.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a build linked, written into the library (`lib.rs`'s `gpu_affinity_unwinder`)
/// so that a test reads this build's decision instead of making it again.
pub const MARKER: &str = "gpu-affinity unwinder: ";

/// Link the static unwinder when this build can, and say which unwinder the library
/// has: `static libgcc_eh`, or `the toolchain's (<why>)`: libgcc_s for a native build,
/// zig's own for cargo zigbuild.
pub fn link_statically(out_dir: &Path) -> String {
    match link(out_dir) {
        Ok(()) => "static libgcc_eh".to_string(),
        Err(why) => format!("the toolchain's ({why})"),
    }
}

fn link(out_dir: &Path) -> Result<(), String> {
    let target = env::var("TARGET").unwrap_or_default();
    // cargo's resolved linker, and the variable cargo zigbuild sets to choose it.
    let target_linker = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace(['-', '.'], "_")
    );
    println!("cargo:rerun-if-env-changed={target_linker}");
    if env::var("HOST").is_ok_and(|host| host != target) {
        return Err(format!("a cross build for {target}"));
    }
    let linux_gnu = env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux")
        && env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|e| e == "gnu");
    if !linux_gnu {
        return Err(format!("{target} is not a Linux gnu target"));
    }
    // RUSTC_LINKER: cargo's resolved linker, when one is configured (cargo sets it for
    // build scripts).
    if env::var_os("RUSTC_LINKER").is_some()
        || env::var_os(&target_linker).is_some()
        || env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("linker="))
    {
        return Err("the build names its own linker".to_string());
    }
    let (Some(eh), Some(gcc)) = (cc_file("libgcc_eh.a"), cc_file("libgcc.a")) else {
        let why = "no libgcc_eh.a and libgcc.a from cc";
        println!("cargo:warning={why}: gpu_affinity.so loads libgcc_s.so.1 for unwinding");
        return Err(why.to_string());
    };
    let script = out_dir.join("libgcc_s.so");
    let text = format!(
        "/* gpu-affinity build.rs: the static unwinder in place of libgcc_s.so.1 */\nGROUP({} {})\n",
        quoted(&eh),
        quoted(&gcc)
    );
    if let Err(e) = fs::write(&script, text) {
        // ASCII only: the text becomes a byte-string literal in series.rs.
        let why = format!("cannot write the linker script in OUT_DIR: {e}");
        println!(
            "cargo:warning={why} ({}); gpu_affinity.so loads libgcc_s.so.1",
            script.display()
        );
        return Err(why);
    }
    println!("cargo:rustc-link-search=native={}", out_dir.display());
    Ok(())
}

/// `name` from the linker rustc runs (`cc`), when it has it (`cc -print-file-name`
/// prints the bare name back when it does not). A path a linker script cannot quote
/// (one with a `"`) counts as none.
fn cc_file(name: &str) -> Option<PathBuf> {
    let out = Command::new("cc")
        .arg(format!("-print-file-name={name}"))
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    let usable = out.status.success()
        && path.is_absolute()
        && path.is_file()
        && !path.to_string_lossy().contains('"');
    usable.then_some(path)
}

/// A path as a linker script names a file: in double quotes, so spaces and
/// parentheses stay part of it.
fn quoted(path: &Path) -> String {
    format!("\"{}\"", path.display())
}
