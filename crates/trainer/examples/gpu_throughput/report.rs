//! The comparison's figures: per model, both implementations' step time,
//! sequences and tokens per second, MFU, final loss and peak memory, the
//! speed-up over Hugging Face, and which required speed-ups were missed.
//! Printed as a markdown table and written as JSON.

use std::fmt::Write as _;
use std::str::FromStr;

use crate::reference::Reference;
use crate::workload::Workload;

/// One implementation's timed run of one model.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Mean wall time of a timed step.
    pub seconds_per_step: f64,
    /// The last step's loss.
    pub loss: f64,
    /// Peak device memory allocated during the timed steps (CUDA only).
    pub peak_bytes: Option<u64>,
}

/// Model FLOPs utilisation: the model's FLOPs per second over the device's
/// peak, `None` when the peak is unknown.
pub fn mfu(flops_per_step: f64, seconds_per_step: f64, peak_flops: Option<f64>) -> Option<f64> {
    peak_flops.map(|peak| flops_per_step / seconds_per_step / peak)
}

/// A minimum speed-up over Hugging Face for one model (`--require-speedup
/// bert-base=1.3`).
#[derive(Clone, Debug, PartialEq)]
pub struct Requirement {
    pub model: String,
    pub min_speedup: f64,
}

impl FromStr for Requirement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (model, min) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}` is not MODEL=SPEEDUP"))?;
        let min_speedup: f64 = min
            .parse()
            .map_err(|e| format!("`{min}` in `{s}` is not a number: {e}"))?;
        if !(min_speedup.is_finite() && min_speedup > 0.0) {
            return Err(format!("the speed-up in `{s}` must be positive"));
        }
        Ok(Requirement {
            model: model.to_string(),
            min_speedup,
        })
    }
}

/// One model's results.
#[derive(Clone, Debug)]
pub struct Row {
    pub workload: Workload,
    pub ours: Timing,
    pub hf: Option<Reference>,
}

impl Row {
    /// How many times faster our step is than HF's.
    pub fn speedup(&self) -> Option<f64> {
        self.hf
            .as_ref()
            .map(|hf| hf.timing().seconds_per_step / self.ours.seconds_per_step)
    }
}

/// Everything one run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// What ran our side: `cuda`/`cpu` and the device's name.
    pub backend: String,
    /// Which of our kernel sets ran.
    pub kernels: trainer::backend::Kernels,
    /// Whether the reference ran through `torch.compile`.
    pub hf_compiled: bool,
    pub device: String,
    pub peak_flops: Option<f64>,
    pub steps: usize,
    pub warmup: usize,
    pub rows: Vec<Row>,
    pub requirements: Vec<Requirement>,
}

impl Report {
    /// The markdown table: two lines per model, ours and HF's.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| model | batch x seq | implementation | ms/step | sequences/s | tokens/s | MFU | final loss | peak memory (MiB) | ours/HF |\n\
             | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for row in &self.rows {
            let w = &row.workload;
            let ours_label = format!(
                "ours ({}, {} kernels, bf16 products)",
                self.backend, self.kernels
            );
            let speedup = row.speedup().map_or("n/a".into(), |s| format!("{s:.2}x"));
            self.line(&mut out, w, &ours_label, &row.ours, &speedup);
            if let Some(hf) = &row.hf {
                let mode = if self.hf_compiled {
                    "HF + torch.compile"
                } else {
                    "HF eager"
                };
                let label = format!(
                    "{mode}, autocast bf16, {}, torch {}",
                    hf.attn_implementation, hf.torch
                );
                self.line(&mut out, w, &label, &hf.timing(), "");
            }
        }
        out
    }

    fn line(&self, out: &mut String, w: &Workload, label: &str, t: &Timing, speedup: &str) {
        let secs = t.seconds_per_step;
        let mfu = mfu(w.train_flops_per_step(), secs, self.peak_flops)
            .map_or("n/a".into(), |m| format!("{:.1}%", m * 100.0));
        let memory = t.peak_bytes.map_or("n/a".into(), |b| {
            format!("{:.0}", b as f64 / (1u64 << 20) as f64)
        });
        let _ = writeln!(
            out,
            "| {} | {} x {} | {label} | {:.1} | {:.1} | {:.0} | {mfu} | {:.4} | {memory} | {speedup} |",
            w.name,
            w.batch,
            w.seq,
            secs * 1e3,
            w.batch as f64 / secs,
            w.tokens_per_step() as f64 / secs,
            t.loss,
        );
    }

    /// The figures as one JSON object.
    pub fn json(&self) -> serde_json::Value {
        let side = |w: &Workload, t: &Timing| {
            let secs = t.seconds_per_step;
            serde_json::json!({
                "ms_per_step": secs * 1e3,
                "seqs_per_s": w.batch as f64 / secs,
                "tokens_per_s": w.tokens_per_step() as f64 / secs,
                "mfu": mfu(w.train_flops_per_step(), secs, self.peak_flops),
                "loss": t.loss,
                "peak_bytes": t.peak_bytes,
            })
        };
        let models: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|row| {
                let w = &row.workload;
                let hf = row.hf.as_ref().map(|hf| {
                    let mut v = side(w, &hf.timing());
                    v["attn_implementation"] = hf.attn_implementation.clone().into();
                    v["torch"] = hf.torch.clone().into();
                    v["transformers"] = hf.transformers.clone().into();
                    v["device"] = hf.device.clone().into();
                    v
                });
                serde_json::json!({
                    "model": w.name,
                    "batch": w.batch,
                    "seq": w.seq,
                    "train_flops_per_step": w.train_flops_per_step(),
                    "ours": side(w, &row.ours),
                    "hf": hf,
                    "speedup": row.speedup(),
                })
            })
            .collect();
        let problems = self.problems();
        serde_json::json!({
            "backend": self.backend,
            "kernels": self.kernels.name(),
            "hf_compiled": self.hf_compiled,
            "device": self.device,
            "matmul_precision": "bf16",
            "peak_tflops": self.peak_flops.map(|p| p / 1e12),
            "steps": self.steps,
            "warmup": self.warmup,
            "models": models,
            "requirements": self.requirements.iter().map(|r| serde_json::json!({
                "model": r.model,
                "min_speedup": r.min_speedup,
            })).collect::<Vec<_>>(),
            "passed": problems.is_empty(),
            "problems": problems,
        })
    }

    /// Why the run does not pass: a loss that is not finite, a required
    /// speed-up missed or not measurable. Empty when it passes.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for row in &self.rows {
            let name = row.workload.name;
            if !row.ours.loss.is_finite() {
                problems.push(format!("{name}: our final loss is {}", row.ours.loss));
            }
            if let Some(hf) = row.hf.as_ref().filter(|hf| !hf.loss.is_finite()) {
                problems.push(format!("{name}: HF's final loss is {}", hf.loss));
            }
        }
        for req in &self.requirements {
            let row = self.rows.iter().find(|r| r.workload.name == req.model);
            match row.map(|r| (r, r.speedup())) {
                None => problems.push(format!("{}: required but not measured", req.model)),
                Some((_, None)) => problems.push(format!(
                    "{}: no HF reference to compare with (pass --python)",
                    req.model
                )),
                Some((_, Some(s))) if s.is_nan() || s < req.min_speedup => problems.push(format!(
                    "{}: ours is {s:.2}x HF, below the required {}x",
                    req.model, req.min_speedup
                )),
                Some(_) => {}
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str, ms: f64, loss: f64) -> Reference {
        Reference {
            model: name.into(),
            batch: 32,
            seq: 128,
            ms_per_step: ms,
            seqs_per_s: 32.0 / (ms / 1e3),
            loss,
            attn_implementation: "sdpa".into(),
            torch: "2.11.0".into(),
            transformers: "5.17.0".into(),
            device: "NVIDIA H100 80GB HBM3".into(),
            max_memory_allocated: Some(3 << 30),
        }
    }

    fn report(ours_secs: f64, hf: Option<Reference>, min: Option<f64>) -> Report {
        Report {
            backend: "cuda".into(),
            kernels: trainer::backend::Kernels::Reference,
            hf_compiled: false,
            device: "NVIDIA H100 80GB HBM3".into(),
            peak_flops: Some(989.4e12),
            steps: 30,
            warmup: 5,
            rows: vec![Row {
                workload: Workload::named("bert-base").unwrap(),
                ours: Timing {
                    seconds_per_step: ours_secs,
                    loss: 0.69,
                    peak_bytes: Some(2 << 30),
                },
                hf,
            }],
            requirements: min
                .map(|m| Requirement {
                    model: "bert-base".into(),
                    min_speedup: m,
                })
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn mfu_is_model_flops_per_second_over_the_peak() {
        assert_eq!(mfu(4e12, 0.02, Some(400e12)), Some(0.5));
        assert_eq!(mfu(4e12, 0.02, None), None);
    }

    #[test]
    fn requirements_parse_and_bad_ones_are_errors() {
        let r: Requirement = "bert-base=1.3".parse().unwrap();
        assert_eq!((r.model.as_str(), r.min_speedup), ("bert-base", 1.3));
        for bad in [
            "bert-base",
            "bert-base=fast",
            "bert-base=0",
            "bert-base=-1",
            "x=NaN",
        ] {
            assert!(bad.parse::<Requirement>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_speedup_is_hf_time_over_ours_and_gates_the_run() {
        let fast = report(0.050, Some(reference("bert-base", 75.0, 0.7)), Some(1.3));
        assert!((fast.rows[0].speedup().unwrap() - 1.5).abs() < 1e-12);
        assert!(fast.problems().is_empty());
        let slow = report(0.060, Some(reference("bert-base", 75.0, 0.7)), Some(1.3));
        let problems = slow.problems();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("1.25x HF, below the required 1.3x"));
    }

    #[test]
    fn a_requirement_without_a_reference_or_a_non_finite_loss_fails() {
        assert_eq!(report(0.05, None, Some(1.3)).problems().len(), 1);
        assert!(report(0.05, None, None).problems().is_empty());
        let nan = report(0.05, Some(reference("bert-base", 75.0, f64::NAN)), None);
        assert!(nan.problems()[0].contains("HF's final loss is NaN"));
    }

    #[test]
    fn the_table_has_a_line_per_implementation() {
        let table = report(0.050, Some(reference("bert-base", 75.0, 0.7)), None).table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4);
        // 32 x 128 tokens in 50 ms; BERT-base's training FLOPs over 989.4 TFLOP/s.
        let flops = Workload::named("bert-base").unwrap().train_flops_per_step();
        let mfu = format!("{:.1}%", flops / 0.05 / 989.4e12 * 100.0);
        assert!(lines[2].starts_with(
            "| bert-base | 32 x 128 | ours (cuda, reference kernels, bf16 products) | 50.0 | 640.0 | 81920 |"
        ));
        assert!(lines[2].contains(&format!("| {mfu} | 0.6900 | 2048 | 1.50x |")));
        assert!(lines[3].contains("| HF eager, autocast bf16, sdpa, torch 2.11.0 | 75.0 |"));
        assert!(lines[3].ends_with("| 3072 |  |"));
    }

    #[test]
    fn the_json_carries_both_sides_and_the_verdict() {
        let v = report(0.060, Some(reference("bert-base", 75.0, 0.7)), Some(1.3)).json();
        let m = &v["models"][0];
        assert_eq!(m["model"], "bert-base");
        assert_eq!(m["ours"]["seqs_per_s"].as_f64().unwrap().round(), 533.0);
        assert_eq!(m["hf"]["attn_implementation"], "sdpa");
        assert_eq!(m["hf"]["peak_bytes"], 3u64 << 30);
        assert!((m["speedup"].as_f64().unwrap() - 1.25).abs() < 1e-12);
        assert_eq!(v["peak_tflops"], 989.4);
        assert_eq!(v["passed"], false);
        assert_eq!(v["problems"].as_array().unwrap().len(), 1);
        let unknown_peak = Report {
            peak_flops: None,
            ..report(0.06, None, None)
        };
        assert!(unknown_peak.json()["models"][0]["ours"]["mfu"].is_null());
    }
}
