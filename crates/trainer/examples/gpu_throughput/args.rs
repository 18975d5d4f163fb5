//! The command line.

use std::path::PathBuf;

use crate::measure::Device;
use crate::report::Requirement;
use crate::workload::{NAMES, Workload};

pub const USAGE: &str =
    "usage: gpu_throughput [--device cpu|cuda] [--models NAME,...] [--steps N] [--warmup N]
                      [--python PY [--script PATH]] [--peak-tflops X] [--json PATH]
                      [--require-speedup MODEL=X]... [--compile]
  --device           where our steps run (default cuda; cuda needs the `cuda` feature)
  --models           bert-base, bert-base-s512, minilm-l6, tiny (default bert-base,minilm-l6)
  --steps, --warmup  timed and untimed steps per model (default 30 and 5)
  --python           also run the Hugging Face reference with this Python (torch, transformers)
  --script           the reference script (default benches/reference/torch_gpu_throughput.py)
  --peak-tflops      the device's peak dense bf16 TFLOP/s, for MFU (default: by device name)
  --json             write the figures there as one JSON object
  --require-speedup  fail unless ours is at least X times HF's speed for MODEL
  --compile          the reference runs its model through torch.compile (default mode)
Our kernels: MEMTUNE_CUDA_KERNELS=reference|fused (default reference).";

#[derive(Clone, Debug, PartialEq)]
pub struct Args {
    pub device: Device,
    pub workloads: Vec<Workload>,
    pub steps: usize,
    pub warmup: usize,
    pub python: Option<String>,
    pub script: PathBuf,
    pub peak_tflops: Option<f64>,
    pub json: Option<PathBuf>,
    pub requirements: Vec<Requirement>,
    /// The reference compiles its model (`torch.compile`).
    pub compile: bool,
}

impl Args {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let mut parsed = Args {
            device: Device::Cuda,
            workloads: ["bert-base", "minilm-l6"]
                .iter()
                .filter_map(|n| Workload::named(n))
                .collect(),
            steps: 30,
            warmup: 5,
            python: None,
            script: PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../benches/reference/torch_gpu_throughput.py"
            )),
            peak_tflops: None,
            json: None,
            requirements: Vec::new(),
            compile: false,
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--device" => {
                    parsed.device = match value()?.as_str() {
                        "cpu" => Device::Cpu,
                        "cuda" => Device::Cuda,
                        other => return Err(format!("--device {other}: not cpu or cuda")),
                    }
                }
                "--models" => {
                    parsed.workloads = value()?
                        .split(',')
                        .map(|name| {
                            Workload::named(name).ok_or_else(|| {
                                format!("--models: unknown model `{name}` (known: {NAMES:?})")
                            })
                        })
                        .collect::<Result<_, _>>()?
                }
                "--steps" => parsed.steps = count(&flag, &value()?)?,
                "--warmup" => parsed.warmup = count(&flag, &value()?)?,
                "--python" => parsed.python = Some(value()?),
                "--script" => parsed.script = PathBuf::from(value()?),
                "--peak-tflops" => {
                    let v = value()?;
                    let tflops: f64 = v
                        .parse()
                        .ok()
                        .filter(|t: &f64| t.is_finite() && *t > 0.0)
                        .ok_or_else(|| format!("--peak-tflops {v}: not a positive number"))?;
                    parsed.peak_tflops = Some(tflops);
                }
                "--compile" => parsed.compile = true,
                "--json" => parsed.json = Some(PathBuf::from(value()?)),
                "--require-speedup" => {
                    let r: Requirement = value()?
                        .parse()
                        .map_err(|e| format!("--require-speedup: {e}"))?;
                    parsed.requirements.push(r);
                }
                other => return Err(format!("unknown argument `{other}`")),
            }
        }
        if parsed.steps == 0 {
            return Err("--steps must be at least 1".into());
        }
        if parsed.workloads.is_empty() {
            return Err("--models names no model".into());
        }
        for r in &parsed.requirements {
            if !parsed.workloads.iter().any(|w| w.name == r.model) {
                return Err(format!(
                    "--require-speedup {}: the model is not among --models",
                    r.model
                ));
            }
        }
        Ok(parsed)
    }
}

fn count(flag: &str, v: &str) -> Result<usize, String> {
    v.parse()
        .map_err(|e| format!("{flag} {v}: not a count of steps: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        Args::parse(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn the_defaults_are_both_models_on_cuda() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.device, Device::Cuda);
        let names: Vec<&str> = a.workloads.iter().map(|w| w.name).collect();
        assert_eq!(names, ["bert-base", "minilm-l6"]);
        assert_eq!((a.steps, a.warmup), (30, 5));
        assert!(
            a.script
                .ends_with("benches/reference/torch_gpu_throughput.py")
        );
        assert!(a.python.is_none() && a.peak_tflops.is_none() && a.json.is_none());
    }

    #[test]
    fn every_flag_is_read() {
        let a = parse(&[
            "--device",
            "cpu",
            "--models",
            "tiny",
            "--steps",
            "2",
            "--warmup",
            "0",
            "--python",
            "py",
            "--script",
            "s.py",
            "--peak-tflops",
            "989.4",
            "--json",
            "f.json",
            "--require-speedup",
            "tiny=1.3",
        ])
        .unwrap();
        assert_eq!(a.device, Device::Cpu);
        assert_eq!(a.workloads, vec![Workload::named("tiny").unwrap()]);
        assert_eq!((a.steps, a.warmup), (2, 0));
        assert_eq!(a.python.as_deref(), Some("py"));
        assert_eq!(a.script, PathBuf::from("s.py"));
        assert_eq!(a.peak_tflops, Some(989.4));
        assert_eq!(a.json, Some(PathBuf::from("f.json")));
        assert_eq!(a.requirements[0].min_speedup, 1.3);
    }

    #[test]
    fn bad_arguments_are_errors() {
        for bad in [
            &["--device", "tpu"][..],
            &["--models", "bert-base,gpt-2"],
            &["--steps", "0"],
            &["--steps", "many"],
            &["--peak-tflops", "-5"],
            &["--require-speedup", "tiny=1.3"],
            &["--python"],
            &["--fast"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
