//! From a validated study file to what the runner needs: the storage URL,
//! the resolved models (directory or simulated architecture, with their
//! architecture for the memory plan), the data (loaded once here, so bad
//! data is reported before any trial starts), and each device's budget.
//!
//! Everything a trial needs from its environment (the data, each model
//! directory loaded whole, the stored study's space) is checked here, once,
//! before the first trial: such a failure is the environment's, not the
//! trial's, and must stop the study without consuming trials.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use trainer::backend::{Kernels, MatmulPrecision};
use trainer::data::DataSource;
use trainer::model::ModelConfig;

use super::config::{
    BuiltinModel, DEFAULT_SAFETY_MARGIN, DEFAULT_SIM_MEMORY, DeviceKind, ModelSource as ModelSpec,
    StudyConfig,
};
use super::models::builtin_dir;
use super::packing::{
    CUDA_MIN_MICRO_TOKENS, CUDA_PROCESS_OVERHEAD, DeviceBudget, GPU_MEM_ALLOCATOR_FLOOR,
    GPU_MEM_ALLOCATOR_SLACK, cpu_budget,
};
use super::pricing::PricedDevice;

/// Why a run cannot start. A model directory or a data set that does not
/// load is named with its trainer error, so the CLI can tell the study
/// file's input at fault from the environment.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// `[models.KEY]`'s directory does not load as a classifier.
    #[error("models.{key}: {}: {source}", path.display())]
    Model {
        key: String,
        path: PathBuf,
        #[source]
        source: Box<trainer::finetune::FinetuneError>,
    },
    /// The study's data does not load.
    #[error("data: {0}")]
    Data(#[source] trainer::data::DataError),
    /// A `[runner]` value of the study file that the device cannot honour
    /// (the message names the file and the key).
    #[error("{0}")]
    Runner(String),
    /// Anything else (the storage URL, the device, the precision...).
    #[error("{0}")]
    Other(String),
}

impl From<String> for SetupError {
    fn from(message: String) -> Self {
        SetupError::Other(message)
    }
}

use super::config::Metric;
use super::protocol::ModelSource;

/// A model a trial may name, resolved.
#[derive(Clone, Debug)]
pub struct ResolvedModel {
    pub source: ModelSource,
    pub config: ModelConfig,
    /// The preset's name when the model trains from random weights.
    pub random_weights: Option<String>,
}

#[derive(Clone, Debug)]
pub struct RunPlan {
    pub study_name: String,
    pub storage_url: String,
    pub n_trials: usize,
    pub timeout: Option<Duration>,
    /// One per objective.
    pub directions: Vec<store::StudyDirection>,
    /// The validation metric that picks a trial's best epoch.
    pub metric: Metric,
    pub data: DataSource,
    pub validation_fraction: f64,
    pub split_seed: u64,
    pub num_classes: usize,
    pub models: BTreeMap<String, ResolvedModel>,
    /// The devices trials are placed on (at least one), in the order of
    /// the study file (CUDA: by ordinal).
    pub devices: Vec<PlanDevice>,
    /// The operand format of matrix products, resolved for the devices
    /// (one that every device runs).
    pub matmul_precision: MatmulPrecision,
    /// Which implementation of the training step trials run.
    pub kernels: Kernels,
    pub threads_per_worker: usize,
    /// A trial whose micro-batch would hold fewer tokens (rows x
    /// `max_length`) waits for memory, unless the empty device fits no more.
    pub min_micro_tokens: usize,
    pub recycle_after: usize,
    pub heartbeat: Duration,
    pub stale_after: Duration,
    pub log_file: PathBuf,
}

/// The CPU's [`PlanDevice::name`], which each trial that ran there records
/// as its `device` user attribute.
pub const CPU_DEVICE_NAME: &str = "CPU";

/// One device of a run: what trials may lease there and how they run.
#[derive(Clone, Debug)]
pub struct PlanDevice {
    /// As progress lines, logs and each trial's `device` attribute name it.
    pub name: String,
    pub budget: DeviceBudget,
    /// How the device allocates, for pricing trials.
    pub priced_device: PricedDevice,
    /// The CUDA device's ordinal; `None`: the CPU or a simulated device.
    pub cuda_device: Option<usize>,
    /// A simulated device's bytes (what its trials' workers simulate).
    pub sim_bytes: Option<u64>,
}

impl RunPlan {
    /// Every device's name, for one line.
    pub fn device_names(&self) -> String {
        let names: Vec<&str> = self.devices.iter().map(|d| d.name.as_str()).collect();
        names.join(", ")
    }

    /// Bytes of every device together.
    pub fn total_capacity(&self) -> u64 {
        self.devices.iter().map(|d| d.budget.capacity).sum()
    }

    /// The plan of `cfg` on the CPU, whatever CUDA device its `[runner]`
    /// names (the simulated device stays: its models are not directories):
    /// `memtune train` retrains there, and must not need the GPU the
    /// study ran on, nor its driver.
    pub fn on_cpu(cfg: &StudyConfig, storage: Option<&str>) -> Result<Self, SetupError> {
        let mut cfg = cfg.clone();
        if cfg.runner.device != DeviceKind::Sim {
            cfg.runner.device = DeviceKind::Cpu;
            cfg.runner.cuda_devices = None;
        }
        Self::new(&cfg, storage)
    }

    /// `storage` (the `--storage` flag) overrides the study file's.
    pub fn new(cfg: &StudyConfig, storage: Option<&str>) -> Result<Self, SetupError> {
        let storage_url = storage.unwrap_or(&cfg.study.storage).to_string();
        let url = store::StorageUrl::parse(&storage_url).map_err(|e| e.to_string())?;
        // Simulated cards of the limit's size when that is smaller.
        let limit = cfg.runner.memory_limit;
        let sim_sizes: Option<Vec<u64>> = match cfg.runner.device {
            DeviceKind::Sim => Some(match &cfg.runner.sim_devices {
                Some(sizes) => sizes
                    .iter()
                    .map(|&b| capped(b, limit, "simulated device"))
                    .collect(),
                None => vec![capped(
                    cfg.runner.sim_memory.unwrap_or(DEFAULT_SIM_MEMORY),
                    limit,
                    "simulated device",
                )],
            }),
            DeviceKind::Cpu | DeviceKind::Auto | DeviceKind::Cuda(_) | DeviceKind::CudaAll => None,
        };
        // What a simulated model's source names; each job carries its own
        // device's size.
        let sim_device = sim_sizes.as_ref().and_then(|s| s.iter().copied().max());
        let cuda = resolve_devices(cfg.runner.device, cfg.runner.cuda_devices.as_deref())?;
        // One precision for every device: the oldest decides.
        let matmul_precision = resolve_precision(
            cfg.runner.precision,
            cuda.iter().map(|d| d.compute_capability).min(),
        )?;
        // Beside the storage file; a server's study logs where it runs.
        let log_file = cfg.runner.log_file.clone().unwrap_or_else(|| {
            let dir = match &url {
                store::StorageUrl::Sqlite(db) => db.parent().map(PathBuf::from).unwrap_or_default(),
                store::StorageUrl::Postgres(_) => PathBuf::new(),
            };
            dir.join(crate::logging::file_name(&cfg.study.name))
        });
        check_log_file(cfg, &url, &log_file)?;
        // The data first: a checkpoint's classifier must fit its classes,
        // and a preset's tokenizer is built from its texts.
        let (data, num_classes, examples) = load_data(cfg)?;
        let texts: Vec<String> = examples
            .iter()
            .flat_map(|e| std::iter::once(&e.text).chain(&e.text_pair))
            .cloned()
            .collect();
        // Names made safe as the log's is: a study or model named `../x`
        // or `/x` must not write outside the storage's directory.
        let presets_dir = log_file.parent().unwrap_or(Path::new("")).join(format!(
            "{}-presets",
            crate::logging::safe_stem(&cfg.study.name)
        ));
        let mut models = BTreeMap::new();
        for (key, spec) in &cfg.models {
            let model = resolve(key, spec, sim_device, num_classes, &presets_dir, &texts)?;
            check_examples(key, &model, &examples)?;
            models.insert(key.clone(), model);
        }
        let threads_per_worker = cfg.runner.threads_per_worker.unwrap_or(1).max(1);
        let mut devices: Vec<PlanDevice> = match (&sim_sizes, cuda.is_empty()) {
            (Some(sizes), _) => sizes
                .iter()
                .enumerate()
                .map(|(i, &bytes)| PlanDevice {
                    name: match sizes.len() {
                        1 => "simulated GPU".to_string(),
                        _ => format!("simulated GPU {i}"),
                    },
                    budget: DeviceBudget {
                        capacity: bytes,
                        safety_margin: cfg.runner.safety_margin.bytes(bytes),
                        process_overhead: cfg
                            .runner
                            .process_overhead
                            .unwrap_or(CUDA_PROCESS_OVERHEAD),
                        max_workers: usize::MAX,
                        allocator_slack: GPU_MEM_ALLOCATOR_SLACK,
                        allocator_floor: GPU_MEM_ALLOCATOR_FLOOR,
                    },
                    priced_device: PricedDevice::Sim,
                    cuda_device: None,
                    sim_bytes: Some(bytes),
                })
                .collect(),
            (None, false) => {
                let mut devices = Vec::with_capacity(cuda.len());
                for device in &cuda {
                    let process_overhead = match cfg.runner.process_overhead {
                        Some(o) => o,
                        None => crate::devices::measure_process_overhead(device.ordinal)?,
                    };
                    // What others hold when the study starts is not ours
                    // to lease; a memory limit makes it a card of that size.
                    let capacity = capped(device.free_bytes, cfg.runner.memory_limit, "free");
                    devices.push(PlanDevice {
                        name: format!("cuda:{} ({})", device.ordinal, device.name),
                        budget: DeviceBudget {
                            capacity,
                            safety_margin: cfg.runner.safety_margin.bytes(capacity),
                            process_overhead,
                            max_workers: usize::MAX,
                            allocator_slack: GPU_MEM_ALLOCATOR_SLACK,
                            allocator_floor: GPU_MEM_ALLOCATOR_FLOOR,
                        },
                        // The worker's allocator falls back to classic
                        // segments where the device has no virtual memory
                        // management.
                        priced_device: PricedDevice::Cuda {
                            expandable_segments: device.virtual_memory,
                        },
                        cuda_device: Some(device.ordinal),
                        sim_bytes: None,
                    });
                }
                devices
            }
            (None, true) => {
                let available = cpu_budget(threads_per_worker, None).capacity;
                let limit = capped(available, cfg.runner.memory_limit, "available");
                let mut b = cpu_budget(threads_per_worker, Some(limit));
                b.safety_margin = cpu_safety_margin(cfg, b.safety_margin, b.capacity);
                if let Some(o) = cfg.runner.process_overhead {
                    b.process_overhead = o;
                }
                vec![PlanDevice {
                    name: CPU_DEVICE_NAME.to_string(),
                    budget: b,
                    priced_device: PricedDevice::Cpu,
                    cuda_device: None,
                    sim_bytes: None,
                }]
            }
        };
        for d in &devices {
            let (overhead, usable) = (d.budget.process_overhead, d.budget.usable());
            if overhead < usable {
                continue;
            }
            let sizes = format!(
                "{} per worker process ({}) leaves no room for a trial on {} ({}): {} after the safety margin of {}",
                gpu_mem::human_bytes(overhead),
                match (cfg.runner.process_overhead, d.sim_bytes) {
                    (Some(_), _) => "set",
                    (None, Some(_)) => "the default",
                    (None, None) => "measured",
                },
                d.name,
                gpu_mem::human_bytes(d.budget.capacity),
                gpu_mem::human_bytes(usable),
                gpu_mem::human_bytes(d.budget.safety_margin),
            );
            // The study file's settings that size the room, or none: the
            // machine itself is too small.
            let r = &cfg.runner;
            let keys: Vec<String> = [
                ("memory_limit", r.memory_limit.is_some()),
                (
                    "sim_memory",
                    r.sim_memory.is_some_and(|b| b != DEFAULT_SIM_MEMORY),
                ),
                ("sim_devices", r.sim_devices.is_some()),
                ("safety_margin", r.safety_margin != DEFAULT_SAFETY_MARGIN),
                ("process_overhead", r.process_overhead.is_some()),
            ]
            .into_iter()
            .filter(|(_, set)| *set)
            .map(|(key, _)| format!("`runner.{key}`"))
            .collect();
            return Err(if keys.is_empty() {
                SetupError::Other(format!("the measured process overhead: {sizes}"))
            } else {
                SetupError::Runner(format!("{}: {}: {sizes}", cfg.origin, keys.join(", ")))
            });
        }
        if let Some(max) = cfg.runner.max_workers {
            for d in &mut devices {
                if max > d.budget.max_workers {
                    // Only the CPU bounds workers by its cores: more would
                    // share them, each trial slower, none sooner done.
                    crate::logging::note(&format!(
                        "memtune: [runner] max_workers = {max} is more than the {} {} holds \
                         ({threads_per_worker} thread(s) per worker): using {}",
                        d.budget.max_workers, d.name, d.budget.max_workers
                    ));
                }
                d.budget.max_workers = d.budget.max_workers.min(max).max(1);
            }
        }
        Ok(Self {
            study_name: cfg.study.name.clone(),
            storage_url,
            n_trials: cfg.study.n_trials as usize,
            timeout: cfg.study.timeout,
            directions: cfg.objective.directions.clone(),
            metric: cfg.objective.metric,
            data,
            validation_fraction: cfg.data.validation_fraction,
            split_seed: cfg.data.split_seed,
            num_classes,
            models,
            devices,
            matmul_precision,
            kernels: resolve_kernels(cfg.runner.kernels, !cuda.is_empty()),
            threads_per_worker,
            min_micro_tokens: cfg.runner.min_micro_tokens.unwrap_or(if cuda.is_empty() {
                0
            } else {
                CUDA_MIN_MICRO_TOKENS
            }),
            recycle_after: cfg.runner.recycle_after.max(1),
            heartbeat: cfg.runner.heartbeat,
            stale_after: cfg.runner.stale_after,
            log_file,
        })
    }

    pub fn model(&self, key: &str) -> Result<&ResolvedModel, String> {
        self.models
            .get(key)
            .ok_or_else(|| format!("the trial names model `{key}`, which [models] does not define"))
    }
}

/// The CPU's safety margin: the study file's, but never under `floor`
/// (`packing::cpu_budget`'s tenth of the memory), which the system, the
/// page cache and the runner itself keep; trials leasing more would push
/// the machine into swap or its OOM killer. Said once when it overrides a
/// margin the study file sets.
fn cpu_safety_margin(cfg: &StudyConfig, floor: u64, capacity: u64) -> u64 {
    let asked = cfg.runner.safety_margin.bytes(capacity);
    if asked < floor && cfg.runner.safety_margin != DEFAULT_SAFETY_MARGIN {
        crate::logging::note(&format!(
            "memtune: [runner] safety_margin = {} is less than the CPU's floor of 10% of its \
             memory, which the system keeps: using {}",
            gpu_mem::human_bytes(asked),
            gpu_mem::human_bytes(floor)
        ));
    }
    asked.max(floor)
}

/// `bytes` of a device, or `limit` when that is smaller (said once when
/// the limit is the larger: the device is what there is).
fn capped(bytes: u64, limit: Option<u64>, what: &str) -> u64 {
    match limit {
        Some(limit) if limit <= bytes => limit,
        Some(limit) => {
            crate::logging::note(&format!(
                "memtune: [runner] memory_limit = {} is more than the {} {what}: using that",
                gpu_mem::human_bytes(limit),
                gpu_mem::human_bytes(bytes)
            ));
            bytes
        }
        None => bytes,
    }
}

/// A random-weight preset's directory name: the model's key and a hash of
/// the preset and the texts its tokenizer is built from. Another run (a
/// study of the same name in another storage beside this one, or this
/// study with other data) then writes a directory of its own instead of
/// replacing the tokenizer under a running study's workers.
fn preset_dir_name(key: &str, preset: &str, texts: &[String]) -> String {
    let hash = crate::logging::fnv1a(
        preset
            .bytes()
            .chain([0])
            .chain(texts.iter().flat_map(|t| t.bytes().chain([0]))),
    );
    format!("{}-{hash:08x}", crate::logging::safe_stem(key))
}

/// A model of the study file, resolved: a random-weight preset becomes a
/// directory the runner writes under `presets_dir` (its tokenizer built
/// from `texts`), or on the simulated device a simulated preset.
fn resolve(
    key: &str,
    spec: &ModelSpec,
    sim_device: Option<u64>,
    num_classes: usize,
    presets_dir: &Path,
    texts: &[String],
) -> Result<ResolvedModel, SetupError> {
    let in_key = |e: String| SetupError::Other(format!("models.{key}: {e}"));
    match (spec, sim_device) {
        (ModelSpec::Sim(preset) | ModelSpec::Preset(preset), Some(device_bytes)) => {
            let name = preset.name();
            Ok(ResolvedModel {
                config: ModelConfig::preset(name)
                    .ok_or_else(|| in_key(format!("unknown preset `{name}`")))?,
                source: ModelSource::Sim {
                    preset: name.to_string(),
                    device_bytes,
                },
                random_weights: matches!(spec, ModelSpec::Preset(_)).then(|| name.to_string()),
            })
        }
        (ModelSpec::Preset(preset), None) => {
            let preset_dir = presets_dir.join(preset_dir_name(key, preset.name(), texts));
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let config = trainer::preset::write_dir(&preset_dir, preset.name(), &texts)
                .map_err(|e| in_key(e.to_string()))?;
            Ok(ResolvedModel {
                config,
                source: ModelSource::Dir { path: preset_dir },
                random_weights: Some(preset.name().to_string()),
            })
        }
        (ModelSpec::Sim(_), None) => Err(in_key(
            "a simulated model needs `[runner] device = \"sim\"`".into(),
        )),
        (_, Some(_)) => Err(in_key(
            "on the simulated device every model must be a preset (`sim` or `preset`)".into(),
        )),
        (ModelSpec::Dir(dir), None) => dir_model(key, dir.clone(), num_classes),
        (ModelSpec::Builtin(b), None) => dir_model(
            key,
            builtin_dir(match b {
                BuiltinModel::MiniLmL6 => "minilm-l6",
            })
            .map_err(in_key)?,
            num_classes,
        ),
    }
}

/// A model directory, checked whole as a worker will load it (config,
/// tokenizer, every tensor's shape), so a broken model stops the study
/// before its first trial instead of failing every trial.
fn dir_model(key: &str, path: PathBuf, num_classes: usize) -> Result<ResolvedModel, SetupError> {
    let config = match trainer::finetune::check_model_dir(&path, num_classes) {
        Ok(config) => config,
        Err(source) => {
            return Err(SetupError::Model {
                key: key.to_string(),
                path,
                source: Box::new(source),
            });
        }
    };
    Ok(ResolvedModel {
        source: ModelSource::Dir { path },
        config,
        random_weights: None,
    })
}

/// Checks the `[runner] device` (or the `devices` list, `cuda_list`)
/// against this machine: the CUDA devices trials will train on, none for
/// the CPU and the simulated devices. `auto` takes CUDA device 0 when the
/// driver and a device are there, else the CPU with a one-line notice
/// saying why; an explicit `cuda`/`cuda:N` without that device fails with
/// the reason; `cuda:*` takes every device the driver shows, which are
/// those `CUDA_VISIBLE_DEVICES` leaves, numbered as it leaves them (the
/// workers inherit the variable, so an ordinal names the same device there).
fn resolve_devices(
    device: DeviceKind,
    cuda_list: Option<&[usize]>,
) -> Result<Vec<crate::devices::CudaDeviceInfo>, String> {
    match (device, cuda_list) {
        (DeviceKind::Cpu | DeviceKind::Sim, _) => Ok(Vec::new()),
        (DeviceKind::Auto, _) => {
            let report = crate::devices::probe_cuda();
            match report.device(0) {
                Ok(d) => {
                    crate::logging::note(&format!(
                        "memtune: device = \"auto\": using cuda:0 ({}, {} free)",
                        d.name,
                        gpu_mem::human_bytes(d.free_bytes)
                    ));
                    Ok(vec![d.clone()])
                }
                Err(reason) => {
                    crate::logging::note(&format!(
                        "memtune: device = \"auto\": using the CPU (no CUDA: {reason})"
                    ));
                    Ok(Vec::new())
                }
            }
        }
        (DeviceKind::Cuda(n), _) => cuda_device(n, &format!("device = \"cuda:{n}\"")),
        (DeviceKind::CudaAll, Some(list)) => {
            let mut out = Vec::with_capacity(list.len());
            for &n in list {
                out.extend(cuda_device(n, &format!("devices: \"cuda:{n}\""))?);
            }
            Ok(out)
        }
        (DeviceKind::CudaAll, None) => match crate::devices::probe_cuda().devices {
            Ok(all) if !all.is_empty() => Ok(all),
            Ok(_) => Err(
                "[runner] device = \"cuda:*\": the driver shows no CUDA device \
                 (CUDA_VISIBLE_DEVICES may hide them; `memtune devices` shows what was found)"
                    .to_string(),
            ),
            Err(reason) => Err(format!(
                "[runner] device = \"cuda:*\": CUDA is unavailable: {reason} \
                 (`memtune devices` shows what was found)"
            )),
        },
    }
}

/// CUDA device `n`, or why it cannot be used (`what` names the setting).
fn cuda_device(n: usize, what: &str) -> Result<Vec<crate::devices::CudaDeviceInfo>, String> {
    match crate::devices::probe_cuda().device(n) {
        Ok(d) => Ok(vec![d.clone()]),
        Err(reason) => Err(format!(
            "[runner] {what}: CUDA is unavailable: {reason} \
             (`memtune devices` shows what was found)"
        )),
    }
}

/// `[runner] precision` for the device: "auto" is bf16 where the tensor
/// cores take it and fp32 elsewhere (the CPU, older GPUs); an explicit
/// 16-bit format a CUDA device cannot run is an error. On the CPU a 16-bit
/// format is emulated (the numbers a GPU would give, more slowly).
fn resolve_precision(
    asked: Option<MatmulPrecision>,
    cuda_capability: Option<(i32, i32)>,
) -> Result<MatmulPrecision, String> {
    match (asked, cuda_capability) {
        (None, Some(cc)) if cc >= MatmulPrecision::Bf16.min_cuda_capability() => {
            Ok(MatmulPrecision::Bf16)
        }
        (None, _) => Ok(MatmulPrecision::Fp32),
        (Some(p), Some(cc)) if cc < p.min_cuda_capability() => {
            let need = p.min_cuda_capability();
            Err(format!(
                "[runner] precision = \"{p}\" needs compute capability {}.{} or newer; the device is {}.{} (use \"fp32\" or \"auto\")",
                need.0, need.1, cc.0, cc.1
            ))
        }
        (Some(p), _) => Ok(p),
    }
}

/// `[runner] kernels` for the devices: "auto" is the fused step on CUDA
/// devices (verified there against the CPU and measured about twice the
/// reference step's speed in 40-50% less memory, `docs/benchmarks.md`) and
/// the reference step on the CPU and the simulated device.
fn resolve_kernels(asked: Option<Kernels>, on_cuda: bool) -> Kernels {
    match asked {
        Some(k) => k,
        None if on_cuda => Kernels::Fused,
        None => Kernels::Reference,
    }
}

/// Loads the data once to check it and count its classes, with its
/// examples (what a preset's tokenizer is built from, and each model's
/// tokenizer is checked on); the workers load it again
/// (each is a separate process). The simulated device's trials step over
/// synthetic batches, but its data is checked all the same: a study file
/// is tried there before a long run, and its head is sized by the classes.
fn load_data(
    cfg: &StudyConfig,
) -> Result<(DataSource, usize, Vec<trainer::data::Example>), SetupError> {
    let source = cfg.data.source.clone();
    let dataset = source.load().map_err(SetupError::Data)?;
    // Split now, as each trial will: an empty side fails every trial alike.
    trainer::data::stratified_split(
        &dataset.examples,
        dataset.num_classes,
        cfg.data.validation_fraction,
        cfg.data.split_seed,
    )
    .map_err(SetupError::Data)?;
    let skipped = &dataset.report.skipped;
    crate::logging::note(&format!(
        "memtune: data: {} examples, {} classes{}",
        dataset.examples.len(),
        dataset.num_classes,
        match skipped.first() {
            None => String::new(),
            Some(first) => format!(" ({} bad records skipped, e.g. {first})", skipped.len()),
        }
    ));
    Ok((source, dataset.num_classes, dataset.examples))
}

/// Every example tokenized by the model's tokenizer, as its trials will:
/// a text it cannot encode, or pairs for a model of one token type, stop
/// the study here instead of failing each trial.
fn check_examples(
    key: &str,
    model: &ResolvedModel,
    examples: &[trainer::data::Example],
) -> Result<(), SetupError> {
    let ModelSource::Dir { path } = &model.source else {
        return Ok(());
    };
    trainer::finetune::check_examples(path, &model.config, examples).map_err(|source| {
        SetupError::Model {
            key: key.to_string(),
            path: path.clone(),
            source: Box::new(source),
        }
    })
}

/// Every value `max_length` can take must fit each model directory's
/// token positions (builtin and simulated models are checked when the
/// study file is read); otherwise every trial would fail alike. The error
/// names the study file, the line or key, and the model's `config.json`.
pub fn check_lengths_against_models(cfg: &StudyConfig, plan: &RunPlan) -> Result<(), String> {
    for (key, model) in &plan.models {
        let ModelSource::Dir { path } = &model.source else {
            continue;
        };
        let limit = model.config.max_sequence();
        let Some((at, v)) = super::space::max_length_over(&cfg.params, &cfg.fixed, limit) else {
            continue;
        };
        let location = match at {
            super::space::LengthAt::Fixed => format!("{}: fixed.max_length", cfg.origin),
            super::space::LengthAt::Param { i, key: field } => format!(
                "{}:{}: param `{}` ({field})",
                cfg.origin, cfg.params[i].line, cfg.params[i].name
            ),
        };
        return Err(format!(
            "{location}: max_length {v} is more than the {limit} token positions of model `{key}` ({}: max_position_embeddings)",
            path.join("config.json").display()
        ));
    }
    Ok(())
}

/// A fixed `head_layers` above 0 that a model of the study cannot carry
/// (DeBERTa has no hidden head layers) would fail every trial on that model
/// alike: refused here, naming the key and the model. So is a `head_layers`
/// param, always active, that never draws 0 where no model of the study
/// carries hidden head layers; otherwise it is checked per trial (another
/// model, or 0, may be drawn).
pub fn check_heads_against_models(cfg: &StudyConfig, plan: &RunPlan) -> Result<(), String> {
    use super::space::Hyperparameter;
    let carries = |layers: usize| {
        let head = trainer::model::HeadConfig {
            num_labels: plan.num_classes,
            hidden: vec![1; layers],
        };
        plan.models
            .iter()
            .map(|(key, model)| (key, model.config.check_head(&head)))
            .collect::<Vec<_>>()
    };
    for p in cfg
        .params
        .iter()
        .filter(|p| p.sets == Hyperparameter::HeadLayers && p.when.is_none())
    {
        let fewest = match &p.distribution {
            hpo_sampler::Distribution::Int { low, .. } => Some(*low),
            hpo_sampler::Distribution::Categorical { choices } => choices
                .iter()
                .filter_map(|c| match c {
                    hpo_sampler::CategoricalChoice::Int(i) => Some(*i),
                    _ => None,
                })
                .min(),
            hpo_sampler::Distribution::Float { .. } => None,
        };
        let Some(layers @ 1..) = fewest.and_then(|n| usize::try_from(n).ok()) else {
            continue;
        };
        let results = carries(layers);
        if results.iter().all(|(_, r)| r.is_err())
            && let Some((key, Err(e))) = results.first()
        {
            return Err(format!(
                "{}:{}: param `{}`: every value is at least {layers}, and no model of the \
                 study carries hidden head layers (model `{key}`: {e}): let it take 0",
                cfg.origin, p.line, p.name
            ));
        }
    }
    let Some(hpo_sampler::ParamValue::Int(n)) = cfg.fixed.get(&Hyperparameter::HeadLayers) else {
        return Ok(());
    };
    let Ok(layers @ 1..) = usize::try_from(*n) else {
        return Ok(());
    };
    match carries(layers).into_iter().find(|(_, r)| r.is_err()) {
        Some((key, Err(e))) => Err(format!(
            "{}: fixed.head_layers = {n}: model `{key}`: {e}; set head_layers = 0 for it",
            cfg.origin
        )),
        _ => Ok(()),
    }
}

/// Refuses to continue a stored study whose params contradict the study
/// file's (a float turned log, changed choices, a float now an int), as
/// Optuna would refuse to store them, or whose objective is another (its
/// directions, or the metric names memtune stored, differ: values of two
/// metrics would mix in one study); a study or file not yet created
/// passes. Checked before any trial is asked, so nothing is written.
pub fn check_space_against_stored(cfg: &StudyConfig, plan: &RunPlan) -> Result<(), String> {
    let opts = store::OpenOptions {
        create: false,
        read_only: true,
        ..store::OpenOptions::default()
    };
    let storage = match store::Storage::open_url(&plan.storage_url, &opts) {
        Ok(s) => s,
        // Empty: another runner is creating the schema right now.
        Err(store::StoreError::NoSuchFile { .. } | store::StoreError::EmptyDatabase { .. }) => {
            return Ok(());
        }
        Err(e) => return Err(e.to_string()),
    };
    let study = match storage.study(&plan.study_name) {
        Ok(s) => s,
        Err(store::StoreError::StudyNotFound { .. }) => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let names: Vec<&str> = cfg.objective.metrics.iter().map(|m| m.name()).collect();
    let mut attrs = storage
        .study_system_attrs(study.study_id)
        .map_err(|e| e.to_string())?;
    let stored_names = attrs.remove(super::record::METRIC_NAMES_KEY);
    // A study stored before its constraints were recorded passes.
    if let Some(stored) = attrs.remove(super::record::STUDY_CONSTRAINTS_KEY) {
        let asked = super::record::constraints_json(&cfg.constraints);
        if stored != asked {
            return Err(format!(
                "{}: constraint: study `{}` was run with the constraints {stored}, but the study \
                 file has {asked}: its trials' constraint values would mean other limits; use \
                 another study name",
                cfg.origin, plan.study_name
            ));
        }
    }
    let same_names = stored_names
        .as_ref()
        .is_none_or(|n| *n == serde_json::json!(names));
    if study.directions != plan.directions || !same_names {
        let stored = match &stored_names {
            Some(n) => format!("{n} ({:?})", study.directions),
            None => format!("{:?}", study.directions),
        };
        return Err(format!(
            "{}: objective: study `{}` optimises {stored}, but the study file asks for {} \
             ({:?}): use another study name",
            cfg.origin,
            plan.study_name,
            serde_json::json!(names),
            plan.directions
        ));
    }
    let trials = storage
        .trials(study.study_id, &store::TrialFilter::default())
        .map_err(|e| e.to_string())?;
    // Each trial, each COMPLETE one's count of values and no number twice:
    // a history the sampler would refuse at every ask is refused once,
    // here, before a trial is claimed or created.
    hpo_sampler::StudyView::with_directions(&study.name, &study.directions, &trials)
        .check()
        .map_err(|e| {
            format!(
                "{}: study `{}`: stored history: {e}",
                storage.path().display(),
                plan.study_name
            )
        })?;
    for p in &cfg.params {
        let space = BTreeMap::from([(p.name.clone(), p.distribution.clone())]);
        hpo_sampler::check_against_history(&trials, &space).map_err(|e| {
            format!(
                "{}:{}: study `{}` cannot continue with this space: {e}",
                cfg.origin, p.line, plan.study_name
            )
        })?;
    }
    check_waiting_params(cfg, plan, &trials)
}

/// A WAITING trial's stored params (a retry copies its failed trial's, as
/// Optuna's `RetryFailedTrialCallback` does) are run as they are, so each
/// must still be a param of the study file: a trial cannot drop a stored
/// param, and one the file no longer defines would fail it before it runs.
/// So are a runner's RUNNING trials', which become such retries when that
/// runner is gone (killed, say) and this one takes them over.
/// Its `fixed_params` are Optuna's `enqueue_trial` values, which apply only
/// to the params the space suggests (the others are ignored, as in Optuna),
/// and are not checked here.
fn check_waiting_params(
    cfg: &StudyConfig,
    plan: &RunPlan,
    trials: &[hpo_sampler::FrozenTrial],
) -> Result<(), String> {
    let defined = |name: &str| cfg.params.iter().any(|p| p.name == name);
    let to_run = trials.iter().filter(|t| match t.state {
        hpo_sampler::TrialState::Waiting => true,
        hpo_sampler::TrialState::Running => t.system_attrs.contains_key(store::OWNER_KEY),
        _ => false,
    });
    for t in to_run {
        if let Some(name) = t.params.keys().find(|name| !defined(name)) {
            return Err(format!(
                "{}: study `{}` has {} trial {} with param `{name}`, which the study file \
                 no longer defines: put the `[[param]]` back to run it, or use another study name",
                cfg.origin, plan.study_name, t.state, t.number
            ));
        }
    }
    Ok(())
}

/// The log is appended to, so a study file, storage file, data file or a
/// file in a model's directory it named would be damaged: a study file or
/// a model's `config.json` would no longer parse, and in a SQLite file the
/// database's own writes overwrite the lines.
fn check_log_file(
    cfg: &StudyConfig,
    url: &store::StorageUrl,
    log_file: &Path,
) -> Result<(), SetupError> {
    let mut files: Vec<(&str, PathBuf)> = vec![("the study file", PathBuf::from(&cfg.origin))];
    if let store::StorageUrl::Sqlite(db) = url {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut side = db.clone().into_os_string();
            side.push(suffix);
            files.push(("the storage file", side.into()));
        }
    }
    if let DataSource::Files { paths, .. } = &cfg.data.source {
        files.extend(paths.iter().map(|p| ("a data file", p.clone())));
    }
    let log = comparable(log_file);
    let in_model = cfg.models.values().find_map(|m| match m {
        super::config::ModelSource::Dir(dir) if log.starts_with(comparable(dir)) => {
            Some(("in a model's directory", dir.clone()))
        }
        _ => None,
    });
    let Some((what, file)) = files
        .into_iter()
        .find(|(_, f)| comparable(f) == log)
        .or(in_model)
    else {
        return Ok(());
    };
    let whose = match cfg.runner.log_file {
        Some(_) => "`runner.log_file`".to_string(),
        None => {
            "the log file (the study's name beside the storage; set `runner.log_file`)".to_string()
        }
    };
    Err(SetupError::Runner(format!(
        "{}: {whose}: {} is {what} ({}); the log is appended to and would damage it",
        cfg.origin,
        log_file.display(),
        file.display()
    )))
}

/// `path` with its directory's links and `..` resolved (the file itself
/// when it exists), so two names of one file compare equal.
pub(crate) fn comparable(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(parent), path.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MatmulPrecision::{Bf16, Fp16, Fp32};

    #[test]
    fn auto_kernels_are_fused_on_cuda_and_the_reference_elsewhere() {
        assert_eq!(resolve_kernels(None, true), Kernels::Fused);
        assert_eq!(resolve_kernels(None, false), Kernels::Reference);
        for k in [Kernels::Reference, Kernels::Fused] {
            assert_eq!(resolve_kernels(Some(k), true), k);
            assert_eq!(resolve_kernels(Some(k), false), k);
        }
    }

    #[test]
    fn auto_precision_is_bf16_from_ampere_on_and_fp32_elsewhere() {
        assert_eq!(resolve_precision(None, Some((9, 0))), Ok(Bf16));
        assert_eq!(resolve_precision(None, Some((8, 0))), Ok(Bf16));
        assert_eq!(resolve_precision(None, Some((7, 5))), Ok(Fp32));
        assert_eq!(resolve_precision(None, None), Ok(Fp32));
    }

    #[test]
    fn an_explicit_precision_is_kept_where_the_device_runs_it() {
        assert_eq!(resolve_precision(Some(Fp16), Some((7, 0))), Ok(Fp16));
        assert_eq!(resolve_precision(Some(Fp32), Some((9, 0))), Ok(Fp32));
        // The CPU emulates every format.
        for p in MatmulPrecision::ALL {
            assert_eq!(resolve_precision(Some(p), None), Ok(p));
        }
        let e = resolve_precision(Some(Bf16), Some((7, 5))).unwrap_err();
        assert!(
            e.contains("precision = \"bf16\" needs compute capability 8.0")
                && e.contains("the device is 7.5"),
            "{e}"
        );
        assert!(resolve_precision(Some(Fp16), Some((6, 1))).is_err());
    }

    /// A log file that is the study file, the storage (or its side files)
    /// or a data file is refused before the run opens it, under another
    /// name of the same file too; one beside them is taken.
    #[test]
    fn a_log_file_never_names_a_file_of_the_study() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let rows: String = (0..20).map(|i| format!("text {i},{}\n", i % 2)).collect();
        std::fs::write(d.join("data.csv"), format!("text,label\n{rows}")).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        let study = |log: Option<&str>, db: &str| {
            let log = log.map_or(String::new(), |l| format!("log_file = \"{l}\"\n"));
            let text = format!(
                "[study]\nname = \"s\"\nstorage = \"sqlite:///{db}\"\nn_trials = 1\n\n\
                 [data]\nsource = \"files\"\nfiles = [\"data.csv\"]\nnum_classes = 2\n\n\
                 [models.m]\nsim = \"bert-base\"\n\n[runner]\ndevice = \"sim\"\n{log}",
                db = d.join(db).display()
            );
            let path = d.join("study.toml");
            std::fs::write(&path, text).unwrap();
            StudyConfig::from_path(&path).unwrap()
        };
        let s_db = d.join("s.db").display().to_string();
        let s_wal = format!("{s_db}-wal");
        let study_file = d.join("study.toml").display().to_string();
        for (log, what) in [
            ("study.toml", "the study file"),
            ("sub/../study.toml", "the study file"),
            (s_db.as_str(), "the storage file"),
            (s_wal.as_str(), "the storage file"),
            ("data.csv", "a data file"),
        ] {
            let e = RunPlan::new(&study(Some(log), "s.db"), None).unwrap_err();
            assert!(matches!(e, SetupError::Runner(_)), "{e:?}");
            let e = e.to_string();
            assert!(
                e.starts_with(&study_file) && e.contains("`runner.log_file`") && e.contains(what),
                "{log}: {e}"
            );
        }
        // The default name, the study's beside the storage, can be one too:
        // study `s` in `s.log`.
        let e = RunPlan::new(&study(None, "s.log"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the log file (the study's name") && e.contains("the storage file"),
            "{e}"
        );
        let plan = RunPlan::new(&study(Some("s.log"), "s.db"), None).unwrap();
        assert_eq!(plan.log_file, d.join("s.log"));
        let plan = RunPlan::new(&study(None, "s.db"), None).unwrap();
        assert_eq!(plan.log_file, d.join("s.log"));
    }
}
