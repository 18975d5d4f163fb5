//! AdamW (decoupled weight decay, bias correction, no decay on biases and
//! LayerNorm) and stateless SGD over the parameter store.

use crate::backend::{AdamWStep, Backend, Kernels, SparseRows};
use crate::memory::BufKind;
use crate::model::Params;

/// Which optimiser [`Optimizer`] runs, with its hyperparameters; the
/// default is AdamW with HF Trainer's settings and weight decay 0.01.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerConfig {
    /// AdamW with bias correction; weight decay applies to weight matrices
    /// and embedding tables only, not to biases or LayerNorm parameters.
    AdamW {
        /// Decay rate of the first-moment (mean) estimate; default 0.9.
        beta1: f64,
        /// Decay rate of the second-moment estimate; default 0.999.
        beta2: f64,
        /// Added to the bias-corrected root of the second moment in the
        /// update's denominator; default `1e-8`.
        eps: f64,
        /// Decoupled decay: each update first multiplies a decayed
        /// parameter by `1 - lr * weight_decay`; default 0.01.
        weight_decay: f64,
    },
    /// Plain SGD, `param -= lr * grad`: no state, no weight decay.
    Sgd,
}

impl Default for OptimizerConfig {
    /// HF Trainer's defaults with weight decay 0.01.
    fn default() -> Self {
        OptimizerConfig::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// AdamW's moment buffers, one pair per parameter.
pub struct AdamW<B: Backend> {
    /// First-moment estimates, index-aligned with the parameters.
    pub m: Vec<B::Buf>,
    /// Second-moment estimates, index-aligned with the parameters.
    pub v: Vec<B::Buf>,
}

/// An optimiser and its state for one model's parameters, which
/// [`Optimizer::step`] updates in place.
pub struct Optimizer<B: Backend> {
    /// The optimiser and its hyperparameters.
    pub config: OptimizerConfig,
    /// AdamW's moments; `None` for SGD.
    pub adam: Option<AdamW<B>>,
    /// Updates done so far.
    pub t: u64,
}

impl<B: Backend> Optimizer<B> {
    /// Allocates the optimiser state (zeros) for every parameter.
    pub fn new(be: &B, params: &Params<B>, config: OptimizerConfig) -> Self {
        let adam = match config {
            OptimizerConfig::AdamW { .. } => {
                let alloc = |what: &str| -> Vec<B::Buf> {
                    params
                        .info
                        .iter()
                        .map(|p| {
                            be.alloc(
                                &format!("adam.{what}.{}", p.name),
                                BufKind::OptimizerState,
                                p.numel(),
                            )
                        })
                        .collect()
                };
                let m = alloc("m");
                let v = alloc("v");
                Some(AdamW { m, v })
            }
            OptimizerConfig::Sgd => None,
        };
        Self { config, adam, t: 0 }
    }

    /// Whether [`Optimizer::step`] clips the gradients itself, on the
    /// device, in the same call (the fused AdamW of [`Kernels::Fused`]).
    pub fn clips(&self, be: &B) -> bool {
        be.kernels() == Kernels::Fused && self.adam.is_some()
    }

    /// One update of every parameter from its gradient at learning rate
    /// `lr`, clipping the gradients to global norm `clip` first when
    /// [`Optimizer::clips`] (otherwise the caller clips, and `clip` is
    /// `None`).
    pub fn step(&mut self, be: &B, params: &mut Params<B>, lr: f64, clip: Option<f64>) {
        self.t += 1;
        match (self.config, &mut self.adam) {
            (
                OptimizerConfig::AdamW {
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                },
                Some(state),
            ) if be.kernels() == Kernels::Fused => {
                let decay: Vec<bool> = params.info.iter().map(|p| p.decay).collect();
                let step = AdamWStep {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                    t: self.t,
                };
                let Params {
                    info,
                    values,
                    grads,
                    sparse,
                    ..
                } = params;
                let sparse = sparse.as_mut().map(|s| {
                    be.upload_ids(&mut s.device_slots, s.slots.slot_of());
                    SparseRows {
                        tensor: s.param,
                        slots: &s.device_slots,
                        width: info[s.param].shape[1],
                    }
                });
                be.adamw_all(
                    values,
                    grads,
                    &mut state.m,
                    &mut state.v,
                    &decay,
                    &step,
                    1.0,
                    clip,
                    sparse,
                );
            }
            (
                OptimizerConfig::AdamW {
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                },
                Some(state),
            ) => {
                debug_assert!(clip.is_none(), "the caller clips for this optimiser");
                assert!(
                    params.sparse.is_none(),
                    "a row-sparse gradient needs the fused AdamW"
                );
                for (i, info) in params.info.iter().enumerate() {
                    let step = AdamWStep {
                        lr,
                        beta1,
                        beta2,
                        eps,
                        weight_decay: if info.decay { weight_decay } else { 0.0 },
                        t: self.t,
                    };
                    be.adamw(
                        &mut params.values[i],
                        &params.grads[i],
                        &mut state.m[i],
                        &mut state.v[i],
                        &step,
                    );
                }
            }
            _ => {
                assert!(
                    params.sparse.is_none(),
                    "a row-sparse gradient needs the fused AdamW"
                );
                for i in 0..params.info.len() {
                    be.sgd(&mut params.values[i], &params.grads[i], lr);
                }
            }
        }
    }
}
