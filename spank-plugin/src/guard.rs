//! The one guard every `extern "C"` export runs in.
//!
//! A panic unwinding into slurmstepd would abort it (and with it the whole step, or in
//! remote `init` leave srun hanging), so each hook body runs under `catch_unwind`; a
//! panic becomes one logged error line and the hook's error return. The plugin keeps no
//! `std::sync::Mutex`, so a caught panic cannot poison state for later hooks.

use std::any::Any;
use std::fmt;
use std::os::raw::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Why a hook fails: one line for srun's stderr or the slurmd log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for Failure {
    fn from(line: String) -> Self {
        Failure(line)
    }
}

/// The value SPANK hooks and option callbacks return on failure.
pub const HOOK_ERROR: c_int = -1;

thread_local! {
    /// Where the last panic on this thread happened, for the guard's log line.
    static PANIC_AT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
    /// How many guards are running on this thread (a hook can call back into a guarded
    /// option callback).
    static GUARDED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Chain a panic hook in front of the one installed now. The hook is process-wide, and
/// slurmstepd may load other Rust SPANK plugins: their panics (and any outside our
/// guard) go on to the hook that was there before, unchanged. Ours, inside a guard,
/// only note where they happened instead of printing a message and backtrace on the
/// user's stderr; the guard logs one line with it.
fn chain_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // `try_with`, never `with`: a panic can happen while this thread's locals are
        // being destroyed (another plugin's thread-local destructor), and `with` on a
        // destroyed local panics inside the panic hook, which aborts slurmstepd.
        if GUARDED.try_with(|g| g.get()).unwrap_or(0) > 0 {
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()));
            // Gone already: the guard's line then goes without the location.
            let _ = PANIC_AT.try_with(|p| *p.borrow_mut() = at);
        } else {
            previous(info);
        }
    }));
}

fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(chain_panic_hook);
}

/// Run one hook body; `Ok` -> 0, `Err` -> its line logged and -1, panic -> logged and -1.
pub fn run(hook: &str, body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    crate::logger::install();
    quiet_panics();
    GUARDED.with(|g| g.set(g.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(body));
    GUARDED.with(|g| g.set(g.get().saturating_sub(1)));
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(failure)) => {
            log::error!("{failure}");
            HOOK_ERROR
        }
        Err(payload) => {
            let at = PANIC_AT
                .with(|p| p.borrow_mut().take())
                .map(|a| format!(" at {a}"))
                .unwrap_or_default();
            log::error!(
                "gpu-affinity: internal error in {hook}: {}{at}; failing this hook instead of crashing",
                panic_text(payload.as_ref())
            );
            HOOK_ERROR
        }
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logger::{SlurmLevel, take};
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn panics_outside_the_guard_still_reach_the_hook_that_was_there() {
        static OUTSIDE: AtomicU32 = AtomicU32::new(0);
        static INSIDE: AtomicU32 = AtomicU32::new(0);
        quiet_panics();
        let before = std::panic::take_hook();
        // Another plugin's hook (it counts only this test's own panics).
        std::panic::set_hook(Box::new(|info| match panic_text(info.payload()).as_str() {
            "another plugin's panic" => {
                OUTSIDE.fetch_add(1, Ordering::SeqCst);
            }
            "our panic" => {
                INSIDE.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }));
        chain_panic_hook();
        let outside = std::thread::spawn(|| panic!("another plugin's panic")).join();
        let inside = std::thread::spawn(|| run("init", || panic!("our panic"))).join();
        let _ = std::panic::take_hook();
        std::panic::set_hook(before);
        assert!(outside.is_err());
        assert_eq!(inside.ok(), Some(HOOK_ERROR));
        assert_eq!(
            OUTSIDE.load(Ordering::SeqCst),
            1,
            "the previous hook saw it"
        );
        assert_eq!(INSIDE.load(Ordering::SeqCst), 0, "ours stayed quiet");
    }

    /// A panic inside a guard while the thread's locals are being torn down: our hook
    /// must neither touch a destroyed local nor abort the process.
    #[test]
    fn a_panic_during_thread_teardown_does_not_abort() {
        struct PanicsOnDrop;
        impl Drop for PanicsOnDrop {
            fn drop(&mut self) {
                // Locals are destroyed in reverse order of first use: PANIC_AT, used
                // after this one, is gone by now (checked, so the test tests that case).
                let gone = PANIC_AT.try_with(|_| ()).is_err();
                GUARDED.with(|g| g.set(g.get() + 1));
                let caught = std::panic::catch_unwind(|| panic!("panic during teardown"));
                GUARDED.with(|g| g.set(g.get() - 1));
                TEARDOWN.store(
                    if gone && caught.is_err() { 1 } else { 2 },
                    Ordering::SeqCst,
                );
            }
        }
        thread_local! {
            static LATE: PanicsOnDrop = const { PanicsOnDrop };
        }
        static TEARDOWN: AtomicU32 = AtomicU32::new(0);
        quiet_panics();
        std::thread::spawn(|| {
            LATE.with(|_| ());
            PANIC_AT.with(|p| p.borrow_mut().take());
        })
        .join()
        .expect("the thread ends normally");
        assert_eq!(
            TEARDOWN.load(Ordering::SeqCst),
            1,
            "the panic ran after PANIC_AT was destroyed and was caught"
        );
    }

    #[test]
    fn ok_error_and_panic_map_to_return_values() {
        take();
        assert_eq!(run("init", || Ok(())), 0);
        assert_eq!(
            run("init", || Err(Failure("gpu-affinity: nope".into()))),
            HOOK_ERROR
        );
        assert_eq!(
            take(),
            vec![(SlurmLevel::Error, "gpu-affinity: nope".to_string())]
        );
        let rc = run("task_init", || -> Result<(), Failure> {
            panic!("boom {}", 7)
        });
        assert_eq!(rc, HOOK_ERROR);
        let logs = take();
        assert_eq!(logs.len(), 1, "{logs:?}");
        assert!(
            logs[0].1.contains("internal error in task_init: boom 7"),
            "{logs:?}"
        );
    }
}
