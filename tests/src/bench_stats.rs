//! The launch bench's statistics: medians of paired rounds and how sure they are.
//!
//! A step on a shared VM moves by several percent from one launch to the next, so a
//! median ratio of 30 rounds moves by about 1 % between runs (docs/measurements.md),
//! as much as the effect being measured. Each figure therefore comes with a 95 %
//! percentile-bootstrap interval: the rounds are drawn again with replacement, keeping
//! each round's arms together (they ran side by side, under the same load), and the
//! figure is recomputed on each draw. An interval whose upper end is under the goal
//! says the goal holds for this run; one that spans it says more rounds are needed.

/// How many bootstrap draws a figure's interval is made of.
pub const DRAWS: usize = 2000;

/// The median of `v` (sorted in place); `NaN` for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The times of a paired bench: `times[arm][round]`, every arm the same length, arm 0
/// the baseline every ratio is taken against.
pub struct Rounds<'a> {
    times: &'a [Vec<f64>],
}

/// A figure and its 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl<'a> Rounds<'a> {
    /// `None` unless there is a baseline and every arm has the same number of rounds
    /// (at least one).
    pub fn new(times: &'a [Vec<f64>]) -> Option<Rounds<'a>> {
        let n = times.first()?.len();
        (n > 0 && times.iter().all(|t| t.len() == n)).then_some(Rounds { times })
    }

    fn len(&self) -> usize {
        self.times[0].len()
    }

    /// median(arm) / median(baseline) over the rounds `pick` names.
    fn ratio_of_medians_in(&self, arm: usize, pick: &[usize]) -> f64 {
        let mut a: Vec<f64> = pick.iter().map(|&r| self.times[arm][r]).collect();
        let mut b: Vec<f64> = pick.iter().map(|&r| self.times[0][r]).collect();
        median(&mut a) / median(&mut b)
    }

    /// The median of each round's own arm / baseline ratio over the rounds `pick` names.
    fn paired_in(&self, arm: usize, pick: &[usize]) -> f64 {
        let mut r: Vec<f64> = pick
            .iter()
            .map(|&r| self.times[arm][r] / self.times[0][r])
            .collect();
        median(&mut r)
    }

    /// median(arm) / median(baseline), with its interval.
    pub fn ratio_of_medians(&self, arm: usize, seed: u64) -> Estimate {
        self.estimate(seed, |pick| self.ratio_of_medians_in(arm, pick))
    }

    /// The median of the rounds' own ratios, with its interval.
    pub fn paired(&self, arm: usize, seed: u64) -> Estimate {
        self.estimate(seed, |pick| self.paired_in(arm, pick))
    }

    fn estimate(&self, seed: u64, figure: impl Fn(&[usize]) -> f64) -> Estimate {
        let n = self.len();
        let all: Vec<usize> = (0..n).collect();
        let value = figure(&all);
        // A fixed seed: the same times print the same interval.
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut pick = vec![0; n];
        let mut draws: Vec<f64> = (0..DRAWS)
            .map(|_| {
                for p in &mut pick {
                    *p = rng.usize(..n);
                }
                figure(&pick)
            })
            .collect();
        draws.sort_unstable_by(f64::total_cmp);
        Estimate {
            value,
            low: draws[DRAWS * 25 / 1000],
            high: draws[DRAWS * 975 / 1000 - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_even_and_empty_lists() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn rounds_must_be_paired() {
        assert!(Rounds::new(&[]).is_none());
        assert!(Rounds::new(&[vec![]]).is_none());
        assert!(Rounds::new(&[vec![1.0, 2.0], vec![1.0]]).is_none());
        assert!(Rounds::new(&[vec![1.0], vec![1.0]]).is_some());
    }

    /// A deterministic noisy baseline (a spread of about +-4 %, like a step here).
    fn baseline(n: usize) -> Vec<f64> {
        let mut rng = fastrand::Rng::with_seed(7);
        (0..n).map(|_| 0.145 * (0.96 + 0.08 * rng.f64())).collect()
    }

    #[test]
    fn an_arm_2_percent_slower_in_every_round_is_found_with_an_interval_around_it() {
        let base = baseline(200);
        let slower: Vec<f64> = base.iter().map(|t| t * 1.02).collect();
        let times = [base, slower];
        let rounds = Rounds::new(&times).unwrap();
        let paired = rounds.paired(1, 1);
        // Every round's own ratio is 1.02, so every draw's is too.
        assert!((paired.value - 1.02).abs() < 1e-12, "{paired:?}");
        assert!((paired.high - paired.low).abs() < 1e-12, "{paired:?}");
        let ratio = rounds.ratio_of_medians(1, 1);
        assert!((ratio.value - 1.02).abs() < 1e-9, "{ratio:?}");
        assert!(ratio.low <= ratio.value && ratio.value <= ratio.high);
    }

    #[test]
    fn a_2_percent_effect_under_noise_lies_inside_both_intervals() {
        // Each round's arm is 2 % slower than its baseline, give or take 1.5 % of its
        // own noise: both figures find 1.02 within an interval that has width.
        let base = baseline(300);
        let mut rng = fastrand::Rng::with_seed(13);
        let arm: Vec<f64> = base
            .iter()
            .map(|t| t * 1.02 * (0.985 + 0.03 * rng.f64()))
            .collect();
        let times = [base, arm];
        let rounds = Rounds::new(&times).unwrap();
        for e in [rounds.paired(1, 2), rounds.ratio_of_medians(1, 2)] {
            assert!(e.low < 1.02 && 1.02 < e.high, "{e:?}");
            assert!(e.low <= e.value && e.value <= e.high, "{e:?}");
            assert!(e.high - e.low > 0.001 && e.high - e.low < 0.03, "{e:?}");
        }
    }

    #[test]
    fn more_rounds_narrow_the_interval_of_unpaired_noise() {
        // Two arms with the same distribution, drawn independently: no effect, and
        // the interval shrinks about as one over the root of the rounds.
        let width = |n: usize| {
            let mut rng = fastrand::Rng::with_seed(11);
            let mut arm = || -> Vec<f64> { (0..n).map(|_| 0.96 + 0.08 * rng.f64()).collect() };
            let times = [arm(), arm()];
            let e = Rounds::new(&times).unwrap().ratio_of_medians(1, 3);
            assert!(e.low < 1.0 && 1.0 < e.high, "n={n}: {e:?} misses 1");
            e.high - e.low
        };
        let (w30, w480) = (width(30), width(480));
        assert!(w480 < w30 / 2.5, "30 rounds {w30:.4}, 480 rounds {w480:.4}");
    }

    #[test]
    fn the_same_times_and_seed_give_the_same_interval() {
        let base = baseline(40);
        let arm: Vec<f64> = baseline(41)[1..].to_vec();
        let times = [base, arm];
        let rounds = Rounds::new(&times).unwrap();
        assert_eq!(rounds.paired(1, 5), rounds.paired(1, 5));
    }
}
