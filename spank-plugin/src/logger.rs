//! The `log` facade, forwarded to Slurm's own log functions.
//!
//! Every line goes through a `"%s"` format so text from the topology or the user can
//! never be read as printf directives. Where a line lands depends on the context:
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

#[cfg(not(test))]
pub fn emit(level: SlurmLevel, line: &str) {
    use crate::ffi;
    use std::ffi::CString;

    let text = CString::new(line.replace('\0', " ")).unwrap_or_default();
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
pub fn emit(level: SlurmLevel, line: &str) {
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
