//! Linear warmup then linear decay to zero (HF
//! `get_linear_schedule_with_warmup`: the rate used by update `k`, counted
//! from 0, is `peak * k / warmup` during warmup, then decays linearly to 0 at
//! `total`).

/// The learning rate of each optimiser update: a linear rise from 0 to
/// `peak_lr` over the warmup, then a linear fall to 0 at `total_steps`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearSchedule {
    /// Rate reached at the end of the warmup.
    pub peak_lr: f64,
    /// Updates spent warming up; 0 starts at `peak_lr`.
    pub warmup_steps: u64,
    /// Updates in the whole run, warmup included; the rate is 0 from this
    /// update on.
    pub total_steps: u64,
}

impl LinearSchedule {
    /// The rate for update `step` (0-based).
    pub fn lr(&self, step: u64) -> f64 {
        let factor = if step < self.warmup_steps {
            step as f64 / self.warmup_steps.max(1) as f64
        } else {
            let rest = self.total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
            (self.total_steps.saturating_sub(step) as f64 / rest).max(0.0)
        };
        self.peak_lr * factor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warms_up_then_decays_to_zero() {
        let s = LinearSchedule {
            peak_lr: 1.0,
            warmup_steps: 4,
            total_steps: 12,
        };
        let lrs: Vec<f64> = (0..13).map(|k| s.lr(k)).collect();
        assert_eq!(&lrs[..5], &[0.0, 0.25, 0.5, 0.75, 1.0]);
        assert_eq!(lrs[8], 0.5);
        assert_eq!(lrs[12], 0.0);
        let flat = LinearSchedule {
            peak_lr: 2.0,
            warmup_steps: 0,
            total_steps: 4,
        };
        assert_eq!(flat.lr(0), 2.0);
        assert_eq!(flat.lr(2), 1.0);
    }
}
