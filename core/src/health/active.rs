//! Active tests' output, parsed (Invariant 6): `dcgmi diag -r LEVEL -j` and nccl-tests'
//! `all_reduce_perf`. Text in, values out; the prolog crate runs the programs.
//!
//! `dcgmi diag -j` (DCGM 3.x and 4.x, key names from DCGM's `NvvsJsonStrings.h`; NVIDIA
//! publishes no stable schema): one object whose `"DCGM Diagnostic"` (3.x: `"DCGM GPU
//! Diagnostic"`) member holds `test_categories`, each `{category, tests: [{name,
//! results: [{status, entity_group, entity_id | gpu_id | gpu_ids, warnings: [{warning,
//! error_id, ...}]}], test_summary: {status}}]}`; `status` is `Pass`, `Fail`, `Warn`, `Skip`
//! (or `Not Run`). A run that could not start prints `{"DCGM Diagnostic": {"runtime_error":
//! "..."}}`.
//!
//! `all_reduce_perf` (nccl-tests `src/common.cu`): `#` comment lines, one table row per
//! size, then `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth    : %g`
//! (GB/s, the mean of the rows' bus bandwidth, optionally followed by `OK`/`FAILED` when
//! NCCL_TESTS_MIN_BW is set).

use serde_json::Value;

/// Bytes of output the parsers look at: what a reader keeps of a program's stdout.
pub const MAX_OUTPUT: usize = 4 << 20;

/// Why an active test's output says nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActiveError {
    #[error("dcgmi diag output is not JSON: {0}")]
    NotJson(String),
    #[error("dcgmi diag output has no \"DCGM Diagnostic\" object")]
    NoDiagnostic,
    #[error("dcgmi diag could not run: {0}")]
    Runtime(String),
    #[error("dcgmi diag output lists no test")]
    NoTests,
    #[error("all_reduce_perf output has no \"# Avg bus bandwidth\" line")]
    NoBandwidth,
    #[error("all_reduce_perf bus bandwidth is not a number: {0}")]
    BadBandwidth(String),
}

/// One test's result on one entity (or the whole node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiagResult {
    pub category: String,
    pub test: String,
    /// `Pass`, `Fail`, `Warn`, `Skip`, as dcgmi writes it.
    pub status: String,
    /// `GPU 0`, `CPU 1`; `None` for a node-wide result.
    pub entity: Option<String>,
    /// The first warning's text, if any.
    pub warning: Option<String>,
}

impl DiagResult {
    pub fn failed(&self) -> bool {
        self.status.eq_ignore_ascii_case("fail")
    }
    pub fn warned(&self) -> bool {
        self.status.eq_ignore_ascii_case("warn")
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DcgmDiag {
    pub results: Vec<DiagResult>,
}

/// Results kept at most (DCGM's own response holds a few hundred).
const MAX_RESULTS: usize = 4096;
/// Characters kept of any text field.
const MAX_FIELD: usize = 200;

fn field(v: &Value) -> Option<String> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let one_line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_FIELD)
        .collect();
    Some(one_line.trim().to_string())
}

/// `dcgmi diag -j`'s JSON.
pub fn dcgm_diag(text: &str) -> Result<DcgmDiag, ActiveError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        let why = e.to_string();
        ActiveError::NotJson(why.lines().next().unwrap_or("").to_string())
    })?;
    let diag = doc
        .get("DCGM Diagnostic")
        .or_else(|| doc.get("DCGM GPU Diagnostic"))
        .ok_or(ActiveError::NoDiagnostic)?;
    if let Some(why) = diag.get("runtime_error").and_then(field) {
        return Err(ActiveError::Runtime(why));
    }
    let mut results = Vec::new();
    let categories = diag
        .get("test_categories")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for cat in categories {
        let category = cat.get("category").and_then(field).unwrap_or_default();
        let tests = cat
            .get("tests")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for t in tests {
            let test = t.get("name").and_then(field).unwrap_or_default();
            let rows = t
                .get("results")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            for r in rows {
                if results.len() >= MAX_RESULTS {
                    break;
                }
                let Some(status) = r.get("status").and_then(field) else {
                    continue;
                };
                results.push(DiagResult {
                    category: category.clone(),
                    test: test.clone(),
                    status,
                    entity: entity(r),
                    warning: r
                        .get("warnings")
                        .and_then(Value::as_array)
                        .and_then(|w| w.first())
                        .and_then(|w| w.get("warning"))
                        .and_then(field),
                });
            }
        }
    }
    if results.is_empty() {
        return Err(ActiveError::NoTests);
    }
    Ok(DcgmDiag { results })
}

/// `GPU 0` from 4.x's `entity_group` + `entity_id`, or 3.x's `gpu_id` / `gpu_ids`.
fn entity(r: &Value) -> Option<String> {
    if let Some(id) = r.get("entity_id").and_then(field) {
        let group = r
            .get("entity_group")
            .and_then(field)
            .unwrap_or_else(|| "GPU".into());
        return Some(format!("{group} {id}"));
    }
    r.get("gpu_id")
        .or_else(|| r.get("gpu_ids"))
        .and_then(field)
        .filter(|s| !s.is_empty())
        .map(|id| format!("GPU {id}"))
}

/// What one `all_reduce_perf` run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct AllReduce {
    /// `# Avg bus bandwidth`, GB/s (finite, not negative).
    pub avg_busbw_gbps: f64,
    /// `# Out of bounds values : N`: results that did not match (data corruption).
    pub wrong: Option<u64>,
    /// Table rows seen (one per message size).
    pub rows: usize,
}

// The parser admits only finite bandwidths, so equality is reflexive (Inputs is `Eq`).
impl Eq for AllReduce {}

impl From<ActiveError> for super::Gap {
    fn from(e: ActiveError) -> super::Gap {
        super::Gap::Failed(e.to_string())
    }
}

/// nccl-tests' text output.
pub fn all_reduce(text: &str) -> Result<AllReduce, ActiveError> {
    let mut avg = None;
    let mut wrong = None;
    let mut rows = 0usize;
    for line in text.lines().take(1 << 16) {
        let t = line.trim_start();
        // Before nccl-tests 2.0 the summary lines had no `#`.
        let body = t.strip_prefix('#').unwrap_or(t);
        if let Some((key, value)) = body.split_once(':') {
            let word = value.split_whitespace().next().unwrap_or("");
            match key.trim() {
                "Avg bus bandwidth" => avg = Some(word.to_string()),
                "Out of bounds values" => wrong = word.parse::<u64>().ok(),
                _ => {}
            }
        } else if t
            .split_whitespace()
            .next()
            .is_some_and(|w| w.parse::<u64>().is_ok())
        {
            rows = rows.saturating_add(1);
        }
    }
    let word = avg.ok_or(ActiveError::NoBandwidth)?;
    let gbps = word
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| ActiveError::BadBandwidth(word.chars().take(40).collect()))?;
    Ok(AllReduce {
        avg_busbw_gbps: gbps,
        wrong,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DCGM 4.x `dcgmi diag -r 2 -j`, two GPUs, memory failing on GPU 1 (shape per DCGM's
    /// NvvsJsonStrings.h and dcgmi's DiagTests).
    pub const DCGM4_FAIL: &str = r#"{
  "DCGM Diagnostic" : {
    "test_categories" : [
      { "category" : "Deployment",
        "tests" : [ { "name" : "software",
          "results" : [ { "entity_group" : "GPU", "entity_group_id" : 1, "entity_id" : 0, "status" : "Pass" },
                        { "entity_group" : "GPU", "entity_group_id" : 1, "entity_id" : 1, "status" : "Pass" } ],
          "test_summary" : { "status" : "Pass" } } ] },
      { "category" : "Hardware",
        "tests" : [ { "name" : "memory",
          "results" : [ { "entity_group" : "GPU", "entity_group_id" : 1, "entity_id" : 0, "status" : "Pass" },
                        { "entity_group" : "GPU", "entity_group_id" : 1, "entity_id" : 1, "status" : "Fail",
                          "warnings" : [ { "error_category" : 10, "error_id" : 83, "error_severity" : 2,
                                           "warning" : "Error using CUDA API cudaMalloc\nline two" } ] } ],
          "test_summary" : { "status" : "Fail" } } ] }
    ]
  },
  "metadata" : { "version" : "4.2.3", "Driver Version Detected" : "570.124.06" }
}"#;

    #[test]
    fn dcgm4_failure_names_the_test_and_gpu() {
        let d = dcgm_diag(DCGM4_FAIL).expect("parses");
        assert_eq!(d.results.len(), 4);
        let failed: Vec<_> = d.results.iter().filter(|r| r.failed()).collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].test, "memory");
        assert_eq!(failed[0].category, "Hardware");
        assert_eq!(failed[0].entity.as_deref(), Some("GPU 1"));
        assert_eq!(
            failed[0].warning.as_deref(),
            Some("Error using CUDA API cudaMalloc line two")
        );
    }

    #[test]
    fn dcgm3_shape_and_runtime_errors() {
        let v3 = r#"{"DCGM GPU Diagnostic":{"test_categories":[{"category":"Integration",
            "tests":[{"name":"PCIe","results":[{"gpu_id":"3","status":"Warn",
            "warnings":[{"warning":"slow link"}]}]}]}]}}"#;
        let d = dcgm_diag(v3).expect("3.x");
        assert!(d.results[0].warned());
        assert_eq!(d.results[0].entity.as_deref(), Some("GPU 3"));
        assert_eq!(
            dcgm_diag(
                r#"{"DCGM Diagnostic":{"runtime_error":"Unable to connect to host engine"}}"#
            ),
            Err(ActiveError::Runtime(
                "Unable to connect to host engine".into()
            ))
        );
        assert_eq!(dcgm_diag("{}"), Err(ActiveError::NoDiagnostic));
        assert_eq!(
            dcgm_diag(r#"{"DCGM Diagnostic":{"test_categories":[]}}"#),
            Err(ActiveError::NoTests)
        );
        let e = dcgm_diag("Error: unable to establish a connection\n").expect_err("text");
        assert!(matches!(e, ActiveError::NotJson(_)));
        assert!(!e.to_string().contains('\n'));
    }

    /// nccl-tests 2.x on one 8-GPU node (`-b 1G -e 1G -g 8`), as common.cu prints it.
    pub const NCCL_PASS: &str = "\
# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 1073741824 step: 1048576(bytes) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41213 on gpu-st-1 device  0 [0x53] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1   4412.3  243.35  425.86      0   4398.7  244.10  427.18      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 426.52 
#
";

    #[test]
    fn all_reduce_reads_the_average_and_the_errors() {
        let a = all_reduce(NCCL_PASS).expect("parses");
        assert_eq!(a.avg_busbw_gbps, 426.52);
        assert_eq!(a.wrong, Some(0));
        assert_eq!(a.rows, 1);
        let bad = NCCL_PASS
            .replace(": 0 OK", ": 12 FAILED")
            .replace("426.52 ", "1.2e+01 FAILED");
        let a = all_reduce(&bad).expect("parses");
        assert_eq!((a.avg_busbw_gbps, a.wrong), (12.0, Some(12)));
        assert_eq!(all_reduce("# nThread 1\n"), Err(ActiveError::NoBandwidth));
        assert_eq!(
            all_reduce("# Avg bus bandwidth    : nan\n"),
            Err(ActiveError::BadBandwidth("nan".into()))
        );
        // Before 2.0 nccl-tests printed the summary lines without `#`.
        let old = all_reduce(" Out of bounds values : 0 OK\n Avg bus bandwidth    : 90.5 \n");
        assert_eq!(old.map(|a| a.avg_busbw_gbps), Ok(90.5));
    }
}
