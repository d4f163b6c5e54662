//! The user's `--gpu-affinity` value and how the admin's default and floor shape it.

use std::fmt;

/// The mode and floor words are the admin config's (core), so plugstack.conf, the config
/// file and `--gpu-affinity` accept the same ones.
pub use gpu_affinity::config::Choice;
/// The admin's floor (`enforce`) is a solver mode, the weakest a step may run with:
/// one type, named as core names it.
use gpu_affinity::solver::Mode;

/// The allowed values, as printed after a bad one.
pub const ALLOWED: &str =
    "strict, prefer or off, optionally followed by ',verbose' (e.g. --gpu-affinity=strict,verbose)";

/// One `--gpu-affinity` / `SLURM_GPU_AFFINITY` value: a mode and the verbose switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserChoice {
    pub choice: Choice,
    /// `,verbose`: print each rank's binding on the task's stderr.
    pub verbose: bool,
}

/// A value that is not one of [`ALLOWED`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadValue(pub String);

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gpu-affinity: invalid value '{}': use {ALLOWED}", self.0)
    }
}

impl UserChoice {
    /// `strict`, `prefer,verbose`, `off`. Case-sensitive like every Slurm option value;
    /// surrounding blanks are tolerated because env files often carry them.
    pub fn parse(value: &str) -> Result<UserChoice, BadValue> {
        let bad = || BadValue(value.to_string());
        let mut words = value.trim().split(',').map(str::trim);
        let choice = words.next().and_then(Choice::parse).ok_or_else(bad)?;
        let mut verbose = false;
        for word in words {
            match word {
                "verbose" if !verbose => verbose = true,
                _ => return Err(bad()),
            }
        }
        Ok(UserChoice { choice, verbose })
    }
}

/// The `--gpu-affinity` value as the option callback saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionValue {
    NotGiven,
    Given(UserChoice),
    /// A bad value (already reported where it was given).
    Invalid,
}

/// The mode a step runs with, and whether the admin's floor raised it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub choice: Choice,
    pub verbose: bool,
    /// The user's (or default) mode when `enforce=` raised it.
    pub raised_from: Option<Choice>,
}

impl Resolved {
    /// Whether a problem refuses the step rather than warns: core decides it for the
    /// mode ([`Mode::refuses`]); off never gets this far, and refuses nothing.
    pub fn strict(&self) -> bool {
        self.choice.solver_mode().is_some_and(Mode::refuses)
    }

    /// The info line for a raised mode, `None` when nothing was raised.
    pub fn raise_note(&self) -> Option<String> {
        self.raised_from.map(|from| {
            format!(
                "gpu-affinity: --gpu-affinity={from} raised to {} by the site's enforce={} setting",
                self.choice, self.choice
            )
        })
    }
}

/// user value (if any) -> admin default -> admin floor.
pub fn resolve(user: Option<UserChoice>, default: Choice, floor: Option<Mode>) -> Resolved {
    let asked = user.map_or(default, |u| u.choice);
    let verbose = user.is_some_and(|u| u.verbose);
    match floor.map(Choice::from) {
        Some(min) if asked < min => Resolved {
            choice: min,
            verbose,
            raised_from: Some(asked),
        },
        _ => Resolved {
            choice: asked,
            verbose,
            raised_from: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_mode_and_the_verbose_switch() {
        for (text, choice, verbose) in [
            ("strict", Choice::Strict, false),
            ("prefer", Choice::Prefer, false),
            ("off", Choice::Off, false),
            ("strict,verbose", Choice::Strict, true),
            (" prefer , verbose ", Choice::Prefer, true),
        ] {
            assert_eq!(
                UserChoice::parse(text),
                Ok(UserChoice { choice, verbose }),
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_bad_values_and_names_the_allowed_ones() {
        for text in [
            "",
            "Strict",
            "on",
            "strict,",
            "strict,verbose,verbose",
            "verbose",
            "strict,loud",
        ] {
            let err = UserChoice::parse(text).expect_err(text);
            let line = err.to_string();
            assert!(line.contains(&format!("'{text}'")), "{line}");
            assert!(line.contains("strict, prefer or off"), "{line}");
        }
    }

    #[test]
    fn default_applies_only_without_a_user_value() {
        let r = resolve(None, Choice::Prefer, None);
        assert_eq!((r.choice, r.raised_from), (Choice::Prefer, None));
        let user = UserChoice::parse("off").ok();
        assert_eq!(resolve(user, Choice::Strict, None).choice, Choice::Off);
    }

    #[test]
    fn enforce_is_a_floor_users_cannot_lower() {
        let off = UserChoice::parse("off").ok();
        let prefer = UserChoice::parse("prefer,verbose").ok();
        let strict = UserChoice::parse("strict").ok();
        let r = resolve(off, Choice::Off, Some(Mode::Strict));
        assert_eq!(
            (r.choice, r.raised_from),
            (Choice::Strict, Some(Choice::Off))
        );
        let note = r.raise_note().unwrap_or_default();
        assert!(
            note.contains("--gpu-affinity=off raised to strict"),
            "{note}"
        );
        let r = resolve(prefer, Choice::Off, Some(Mode::Strict));
        assert_eq!(
            (r.choice, r.verbose, r.raised_from),
            (Choice::Strict, true, Some(Choice::Prefer))
        );
        let r = resolve(off, Choice::Off, Some(Mode::Prefer));
        assert_eq!(r.choice, Choice::Prefer);
        // Raising above the floor is the user's right and is no "raise".
        let r = resolve(strict, Choice::Off, Some(Mode::Prefer));
        assert_eq!((r.choice, r.raised_from), (Choice::Strict, None));
        // No user value: the default is floored too.
        assert_eq!(
            resolve(None, Choice::Off, Some(Mode::Prefer)).choice,
            Choice::Prefer
        );
    }
}
