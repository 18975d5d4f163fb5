//! The objective of a trial on the simulated device, which computes
//! nothing: a smooth, deterministic function of the hyperparameters with an
//! optimum inside the usual ranges, rising with epochs, so the sampler and
//! the pruner have something real to work on in tests and simulations.

use super::config::Metric;
use super::protocol::Job;
use super::space::TrialSettings;

/// Training examples a simulated trial steps over per epoch.
pub const TRAIN_EXAMPLES: usize = 256;
/// And evaluates on.
pub const VALIDATION_EXAMPLES: usize = 64;

/// A validation "accuracy" in (0.5, 0.95] for `epoch` (0-based) of a job.
pub fn objective(job: &Job, epoch: usize) -> f64 {
    objective_at(&job.settings, job.settings.batch_size, epoch)
}

/// The validation metrics of `epoch` of a simulated job: accuracy and
/// macro F1 are [`objective`], the loss its complement, so every metric
/// improves together.
pub fn validation(job: &Job, epoch: usize) -> (f64, f64, f64) {
    let score = objective(job, epoch);
    (score, score, 1.0 - score)
}

/// The value of `job`'s metric at `epoch` (what a simulated trial reports).
pub fn metric_value(job: &Job, epoch: usize) -> f64 {
    let (accuracy, f1_macro, loss) = validation(job, epoch);
    match job.metric {
        Metric::Accuracy => accuracy,
        Metric::F1Macro => f1_macro,
        Metric::Loss => loss,
    }
}

/// [`objective`] of `settings` trained with `effective_batch` examples per
/// optimiser step (the runner's micro-batch times accumulation).
pub fn objective_at(settings: &TrialSettings, effective_batch: usize, epoch: usize) -> f64 {
    // Best near lr 3e-5, warmup 0.1, dropout 0.1, effective batch 32.
    let lr = (settings.learning_rate.max(1e-12).log10() - 3e-5f64.log10()) / 0.5;
    let warmup = (settings.warmup_ratio - 0.1) / 0.2;
    let dropout = (settings.dropout.unwrap_or(0.1) - 0.1) / 0.2;
    let batch = (effective_batch as f64 / 32.0).log2() / 2.0;
    let distance = lr * lr + warmup * warmup + dropout * dropout + batch * batch;
    let ceiling = 0.5 + 0.45 * (-distance / 2.0).exp();
    let progress = 1.0 - 0.5f64.powi(epoch as i32 + 1);
    0.5 + (ceiling - 0.5) * progress
}
