//! The comparison's figures: per model, our step beside Hugging Face eager
//! and, for the models it compiles, HF + `torch.compile`: step time (the
//! median of the timed runs, with their spread), sequences and tokens per
//! second, MFU, final loss, peak memory, our host's busy time and launches
//! per step, the speed-ups over each HF side, and which required speed-ups
//! were missed. Printed as a markdown table and written as JSON.

use std::fmt::Write as _;
use std::str::FromStr;

use crate::reference::Reference;
use crate::workload::Workload;

/// The median, least and greatest of some measurements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (the median of an even count is the mean of
    /// the middle two); `None` when there are none. A NaN sorts last.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[v.len() - 1],
        })
    }
}

/// What our host did during one timed run, per step (our CUDA side only).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostRun {
    /// Time the host spent waiting in stream synchronisation.
    pub sync_wait_seconds: f64,
    pub syncs: f64,
    /// Kernels of ours launched.
    pub kernel_launches: f64,
    /// cuBLAS products enqueued.
    pub blas_calls: f64,
}

/// One timed run: `--steps` steps after the warm-up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Run {
    /// Mean wall time of a step.
    pub seconds_per_step: f64,
    pub host: Option<HostRun>,
}

impl Run {
    /// The step time the host was not waiting for the device: launching,
    /// the model's host code, copies. Near the whole step when the device
    /// waits on the host (launch-bound), small when the host waits on the
    /// device.
    pub fn host_busy_seconds(&self) -> Option<f64> {
        self.host
            .map(|h| (self.seconds_per_step - h.sync_wait_seconds).max(0.0))
    }
}

/// One implementation's timed runs of one model.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// The timed runs, in the order they ran (at least one).
    pub runs: Vec<Run>,
    /// The last step's loss.
    pub loss: f64,
    /// Peak device memory allocated during the timed runs (CUDA only).
    pub peak_bytes: Option<u64>,
}

impl Timing {
    /// The runs' step times.
    pub fn step_spread(&self) -> Spread {
        Spread::of(self.runs.iter().map(|r| r.seconds_per_step)).unwrap_or(Spread {
            median: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
        })
    }

    /// The median run's step time: the figure compared and reported.
    pub fn seconds_per_step(&self) -> f64 {
        self.step_spread().median
    }

    /// The host's busy time per step over the runs, when it was counted.
    pub fn host_busy(&self) -> Option<Spread> {
        let busy: Option<Vec<f64>> = self.runs.iter().map(Run::host_busy_seconds).collect();
        busy.and_then(Spread::of)
    }

    /// The median over the runs of a host count per step.
    fn host_median(&self, f: impl Fn(&HostRun) -> f64) -> Option<f64> {
        let v: Option<Vec<f64>> = self.runs.iter().map(|r| r.host.as_ref().map(&f)).collect();
        v.and_then(Spread::of).map(|s| s.median)
    }
}

/// Model FLOPs utilisation: the model's FLOPs per second over the device's
/// peak, `None` when the peak is unknown.
pub fn mfu(flops_per_step: f64, seconds_per_step: f64, peak_flops: Option<f64>) -> Option<f64> {
    peak_flops.map(|peak| flops_per_step / seconds_per_step / peak)
}

/// Which Hugging Face side a speed-up is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    Eager,
    /// HF + `torch.compile` (only for the models `--compile-models` names).
    Compiled,
}

impl Anchor {
    pub fn name(self) -> &'static str {
        match self {
            Anchor::Eager => "eager",
            Anchor::Compiled => "compiled",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Anchor::Eager => "HF eager",
            Anchor::Compiled => "HF + torch.compile",
        }
    }
}

/// A minimum speed-up over one HF side for one model: `--require-speedup
/// bert-base=compiled:1.5`, `minilm-l6=eager:5`, or `minilm-l6=5` (eager).
#[derive(Clone, Debug, PartialEq)]
pub struct Requirement {
    pub model: String,
    pub anchor: Anchor,
    pub min_speedup: f64,
}

impl FromStr for Requirement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (model, rest) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}` is not MODEL=[eager:|compiled:]SPEEDUP"))?;
        let (anchor, min) = match rest.split_once(':') {
            None => (Anchor::Eager, rest),
            Some(("eager", min)) => (Anchor::Eager, min),
            Some(("compiled", min)) => (Anchor::Compiled, min),
            Some((other, _)) => {
                return Err(format!(
                    "`{other}` in `{s}` is not eager or compiled (MODEL=[eager:|compiled:]SPEEDUP)"
                ));
            }
        };
        if model.is_empty() {
            return Err(format!("`{s}` names no model"));
        }
        let min_speedup: f64 = min
            .parse()
            .map_err(|e| format!("`{min}` in `{s}` is not a number: {e}"))?;
        if !(min_speedup.is_finite() && min_speedup > 0.0) {
            return Err(format!("the speed-up in `{s}` must be positive"));
        }
        Ok(Requirement {
            model: model.to_string(),
            anchor,
            min_speedup,
        })
    }
}

/// One model's results.
#[derive(Clone, Debug)]
pub struct Row {
    pub workload: Workload,
    pub ours: Timing,
    /// HF eager, when the reference ran.
    pub hf: Option<Reference>,
    /// HF + `torch.compile`, when the reference compiled this model.
    pub hf_compiled: Option<Reference>,
}

impl Row {
    fn reference(&self, anchor: Anchor) -> Option<&Reference> {
        match anchor {
            Anchor::Eager => self.hf.as_ref(),
            Anchor::Compiled => self.hf_compiled.as_ref(),
        }
    }

    /// How many times faster our median step is than the HF side's median.
    pub fn speedup(&self, anchor: Anchor) -> Option<f64> {
        self.reference(anchor)
            .map(|hf| hf.timing().seconds_per_step() / self.ours.seconds_per_step())
    }
}

/// Everything one run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// What ran our side: `cuda`/`cpu` and the device's name.
    pub backend: String,
    /// Which of our kernel sets ran.
    pub kernels: trainer::backend::Kernels,
    pub device: String,
    pub peak_flops: Option<f64>,
    pub steps: usize,
    pub warmup: usize,
    /// Timed runs per implementation and model.
    pub repeats: usize,
    pub rows: Vec<Row>,
    pub requirements: Vec<Requirement>,
}

const NA: &str = "n/a";

impl Report {
    /// The markdown table: a line per implementation and model (ours, HF
    /// eager, HF + torch.compile), our speed-ups over each HF side on ours.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| model | batch x seq | implementation | ms/step | min-max | sequences/s | tokens/s | MFU | host busy ms/step | launches/step (kernels + cuBLAS) | final loss | peak memory (MiB) | ours/HF eager | ours/HF compiled |\n\
             | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for row in &self.rows {
            let w = &row.workload;
            let ours_label = format!(
                "ours ({}, {} kernels, bf16 products)",
                self.backend, self.kernels
            );
            let ratio = |anchor| {
                row.speedup(anchor)
                    .map_or(NA.into(), |s| format!("{s:.2}x"))
            };
            let host_busy = row
                .ours
                .host_busy()
                .map_or(NA.into(), |b| format!("{:.2}", b.median * 1e3));
            let launches = match (
                row.ours.host_median(|h| h.kernel_launches),
                row.ours.host_median(|h| h.blas_calls),
            ) {
                (Some(k), Some(b)) => format!("{k:.0} + {b:.0}"),
                _ => NA.into(),
            };
            let ours_extra = [
                host_busy,
                launches,
                ratio(Anchor::Eager),
                ratio(Anchor::Compiled),
            ];
            self.line(&mut out, w, &ours_label, &row.ours, &ours_extra);
            for anchor in [Anchor::Eager, Anchor::Compiled] {
                if let Some(hf) = row.reference(anchor) {
                    let label = format!(
                        "{}, autocast bf16, {}, torch {}",
                        anchor.label(),
                        hf.attn_implementation,
                        hf.torch
                    );
                    let extra = [NA.into(), NA.into(), String::new(), String::new()];
                    self.line(&mut out, w, &label, &hf.timing(), &extra);
                }
            }
        }
        out
    }

    /// One line; `extra` fills host busy, launches and the two ratios.
    fn line(&self, out: &mut String, w: &Workload, label: &str, t: &Timing, extra: &[String; 4]) {
        let spread = t.step_spread();
        let secs = spread.median;
        let mfu = mfu(w.train_flops_per_step(), secs, self.peak_flops)
            .map_or(NA.into(), |m| format!("{:.1}%", m * 100.0));
        let memory = t.peak_bytes.map_or(NA.into(), |b| {
            format!("{:.0}", b as f64 / (1u64 << 20) as f64)
        });
        let [host_busy, launches, eager, compiled] = extra;
        let _ = writeln!(
            out,
            "| {} | {} x {} | {label} | {:.1} | {:.1}-{:.1} | {:.1} | {:.0} | {mfu} | {host_busy} | {launches} | {:.4} | {memory} | {eager} | {compiled} |",
            w.name,
            w.batch,
            w.seq,
            secs * 1e3,
            spread.min * 1e3,
            spread.max * 1e3,
            w.batch as f64 / secs,
            w.tokens_per_step() as f64 / secs,
            t.loss,
        );
    }

    /// The figures as one JSON object.
    pub fn json(&self) -> serde_json::Value {
        let side = |w: &Workload, t: &Timing| {
            let spread = t.step_spread();
            let secs = spread.median;
            let host = t.host_busy().map(|busy| {
                let per_step = |f: fn(&HostRun) -> f64| t.host_median(f);
                serde_json::json!({
                    "host_busy_ms_per_step": busy.median * 1e3,
                    "host_busy_ms_per_step_min": busy.min * 1e3,
                    "host_busy_ms_per_step_max": busy.max * 1e3,
                    "sync_wait_ms_per_step": per_step(|h| h.sync_wait_seconds).map(|s| s * 1e3),
                    "syncs_per_step": per_step(|h| h.syncs),
                    "kernel_launches_per_step": per_step(|h| h.kernel_launches),
                    "blas_calls_per_step": per_step(|h| h.blas_calls),
                })
            });
            serde_json::json!({
                "ms_per_step": secs * 1e3,
                "ms_per_step_min": spread.min * 1e3,
                "ms_per_step_max": spread.max * 1e3,
                "ms_per_step_runs": t.runs.iter().map(|r| r.seconds_per_step * 1e3).collect::<Vec<_>>(),
                "seqs_per_s": w.batch as f64 / secs,
                "tokens_per_s": w.tokens_per_step() as f64 / secs,
                "mfu": mfu(w.train_flops_per_step(), secs, self.peak_flops),
                "loss": t.loss,
                "peak_bytes": t.peak_bytes,
                "host": host,
            })
        };
        let reference = |w: &Workload, hf: &Reference| {
            let mut v = side(w, &hf.timing());
            if let Some(fields) = v.as_object_mut() {
                fields.remove("host");
            }
            v["attn_implementation"] = hf.attn_implementation.clone().into();
            v["torch"] = hf.torch.clone().into();
            v["transformers"] = hf.transformers.clone().into();
            v["device"] = hf.device.clone().into();
            v
        };
        let models: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|row| {
                let w = &row.workload;
                serde_json::json!({
                    "model": w.name,
                    "batch": w.batch,
                    "seq": w.seq,
                    "train_flops_per_step": w.train_flops_per_step(),
                    "ours": side(w, &row.ours),
                    "hf": row.hf.as_ref().map(|hf| reference(w, hf)),
                    "hf_compiled": row.hf_compiled.as_ref().map(|hf| reference(w, hf)),
                    "speedup": row.speedup(Anchor::Eager),
                    "speedup_compiled": row.speedup(Anchor::Compiled),
                })
            })
            .collect();
        let problems = self.problems();
        serde_json::json!({
            "backend": self.backend,
            "kernels": self.kernels.name(),
            "hf_compiled_models": self
                .rows
                .iter()
                .filter(|r| r.hf_compiled.is_some())
                .map(|r| r.workload.name)
                .collect::<Vec<_>>(),
            "device": self.device,
            "matmul_precision": "bf16",
            "peak_tflops": self.peak_flops.map(|p| p / 1e12),
            "steps": self.steps,
            "warmup": self.warmup,
            "repeats": self.repeats,
            "models": models,
            "requirements": self.requirements.iter().map(|r| serde_json::json!({
                "model": r.model,
                "anchor": r.anchor.name(),
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
            for anchor in [Anchor::Eager, Anchor::Compiled] {
                if let Some(hf) = row.reference(anchor).filter(|hf| !hf.loss.is_finite()) {
                    problems.push(format!(
                        "{name}: {}'s final loss is {}",
                        anchor.label(),
                        hf.loss
                    ));
                }
            }
        }
        for req in &self.requirements {
            let row = self.rows.iter().find(|r| r.workload.name == req.model);
            let how = match req.anchor {
                Anchor::Eager => "pass --python",
                Anchor::Compiled => "pass --python and --compile-models",
            };
            match row.map(|r| r.speedup(req.anchor)) {
                None => problems.push(format!("{}: required but not measured", req.model)),
                Some(None) => problems.push(format!(
                    "{}: no {} reference to compare with ({how})",
                    req.model,
                    req.anchor.label()
                )),
                Some(Some(s)) if s.is_nan() || s < req.min_speedup => problems.push(format!(
                    "{}: ours is {s:.2}x {}, below the required {}x",
                    req.model,
                    req.anchor.label(),
                    req.min_speedup
                )),
                Some(Some(_)) => {}
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
            ms_per_step_runs: None,
            seqs_per_s: 32.0 / (ms / 1e3),
            loss,
            compiled: false,
            attn_implementation: "sdpa".into(),
            torch: "2.11.0".into(),
            transformers: "5.17.0".into(),
            device: "NVIDIA H100 80GB HBM3".into(),
            max_memory_allocated: Some(3 << 30),
        }
    }

    fn compiled(ms_runs: &[f64]) -> Reference {
        let median = Spread::of(ms_runs.iter().copied()).unwrap().median;
        Reference {
            ms_per_step_runs: Some(ms_runs.to_vec()),
            compiled: true,
            ..reference("bert-base", median, 0.7)
        }
    }

    fn ours(secs: &[f64]) -> Timing {
        Timing {
            runs: secs
                .iter()
                .map(|&s| Run {
                    seconds_per_step: s,
                    host: None,
                })
                .collect(),
            loss: 0.69,
            peak_bytes: Some(2 << 30),
        }
    }

    fn requirement(s: &str) -> Requirement {
        s.parse().unwrap()
    }

    fn report(ours_secs: f64, hf: Option<Reference>, min: Option<f64>) -> Report {
        Report {
            backend: "cuda".into(),
            kernels: trainer::backend::Kernels::Reference,
            device: "NVIDIA H100 80GB HBM3".into(),
            peak_flops: Some(989.4e12),
            steps: 30,
            warmup: 5,
            repeats: 1,
            rows: vec![Row {
                workload: Workload::named("bert-base").unwrap(),
                ours: ours(&[ours_secs]),
                hf,
                hf_compiled: None,
            }],
            requirements: min
                .map(|m| requirement(&format!("bert-base={m}")))
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
    fn the_median_is_the_middle_run_and_the_spread_its_ends() {
        let s = Spread::of([0.030, 0.010, 0.020]).unwrap();
        assert_eq!((s.median, s.min, s.max), (0.020, 0.010, 0.030));
        let even = Spread::of([4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((even.median, even.min, even.max), (2.5, 1.0, 4.0));
        assert_eq!(Spread::of([7.0]).unwrap().median, 7.0);
        assert_eq!(Spread::of([]), None);
        // One slow outlier moves the mean, not the median.
        let t = ours(&[0.017, 0.040, 0.018]);
        assert_eq!(t.seconds_per_step(), 0.018);
        assert_eq!(t.step_spread().max, 0.040);
    }

    #[test]
    fn host_busy_is_the_step_less_the_wait_in_synchronisation() {
        let host = |wait: f64| HostRun {
            sync_wait_seconds: wait,
            syncs: 2.0,
            kernel_launches: 737.0,
            blas_calls: 222.0,
        };
        let mut t = ours(&[0.020, 0.018, 0.019]);
        for (run, wait) in t.runs.iter_mut().zip([0.004, 0.003, 0.005]) {
            run.host = Some(host(wait));
        }
        let busy = t.host_busy().unwrap();
        assert!((busy.median - 0.015).abs() < 1e-12, "{busy:?}");
        assert!((busy.min - 0.014).abs() < 1e-12 && (busy.max - 0.016).abs() < 1e-12);
        // Without counts on every run there is no figure.
        t.runs[1].host = None;
        assert_eq!(t.host_busy(), None);
    }

    #[test]
    fn requirements_parse_with_their_anchor_and_bad_ones_are_errors() {
        for (s, anchor, min) in [
            ("bert-base=1.3", Anchor::Eager, 1.3),
            ("minilm-l6=eager:5", Anchor::Eager, 5.0),
            ("bert-base=compiled:1.5", Anchor::Compiled, 1.5),
        ] {
            let r = requirement(s);
            assert_eq!((r.anchor, r.min_speedup), (anchor, min), "{s}");
        }
        assert_eq!(requirement("minilm-l6=eager:5").model, "minilm-l6");
        for bad in [
            "bert-base",
            "bert-base=fast",
            "bert-base=0",
            "bert-base=-1",
            "x=NaN",
            "bert-base=compiled",
            "bert-base=compiled:",
            "bert-base=inductor:1.5",
            "bert-base=compiled:0",
            "=1.5",
        ] {
            assert!(bad.parse::<Requirement>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_speedup_is_hf_time_over_ours_and_gates_the_run() {
        let fast = report(0.050, Some(reference("bert-base", 75.0, 0.7)), Some(1.3));
        assert!((fast.rows[0].speedup(Anchor::Eager).unwrap() - 1.5).abs() < 1e-12);
        assert_eq!(fast.rows[0].speedup(Anchor::Compiled), None);
        assert!(fast.problems().is_empty());
        let slow = report(0.060, Some(reference("bert-base", 75.0, 0.7)), Some(1.3));
        let problems = slow.problems();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("1.25x HF eager, below the required 1.3x"));
    }

    #[test]
    fn a_compiled_requirement_is_judged_against_the_compiled_median() {
        let mut r = report(0.017, Some(reference("bert-base", 36.0, 0.7)), None);
        r.rows[0].ours = ours(&[0.018, 0.017, 0.030]);
        r.rows[0].hf_compiled = Some(compiled(&[26.0, 25.0, 40.0]));
        r.requirements = vec![requirement("bert-base=compiled:1.5")];
        // 26 ms over 18 ms: 1.44x, though the fastest runs would give 1.47x.
        let s = r.rows[0].speedup(Anchor::Compiled).unwrap();
        assert!((s - 26.0 / 18.0).abs() < 1e-12, "{s}");
        let problems = r.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("1.44x HF + torch.compile, below the required 1.5x"));
        r.requirements = vec![
            requirement("bert-base=compiled:1.4"),
            requirement("bert-base=2"),
        ];
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        // Required against a side that did not run.
        r.rows[0].hf_compiled = None;
        assert!(r.problems()[0].contains("no HF + torch.compile reference"));
    }

    #[test]
    fn a_requirement_without_a_reference_or_a_non_finite_loss_fails() {
        assert_eq!(report(0.05, None, Some(1.3)).problems().len(), 1);
        assert!(report(0.05, None, None).problems().is_empty());
        let nan = report(0.05, Some(reference("bert-base", 75.0, f64::NAN)), None);
        assert!(nan.problems()[0].contains("HF eager's final loss is NaN"));
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
            "| bert-base | 32 x 128 | ours (cuda, reference kernels, bf16 products) | 50.0 | 50.0-50.0 | 640.0 | 81920 |"
        ));
        assert!(
            lines[2].ends_with(&format!(
                "| {mfu} | n/a | n/a | 0.6900 | 2048 | 1.50x | n/a |"
            )),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains("| HF eager, autocast bf16, sdpa, torch 2.11.0 | 75.0 |"));
        assert!(lines[3].ends_with("| 3072 |  |  |"), "{}", lines[3]);
        for line in &lines {
            assert_eq!(line.matches('|').count(), 15, "{line}");
        }
    }

    #[test]
    fn the_table_puts_compiled_beside_eager_with_the_host_figures() {
        let mut r = report(0.017, Some(reference("bert-base", 36.0, 0.7)), None);
        r.rows[0].ours = ours(&[0.018, 0.017, 0.020]);
        for run in &mut r.rows[0].ours.runs {
            run.host = Some(HostRun {
                sync_wait_seconds: 0.004,
                syncs: 3.0,
                kernel_launches: 737.0,
                blas_calls: 222.0,
            });
        }
        r.rows[0].hf_compiled = Some(compiled(&[26.0, 25.0, 27.0]));
        let table = r.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[2].contains("| 18.0 | 17.0-20.0 |"), "{}", lines[2]);
        assert!(
            lines[2].ends_with("| 14.00 | 737 + 222 | 0.6900 | 2048 | 2.00x | 1.44x |"),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains("| HF eager, "));
        assert!(lines[4].contains(
            "| HF + torch.compile, autocast bf16, sdpa, torch 2.11.0 | 26.0 | 25.0-27.0 |"
        ));
    }

    #[test]
    fn the_json_carries_every_side_and_the_verdict() {
        let v = report(0.060, Some(reference("bert-base", 75.0, 0.7)), Some(1.3)).json();
        let m = &v["models"][0];
        assert_eq!(m["model"], "bert-base");
        assert_eq!(m["ours"]["seqs_per_s"].as_f64().unwrap().round(), 533.0);
        assert!(m["ours"]["host"].is_null());
        assert_eq!(m["hf"]["attn_implementation"], "sdpa");
        assert_eq!(m["hf"]["peak_bytes"], 3u64 << 30);
        assert!(m["hf"].get("host").is_none());
        assert!(m["hf_compiled"].is_null());
        assert!((m["speedup"].as_f64().unwrap() - 1.25).abs() < 1e-12);
        assert!(m["speedup_compiled"].is_null());
        assert_eq!(v["peak_tflops"], 989.4);
        assert_eq!(v["repeats"], 1);
        assert_eq!(v["requirements"][0]["anchor"], "eager");
        assert_eq!(v["passed"], false);
        assert_eq!(v["problems"].as_array().unwrap().len(), 1);
        let unknown_peak = Report {
            peak_flops: None,
            ..report(0.06, None, None)
        };
        assert!(unknown_peak.json()["models"][0]["ours"]["mfu"].is_null());
    }

    #[test]
    fn the_json_has_each_sides_median_spread_and_runs() {
        let mut r = report(0.017, Some(reference("bert-base", 36.0, 0.7)), None);
        r.repeats = 3;
        r.rows[0].ours = ours(&[0.018, 0.017, 0.020]);
        for (run, wait) in r.rows[0].ours.runs.iter_mut().zip([0.004, 0.002, 0.005]) {
            run.host = Some(HostRun {
                sync_wait_seconds: wait,
                syncs: 3.0,
                kernel_launches: 737.0,
                blas_calls: 222.0,
            });
        }
        r.rows[0].hf_compiled = Some(compiled(&[26.0, 25.0, 27.0]));
        r.requirements = vec![requirement("bert-base=compiled:1.5")];
        let v = r.json();
        let m = &v["models"][0];
        let close = |v: &serde_json::Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-9;
        assert!(close(&m["ours"]["ms_per_step"], 18.0));
        assert!(close(&m["ours"]["ms_per_step_min"], 17.0));
        assert!(close(&m["ours"]["ms_per_step_max"], 20.0));
        assert_eq!(m["ours"]["ms_per_step_runs"].as_array().unwrap().len(), 3);
        let host = &m["ours"]["host"];
        // Busy 14, 15 and 15 ms.
        assert!(close(&host["host_busy_ms_per_step"], 15.0));
        assert!(close(&host["host_busy_ms_per_step_min"], 14.0));
        assert!(close(&host["sync_wait_ms_per_step"], 4.0));
        assert_eq!(host["kernel_launches_per_step"], 737.0);
        assert_eq!(host["blas_calls_per_step"], 222.0);
        assert!(close(&m["hf_compiled"]["ms_per_step"], 26.0));
        assert!(close(&m["hf_compiled"]["ms_per_step_min"], 25.0));
        assert!(close(&m["speedup_compiled"], 26.0 / 18.0));
        assert!(close(&m["speedup"], 2.0));
        assert_eq!(v["hf_compiled_models"], serde_json::json!(["bert-base"]));
        assert_eq!(v["requirements"][0]["anchor"], "compiled");
        assert_eq!(v["passed"], false);
    }
}
