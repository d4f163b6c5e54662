//! What the plugin remembers between hooks of one process.
//!
//! srun, sbatch and slurmstepd each load the plugin into one process that serves one
//! step, and the hooks that write this state (init, the option callback, init_post_opt,
//! user_init) run
//! single-threaded before any task is forked. So: set-once cells and an atomic, no
//! `std::sync::Mutex` a panic could poison. Tests build their own [`Plugin`].

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::mode::{Choice, OptionValue, UserChoice};
use crate::run_dir::StepDir;
use crate::settings::Settings;
use crate::step_data::{Prepared, StepOutcome};

const NOT_GIVEN: u32 = 0;
const INVALID: u32 = u32::MAX;
const VERBOSE_BIT: u32 = 0x100;

pub struct Plugin {
    settings: OnceLock<Settings>,
    option: AtomicU32,
    /// What remote init_post_opt settled and read as root, for user_init.
    prepared: OnceLock<Prepared>,
    step: OnceLock<StepOutcome>,
    /// task_post_fork's attempt at the step directory: `Some(dir)`, held open, once it
    /// exists (exit removes it, written or not), `None` when it could not be made. Set once.
    step_dir: OnceLock<Option<StepDir>>,
}

impl Plugin {
    pub const fn new() -> Self {
        Plugin {
            settings: OnceLock::new(),
            option: AtomicU32::new(NOT_GIVEN),
            prepared: OnceLock::new(),
            step: OnceLock::new(),
            step_dir: OnceLock::new(),
        }
    }

    /// The settings from init; the built-in defaults if init has not run.
    pub fn settings(&self) -> Settings {
        self.settings.get().cloned().unwrap_or_default()
    }

    /// First init wins: a process serves one step, so later calls carry the same
    /// plugstack line.
    pub fn set_settings(&self, settings: Settings) {
        let _ = self.settings.set(settings);
    }

    pub fn option(&self) -> OptionValue {
        match self.option.load(Ordering::Relaxed) {
            NOT_GIVEN => OptionValue::NotGiven,
            INVALID => OptionValue::Invalid,
            bits => {
                let choice = match bits & 0xff {
                    1 => Choice::Off,
                    2 => Choice::Prefer,
                    _ => Choice::Strict,
                };
                OptionValue::Given(UserChoice {
                    choice,
                    verbose: bits & VERBOSE_BIT != 0,
                })
            }
        }
    }

    pub fn set_option(&self, value: OptionValue) {
        let bits = match value {
            OptionValue::NotGiven => NOT_GIVEN,
            OptionValue::Invalid => INVALID,
            OptionValue::Given(u) => {
                let c = match u.choice {
                    Choice::Off => 1,
                    Choice::Prefer => 2,
                    Choice::Strict => 3,
                };
                c | if u.verbose { VERBOSE_BIT } else { 0 }
            }
        };
        self.option.store(bits, Ordering::Relaxed);
    }

    /// The node's inputs and early verdicts, from remote init_post_opt.
    pub fn prepared(&self) -> Option<&Prepared> {
        self.prepared.get()
    }

    pub fn set_prepared(&self, prepared: Prepared) {
        let _ = self.prepared.set(prepared);
    }

    /// The step's outcome, computed once in user_init.
    pub fn step(&self) -> Option<&StepOutcome> {
        self.step.get()
    }

    pub fn set_step(&self, outcome: StepOutcome) {
        let _ = self.step.set(outcome);
    }

    /// Whether task_post_fork already tried to write the step directory.
    pub fn step_dir_tried(&self) -> bool {
        self.step_dir.get().is_some()
    }

    /// The step directory made for this step (exit removes it).
    pub fn step_dir(&self) -> Option<&StepDir> {
        self.step_dir.get().and_then(Option::as_ref)
    }

    /// Only the first call counts: a directory recorded stays recorded.
    pub fn set_step_dir(&self, made: Option<StepDir>) {
        let _ = self.step_dir.set(made);
    }
}

impl Default for Plugin {
    fn default() -> Self {
        Plugin::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_value_round_trips() {
        let p = Plugin::new();
        assert_eq!(p.option(), OptionValue::NotGiven);
        for choice in [Choice::Off, Choice::Prefer, Choice::Strict] {
            for verbose in [false, true] {
                let v = OptionValue::Given(UserChoice { choice, verbose });
                p.set_option(v);
                assert_eq!(p.option(), v);
            }
        }
        p.set_option(OptionValue::Invalid);
        assert_eq!(p.option(), OptionValue::Invalid);
    }
}
