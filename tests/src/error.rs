//! The harness's one error type: a sentence saying what failed and what to do.

use std::fmt;

/// Why the harness could not do what a test asked. The text is meant to be read by a
/// person looking at a failed CI run: it names the step, the path or program, and,
/// for missing prerequisites, what to install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessError(pub String);

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HarnessError {}

pub type Result<T, E = HarnessError> = std::result::Result<T, E>;

/// Build a [`HarnessError`] with `format!` syntax.
#[macro_export]
macro_rules! harness_err {
    ($($arg:tt)*) => { $crate::error::HarnessError(format!($($arg)*)) };
}

/// Attach what was being done to an I/O (or any displayable) error.
pub trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| HarnessError(format!("{}: {e}", what())))
    }
}
