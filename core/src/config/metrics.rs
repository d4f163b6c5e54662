//! `[metrics]`: what the health programs publish for other tools.
//!
//! ```toml
//! [metrics]
//! textfile = "/var/lib/node_exporter/gpu_affinity.prom"
//! dcgm_job_mapping_dir = "/var/lib/dcgm-exporter/job-mapping"
//! ```

use std::path::PathBuf;

use serde::Deserialize;

use super::value::{abs_dir, abs_path};

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// A node_exporter textfile each pass writes; unset: none.
    #[serde(default, deserialize_with = "abs_path")]
    pub textfile: Option<PathBuf>,
    /// dcgm-exporter's HPC job mapping files; unset: none.
    #[serde(default, deserialize_with = "abs_dir")]
    pub dcgm_job_mapping_dir: Option<PathBuf>,
}
