//! `[handoff]`: where the Azure and OCI hand-offs (`[drain] handoff = "azure"` / `"oci"`)
//! send their report. Every key has a default for the real clouds; the endpoints are
//! settable here only (a root-owned file), for tests and private endpoints:
//!
//! ```toml
//! [handoff]
//! curl = "/usr/bin/curl"                 # runs every request (no shell; config on stdin)
//! timeout_s = 10                         # each request's bound (curl --max-time), 1-15
//! azure_imds = "http://169.254.169.254"  # the token and the VM's ids
//! azure_arm = "https://management.azure.com"
//! azure_object_id = "..."                # a user-assigned identity (unset: the VM's own)
//! oci_file = "/opt/oci-hpc/http_server/files/healthchecks"
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use super::value::{abs_path, after_key, in_range, is_invalid};

pub const DEFAULT_CURL: &str = "/usr/bin/curl";
pub const DEFAULT_HANDOFF_TIMEOUT_S: u32 = 10;
/// Three requests of this bound (plus curl's start) stay under the 60 s slurmd gives
/// HealthCheckProgram before it kills it (slurmd.c `.max_wait = 60 * 1000`).
pub const MAX_HANDOFF_TIMEOUT_S: u32 = 15;
/// Azure's Instance Metadata Service (triggerGHR.sh).
pub const DEFAULT_AZURE_IMDS: &str = "http://169.254.169.254";
/// Azure Resource Manager.
pub const DEFAULT_AZURE_ARM: &str = "https://management.azure.com";
/// The file the OCI HPC stack's http_server serves (check_gpu_setup.py's `http_server_file`).
pub const DEFAULT_OCI_FILE: &str = "/opt/oci-hpc/http_server/files/healthchecks";

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandoffConfig {
    #[serde(default, deserialize_with = "abs_path")]
    pub curl: Option<PathBuf>,
    #[serde(default, deserialize_with = "timeout")]
    pub timeout_s: Option<u32>,
    #[serde(default, deserialize_with = "url")]
    pub azure_imds: Option<String>,
    #[serde(default, deserialize_with = "url")]
    pub azure_arm: Option<String>,
    #[serde(default, deserialize_with = "object_id")]
    pub azure_object_id: Option<String>,
    #[serde(default, deserialize_with = "abs_path")]
    pub oci_file: Option<PathBuf>,
}

impl HandoffConfig {
    pub fn curl(&self) -> &Path {
        self.curl.as_deref().unwrap_or(Path::new(DEFAULT_CURL))
    }

    pub fn timeout_s(&self) -> u32 {
        self.timeout_s.unwrap_or(DEFAULT_HANDOFF_TIMEOUT_S)
    }

    pub fn azure_imds(&self) -> &str {
        self.azure_imds.as_deref().unwrap_or(DEFAULT_AZURE_IMDS)
    }

    pub fn azure_arm(&self) -> &str {
        self.azure_arm.as_deref().unwrap_or(DEFAULT_AZURE_ARM)
    }

    pub fn oci_file(&self) -> &Path {
        self.oci_file
            .as_deref()
            .unwrap_or(Path::new(DEFAULT_OCI_FILE))
    }
}

fn timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    in_range(d, 1, i64::from(MAX_HANDOFF_TIMEOUT_S)).map(Some)
}

/// `http://` or `https://` and a host (a port, a path prefix), printable ASCII without
/// blanks, quotes or backslashes (it goes into a curl config line), no trailing `/`.
fn url<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(d)?;
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    let ok = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
        && text.len() <= 256
        && !text.ends_with('/')
        && text
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b'?' | b'#'));
    if ok {
        Ok(Some(text))
    } else {
        Err(after_key(is_invalid(
            format_args!("'{text}'"),
            "an http:// or https:// URL without a trailing '/'",
        )))
    }
}

/// A managed identity's object id: a GUID.
fn object_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(d)?;
    if (1..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        Ok(Some(text))
    } else {
        Err(after_key(is_invalid(
            format_args!("'{text}'"),
            "an object id (hex digits and '-')",
        )))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, parse};

    /// The shipped sample, every setting on, shows the defaults.
    #[test]
    fn the_sample_shows_the_defaults() {
        let text = crate::sample_config::uncommented(crate::sample_config::TEXT).expect("sample");
        let h = parse(&text).expect("sample parses").handoff;
        let d = super::HandoffConfig::default();
        assert_eq!(
            (
                h.curl(),
                h.timeout_s(),
                h.azure_imds(),
                h.azure_arm(),
                h.oci_file()
            ),
            (
                d.curl(),
                d.timeout_s(),
                d.azure_imds(),
                d.azure_arm(),
                d.oci_file()
            )
        );
        assert!(h.timeout_s.is_some() && h.azure_object_id.is_none());
    }

    #[test]
    fn handoff_keys_are_checked_and_named() {
        let c = parse(
            "[drain]\nhandoff = \"azure\"\n[handoff]\nazure_imds = \"http://127.0.0.1:8080\"\n\
             azure_arm = \"http://127.0.0.1:8081/arm\"\ntimeout_s = 3\nazure_object_id = \"ab-12\"\n\
             curl = \"/opt/curl\"\noci_file = \"/srv/hc\"\n",
        )
        .expect("valid");
        let h = &c.handoff;
        assert_eq!(
            (h.azure_imds(), h.azure_arm(), h.timeout_s()),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8081/arm", 3)
        );
        assert_eq!(h.azure_object_id.as_deref(), Some("ab-12"));
        assert_eq!(h.curl().to_str(), Some("/opt/curl"));
        assert_eq!(h.oci_file().to_str(), Some("/srv/hc"));
        let d = Config::default().handoff;
        assert_eq!(
            (d.azure_imds(), d.azure_arm(), d.timeout_s()),
            (super::DEFAULT_AZURE_IMDS, super::DEFAULT_AZURE_ARM, 10)
        );
        for (text, error) in [
            (
                "[handoff]\nazure_arm = \"ftp://x\"\n",
                "config line 2: [handoff] azure_arm = 'ftp://x' is invalid: expected an http:// or https:// URL without a trailing '/'",
            ),
            (
                "[handoff]\nazure_imds = \"http://a b\"\n",
                "config line 2: [handoff] azure_imds = 'http://a b' is invalid: expected an http:// or https:// URL without a trailing '/'",
            ),
            (
                "[handoff]\n\ntimeout_s = 0\n",
                "config line 3: [handoff] timeout_s = 0 is invalid: expected 1 to 15",
            ),
            (
                "[handoff]\nazure_object_id = \"x\\\"y\"\n",
                "config line 2: [handoff] azure_object_id = 'x\"y' is invalid: expected an object id (hex digits and '-')",
            ),
            (
                "[handoff]\noci_file = \"healthchecks\"\n",
                "config line 2: [handoff] oci_file = 'healthchecks' is invalid: expected an absolute path",
            ),
            (
                "[handoff]\nimds = \"http://x\"\n",
                "config line 2: unknown key 'imds' in [handoff] (known: curl, timeout_s, azure_imds, azure_arm, azure_object_id, oci_file)",
            ),
        ] {
            assert_eq!(parse(text).map(|_| ()).unwrap_err().to_string(), error);
        }
    }
}
