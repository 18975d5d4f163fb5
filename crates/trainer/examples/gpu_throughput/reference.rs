//! The Hugging Face side: runs `benches/reference/torch_gpu_throughput.py`
//! with the same models and reads the JSON line it prints per model.

use std::path::Path;
use std::process::Command;

use crate::report::Timing;
use crate::workload::Workload;

/// One model's line from the reference script.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct Reference {
    pub model: String,
    pub batch: usize,
    pub seq: usize,
    pub ms_per_step: f64,
    pub seqs_per_s: f64,
    /// The last step's loss; JSON has no NaN, so the script writes a loss
    /// that is not finite as `null`, read back as NaN.
    #[serde(deserialize_with = "null_as_nan")]
    pub loss: f64,
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
        Timing {
            seconds_per_step: self.ms_per_step / 1e3,
            loss: self.loss,
            peak_bytes: self.max_memory_allocated,
        }
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
    #[error("the reference printed no result for {model} (batch {batch}, seq {seq})")]
    Missing {
        model: String,
        batch: usize,
        seq: usize,
    },
}

/// Runs `script` with `python` on `device` for `workloads` and returns one
/// result per workload, in their order.
pub fn run(
    python: &str,
    script: &Path,
    device: &str,
    workloads: &[Workload],
    steps: usize,
    warmup: usize,
    compile: bool,
) -> Result<Vec<Reference>, ReferenceError> {
    let out = Command::new(python)
        .arg(script)
        .args(compile.then_some("--compile"))
        .args(["--steps", &steps.to_string()])
        .args(["--warmup", &warmup.to_string()])
        .args(["--device", device])
        .args(workloads.iter().map(|w| w.reference_spec().to_string()))
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
    parse(&String::from_utf8_lossy(&out.stdout), workloads)
}

/// The results in `stdout` for `workloads`, in their order. Lines that do
/// not start with `{` are the libraries' chatter and are skipped; every
/// other line must be a result.
pub fn parse(stdout: &str, workloads: &[Workload]) -> Result<Vec<Reference>, ReferenceError> {
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
    workloads
        .iter()
        .map(|w| {
            results
                .iter()
                .find(|r| r.model == w.name && r.batch == w.batch && r.seq == w.seq)
                .cloned()
                .ok_or_else(|| ReferenceError::Missing {
                    model: w.name.to_string(),
                    batch: w.batch,
                    seq: w.seq,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BERT: &str = r#"{"model": "bert-base", "batch": 32, "seq": 128, "ms_per_step": 75.5, "seqs_per_s": 423.8, "loss": 0.69, "attn_implementation": "sdpa", "torch": "2.11.0", "transformers": "5.17.0", "device": "NVIDIA H100 80GB HBM3", "max_memory_allocated": 3221225472}"#;
    const MINILM: &str = r#"{"model": "minilm-l6", "batch": 32, "seq": 64, "ms_per_step": 12.0, "seqs_per_s": 2666.7, "loss": null, "attn_implementation": "sdpa", "torch": "2.11.0", "transformers": "5.17.0", "device": "cpu", "max_memory_allocated": null}"#;

    fn workloads() -> Vec<Workload> {
        ["bert-base", "minilm-l6"]
            .iter()
            .map(|n| Workload::named(n).unwrap())
            .collect()
    }

    #[test]
    fn results_come_back_in_the_workloads_order_past_other_output() {
        let stdout = format!("Some weights were newly initialized\n{MINILM}\n{BERT}\n");
        let got = parse(&stdout, &workloads()).unwrap();
        assert_eq!(got[0].model, "bert-base");
        assert_eq!(got[0].timing().seconds_per_step, 0.0755);
        assert_eq!(got[0].timing().peak_bytes, Some(3 << 30));
        assert_eq!(got[1].model, "minilm-l6");
        assert!(got[1].loss.is_nan());
        assert_eq!(got[1].max_memory_allocated, None);
    }

    #[test]
    fn a_missing_model_or_a_broken_line_is_an_error() {
        let missing = parse(BERT, &workloads()).unwrap_err();
        assert!(
            matches!(missing, ReferenceError::Missing { ref model, .. } if model == "minilm-l6")
        );
        let wrong_shape = BERT.replace("\"seq\": 128", "\"seq\": 64");
        assert!(matches!(
            parse(&format!("{wrong_shape}\n{MINILM}"), &workloads()),
            Err(ReferenceError::Missing { .. })
        ));
        let broken = format!("{BERT}\n{{\"model\": \"minilm-l6\"}}");
        assert!(matches!(
            parse(&broken, &workloads()),
            Err(ReferenceError::BadLine { .. })
        ));
    }
}
