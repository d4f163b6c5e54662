//! Real-Slurm test harness (being written).
