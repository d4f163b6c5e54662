//! Hard bounds (Invariant 4): every reader runs in its own thread and is waited for until a
//! deadline; a thread stuck in a driver or filesystem call is abandoned, its input becomes
//! `Gap::Timeout`, and the process still ends on time because the binaries leave through
//! `std::process::exit` (which takes every thread down) and a watchdog ends the process at
//! the overall deadline whatever the main thread is doing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gpu_affinity::health::{Gap, Gathered};

/// A reader started in the background; [`Pending::wait`] collects it by a deadline.
pub struct Pending<T> {
    rx: mpsc::Receiver<Gathered<T>>,
    bound: Duration,
    started: Instant,
}

/// Start `read` now; it may run at most `bound` (measured from now).
pub fn start<T: Send + 'static>(
    bound: Duration,
    read: impl FnOnce() -> Gathered<T> + Send + 'static,
) -> Pending<T> {
    let (tx, rx) = mpsc::channel();
    let spawned = thread::Builder::new()
        .name("health-reader".into())
        .spawn(move || {
            // The receiver may be gone (deadline passed): nothing to do then.
            let _ = tx.send(read());
        });
    if let Err(e) = spawned {
        let (tx, rx2) = mpsc::channel();
        let _ = tx.send(Err(Gap::Failed(format!("cannot start reader thread: {e}"))));
        return Pending {
            rx: rx2,
            bound,
            started: Instant::now(),
        };
    }
    Pending {
        rx,
        bound,
        started: Instant::now(),
    }
}

impl<T> Pending<T> {
    pub fn wait(self) -> Gathered<T> {
        let left = self.bound.saturating_sub(self.started.elapsed());
        match self.rx.recv_timeout(left) {
            Ok(v) => v,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Gap::Timeout {
                after_ms: self.bound.as_millis() as u64,
            }),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(Gap::Failed("reader thread ended without an answer".into()))
            }
        }
    }
}

/// Run `read` with a bound, waiting for it now.
pub fn within<T: Send + 'static>(
    bound: Duration,
    read: impl FnOnce() -> Gathered<T> + Send + 'static,
) -> Gathered<T> {
    start(bound, read).wait()
}

/// Time the watchdog grants on top of its deadline: what the active tests announced they
/// may take (each under its own bound) before they started.
static EXTRA_MS: AtomicU64 = AtomicU64::new(0);

/// Give the watchdog `by` more before it ends the process (an active test about to run
/// under that bound).
pub fn extend_watchdog(by: Duration) {
    let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
    EXTRA_MS.fetch_add(ms, Ordering::SeqCst);
}

/// End the process with `code` at `deadline` from now (plus what [`extend_watchdog`]
/// granted), whatever else is running: the last line of defence should a bounded call
/// still overrun (a bug), so a prolog never hangs.
pub fn watchdog(deadline: Duration, program: &'static str, code: i32) {
    let _ = thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            thread::sleep(deadline);
            loop {
                let extra = EXTRA_MS.swap(0, Ordering::SeqCst);
                if extra == 0 {
                    break;
                }
                thread::sleep(Duration::from_millis(extra));
            }
            eprintln!(
                "{program}: overall deadline of {} ms passed; exiting",
                deadline.as_millis()
            );
            std::process::exit(code);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stuck_reader_times_out_on_time() {
        let t = Instant::now();
        let r: Gathered<u32> = within(Duration::from_millis(100), || {
            thread::sleep(Duration::from_secs(3600));
            Ok(1)
        });
        assert_eq!(r, Err(Gap::Timeout { after_ms: 100 }));
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(within(Duration::from_secs(5), || Ok(7)), Ok(7));
    }
}
