//! The `--gpu-affinity` callback and its environment twin, checked by srun's init_post_opt.

use super::*;

#[test]
fn option_callback_accepts_modes_and_rejects_bad_values_with_the_allowed_ones() {
    let plugin = Plugin::new();
    assert!(option_callback::on_option(&plugin, Some("prefer,verbose"), false).is_ok());
    assert!(
        matches!(plugin.option(), OptionValue::Given(u) if u.choice == Choice::Prefer && u.verbose)
    );
    let err = option_callback::on_option(&plugin, Some("fast"), false).expect_err("bad value");
    assert!(
        err.0.contains("'fast'") && err.0.contains("strict, prefer or off"),
        "{err}"
    );
    assert_eq!(plugin.option(), OptionValue::Invalid);
    assert!(option_callback::on_option(&plugin, None, true).is_err());
}

#[test]
fn srun_checks_the_env_twin_before_launch() {
    let plugin = Plugin::new();
    let mut host = FakeHost::new(Context::Local);
    host.process_env
        .insert("SLURM_GPU_AFFINITY".into(), "sometimes".into());
    let err = dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).expect_err("bad twin");
    assert!(
        err.0.contains("'sometimes'") && err.0.contains("(from SLURM_GPU_AFFINITY)"),
        "{err}"
    );
    // The option, when given, wins over the variable.
    option_callback::on_option(&plugin, Some("strict"), false).expect("good value");
    dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).expect("option wins");
    // sbatch/salloc check it too.
    let host = FakeHost {
        context: Context::Allocator,
        ..host
    };
    let plugin = Plugin::new();
    assert!(dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).is_err());
}

#[test]
fn srun_says_when_the_site_floor_raises_the_mode() {
    let plugin = Plugin::new();
    let host = FakeHost::new(Context::Local);
    let argv = vec!["enforce=strict".to_string()];
    crate::init::init_with_config(&plugin, &host, &argv, Path::new("/nonexistent.toml"), 0)
        .expect("init");
    option_callback::on_option(&plugin, Some("off"), false).expect("off");
    logger::take();
    dispatch(&plugin, Hook::InitPostOpt, &host, &no_os(), &[]).expect("post opt");
    let logs = logger::take();
    assert!(
        logs.iter()
            .any(|(l, t)| *l == SlurmLevel::Info
                && t.contains("--gpu-affinity=off raised to strict")),
        "{logs:?}"
    );
}
