//! Generates the SPANK bindings from the installed `<slurm/spank.h>`.
//!
//! One build targets one Slurm series: `plugin_version` must carry the header's
//! SLURM_VERSION_NUMBER (Slurm refuses a plugin whose major.minor differ), so the number
//! is read from the same header set bindgen sees and exported as `SLURM_VERSION_NUMBER`
//! in the bindings. Every SPANK function the wrapper calls is looked for in the header
//! text, so a Slurm that lacks one fails the build with its name instead of leaving an
//! undefined symbol for slurmstepd to trip over at load.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// The functions `spank.rs` and `logger.rs` call; all must be declared by the header.
const REQUIRED_FUNCTIONS: &[&str] = &[
    "spank_context",
    "spank_get_item",
    "spank_getenv",
    "spank_setenv",
    "spank_option_register",
    "spank_strerror",
    "slurm_error",
    "slurm_info",
    "slurm_verbose",
    "slurm_debug",
];

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-changed=build.rs");

    let include_dir = env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let spank_h = include_dir.join("slurm/spank.h");
    let version_h = include_dir.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", spank_h.display());
    println!("cargo:rerun-if-changed={}", version_h.display());

    let spank_text = read_or_die(&spank_h);
    let version_text = read_or_die(&version_h);
    let version = match version_number(&version_text) {
        Some(v) => v,
        None => die(&format!(
            "{}: no `#define SLURM_VERSION_NUMBER 0x...` line",
            version_h.display()
        )),
    };
    println!(
        "cargo:warning=building for Slurm {}.{}.{} (SLURM_VERSION_NUMBER {version:#08x}, {})",
        (version >> 16) & 0xff,
        (version >> 8) & 0xff,
        version & 0xff,
        include_dir.display()
    );

    let missing: Vec<&str> = REQUIRED_FUNCTIONS
        .iter()
        .copied()
        .filter(|name| !declares_function(&spank_text, name))
        .collect();
    if !missing.is_empty() {
        die(&format!(
            "{} does not declare {} (the plugin calls them); is this Slurm's spank.h?",
            spank_h.display(),
            missing.join(", ")
        ));
    }

    let bindings = bindgen::Builder::default()
        .header(spank_h.to_string_lossy())
        .clang_arg(format!("-I{}", include_dir.display()))
        .rust_edition(bindgen::RustEdition::Edition2024)
        .allowlist_function("spank_.*")
        .allowlist_function("slurm_(error|info|verbose|debug|debug2|debug3|spank_log)")
        .allowlist_type("spank_.*")
        .allowlist_var("SLURM_VERSION_NUMBER|ESPANK_.*|SLURM_SUCCESS|SLURM_ERROR")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate();
    let bindings = match bindings {
        Ok(b) => b,
        Err(e) => die(&format!("bindgen on {}: {e}", spank_h.display())),
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("spank.rs");
    if let Err(e) = bindings.write_to_file(&out) {
        die(&format!("writing {}: {e}", out.display()));
    }
}

fn read_or_die(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| {
        die(&format!(
            "cannot read {}: {e} (install libslurm-dev or set SLURM_INCLUDE_DIR to the directory holding slurm/spank.h)",
            path.display()
        ))
    })
}

fn die(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}

/// `#define SLURM_VERSION_NUMBER 0x160508` -> 0x160508.
fn version_number(header: &str) -> Option<u32> {
    header.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != "#define" || words.next()? != "SLURM_VERSION_NUMBER" {
            return None;
        }
        let value = words.next()?;
        let hex = value
            .strip_prefix("0x")
            .or_else(|| value.strip_prefix("0X"))?;
        u32::from_str_radix(hex, 16).ok()
    })
}

/// True when the header declares `name (` or `name(` outside a comment line.
fn declares_function(header: &str, name: &str) -> bool {
    header.lines().any(|line| {
        let t = line.trim_start();
        if t.starts_with("/*") || t.starts_with('*') || t.starts_with("//") {
            return false;
        }
        t.match_indices(name).any(|(at, _)| {
            let before_ok = t[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let after = t[at + name.len()..].trim_start();
            before_ok && after.starts_with('(')
        })
    })
}
