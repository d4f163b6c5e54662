//! Private TCP ports for slurmctld and slurmd.
//!
//! Other people's clusters may run on the same machine (developers share CI hosts), so
//! the pair is derived from our PID and probed before use; a taken pair moves on to the
//! next candidate.

use std::net::{Ipv4Addr, TcpListener};

use crate::error::Result;
use crate::harness_err;

/// Ports between 20000 and 29998, in pairs.
const BASE: u32 = 20000;
const PAIRS: u32 = 5000;

/// A free (slurmctld, slurmd) port pair.
pub fn pick_pair() -> Result<(u16, u16)> {
    let start = std::process::id() % PAIRS;
    for step in 0..64 {
        let slot = (start + step * 37) % PAIRS;
        let ctld = BASE + slot * 2;
        let (Ok(a), Ok(b)) = (u16::try_from(ctld), u16::try_from(ctld + 1)) else {
            continue;
        };
        if is_free(a) && is_free(b) {
            return Ok((a, b));
        }
    }
    Err(harness_err!(
        "no free TCP port pair between {BASE} and {} after 64 tries",
        BASE + PAIRS * 2
    ))
}

fn is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok()
}

/// `n` free ports for the slurmds of a several-node cluster, from 30000-39999 (apart
/// from [`pick_pair`]'s range), derived from our PID and probed like it.
pub fn pick_run(n: usize) -> Result<Vec<u16>> {
    const RUN_BASE: u32 = 30000;
    const SPAN: u32 = 10000;
    let start = std::process::id().wrapping_mul(61) % SPAN;
    let mut out = Vec::new();
    for step in 0..SPAN {
        let Ok(port) = u16::try_from(RUN_BASE + (start + step) % SPAN) else {
            continue;
        };
        if is_free(port) {
            out.push(port);
            if out.len() == n {
                return Ok(out);
            }
        }
    }
    Err(harness_err!(
        "fewer than {n} free TCP ports between {RUN_BASE} and {}",
        RUN_BASE + SPAN
    ))
}
