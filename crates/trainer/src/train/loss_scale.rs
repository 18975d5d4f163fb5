//! Dynamic loss scaling for fp16 matrix products, with the rules of
//! PyTorch's `torch.amp.GradScaler`.
//!
//! The backward pass starts from `scale * dloss`, so gradients are `scale`
//! times too large while fp16 rounds them and small ones survive. Before the
//! update they are divided by `scale` (a power of two: exact). When any
//! gradient is not finite the scale was too large: the step is skipped
//! (parameters, optimiser state and its step count unchanged) and the scale
//! halves. After `growth_interval` good steps in a row it doubles.

use crate::backend::Backend;

/// The scaler's settings; the defaults are GradScaler's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScaleConfig {
    /// The first scale (a power of two).
    pub init_scale: f64,
    /// Good steps in a row before the scale doubles.
    pub growth_interval: u64,
}

impl Default for LossScaleConfig {
    fn default() -> Self {
        Self {
            init_scale: 65536.0,
            growth_interval: 2000,
        }
    }
}

/// The scale and its history over one run.
#[derive(Clone, Debug, PartialEq)]
pub struct LossScaler {
    config: LossScaleConfig,
    scale: f64,
    good_in_a_row: u64,
    skipped: u64,
}

impl LossScaler {
    /// A scaler at `config.init_scale`, which must be a positive power of
    /// two (so scaling and unscaling are exact).
    pub fn new(config: LossScaleConfig) -> Result<Self, String> {
        let s = config.init_scale;
        if !(s.is_finite() && s > 0.0 && s.log2().fract() == 0.0) {
            return Err(format!(
                "init_scale must be a positive power of two, got {s}"
            ));
        }
        if config.growth_interval == 0 {
            return Err("growth_interval must be at least 1".into());
        }
        Ok(Self {
            config,
            scale: s,
            good_in_a_row: 0,
            skipped: 0,
        })
    }

    /// The factor the loss's gradient is multiplied by this step.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Steps skipped so far because a gradient overflowed.
    pub fn skipped_steps(&self) -> u64 {
        self.skipped
    }

    /// Ends a step's backward: when every gradient is finite, divides them
    /// by the scale and returns the sum of squares of the unscaled
    /// gradients; otherwise returns `None` (skip the update) and halves the
    /// scale.
    pub fn unscale<B: Backend>(&mut self, be: &B, grads: &mut [B::Buf]) -> Option<f64> {
        let scaled: f64 = grads.iter().map(|g| be.sum_squares(g)).sum();
        if !scaled.is_finite() {
            self.scale = (self.scale * 0.5).max(f64::MIN_POSITIVE);
            self.good_in_a_row = 0;
            self.skipped += 1;
            return None;
        }
        let inverse = 1.0 / self.scale;
        if inverse != 1.0 {
            for g in grads.iter_mut() {
                be.scale(g, inverse);
            }
        }
        self.good_in_a_row += 1;
        if self.good_in_a_row == self.config.growth_interval {
            self.scale *= 2.0;
            self.good_in_a_row = 0;
        }
        Some(scaled * inverse * inverse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;
    use crate::memory::BufKind;

    fn grads(be: &CpuBackend<f32>, values: &[&[f64]]) -> Vec<crate::backend::cpu::CpuBuf<f32>> {
        values
            .iter()
            .map(|v| {
                let mut g = be.alloc("g", BufKind::Grad, v.len());
                be.upload(&mut g, v);
                g
            })
            .collect()
    }

    #[test]
    fn a_finite_step_is_unscaled_exactly_and_an_overflow_is_skipped_and_halves_the_scale() {
        let be = CpuBackend::<f32>::new();
        let mut s = LossScaler::new(LossScaleConfig {
            init_scale: 1024.0,
            growth_interval: 3,
        })
        .unwrap();
        let mut g = grads(&be, &[&[3.0 * 1024.0, -4.0 * 1024.0], &[0.5]]);
        let sum = s.unscale(&be, &mut g).unwrap();
        assert_eq!(be.download(&g[0]), vec![3.0, -4.0]);
        assert_eq!(be.download(&g[1]), vec![0.5 / 1024.0]);
        assert_eq!(sum, 25.0 + (0.5f64 / 1024.0).powi(2));
        assert_eq!(s.scale(), 1024.0);

        let mut bad = grads(&be, &[&[1.0, f64::INFINITY]]);
        assert_eq!(s.unscale(&be, &mut bad), None);
        // Left as it was: the caller skips the update.
        assert_eq!(be.download(&bad[0])[0], 1.0);
        assert_eq!((s.scale(), s.skipped_steps()), (512.0, 1));
        let mut nan = grads(&be, &[&[f64::NAN]]);
        assert_eq!(s.unscale(&be, &mut nan), None);
        assert_eq!((s.scale(), s.skipped_steps()), (256.0, 2));
    }

    #[test]
    fn the_scale_doubles_after_growth_interval_good_steps_in_a_row() {
        let be = CpuBackend::<f32>::new();
        let mut s = LossScaler::new(LossScaleConfig {
            init_scale: 8.0,
            growth_interval: 2,
        })
        .unwrap();
        let step = |s: &mut LossScaler, v: f64| s.unscale(&be, &mut grads(&be, &[&[v]]));
        step(&mut s, 1.0).unwrap();
        assert_eq!(s.scale(), 8.0);
        // An overflow resets the run of good steps.
        assert!(step(&mut s, f64::INFINITY).is_none());
        assert_eq!(s.scale(), 4.0);
        step(&mut s, 1.0).unwrap();
        assert_eq!(s.scale(), 4.0);
        step(&mut s, 1.0).unwrap();
        assert_eq!(s.scale(), 8.0);
    }

    #[test]
    fn the_settings_are_checked() {
        for init_scale in [0.0, -2.0, 3.0, f64::INFINITY, f64::NAN] {
            let c = LossScaleConfig {
                init_scale,
                ..LossScaleConfig::default()
            };
            assert!(LossScaler::new(c).is_err(), "{init_scale}");
        }
        let c = LossScaleConfig {
            growth_interval: 0,
            ..LossScaleConfig::default()
        };
        assert!(LossScaler::new(c).is_err());
        assert_eq!(
            LossScaler::new(LossScaleConfig::default()).unwrap().scale(),
            65536.0
        );
    }
}
