//! Optimiser, learning-rate schedule, metrics and the training loop.

mod batches;
pub mod loss_scale;
pub mod metrics;
pub mod optimizer;
pub mod schedule;
mod train_loop;

pub use batches::TrainBatches;
pub use loss_scale::{LossScaleConfig, LossScaler};
pub use metrics::{EpochMetrics, Metrics};
pub use optimizer::{AdamW, Optimizer, OptimizerConfig};
pub use schedule::LinearSchedule;
pub use train_loop::{
    Control, Monitor, OomRetry, StepContext, StepLoss, TrainConfig, TrainError, TrainReport,
    evaluate, train, train_step,
};
