//! The `log` facade, forwarded to Slurm's own log functions.
//!
//! Every line goes through a `"%s"` format so text from the topology or the user can
//! never be read as printf directives, and through [`printable`] so it can never forge a
//! line of its own: values the user controls (`SLURM_STEP_GPUS`, `SLURM_GPUS_PER_TASK`,
//! the option's text) reach slurmd's log, which admins and their tools read line by
//! line, so a newline in one would start a line that looks like Slurm's own. Escaping
//! here, at the one boundary every `log` macro passes, means no caller can forget it.
//! Where a line lands depends on the context:
//! srun prints errors on the user's terminal; in slurmstepd, errors from task hooks reach
//! srun's stderr and everything lands in the slurmd log at the configured level.

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Slurm's log levels this plugin uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlurmLevel {
    Error,
    Info,
    Verbose,
    Debug,
}

fn slurm_level(level: Level) -> SlurmLevel {
    match level {
        Level::Error => SlurmLevel::Error,
        // Slurm has no warning level; info is shown by srun and logged by slurmd.
        Level::Warn | Level::Info => SlurmLevel::Info,
        Level::Debug => SlurmLevel::Verbose,
        Level::Trace => SlurmLevel::Debug,
    }
}

struct SlurmLogger;

static LOGGER: SlurmLogger = SlurmLogger;

impl Log for SlurmLogger {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &Record<'_>) {
        emit(slurm_level(record.level()), &record.args().to_string());
    }

    fn flush(&self) {}
}

/// Route the `log` macros to Slurm. Idempotent; called at every hook entry because the
/// plugin has no load-time constructor.
pub fn install() {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(LevelFilter::Trace);
    }
}

/// `line` as one line, control characters escaped: core's one escaper
/// ([`gpu_affinity::text::one_line`]), the same rules as core's error lines.
pub use gpu_affinity::text::one_line as printable;

/// Send one line to Slurm (tests: to this thread's capture), made [`printable`] first.
pub fn emit(level: SlurmLevel, line: &str) {
    sink(level, &printable(line));
}

// Slurm's log functions are C varargs calls.
#[cfg(not(test))]
#[allow(unsafe_code)]
fn sink(level: SlurmLevel, line: &str) {
    use crate::ffi;
    use std::ffi::CString;

    // `printable` left no NUL, so this cannot fail; an empty line is the safe fallback.
    let text = CString::new(line).unwrap_or_default();
    let fmt = c"%s".as_ptr();
    // SAFETY: the format is a literal "%s" and its one argument a valid C string that
    // lives across the call; Slurm copies the text.
    unsafe {
        match level {
            SlurmLevel::Error => ffi::slurm_error(fmt, text.as_ptr()),
            SlurmLevel::Info => ffi::slurm_info(fmt, text.as_ptr()),
            SlurmLevel::Verbose => ffi::slurm_verbose(fmt, text.as_ptr()),
            SlurmLevel::Debug => ffi::slurm_debug(fmt, text.as_ptr()),
        }
    }
}

#[cfg(test)]
thread_local! {
    static CAPTURED: std::cell::RefCell<Vec<(SlurmLevel, String)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Tests: lines are kept per thread instead of reaching Slurm (which is not linked).
#[cfg(test)]
fn sink(level: SlurmLevel, line: &str) {
    CAPTURED.with(|c| c.borrow_mut().push((level, line.to_string())));
}

/// Tests: the lines this thread logged since the last call. It also routes the `log`
/// macros here, since a test process (nextest runs one per test) may call a hook body
/// without the guard that normally installs the logger.
#[cfg(test)]
pub fn take() -> Vec<(SlurmLevel, String)> {
    install();
    CAPTURED.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_so_a_value_cannot_forge_a_log_line() {
        take();
        let forged = "SLURM_STEP_GPUS='0,1\nerror: FORGED LINE\r\u{1b}[2J\0\u{7f}\u{85}\t'";
        log::warn!("gpu-affinity: {forged}");
        let logs = take();
        assert_eq!(
            logs,
            vec![(
                SlurmLevel::Info,
                "gpu-affinity: SLURM_STEP_GPUS='0,1\\nerror: FORGED LINE\\r\\x1b[2J\\x00\\x7f\\x85\\t'"
                    .to_string()
            )]
        );
        assert!(logs[0].1.chars().all(|c| !c.is_control()));
        // Ordinary text, non-ASCII included, passes unchanged and uncopied.
        assert!(matches!(
            printable("GPU 0000:18:00.0 (CUDA 0) — ok"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
