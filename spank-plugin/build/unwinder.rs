//! Link GCC's static unwinder into gpu_affinity.so instead of loading libgcc_s.so.1.
//!
//! Rust's std on `*-linux-gnu` asks the linker for `-lgcc_s`, the shared unwinder that
//! the panic guard's `catch_unwind` needs. srun and slurmstepd do not load libgcc_s
//! themselves, so every process that loads the plugin (srun, and each step's
//! slurmstepd) pays for loading it: 0.13-0.14 ms, most of it its constructor probing
//! the CPU with `cpuid`, which traps to the hypervisor on a VM (docs/measurements.md).
//! The packaged build (`cargo zigbuild`) links zig's unwinder into the .so already;
//! this gives a native build the same: a linker script named `libgcc_s.so` in OUT_DIR,
//! searched before the compiler's own directories, that names the compiler's
//! `libgcc_eh.a` (position-independent, its symbols hidden, as `gcc -shared
//! -static-libgcc` uses it). The unwinder then finds every object's unwind tables
//! through `dl_iterate_phdr`, as the shared one does.
//!
//! Only for a native build with the default linker: a cross build, or one whose linker
//! is set (cargo zigbuild sets it), keeps what its toolchain does. No `libgcc_eh.a`
//! (another C compiler): libgcc_s as before, with a build warning.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn link_statically(out_dir: &Path) {
    let target = env::var("TARGET").unwrap_or_default();
    // cargo's resolved linker, and the variable cargo zigbuild sets to choose it.
    let target_linker = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace(['-', '.'], "_")
    );
    for var in ["RUSTC_LINKER", "CC", target_linker.as_str()] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let native = env::var("HOST").is_ok_and(|host| host == target);
    let gnu = env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|e| e == "gnu");
    let own_linker = env::var_os("RUSTC_LINKER").is_some() || env::var_os(&target_linker).is_some();
    if !native || !gnu || own_linker {
        return;
    }
    let Some(archive) = libgcc_eh() else {
        println!(
            "cargo:warning=no libgcc_eh.a from the C compiler: gpu_affinity.so loads libgcc_s.so.1 for unwinding"
        );
        return;
    };
    let script = out_dir.join("libgcc_s.so");
    let text = format!(
        "/* gpu-affinity build.rs: the static unwinder in place of libgcc_s.so.1 */\nINPUT({})\n",
        archive.display()
    );
    if let Err(e) = fs::write(&script, text) {
        println!(
            "cargo:warning=cannot write {}: {e}; gpu_affinity.so loads libgcc_s.so.1",
            script.display()
        );
        return;
    }
    println!("cargo:rustc-link-search=native={}", out_dir.display());
}

/// The C compiler's `libgcc_eh.a`, when it has one (`cc -print-file-name` prints the
/// bare name back when it does not).
fn libgcc_eh() -> Option<PathBuf> {
    let cc = env::var_os("CC").unwrap_or_else(|| "cc".into());
    let out = Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.is_absolute() && path.is_file()).then_some(path)
}
