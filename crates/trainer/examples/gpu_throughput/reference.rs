//! The Hugging Face side: runs `benches/reference/torch_gpu_throughput.py`
//! once with the same models, eager and, for the models asked for, through
//! `torch.compile`, and reads the JSON line it prints per model and mode.

use std::path::Path;
use std::process::Command;

use crate::report::{Run, Timing};
use crate::workload::Workload;

/// One model's line from the reference script.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct Reference {
    pub model: String,
    pub batch: usize,
    pub seq: usize,
    /// The median of `ms_per_step_runs`.
    pub ms_per_step: f64,
    /// Each timed run's mean step time, in the order they ran; a script
    /// that timed one run writes none, and `ms_per_step` is that run.
    #[serde(default)]
    pub ms_per_step_runs: Option<Vec<f64>>,
    pub seqs_per_s: f64,
    /// The last step's loss; JSON has no NaN, so the script writes a loss
    /// that is not finite as `null`, read back as NaN.
    #[serde(deserialize_with = "null_as_nan")]
    pub loss: f64,
    /// Whether the model ran through `torch.compile`.
    #[serde(default)]
    pub compiled: bool,
    pub attn_implementation: String,
    pub torch: String,
    pub transformers: String,
    pub device: String,
    /// `torch.cuda.max_memory_allocated`; `None` on the CPU.
    pub max_memory_allocated: Option<u64>,
}

fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    use serde::Deserialize;
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl Reference {
    pub fn timing(&self) -> Timing {
        let runs = match &self.ms_per_step_runs {
            Some(runs) if !runs.is_empty() => runs.clone(),
            _ => vec![self.ms_per_step],
        };
        Timing {
            runs: runs
                .into_iter()
                .map(|ms| Run {
                    seconds_per_step: ms / 1e3,
                    host: None,
                })
                .collect(),
            loss: self.loss,
            peak_bytes: self.max_memory_allocated,
        }
    }
}

/// One model's HF results: eager, and compiled when asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct Sides {
    pub eager: Reference,
    pub compiled: Option<Reference>,
}

/// What the reference runs.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `cuda` or `cpu`.
    pub device: &'a str,
    pub workloads: &'a [Workload],
    /// Per workload, whether it also runs through `torch.compile`.
    pub compile: &'a [bool],
    pub steps: usize,
    pub warmup: usize,
    pub repeats: usize,
}

impl Request<'_> {
    /// The script's arguments: every model eager, then the compiled ones
    /// (last, so that no compiler state is around while eager is timed).
    pub fn arguments(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "--steps",
            &self.steps.to_string(),
            "--warmup",
            &self.warmup.to_string(),
            "--repeats",
            &self.repeats.to_string(),
            "--device",
            self.device,
        ]
        .map(String::from)
        .into();
        args.extend(
            self.workloads
                .iter()
                .map(|w| w.reference_spec().to_string()),
        );
        let compiled = self.workloads.iter().zip(self.compile).filter(|(_, c)| **c);
        args.extend(compiled.map(|(w, _)| {
            let mut spec = w.reference_spec();
            spec["compile"] = true.into();
            spec.to_string()
        }));
        args
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("cannot run {python}: {source}")]
    Spawn {
        python: String,
        source: std::io::Error,
    },
    #[error("{script} failed ({status}); its messages are above")]
    Failed {
        script: String,
        status: std::process::ExitStatus,
    },
    #[error("the reference printed a line that is not a model's result ({source}): {line}")]
    BadLine {
        line: String,
        source: serde_json::Error,
    },
    #[error("the reference printed no {mode} result for {model} (batch {batch}, seq {seq})")]
    Missing {
        model: String,
        batch: usize,
        seq: usize,
        mode: &'static str,
    },
}

/// Runs `script` with `python` for `req` and returns each workload's
/// results, in their order.
pub fn run(python: &str, script: &Path, req: &Request) -> Result<Vec<Sides>, ReferenceError> {
    let out = Command::new(python)
        .arg(script)
        .args(req.arguments())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|source| ReferenceError::Spawn {
            python: python.to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(ReferenceError::Failed {
            script: script.display().to_string(),
            status: out.status,
        });
    }
    parse(
        &String::from_utf8_lossy(&out.stdout),
        req.workloads,
        req.compile,
    )
}

/// The results in `stdout` for `workloads` (compiled too where `compile`
/// says so), in their order. Lines that do not start with `{` are the
/// libraries' chatter and are skipped; every other line must be a result.
pub fn parse(
    stdout: &str,
    workloads: &[Workload],
    compile: &[bool],
) -> Result<Vec<Sides>, ReferenceError> {
    let results = stdout
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with('{'))
        .map(|line| {
            serde_json::from_str(line).map_err(|source| ReferenceError::BadLine {
                line: line.to_string(),
                source,
            })
        })
        .collect::<Result<Vec<Reference>, ReferenceError>>()?;
    let find = |w: &Workload, compiled: bool| {
        results
            .iter()
            .find(|r| {
                r.model == w.name && r.batch == w.batch && r.seq == w.seq && r.compiled == compiled
            })
            .cloned()
            .ok_or_else(|| ReferenceError::Missing {
                model: w.name.to_string(),
                batch: w.batch,
                seq: w.seq,
                mode: if compiled { "torch.compile" } else { "eager" },
            })
    };
    workloads
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let compiled = compile.get(i).copied().unwrap_or(false);
            Ok(Sides {
                eager: find(w, false)?,
                compiled: if compiled { Some(find(w, true)?) } else { None },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BERT: &str = r#"{"model": "bert-base", "batch": 32, "seq": 128, "ms_per_step": 75.5, "seqs_per_s": 423.8, "loss": 0.69, "attn_implementation": "sdpa", "compiled": false, "torch": "2.11.0", "transformers": "5.17.0", "device": "NVIDIA H100 80GB HBM3", "max_memory_allocated": 3221225472}"#;
    const MINILM: &str = r#"{"model": "minilm-l6", "batch": 32, "seq": 64, "ms_per_step": 12.0, "seqs_per_s": 2666.7, "loss": null, "attn_implementation": "sdpa", "compiled": false, "torch": "2.11.0", "transformers": "5.17.0", "device": "cpu", "max_memory_allocated": null}"#;
    /// A compiled model's line, of three timed runs.
    const BERT_COMPILED: &str = r#"{"model": "bert-base", "batch": 32, "seq": 128, "ms_per_step": 26.0, "ms_per_step_runs": [27.5, 25.0, 26.0], "seqs_per_s": 1230.8, "loss": 0.7, "attn_implementation": "sdpa", "compiled": true, "torch": "2.11.0", "transformers": "5.17.0", "device": "NVIDIA H200", "max_memory_allocated": 3221225472}"#;

    fn workloads() -> Vec<Workload> {
        ["bert-base", "minilm-l6"]
            .iter()
            .map(|n| Workload::named(n).unwrap())
            .collect()
    }

    #[test]
    fn results_come_back_in_the_workloads_order_past_other_output() {
        let stdout = format!("Some weights were newly initialized\n{MINILM}\n{BERT}\n");
        let got = parse(&stdout, &workloads(), &[false, false]).unwrap();
        assert_eq!(got[0].eager.model, "bert-base");
        assert_eq!(got[0].eager.timing().seconds_per_step(), 0.0755);
        assert_eq!(got[0].eager.timing().runs.len(), 1);
        assert_eq!(got[0].eager.timing().peak_bytes, Some(3 << 30));
        assert_eq!(got[0].compiled, None);
        assert_eq!(got[1].eager.model, "minilm-l6");
        assert!(got[1].eager.loss.is_nan());
        assert_eq!(got[1].eager.max_memory_allocated, None);
    }

    #[test]
    fn compiled_results_pair_with_the_eager_ones_and_keep_their_runs() {
        let stdout = format!("{BERT}\n{MINILM}\ncompiling...\n{BERT_COMPILED}\n");
        let got = parse(&stdout, &workloads(), &[true, false]).unwrap();
        assert!(!got[0].eager.compiled);
        let compiled = got[0].compiled.as_ref().unwrap();
        let t = compiled.timing();
        assert_eq!(t.runs.len(), 3);
        assert_eq!(t.seconds_per_step(), 0.026);
        assert_eq!(t.step_spread().min, 0.025);
        assert_eq!(t.step_spread().max, 0.0275);
        assert_eq!(got[1].compiled, None);
        // Asked for but not printed.
        let missing = parse(&format!("{BERT}\n{MINILM}"), &workloads(), &[true, false]);
        assert!(matches!(
            missing,
            Err(ReferenceError::Missing { ref model, mode: "torch.compile", .. }) if model == "bert-base"
        ));
        // A compiled line does not stand in for the eager one.
        let only_compiled = parse(
            &format!("{BERT_COMPILED}\n{MINILM}"),
            &workloads(),
            &[true, false],
        );
        assert!(matches!(
            only_compiled,
            Err(ReferenceError::Missing { mode: "eager", .. })
        ));
    }

    #[test]
    fn a_missing_model_or_a_broken_line_is_an_error() {
        let none = [false, false];
        let missing = parse(BERT, &workloads(), &none).unwrap_err();
        assert!(
            matches!(missing, ReferenceError::Missing { ref model, .. } if model == "minilm-l6")
        );
        let wrong_shape = BERT.replace("\"seq\": 128", "\"seq\": 64");
        assert!(matches!(
            parse(&format!("{wrong_shape}\n{MINILM}"), &workloads(), &none),
            Err(ReferenceError::Missing { .. })
        ));
        let broken = format!("{BERT}\n{{\"model\": \"minilm-l6\"}}");
        assert!(matches!(
            parse(&broken, &workloads(), &none),
            Err(ReferenceError::BadLine { .. })
        ));
    }

    #[test]
    fn the_script_gets_every_model_eager_then_the_compiled_ones() {
        let w = workloads();
        let req = Request {
            device: "cuda",
            workloads: &w,
            compile: &[true, false],
            steps: 40,
            warmup: 8,
            repeats: 3,
        };
        let args = req.arguments();
        assert_eq!(
            args[..8],
            [
                "--steps",
                "40",
                "--warmup",
                "8",
                "--repeats",
                "3",
                "--device",
                "cuda"
            ]
        );
        let specs: Vec<serde_json::Value> = args[8..]
            .iter()
            .map(|a| serde_json::from_str(a).unwrap())
            .collect();
        let names: Vec<(&str, bool)> = specs
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap(),
                    s["compile"].as_bool().unwrap_or(false),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("bert-base", false),
                ("minilm-l6", false),
                ("bert-base", true)
            ]
        );
    }
}
