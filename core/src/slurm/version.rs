//! Slurm's release series (`MAJOR.MINOR`, what the plugin loader compares) and the one
//! parser of each text that names it: slurm_version.h's `SLURM_VERSION_NUMBER`, the
//! `slurmd -V` / `srun --version` line, and the marker a gpu_affinity.so build carries.
//!
//! A leaf with no imports: spank-plugin's build.rs compiles this same file (`#[path]`),
//! so the build that decides a plugin's series and `gpu-affinity install`, which picks
//! the build for a Slurm, read the header one way.

use std::fmt;

/// A Slurm release series, `MAJOR.MINOR` (24.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Series {
    pub major: u8,
    pub minor: u8,
}

impl Series {
    /// The series of a `SLURM_VERSION_NUMBER` (`0xMMmmpp`).
    pub fn of(version_number: u32) -> Series {
        Series {
            major: (version_number >> 16) as u8,
            minor: (version_number >> 8) as u8,
        }
    }

    /// `24.11` (blanks around it allowed); a patch level is not part of a series.
    pub fn parse(text: &str) -> Option<Series> {
        let (major, minor) = text.trim().split_once('.')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(major) || !digits(minor) {
            return None;
        }
        Some(Series {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
        })
    }

    /// The series' own `SLURM_VERSION_NUMBER`, patch level 0.
    pub fn version_number(self) -> u32 {
        (u32::from(self.major) << 16) | (u32::from(self.minor) << 8)
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}", self.major, self.minor)
    }
}

/// `#define SLURM_VERSION_NUMBER 0x160508` (slurm_version.h) -> 0x160508.
pub fn version_number(header: &str) -> Option<u32> {
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

/// The series of a slurm_version.h.
pub fn series_of_header(header: &str) -> Option<Series> {
    version_number(header).map(Series::of)
}

/// The series `slurmd -V` / `srun --version` prints: `slurm 24.11.5`, `slurm-wlm 22.05.8`,
/// `slurm 25.11.0-0rc1`.
pub fn series_of_version_output(text: &str) -> Option<Series> {
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    Series::parse(&format!("{major}.{minor}"))
}

/// What a gpu_affinity.so build says it is for: build.rs writes `Slurm MAJOR.MINOR
/// (headers ...)` into it (the exported `gpu_affinity_built_for`; `strings
/// gpu_affinity.so | grep '^Slurm '`).
pub fn built_for_marker(series: Series) -> String {
    format!("Slurm {series} {BUILT_FOR_TAIL}")
}

/// What follows the series in the marker: it tells the marker from other text with
/// "Slurm" in it.
const BUILT_FOR_TAIL: &str = "(headers ";

/// The series a gpu_affinity.so build's bytes name (its `built_for` marker); `None` when
/// no marker is there or two disagree.
pub fn series_of_plugin(bytes: &[u8]) -> Option<Series> {
    let needle = b"Slurm ";
    let mut found: Option<Series> = None;
    let mut at = 0;
    while let Some(pos) = find(bytes.get(at..)?, needle) {
        let start = at + pos + needle.len();
        at = start;
        let rest = bytes.get(start..)?;
        let len = rest
            .iter()
            .take(8)
            .take_while(|b| b.is_ascii_digit() || **b == b'.')
            .count();
        let Some(tail) = rest.get(len..) else {
            continue;
        };
        if !tail.starts_with(b" ") || !tail[1..].starts_with(BUILT_FOR_TAIL.as_bytes()) {
            continue;
        }
        let Some(series) = std::str::from_utf8(&rest[..len])
            .ok()
            .and_then(Series::parse)
        else {
            continue;
        };
        match found {
            Some(f) if f != series => return None,
            _ => found = Some(series),
        }
    }
    found
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Where Slurm keeps its plugins under a prefix, in the order install looks: source
/// builds `lib/slurm`, EL RPMs `lib64/slurm`, Debian `lib/MULTIARCH/slurm-wlm`, SchedMD's
/// debs `lib/MULTIARCH/slurm`.
pub fn plugin_dirs(multiarch: &str) -> [String; 4] {
    [
        "lib/slurm".to_owned(),
        "lib64/slurm".to_owned(),
        format!("lib/{multiarch}/slurm-wlm"),
        format!("lib/{multiarch}/slurm"),
    ]
}

/// The Debian multiarch name of the machine this was built for.
pub fn multiarch() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "aarch64-linux-gnu",
        _ => "x86_64-linux-gnu",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_from_the_header() {
        let h = "#define SLURM_VERSION_NUMBER 0x180b05\n#define SLURM_VERSION_MAJOR 24\n";
        assert_eq!(version_number(h), Some(0x180b05));
        assert_eq!(
            series_of_header(h).map(|s| s.to_string()).as_deref(),
            Some("24.11")
        );
        let s = series_of_header("#define SLURM_VERSION_NUMBER 0X160508").expect("series");
        assert_eq!(s.to_string(), "22.05");
        assert_eq!(s.version_number(), 0x160500);
        assert_eq!(series_of_header("nothing"), None);
        assert_eq!(
            series_of_header("#define SLURM_VERSION_NUMBER 160508"),
            None
        );
        assert_eq!(series_of_header("#define SLURM_VERSION_NUMBER 0xzz"), None);
    }

    #[test]
    fn series_from_slurmd_and_text() {
        let s = |t: &str| series_of_version_output(t).map(|s| s.to_string());
        assert_eq!(s("slurm-wlm 22.05.8\n").as_deref(), Some("22.05"));
        assert_eq!(s("slurm 25.11.0-0rc1\n").as_deref(), Some("25.11"));
        assert_eq!(s("garbage"), None);
        assert_eq!(s("slurm x.y"), None);
        assert_eq!(
            Series::parse(" 24.11 ").map(|s| s.to_string()).as_deref(),
            Some("24.11")
        );
        assert_eq!(Series::parse("24"), None);
        assert_eq!(Series::parse("+1.2"), None);
        assert_eq!(Series::parse("256.1"), None);
    }

    #[test]
    fn series_from_a_plugin_build() {
        let s = Series::parse("24.11").expect("series");
        let mut so = b"\x7fELF...Slurm binds local task 3\0".to_vec();
        so.extend_from_slice(built_for_marker(s).as_bytes());
        so.extend_from_slice(b"24.11.5, /usr/include)\0more");
        assert_eq!(series_of_plugin(&so), Some(s));
        // The same marker twice (the Rust and the C string) is one answer.
        let twice = [so.clone(), so.clone()].concat();
        assert_eq!(series_of_plugin(&twice), Some(s));
        // Two builds' markers disagree: no answer rather than a guess.
        let other = built_for_marker(Series::parse("22.05").expect("series"));
        let both = [so, other.into_bytes()].concat();
        assert_eq!(series_of_plugin(&both), None);
        assert_eq!(series_of_plugin(b"Slurm 22.05 is the series"), None);
        assert_eq!(series_of_plugin(b""), None);
        assert_eq!(series_of_plugin(b"Slurm "), None);
    }
}
