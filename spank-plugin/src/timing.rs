//! Where a hook's time goes, for the launch bench (`bench-launch --breakdown`): each
//! hook logs one line at Slurm's debug level,
//! `gpu-affinity: timing: init_post_opt 0.412 ms (sysfs 0.301, gres.conf 0.020, ...)`,
//! with the phases its code marked ([`mark`]). A figure, never a decision: nothing reads
//! it back, and a hook whose phases cannot be recorded (a re-entered hook) just logs
//! fewer of them.

use std::cell::RefCell;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// At most this many phases per hook are kept (the plugin marks fewer than ten).
const MAX_PHASES: usize = 16;

struct Clock {
    last: Instant,
    phases: Vec<(&'static str, Duration)>,
}

thread_local! {
    static CLOCK: RefCell<Option<Clock>> = const { RefCell::new(None) };
}

/// A hook's timer: started at its entry, logged by [`Hook::finish`].
pub struct Hook {
    name: &'static str,
    start: Instant,
}

impl Hook {
    pub fn start(name: &'static str) -> Hook {
        let start = Instant::now();
        let _ = CLOCK.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                *c = Some(Clock {
                    last: start,
                    phases: Vec::new(),
                });
            }
        });
        Hook { name, start }
    }

    /// Log the hook's time and its phases (Slurm's debug level).
    pub fn finish(self) {
        let total = self.start.elapsed();
        let phases = CLOCK
            .try_with(|c| c.try_borrow_mut().ok().and_then(|mut c| c.take()))
            .ok()
            .flatten()
            .map(|c| c.phases)
            .unwrap_or_default();
        log::trace!("{}", line(self.name, total, &phases));
    }
}

/// Close the phase that ran since the hook's start or the previous mark, as `phase`.
pub fn mark(phase: &'static str) {
    let now = Instant::now();
    let _ = CLOCK.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut()
            && let Some(clock) = c.as_mut()
        {
            if clock.phases.len() < MAX_PHASES {
                clock.phases.push((phase, now - clock.last));
            }
            clock.last = now;
        }
    });
}

fn line(hook: &str, total: Duration, phases: &[(&str, Duration)]) -> String {
    let mut s = format!("gpu-affinity: timing: {hook} {:.3} ms", ms(total));
    for (i, (name, took)) in phases.iter().enumerate() {
        let _ = write!(
            s,
            "{}{name} {:.3}",
            if i == 0 { " (" } else { ", " },
            ms(*took)
        );
    }
    if !phases.is_empty() {
        s.push(')');
    }
    s
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_hook_and_its_phases() {
        let phases = [
            ("sysfs", Duration::from_micros(301)),
            ("gres.conf", Duration::from_micros(20)),
        ];
        assert_eq!(
            line("init_post_opt", Duration::from_micros(412), &phases),
            "gpu-affinity: timing: init_post_opt 0.412 ms (sysfs 0.301, gres.conf 0.020)"
        );
        assert_eq!(
            line("exit", Duration::from_micros(3), &[]),
            "gpu-affinity: timing: exit 0.003 ms"
        );
    }

    #[test]
    fn marks_are_kept_per_hook() {
        let hook = Hook::start("user_init");
        mark("solve");
        mark("env");
        let kept = CLOCK.with(|c| c.borrow().as_ref().map(|c| c.phases.len()));
        assert_eq!(kept, Some(2));
        hook.finish();
        assert!(CLOCK.with(|c| c.borrow().is_none()));
        // Outside a hook a mark is a no-op.
        mark("stray");
        assert!(CLOCK.with(|c| c.borrow().is_none()));
    }
}
