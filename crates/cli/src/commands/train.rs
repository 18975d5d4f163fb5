//! `memtune train --study NAME [--trial N] --output DIR`: retrain a recorded
//! trial and save the model as a Hugging Face directory.
//!
//! The trial's stored params become [`TrialSettings`] exactly as the runner
//! resolves them (the study file's `[fixed]` values and defaults included),
//! and the job is the runner's: the same model, data, split seed, training
//! seed, micro-batch and accumulation (the trial's recorded lease), matrix
//! product precision and kernel set, and whether it recomputed its layers
//! in backward. It stops after the epoch whose value the study recorded
//! (the best epoch of a COMPLETE trial, the last of a PRUNED one).
//!
//! The retrain runs on the CPU, whose backend is deterministic for any
//! thread count: a trial that ran on the CPU is repeated bit for bit, and
//! any epoch whose value differs from the stored one fails the command. A
//! trial that ran on a GPU is retrained in the same recipe (16-bit
//! products emulated), but the CPU adds in another order than the GPU's
//! kernels, so its figures differ a little: they are shown beside the
//! recorded ones, and the command succeeds.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use serde_json::Value as Json;
use store::{OpenOptions, Storage, TrialFilter, TrialState};
use trainer::export::{check_exportable, check_output_dir, default_label_names, save_hf_dir};
use trainer::finetune::finetune_cpu_trained;
use trainer::model::HeadConfig;
use trainer::tokenize::TextTokenizer;
use trainer::train::Control;

use super::Context;
use crate::error::{CliError, Result};
use crate::history::HistoryError;
use crate::tune::config::StudyConfig;
use crate::tune::protocol::{Job, ModelSource};
use crate::tune::record::settings_text;
use crate::tune::runner::RECOMPUTE_KEY;
use crate::tune::setup::{CPU_DEVICE_NAME, RunPlan};
use crate::tune::space::TrialSettings;
use crate::tune::worker::finetune_spec;

#[derive(clap::Args)]
pub struct Args {
    /// The study's name in the storage.
    #[arg(long, alias = "study-name")]
    study: String,
    /// The trial to retrain (its number); default: the best trial.
    #[arg(long)]
    trial: Option<i64>,
    /// The directory to write (absent or empty; nothing is overwritten).
    #[arg(long)]
    output: PathBuf,
    /// The study file the study was run with (TOML): its models, data and
    /// `[fixed]` values. Without it: the default study.
    #[arg(long)]
    config: Option<PathBuf>,
}

fn usage(message: impl std::fmt::Display) -> CliError {
    CliError::Usage(message.to_string())
}

pub fn run(args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let cfg = match &args.config {
        Some(path) => StudyConfig::from_path(path),
        None => Ok(StudyConfig::default_study()),
    }?;
    if cfg.study.name != args.study {
        return Err(usage(format!(
            "the study file {} describes study `{}`, not `{}`: pass the file the study was run with (--config)",
            args.config
                .as_ref()
                .map_or("(the default study)".into(), |p| p.display().to_string()),
            cfg.study.name,
            args.study
        )));
    }
    check_output_dir(&args.output).map_err(usage)?;
    let plan = RunPlan::on_cpu(&cfg, ctx.storage_url.as_deref())?;
    let storage = Storage::open_url(
        &plan.storage_url,
        &OpenOptions {
            create: false,
            read_only: true,
            ..OpenOptions::default()
        },
    )?;
    let study = storage.study(&args.study)?;
    let trial = match args.trial {
        Some(number) => storage
            .trials(study.study_id, &TrialFilter::default())?
            .into_iter()
            .find(|t| t.number as i64 == number)
            .ok_or_else(|| usage(format!("study `{}` has no trial {number}", study.name)))?,
        None => storage
            .best_trial(study.study_id)?
            .ok_or_else(|| usage(format!("study `{}` has no COMPLETE trial yet", study.name)))?,
    };
    let recorded = match (trial.state, trial.values.as_deref()) {
        (TrialState::Complete | TrialState::Pruned, Some([value])) => *value,
        (state, _) => {
            return Err(usage(format!(
                "trial {} is {} with {} value(s): only a COMPLETE or PRUNED trial of a \
                 single-objective study can be retrained",
                trial.number,
                state.as_str(),
                trial.values.as_ref().map_or(0, Vec::len)
            )));
        }
    };
    let settings = trial_settings(&cfg, &storage, &trial)?;
    let model = plan.model(&settings.model).map_err(usage)?;
    let ModelSource::Dir { path: model_dir } = &model.source else {
        return Err(usage(
            "the trial ran on the simulated device, which computes nothing: there is no model to retrain",
        ));
    };
    let head = HeadConfig {
        num_labels: plan.num_classes,
        hidden: settings.head_hidden.clone(),
    };
    check_exportable(&head).map_err(|e| usage(format!("trial {}: {e}", trial.number)))?;

    let step = RecordedStep::of(&trial);
    if let Some(device) = &step.other_device {
        eprintln!(
            "memtune: trial {} ran on {device}; the retrain runs on the CPU in the same recipe \
             ({} products, {} kernels), whose sums round differently, so its figures will differ \
             a little from the recorded ones",
            trial.number, step.precision, step.kernels
        );
    }
    let attr = |key: &str| trial.user_attrs.get(key).and_then(Json::as_u64);
    let (micro_batch, accumulation_steps) = match (attr("micro_batch"), attr("accumulation_steps"))
    {
        (Some(m), Some(a)) if m > 0 && a > 0 => (m as usize, a as usize),
        _ => {
            eprintln!(
                "memtune: trial {} has no recorded micro-batch (it was not run by `memtune tune`): \
                     training with micro-batch {}; its figures may differ from the recorded ones",
                trial.number, settings.batch_size
            );
            (settings.batch_size, 1)
        }
    };
    if trial
        .user_attrs
        .get("oom_retries")
        .and_then(Json::as_array)
        .is_some_and(|r| !r.is_empty())
    {
        eprintln!(
            "memtune: trial {} retried steps at smaller micro-batches after running out of memory; \
             the retrain has no memory limit, so its dropout masks and figures may differ slightly",
            trial.number
        );
    }
    // The epoch whose value the study recorded.
    let epoch_of_value = match trial.state {
        TrialState::Pruned => trial.intermediate_values.keys().next_back().copied(),
        _ => trial
            .user_attrs
            .get("best_epoch")
            .and_then(Json::as_i64)
            .or_else(|| last_epoch_with(&trial.intermediate_values, recorded)),
    }
    .unwrap_or(settings.epochs as i64 - 1)
    .max(0) as usize;

    let job = Job {
        trial_number: trial.number as i64,
        model: model.source.clone(),
        data: plan.data.clone(),
        validation_fraction: plan.validation_fraction,
        split_seed: plan.split_seed,
        metric: plan.metric,
        settings: settings.clone(),
        micro_batch,
        accumulation_steps,
        // As the trial ran: a trial that fitted only by recomputing its
        // layers would not fit keeping them (the gradients are the same).
        recompute: trial
            .user_attrs
            .get(RECOMPUTE_KEY)
            .and_then(Json::as_bool)
            .unwrap_or(false),
        memory_limit: None,
        fault: None,
        threads: 0,
        // The CPU backend holds the model `train` exports.
        cuda_device: None,
        matmul_precision: step.precision,
        kernels: step.kernels,
    };
    let spec = finetune_spec(&job, model_dir.clone());
    crate::logging::note(&format!(
        "memtune: retraining trial {} of `{}` ({}) to epoch {epoch_of_value}, micro-batch {micro_batch} x {accumulation_steps}",
        trial.number,
        study.name,
        settings_text(&settings)
    ));
    let metric = plan.metric;
    let mut mismatches = Vec::new();
    let trained = finetune_cpu_trained(&spec, &mut |m| {
        let value = metric.value(&m.valid);
        let stored = trial.intermediate_values.get(&(m.epoch as i64)).copied();
        crate::logging::note(&format!(
            "memtune: epoch {}: {} {value:.6} (recorded {})",
            m.epoch,
            metric.name(),
            stored.map_or("none".into(), |v| format!("{v:.6}"))
        ));
        if stored.is_some_and(|s| s != value) {
            mismatches.push(m.epoch);
        }
        Control::stop_if(m.epoch >= epoch_of_value)
    })
    .map_err(|e| CliError::trainer(format!("retraining trial {}", trial.number), e))?;
    let report = &trained.outcome.report;
    let last = report
        .epochs
        .last()
        .ok_or_else(|| CliError::failed("the retrain ran no epoch"))?;
    let value = metric.value(&last.valid);

    let tokenizer = TextTokenizer::from_model_dir(model_dir, settings.max_length)?;
    let labels = trained
        .label_names
        .clone()
        .unwrap_or_else(|| default_label_names(plan.num_classes));
    save_hf_dir(
        &trained.backend,
        &*trained.model,
        &tokenizer,
        model_dir,
        &labels,
        &args.output,
    )?;
    writeln!(
        out,
        "trial {}: validation {} {value} at epoch {} (recorded {recorded}); accuracy {}; saved to {}",
        trial.number,
        metric.name(),
        last.epoch,
        last.valid.accuracy,
        args.output.display()
    )?;
    let repeated = value == recorded && mismatches.is_empty();
    if let (false, Some(device)) = (repeated, &step.other_device) {
        eprintln!(
            "memtune: the retrain's validation {} is {value} where trial {} recorded {recorded} \
             on {device} (epochs differing: {mismatches:?})",
            metric.name(),
            trial.number
        );
    } else if !repeated {
        return Err(CliError::failed(format!(
            "the retrain did not repeat trial {}: validation {} {value} vs recorded {recorded} \
             (epochs differing: {mismatches:?}); the model is saved, but it is not the trial's",
            trial.number,
            metric.name()
        )));
    }
    Ok(())
}

/// The trial's settings, from its params stored in `storage`, as the
/// runner resolves them.
fn trial_settings(
    cfg: &StudyConfig,
    storage: &store::Storage,
    trial: &store::FrozenTrial,
) -> Result<TrialSettings> {
    trial.check().map_err(HistoryError::in_storage(storage))?;
    let values = trial
        .params
        .iter()
        .map(|(name, p)| (name.clone(), p.value()))
        .collect();
    cfg.settings(&values)
        .map_err(|e| usage(format!("trial {}: {e}", trial.number)))
}

/// The arithmetic a trial recorded that it ran with (`memtune tune`'s
/// `device`, `matmul_precision` and `kernels` user attributes), as the CPU
/// retrain takes it: fp32 products and the reference kernels where the
/// trial recorded none (a trial told by `memtune tell`).
struct RecordedStep {
    precision: trainer::backend::MatmulPrecision,
    kernels: trainer::backend::Kernels,
    /// The device the trial ran on, when it was not the CPU.
    other_device: Option<String>,
}

impl RecordedStep {
    fn of(trial: &store::FrozenTrial) -> RecordedStep {
        let text = |key: &str| trial.user_attrs.get(key).and_then(Json::as_str);
        // An attribute this version cannot read (a later version's name, an
        // edited storage) is named, and the retrain takes the default.
        fn parsed<T: std::str::FromStr + Default>(number: u64, key: &str, v: Option<&str>) -> T {
            let Some(v) = v else { return T::default() };
            v.parse().unwrap_or_else(|_| {
                eprintln!(
                    "memtune: trial {number}'s user attribute `{key}` is `{v}`, which this \
                     version does not know: the retrain uses the default"
                );
                T::default()
            })
        }
        RecordedStep {
            precision: parsed(trial.number, "matmul_precision", text("matmul_precision")),
            kernels: parsed(trial.number, "kernels", text("kernels")),
            other_device: text("device")
                .filter(|d| *d != CPU_DEVICE_NAME)
                .map(str::to_string),
        }
    }
}

/// The last epoch whose recorded value is `value` (trials without a
/// `best_epoch` attribute).
fn last_epoch_with(values: &BTreeMap<i64, f64>, value: f64) -> Option<i64> {
    values
        .iter()
        .rev()
        .find(|(_, v)| **v == value)
        .map(|(k, _)| *k)
}
