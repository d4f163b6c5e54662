//! Generates the SPANK bindings from a Slurm header set and decides which Slurm series
//! this build of gpu_affinity.so is for.
//!
//! One build targets one Slurm series: Slurm loads a plugin only when its
//! `plugin_version` major.minor equals its own (SchedMD `src/common/plugin.c`), so the
//! number comes from the same header set bindgen sees (`SLURM_INCLUDE_DIR`, default
//! /usr/include). `GPU_AFFINITY_BUILD_SERIES=MAJOR.MINOR` names the series explicitly;
//! when it differs from the headers' own (25.05 and 25.11 have no Debian headers and are
//! built from 26.05's), the build is allowed only if the headers' SPANK declarations
//! match the fingerprint recorded for that series in `spank-fingerprint.txt`, and any
//! difference is named. Every SPANK function the wrapper calls is looked for in the
//! header text, so a Slurm that lacks one fails the build with its name instead of
//! leaving an undefined symbol for slurmstepd to trip over at load.
//!
//! Outputs (in OUT_DIR): `spank.rs` (bindings) and `series.rs` (the series, the
//! plugin_version to export, a build description); cfg `spank_init_failure_mode` when
//! the headers declare `slurm_spank_init_failure_mode` (Slurm 25.05+). A native build
//! links the static unwinder in place of libgcc_s (`build/unwinder.rs`).

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

// core's one parser of Slurm's version texts, compiled here too (it imports nothing).
#[allow(dead_code)]
#[path = "../core/src/slurm/version.rs"]
mod version;

use version::{Series, built_for_marker, version_number};

#[path = "build/unwinder.rs"]
mod unwinder;

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

const SERIES_ENV: &str = "GPU_AFFINITY_BUILD_SERIES";
const UPDATE_ENV: &str = "GPU_AFFINITY_FINGERPRINT_UPDATE";
/// The recorded SPANK declarations, relative to this crate.
const FINGERPRINT_FILE: &str = "spank-fingerprint.txt";

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed={SERIES_ENV}");
    println!("cargo:rerun-if-env-changed={UPDATE_ENV}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/unwinder.rs");
    println!("cargo:rerun-if-changed=../core/src/slurm/version.rs");
    println!("cargo:rerun-if-changed={FINGERPRINT_FILE}");
    println!("cargo::rustc-check-cfg=cfg(spank_init_failure_mode)");

    let include_dir = env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let spank_h = include_dir.join("slurm/spank.h");
    let errno_h = include_dir.join("slurm/slurm_errno.h");
    let version_h = include_dir.join("slurm/slurm_version.h");
    for h in [&spank_h, &errno_h, &version_h] {
        println!("cargo:rerun-if-changed={}", h.display());
    }

    let spank_text = read_or_die(&spank_h);
    let errno_text = read_or_die(&errno_h);
    let version_text = read_or_die(&version_h);
    let header_version = match version_number(&version_text) {
        Some(v) => v,
        None => die(&format!(
            "{}: no `#define SLURM_VERSION_NUMBER 0x...` line",
            version_h.display()
        )),
    };
    let header_series = Series::of(header_version);
    let found = fingerprint(&spank_text, &errno_text);

    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let recorded_path = manifest.join(FINGERPRINT_FILE);
    if env::var_os(UPDATE_ENV).is_some_and(|v| v == "1") {
        record(&recorded_path, header_series, &found);
    }

    let series = match env::var(SERIES_ENV) {
        Err(_) => header_series,
        Ok(s) if s.is_empty() => header_series,
        Ok(s) => match Series::parse(&s) {
            Some(wanted) => wanted,
            None => die(&format!(
                "{SERIES_ENV}={s:?} is not MAJOR.MINOR (e.g. 25.11)"
            )),
        },
    };
    let plugin_version = if series == header_series {
        header_version
    } else {
        let recorded = read_or_die(&recorded_path);
        if let Err(why) = override_allowed(&recorded, header_series, series, &found) {
            die(&format!(
                "refusing to build for Slurm {series} from the Slurm {header_series} headers in {}: {why}",
                include_dir.display()
            ));
        }
        // Only major.minor reach the loader's check; the patch level is unknown.
        series.version_number()
    };
    let description = if series == header_series {
        format!(
            "{}{}, {})",
            built_for_marker(series),
            dotted(header_version),
            include_dir.display()
        )
    } else {
        format!(
            "{}{} from {}, SPANK declarations equal to {series}'s recorded fingerprint {:016x})",
            built_for_marker(series),
            dotted(header_version),
            include_dir.display(),
            found.digest()
        )
    };
    println!(
        "cargo:warning=building gpu_affinity.so for {description}, plugin_version {plugin_version:#08x}"
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
    // 25.05 added the variable and its two values together; a header with one but not
    // the other is not one we know.
    let failure_mode = found.items.contains_key("slurm_spank_init_failure_mode")
        && found.items.contains_key("ESPANK_JOB_FAILURE");
    if failure_mode {
        println!("cargo:rustc-cfg=spank_init_failure_mode");
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
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default());
    let out = out_dir.join("spank.rs");
    if let Err(e) = bindings.write_to_file(&out) {
        die(&format!("writing {}: {e}", out.display()));
    }
    // The unwinder decided (and linked) here, carried in the library for its test.
    let unwinder = format!(
        "{}{}",
        unwinder::MARKER,
        unwinder::link_statically(&out_dir)
    );
    let series_rs = format!(
        "/// The Slurm series this build is for (`MAJOR.MINOR`).\n\
         pub const SERIES: &str = {:?};\n\
         /// What `plugin_version` exports: the series' SLURM_VERSION_NUMBER.\n\
         pub const PLUGIN_VERSION: u32 = {plugin_version:#x};\n\
         /// One line saying what this build was made from.\n\
         pub const BUILT_FOR: &str = {:?};\n\
         /// The same, NUL-terminated, for the exported `gpu_affinity_built_for`.\n\
         pub const BUILT_FOR_C: [u8; {}] = *b\"{}\\0\";\n\
         /// Which unwinder the library has (build/unwinder.rs), NUL-terminated.\n\
         pub const UNWINDER_C: [u8; {}] = *b\"{}\\0\";\n",
        series.to_string(),
        description,
        description.len() + 1,
        description.escape_default(),
        unwinder.len() + 1,
        unwinder.escape_default()
    );
    let out = out_dir.join("series.rs");
    if let Err(e) = fs::write(&out, series_rs) {
        die(&format!("writing {}: {e}", out.display()));
    }
}

fn read_or_die(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| {
        die(&format!(
            "cannot read {}: {e} (install libslurm-dev, set SLURM_INCLUDE_DIR to the directory holding slurm/spank.h, or use scripts/build-plugins)",
            path.display()
        ))
    })
}

fn die(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1);
}

fn dotted(v: u32) -> String {
    format!("{}.{:02}.{}", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff)
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

/// The SPANK API of a header set, one entry per declaration: every statement and
/// `#define` of spank.h (comments and whitespace normalized away, so a typo fixed in a
/// comment does not count) and every `ESPANK_*` line of slurm_errno.h (with its position,
/// since an enum entry's value is its place in the list). Name -> FNV-1a hash of the
/// normalized text; names let a refusal say what differs.
struct Fingerprint {
    items: BTreeMap<String, u64>,
}

impl Fingerprint {
    /// One hash over every entry, to print and compare at a glance.
    fn digest(&self) -> u64 {
        let mut text = String::new();
        for (name, hash) in &self.items {
            let _ = writeln!(text, "{name} {hash:016x}");
        }
        fnv1a(text.as_bytes())
    }
}

fn fingerprint(spank_h: &str, errno_h: &str) -> Fingerprint {
    let mut items = BTreeMap::new();
    let mut add = |name: String, text: &str| {
        let mut key = name.clone();
        let mut n = 2;
        while items.contains_key(&key) {
            key = format!("{name}#{n}");
            n += 1;
        }
        items.insert(key, fnv1a(text.as_bytes()));
    };
    for statement in statements(&strip_comments(spank_h)) {
        add(statement_name(&statement), &statement);
    }
    let errno = strip_comments(errno_h);
    let mut position = 0;
    for line in errno.lines() {
        let line = normalize(line);
        let line = line.trim_end_matches(',').trim();
        let Some(name) = identifiers(line).find(|w| w.starts_with("ESPANK_")) else {
            continue;
        };
        add(name.to_owned(), &format!("{line} @{position}"));
        position += 1;
    }
    Fingerprint { items }
}

/// The header without `/* */` and `//` comments (newlines kept, for preprocessor lines).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            let end = after.find("*/").map_or(after.len(), |e| e + 2);
            out.extend(after[..end.min(after.len())].chars().filter(|c| *c == '\n'));
            rest = &after[end.min(after.len())..];
        } else if let Some(after) = rest.strip_prefix("//") {
            rest = &after[after.find('\n').unwrap_or(after.len())..];
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn normalize(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Preprocessor lines (continuations joined) and `;`-terminated statements at brace
/// depth 0, each normalized. `#ifdef __cplusplus` blocks (the `extern "C" {` wrapper)
/// are left out: they are the same in every series and unbalance the braces.
fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut depth = 0i32;
    let mut lines = text.lines();
    let mut skipping = 0u32;
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t.starts_with('#') {
            let mut directive = t.to_owned();
            while directive.ends_with('\\') {
                directive.pop();
                directive.push(' ');
                directive.push_str(lines.next().unwrap_or_default().trim());
            }
            let directive = normalize(&directive);
            if skipping > 0 {
                if directive.starts_with("#if") {
                    skipping += 1;
                } else if directive.starts_with("#endif") {
                    skipping -= 1;
                }
                continue;
            }
            if directive == "#ifdef __cplusplus" {
                skipping = 1;
                continue;
            }
            out.push(directive);
            continue;
        }
        if skipping > 0 {
            continue;
        }
        for c in line.chars() {
            pending.push(c);
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ';' if depth == 0 => {
                    out.push(normalize(&pending));
                    pending.clear();
                }
                _ => {}
            }
        }
        pending.push(' ');
    }
    let rest = normalize(&pending);
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
}

/// What a statement declares: `#define NAME`, the function before its `(`, the
/// parenthesized name of a function-pointer typedef, `enum X`/`struct X` for a
/// definition, else its last identifier (variables, plain typedefs).
fn statement_name(s: &str) -> String {
    if let Some(rest) = s.strip_prefix('#') {
        let mut words = rest.split_whitespace();
        let directive = words.next().unwrap_or_default();
        let name = words
            .next()
            .map(|w| w.split('(').next().unwrap_or(w))
            .unwrap_or_default();
        return format!("#{directive} {name}").trim_end().to_owned();
    }
    if let Some(brace) = s.find('{') {
        let head: Vec<&str> = identifiers(&s[..brace]).collect();
        if s.starts_with("typedef")
            && let Some(last) = identifiers(&s[s.rfind('}').unwrap_or(0)..]).last()
        {
            return format!("typedef {last}");
        }
        return head.join(" ");
    }
    if let Some(paren) = s.find('(') {
        if s.starts_with("typedef")
            && let Some(inner) = identifiers(&s[paren..]).next()
        {
            return format!("typedef {inner}");
        }
        if let Some(name) = identifiers(&s[..paren]).last() {
            return name.to_owned();
        }
    }
    identifiers(s).last().unwrap_or(s).to_owned()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The recorded file: `series A B C` (the series that share these declarations), then
/// `decl NAME HASH` lines; `#` starts a comment line.
struct Recorded {
    series: Vec<Series>,
    items: BTreeMap<String, u64>,
}

fn parse_recorded(text: &str) -> Recorded {
    let mut series = Vec::new();
    let mut items = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(first), rest) = (words.next(), words) else {
            continue;
        };
        if first == "series" {
            series.extend(rest.filter_map(Series::parse));
        } else if let Some(entry) = line.strip_prefix("decl ")
            && let Some((name, hash)) = entry.rsplit_once(' ')
            && let Ok(hash) = u64::from_str_radix(hash, 16)
        {
            items.insert(name.trim().to_owned(), hash);
        }
    }
    Recorded { series, items }
}

/// Building `wanted` from headers of `have` is allowed when both series share one
/// recorded set of SPANK declarations and the headers match it exactly.
fn override_allowed(
    recorded_text: &str,
    have: Series,
    wanted: Series,
    found: &Fingerprint,
) -> Result<(), String> {
    let recorded = parse_recorded(recorded_text);
    let names = |v: &[Series]| {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !recorded.series.contains(&wanted) || !recorded.series.contains(&have) {
        return Err(format!(
            "{FINGERPRINT_FILE} records one SPANK API only for Slurm {}; build {wanted} from its own headers",
            names(&recorded.series)
        ));
    }
    let mut problems = Vec::new();
    for (name, hash) in &recorded.items {
        match found.items.get(name) {
            None => problems.push(format!("`{name}` is missing")),
            Some(h) if h != hash => problems.push(format!("`{name}` is declared differently")),
            Some(_) => {}
        }
    }
    for name in found.items.keys() {
        if !recorded.items.contains_key(name) {
            problems.push(format!("`{name}` is new"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "their SPANK declarations differ from those recorded for {} ({}): {}",
            names(&recorded.series),
            FINGERPRINT_FILE,
            problems.join("; ")
        ))
    }
}

/// Rewrite the recorded file from these headers (`GPU_AFFINITY_FINGERPRINT_UPDATE=1`),
/// keeping its `series` line; run against the newest series' real headers.
fn record(path: &Path, header_series: Series, found: &Fingerprint) {
    let old = fs::read_to_string(path).unwrap_or_default();
    let mut series = parse_recorded(&old).series;
    if !series.contains(&header_series) {
        series.push(header_series);
    }
    let mut text = String::from(
        "# The SPANK declarations (spank.h, and the ESPANK_* block of slurm_errno.h) that the\n\
         # Slurm series below share, as spank-plugin/build.rs normalizes and hashes them: one\n\
         # `decl NAME FNV-1a-64` line per declaration. build.rs builds a series from another's\n\
         # headers only when both are listed here and the headers match every line.\n\
         # Regenerate: GPU_AFFINITY_FINGERPRINT_UPDATE=1 with SLURM_INCLUDE_DIR at real headers.\n",
    );
    let _ = writeln!(
        text,
        "series {}",
        series
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    );
    for (name, hash) in &found.items {
        let _ = writeln!(text, "decl {name} {hash:016x}");
    }
    if let Err(e) = fs::write(path, text) {
        die(&format!("writing {}: {e}", path.display()));
    }
}
