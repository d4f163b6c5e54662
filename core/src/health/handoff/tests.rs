use super::*;
use crate::health::{Class, Fault, Status};

fn outcome(id: CheckId, code: &str, class: Class, repair: Repair) -> Outcome {
    Outcome {
        id,
        tier: id.def().tier,
        class,
        status: Status::Fail,
        evidence: format!("{code} seen"),
        code: code.to_string(),
        subject: Some("gpu=0000:53:00.0".into()),
        fault: Fault::Gpu,
        repair,
    }
}

/// Every check that can drain has an entry of its own (not only refinements), each entry
/// names a fault code the dictionary has, and every generic or absent mapping says why.
#[test]
fn every_drain_class_check_maps() {
    for id in CheckId::ALL {
        let def = id.def();
        let check_level = CLOUD_MAP.iter().find(|e| e.check == id && e.code.is_none());
        if def.class == Class::Drain {
            assert!(
                check_level.is_some(),
                "{id} ({}) has no cloud entry",
                def.code
            );
        }
    }
    for e in CLOUD_MAP {
        if let Some(code) = e.azure {
            assert!(
                ghr_category(code).is_some(),
                "{}: {code} not in the dictionary",
                e.check
            );
        }
        let generic = e.azure.is_none_or(|c| c == GENERIC);
        if generic {
            assert!(
                e.why.starts_with("generic:")
                    || e.why.starts_with("not reported:")
                    || e.why.contains("NHC2001"),
                "{} {:?}: a generic or absent mapping must say why ({})",
                e.check,
                e.code,
                e.why
            );
        }
        assert!(!e.why.is_empty());
        // No two entries for the same finding.
        let same = CLOUD_MAP
            .iter()
            .filter(|o| o.check == e.check && o.code == e.code)
            .count();
        assert_eq!(same, 1, "{} {:?} twice", e.check, e.code);
    }
}

/// The counters' drain codes (counters.rs) each reach an entry; the ones with their own
/// category in the dictionary get it, not their check's.
#[test]
fn counter_and_xid_codes_refine_their_check() {
    let cat = |id, code: &str| azure_category(&outcome(id, code, Class::Drain, Repair::Reset));
    let r = |s: &str| Some(format!("Resource.Hpc.Unhealthy.{s}"));
    let own = |id, code: &str| cat(id, code).map(str::to_string);
    let cases: &[(CheckId, &str, &str)] = &[
        (C::GpuXid, "GPU_XID_79", "XID79FallenOffBus"),
        (C::GpuXid, "GPU_XID_48", "XID48DoubleBitECC"),
        (C::GpuXid, "GPU_XID_94", "XID94ContainedECCError"),
        (C::GpuXid, "GPU_XID_95", "XID95UncontainedECCError"),
        // Every other XID: generic, as AzNHC's XID test reports them.
        (C::GpuXid, "GPU_XID_119", "HpcGenericFailure"),
        (
            C::GpuMemoryWear,
            "GPU_ROW_REMAP_EXHAUSTED",
            "HpcRowRemapFailure",
        ),
        (
            C::GpuMemoryWear,
            "GPU_PAGES_EXHAUSTED",
            "ECCPageRetirementTableFull",
        ),
        (C::GpuMemoryWear, "GPU_PAGES_DBE_RATE", "DBEOverLimit"),
        (C::GpuMemoryWear, "GPU_SRAM_UNCORRECTABLE", "DBEOverLimit"),
        (C::GpuMemoryWear, "GPU_SRAM_ECC", "DBEOverLimit"),
        (C::GpuMemoryWear, "GPU_DRAM_ECC", "DBEOverLimit"),
        (C::GpuNvlinkErrors, "GPU_NVLINK_RECOVERY", "NvLink"),
        (C::GpuNvlinkErrors, "GPU_NVLINK_REPLAY", "NvLink"),
        (C::GpuNvlinkErrors, "GPU_NVLINK_CRC", "NvLink"),
        (C::FabricPortErrors, "NIC_PHYS_DOWN", "IBPortDown"),
        (C::FabricPortErrors, "NIC_PORT_ERRORS", "IBPerformance"),
        (C::GpuBus, "GPU_FELL_OFF_BUS", "XID79FallenOffBus"),
        (C::GpuCount, "GPU_MISSING", "HpcMissingGpu"),
        (C::GpuRowRemap, "GPU_ROW_REMAP", "HpcRowRemapFailure"),
        (C::FabricPortState, "NIC_PORT_DOWN", "IBPortDown"),
        (C::FabricLinkFlaps, "NIC_LINK_FLAPS", "IBPortFlapping"),
        (C::GpuDcgmDiag, "GPU_DCGM_DIAG", "HpcGpuDcgmDiagFailure"),
        (C::GpuNvlink, "GPU_NVLINK", "NvLink"),
    ];
    for (id, code, want) in cases {
        assert_eq!(own(*id, code), r(want), "{id} {code}");
    }
    // The cluster's storage and a job's leftovers are not the Azure host's fault.
    assert_eq!(cat(C::StorageMount, "STORAGE_MOUNT"), None);
    assert_eq!(cat(C::StorageLatency, "STORAGE_STALL_TIMEOUT"), None);
    assert_eq!(cat(C::GpuLeftoverProcesses, "GPU_PROCS_LEFT"), None);
}

#[test]
fn the_dictionary_is_azhncs() {
    assert_eq!(
        ghr_category("NHC2013"),
        Some("Resource.Hpc.Unhealthy.XID79FallenOffBus")
    );
    assert_eq!(ghr_category("NHC2006"), None);
    assert_eq!(ghr_category("NHCNA"), None);
    for (code, cat) in GHR_CATEGORIES {
        assert!(code.starts_with("NHC20") && cat.starts_with("Resource.Hpc.Unhealthy."));
    }
}

#[test]
fn oci_recommendations_follow_the_repair() {
    assert_eq!(oci_recommendation(Repair::Reset), "Reset_GPU");
    assert_eq!(oci_recommendation(Repair::Reboot), "Reboot");
    assert_eq!(oci_recommendation(Repair::Replace), "Terminate");
}

fn report(checks: Vec<Outcome>) -> Report {
    let verdict = if checks.iter().any(|c| c.class == Class::Drain && c.failed()) {
        Verdict::Drain
    } else {
        Verdict::Ok
    };
    Report { verdict, checks }
}

#[test]
fn the_oci_file_keeps_the_other_writers_keys() {
    let r = report(vec![
        outcome(C::GpuXid, "GPU_XID_79", Class::Drain, Repair::Reboot),
        outcome(C::GpuCount, "GPU_MISSING", Class::Drain, Repair::Reboot),
        outcome(
            C::StorageMount,
            "STORAGE_MOUNT",
            Class::Drain,
            Repair::Reboot,
        ),
    ]);
    let rec = OciRecord::of(&r);
    assert_eq!(rec.recommendation, "Reboot");
    assert_eq!(
        rec.status,
        [
            "Xid Error",
            "Missing GPU Error",
            "gpu-affinity: STORAGE_MOUNT gpu=0000:53:00.0"
        ]
    );
    assert!(
        rec.logs
            .starts_with("gpu-affinity: GPU_XID_79 gpu=0000:53:00.0: GPU_XID_79 seen\n")
    );
    let existing = br#"{"multi_node_healthcheck_status": "Healthy", "passive_healthcheck_recommendation": "Terminate"}"#;
    let bytes = rec.file(Some(existing), 1_764_650_096);
    let text = String::from_utf8(bytes).expect("utf-8");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["multi_node_healthcheck_status"], "Healthy");
    assert_eq!(v["passive_healthcheck_recommendation"], "Reboot");
    assert_eq!(v["passive_healthcheck_time"], "2025-12-02 04:34:56");
    assert_eq!(v["passive_healthcheck_status"][0], "Xid Error");
    assert!(
        text.contains("\n    \"passive_healthcheck_logs\""),
        "{text}"
    );
    // Garbage or a non-object starts afresh, as OCI's own writer does.
    for bad in [&b"not json"[..], b"[1]"] {
        let v: serde_json::Value = serde_json::from_slice(&rec.file(Some(bad), 0)).expect("json");
        assert_eq!(v.as_object().map(|m| m.len()), Some(4));
        assert_eq!(v["passive_healthcheck_time"], "1970-01-01 00:00:00");
    }
    let healthy = OciRecord::of(&report(vec![]));
    let v: serde_json::Value = serde_json::from_slice(&healthy.file(None, 0)).expect("json");
    assert_eq!(v["passive_healthcheck_recommendation"], "Healthy");
    assert_eq!(v["passive_healthcheck_status"], "Healthy");
}

#[test]
fn oci_logs_are_cut_where_oci_cuts_them() {
    let mut o = outcome(C::GpuXid, "GPU_XID_79", Class::Drain, Repair::Replace);
    o.evidence = "é".repeat(5000);
    let rec = OciRecord::of(&report(vec![o]));
    assert!(rec.logs.len() <= OCI_LOGS_MAX && rec.logs.len() > 4000);
    assert_eq!(rec.recommendation, "Terminate");
}

#[test]
fn utc_dates() {
    assert_eq!(utc(0, 'T'), "1970-01-01T00:00:00");
    assert_eq!(utc(951_782_400, ' '), "2000-02-29 00:00:00");
    assert_eq!(utc(4_102_444_799, 'T'), "2099-12-31T23:59:59");
    assert_eq!(utc(1_709_210_096, 'T'), "2024-02-29T12:34:56");
}

#[test]
fn the_impact_body_is_triggerghrs() {
    let body = impact_body(
        "Resource.Hpc.Unhealthy.XID79FallenOffBus",
        "gpu-affinity: GPU_XID_79 gpu=0000:53:00.0",
        "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/vm1",
        1_709_210_096,
    );
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let p = &v["properties"];
    assert_eq!(
        p["impactCategory"],
        "Resource.Hpc.Unhealthy.XID79FallenOffBus"
    );
    assert_eq!(p["startDateTime"], "2024-02-29T12:34:56Z");
    assert_eq!(p["reportedTimeUtc"], p["startDateTime"]);
    assert_eq!(
        p["impactDescription"],
        "gpu-affinity: GPU_XID_79 gpu=0000:53:00.0"
    );
    assert!(
        p["impactedResourceId"]
            .as_str()
            .is_some_and(|r| r.ends_with("/vm1"))
    );
    assert_eq!(
        impact_path("0000-aa", "u"),
        "/subscriptions/0000-aa/providers/Microsoft.Impact/workloadImpacts/u?api-version=2023-02-01-preview"
    );
    assert!(token_path(None).ends_with("resource=https%3A%2F%2Fmanagement.azure.com%2F"));
    assert!(token_path(Some("abc")).ends_with("%2F&object_id=abc"));
}

#[test]
fn imds_answers_are_checked() {
    assert_eq!(
        parse_token(r#"{"access_token":"eyJ0.eXa-_.sig","expires_in":"3599"}"#),
        Ok("eyJ0.eXa-_.sig".into())
    );
    for bad in [
        r#"{"access_token":"a b"}"#,
        r#"{"access_token":"a\"\nurl = \"http://evil\""}"#,
        r#"{"access_token":""}"#,
        r#"{"token":"x"}"#,
        "<html>",
    ] {
        assert_eq!(parse_token(bad), Err(AzureError::Token), "{bad}");
    }
    let vm = parse_compute(
        r#"{"subscriptionId":"8d10da13-8125-4ba9-a717-bf7490507b3d","resourceId":"/subscriptions/8d10da13-8125-4ba9-a717-bf7490507b3d/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/n1","name":"n1"}"#,
    )
    .expect("compute");
    assert_eq!(vm.subscription_id, "8d10da13-8125-4ba9-a717-bf7490507b3d");
    assert!(vm.resource_id.ends_with("/virtualMachines/n1"));
    assert_eq!(
        parse_compute(r#"{"subscriptionId":"../x","resourceId":"/subscriptions/x"}"#),
        Err(AzureError::Compute("subscriptionId"))
    );
    assert_eq!(
        parse_compute(r#"{"subscriptionId":"ab","resourceId":"/elsewhere"}"#),
        Err(AzureError::Compute("resourceId"))
    );
}

#[test]
fn uuids_are_version_4() {
    let u = uuid_v4([0xff; 16]);
    assert_eq!(u, "ffffffff-ffff-4fff-bfff-ffffffffffff");
    assert_eq!(uuid_v4([0; 16]), "00000000-0000-4000-8000-000000000000");
}

#[test]
fn the_curl_config_quotes_every_value() {
    let req = CurlRequest {
        method: "PUT",
        url: "https://management.azure.com/x?a=1&b=2".into(),
        headers: vec!["Authorization: Bearer tok".into()],
        body: Some(r#"{"a":"q\"uote \\ back"}"#.into()),
    };
    let text = req.config();
    assert_eq!(
        text,
        "url = \"https://management.azure.com/x?a=1&b=2\"\nrequest = \"PUT\"\n\
         header = \"Authorization: Bearer tok\"\n\
         data-binary = \"{\\\"a\\\":\\\"q\\\\\\\"uote \\\\\\\\ back\\\"}\"\n\
         write-out = \"\\ngpu-affinity-http-status:%{http_code}\\n\"\n"
    );
    // One line per setting: nothing a value holds can start another.
    assert_eq!(text.lines().count(), 5);
    assert_eq!(
        split_status("{\"ok\":1}\ngpu-affinity-http-status:201\n"),
        ("{\"ok\":1}", Some(201))
    );
    assert_eq!(split_status("partial"), ("partial", None));
    assert_eq!(
        split_status("\ngpu-affinity-http-status:000\n"),
        ("", Some(0))
    );
}

#[test]
fn reported_reasons_are_bounded() {
    let mut r = Reported::default();
    for i in 0..40 {
        r.record(&format!("gpu-affinity: GPU_XID_{i}"));
    }
    r.record("gpu-affinity: GPU_XID_39");
    assert_eq!(r.reasons.len(), Reported::MAX);
    assert!(r.contains("gpu-affinity: GPU_XID_39") && !r.contains("gpu-affinity: GPU_XID_0"));
}

/// Azure and OCI drain with the suite's own reason, and resume it as `drain` does.
#[test]
fn azure_and_oci_keep_the_suites_reason() {
    use crate::health::drain::{Action, Handoff, drain_action};
    let r = report(vec![outcome(
        C::GpuXid,
        "GPU_XID_79",
        Class::Drain,
        Repair::Reboot,
    )]);
    for h in [Handoff::Azure, Handoff::Oci] {
        assert_eq!(
            drain_action(&r, h),
            Some(Action::Set {
                state: "drain",
                reason: "gpu-affinity: GPU_XID_79 gpu=0000:53:00.0".into()
            })
        );
        assert!(h.is_own("gpu-affinity: GPU_XID_79 gpu=0000:53:00.0"));
        assert!(!h.is_own("Healthcheck:: Xid Error") && !h.is_own("Action:Reboot"));
    }
    assert_eq!(Handoff::parse("azure"), Some(Handoff::Azure));
    assert_eq!(Handoff::parse("oci"), Some(Handoff::Oci));
}
