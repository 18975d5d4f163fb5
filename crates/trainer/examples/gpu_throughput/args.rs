//! The command line.

use std::path::PathBuf;

use crate::measure::Device;
use crate::report::{Anchor, Requirement};
use crate::workload::{NAMES, Workload};

pub const USAGE: &str =
    "usage: gpu_throughput [--device cpu|cuda] [--models NAME,...] [--steps N] [--warmup N] [--repeats N]
                      [--python PY [--script PATH] [--compile-models NAME,... | --compile]]
                      [--peak-tflops X] [--json PATH] [--require-speedup MODEL=[eager:|compiled:]X]...
  --device           where our steps run (default cuda; cuda needs the `cuda` feature)
  --models           bert-base, bert-base-s512, minilm-l6, deberta-v3-base, tiny, tiny-deberta
                     (default bert-base,minilm-l6)
  --steps, --warmup  timed steps per run and untimed steps before the first (default 30 and 5)
  --repeats          timed runs per model and implementation; the median is reported (default 1)
  --python           also run the Hugging Face reference with this Python (torch, transformers)
  --script           the reference script (default benches/reference/torch_gpu_throughput.py)
  --compile-models   these of --models also run in HF through torch.compile, beside HF eager
  --compile          every model of --models does (--compile-models with all of them)
  --peak-tflops      the device's peak dense bf16 TFLOP/s, for MFU (default: by device name)
  --json             write the figures there as one JSON object
  --require-speedup  fail unless ours is at least X times HF eager's speed (eager:X, or X alone)
                     or HF + torch.compile's (compiled:X) for MODEL
Our kernels: MEMTUNE_CUDA_KERNELS=reference|fused (default reference); our uploads:
MEMTUNE_CUDA_UPLOADS=sync|staged (default staged).";

#[derive(Clone, Debug, PartialEq)]
pub struct Args {
    pub device: Device,
    pub workloads: Vec<Workload>,
    pub steps: usize,
    pub warmup: usize,
    /// Timed runs per model and implementation.
    pub repeats: usize,
    pub python: Option<String>,
    pub script: PathBuf,
    pub peak_tflops: Option<f64>,
    pub json: Option<PathBuf>,
    pub requirements: Vec<Requirement>,
    /// Per workload, whether the reference also compiles it
    /// (`torch.compile`).
    pub compile: Vec<bool>,
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
            repeats: 1,
            python: None,
            script: PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../benches/reference/torch_gpu_throughput.py"
            )),
            peak_tflops: None,
            json: None,
            requirements: Vec::new(),
            compile: Vec::new(),
        };
        // Names from --compile-models, or every model (--compile); matched
        // with --models once all flags are read.
        let mut compile_names: Vec<String> = Vec::new();
        let mut compile_all = false;
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
                "--repeats" => parsed.repeats = count(&flag, &value()?)?,
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
                "--compile" => compile_all = true,
                "--compile-models" => {
                    compile_names.extend(value()?.split(',').map(String::from));
                }
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
        if parsed.repeats == 0 {
            return Err("--repeats must be at least 1".into());
        }
        if parsed.workloads.is_empty() {
            return Err("--models names no model".into());
        }
        let in_models = |name: &str| parsed.workloads.iter().any(|w| w.name == name);
        if let Some(name) = compile_names.iter().find(|n| !in_models(n)) {
            return Err(format!(
                "--compile-models {name}: the model is not among --models"
            ));
        }
        parsed.compile = parsed
            .workloads
            .iter()
            .map(|w| compile_all || compile_names.iter().any(|n| n == w.name))
            .collect();
        if parsed.python.is_none() && parsed.compile.contains(&true) {
            return Err("--compile and --compile-models need --python (the reference)".into());
        }
        for r in &parsed.requirements {
            if !in_models(&r.model) {
                return Err(format!(
                    "--require-speedup {}: the model is not among --models",
                    r.model
                ));
            }
            if r.anchor == Anchor::Compiled && !parsed.compiles(&r.model) {
                return Err(format!(
                    "--require-speedup {}=compiled:{}: the model is not among --compile-models",
                    r.model, r.min_speedup
                ));
            }
        }
        Ok(parsed)
    }

    /// Whether the reference compiles the model called `name`.
    pub fn compiles(&self, name: &str) -> bool {
        self.workloads
            .iter()
            .zip(&self.compile)
            .any(|(w, c)| *c && w.name == name)
    }
}

fn count(flag: &str, v: &str) -> Result<usize, String> {
    v.parse()
        .map_err(|e| format!("{flag} {v}: not a count: {e}"))
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
        assert_eq!((a.steps, a.warmup, a.repeats), (30, 5, 1));
        assert!(
            a.script
                .ends_with("benches/reference/torch_gpu_throughput.py")
        );
        assert!(a.python.is_none() && a.peak_tflops.is_none() && a.json.is_none());
        assert_eq!(a.compile, [false, false]);
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
            "--repeats",
            "3",
            "--python",
            "py",
            "--script",
            "s.py",
            "--peak-tflops",
            "989.4",
            "--json",
            "f.json",
            "--compile-models",
            "tiny",
            "--require-speedup",
            "tiny=1.3",
        ])
        .unwrap();
        assert_eq!(a.device, Device::Cpu);
        assert_eq!(a.workloads, vec![Workload::named("tiny").unwrap()]);
        assert_eq!((a.steps, a.warmup, a.repeats), (2, 0, 3));
        assert_eq!(a.python.as_deref(), Some("py"));
        assert_eq!(a.script, PathBuf::from("s.py"));
        assert_eq!(a.peak_tflops, Some(989.4));
        assert_eq!(a.json, Some(PathBuf::from("f.json")));
        assert_eq!(a.compile, [true]);
        assert_eq!(a.requirements[0].min_speedup, 1.3);
        assert_eq!(a.requirements[0].anchor, Anchor::Eager);
    }

    #[test]
    fn compile_models_picks_models_and_compile_takes_them_all() {
        let models = [
            "--python",
            "py",
            "--models",
            "bert-base,bert-base-s512,minilm-l6",
        ];
        let some = parse(&[&models[..], &["--compile-models", "bert-base"]].concat()).unwrap();
        assert_eq!(some.compile, [true, false, false]);
        assert!(some.compiles("bert-base") && !some.compiles("minilm-l6"));
        let two = [&models[..], &["--compile-models", "minilm-l6,bert-base"]].concat();
        assert_eq!(parse(&two).unwrap().compile, [true, false, true]);
        let all = parse(&[&models[..], &["--compile"]].concat()).unwrap();
        assert_eq!(all.compile, [true, true, true]);
    }

    #[test]
    fn each_requirement_names_its_anchor() {
        let a = parse(&[
            "--python",
            "py",
            "--models",
            "bert-base,minilm-l6",
            "--compile-models",
            "bert-base",
            "--require-speedup",
            "bert-base=compiled:1.5",
            "--require-speedup",
            "minilm-l6=eager:5",
            "--require-speedup",
            "bert-base=2",
        ])
        .unwrap();
        let got: Vec<(&str, Anchor, f64)> = a
            .requirements
            .iter()
            .map(|r| (r.model.as_str(), r.anchor, r.min_speedup))
            .collect();
        assert_eq!(
            got,
            [
                ("bert-base", Anchor::Compiled, 1.5),
                ("minilm-l6", Anchor::Eager, 5.0),
                ("bert-base", Anchor::Eager, 2.0),
            ]
        );
    }

    /// Every call of the example in the GPU bundle's script parses, and the
    /// throughput step times HF eager and compiled beside ours in one run.
    #[test]
    fn the_gpu_bundles_calls_parse() {
        let run_sh = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../xtask/src/gpu_bundle/run.sh"
        ));
        let joined = run_sh.replace("\\\n", " ");
        let calls: Vec<Args> = joined
            .lines()
            .filter_map(|line| line.split_once("./bin/gpu_throughput "))
            .map(|(_, rest)| {
                let rest = rest.split(['>', '|']).next().unwrap();
                let words = rest
                    .split_whitespace()
                    .map(|w| w.trim_matches('"'))
                    .map(|w| {
                        w.replace(
                            "$models",
                            "bert-base,bert-base-s512,minilm-l6,deberta-v3-base",
                        )
                    });
                Args::parse(words).unwrap_or_else(|e| panic!("{rest}: {e}"))
            })
            .collect();
        // throughput (fused, reference kernels, fused with synchronous uploads),
        // profile, legacy's warm-up.
        assert_eq!(calls.len(), 5, "{calls:?}");
        let fused = calls.iter().find(|a| a.python.is_some()).unwrap();
        assert_eq!(fused.compile, [true, false, false, false]);
        assert_eq!((fused.steps, fused.warmup, fused.repeats), (40, 8, 3));
        let required: Vec<(&str, Anchor, f64)> = fused
            .requirements
            .iter()
            .map(|r| (r.model.as_str(), r.anchor, r.min_speedup))
            .collect();
        assert_eq!(
            required,
            [
                ("bert-base", Anchor::Compiled, 1.5),
                ("minilm-l6", Anchor::Eager, 5.0)
            ]
        );
    }

    #[test]
    fn bad_arguments_are_errors() {
        for bad in [
            &["--device", "tpu"][..],
            &["--models", "bert-base,gpt-2"],
            &["--steps", "0"],
            &["--steps", "many"],
            &["--repeats", "0"],
            &["--repeats", "-1"],
            &["--peak-tflops", "-5"],
            &["--require-speedup", "tiny=1.3"],
            &["--require-speedup", "bert-base=fast:1.3"],
            // Compiled needs the model compiled.
            &[
                "--python",
                "py",
                "--require-speedup",
                "bert-base=compiled:1.5",
            ],
            &[
                "--python",
                "py",
                "--compile-models",
                "minilm-l6",
                "--require-speedup",
                "bert-base=compiled:1.5",
            ],
            &["--python", "py", "--compile-models", "tiny"],
            // Nothing to compile without the reference.
            &["--compile-models", "bert-base"],
            &["--compile"],
            &["--python"],
            &["--fast"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
