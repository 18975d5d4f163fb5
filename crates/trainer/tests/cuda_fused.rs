//! The fused CUDA step ([`Kernels::Fused`]) against the CPU backend's fused
//! step, which `fused_step.rs` holds to the reference: every fused operation
//! forward and backward on fresh random inputs with the GPU's outputs
//! poisoned (NaN) first, odd shapes (a length that is no multiple of the
//! attention tile, padded rows, heads of 32 and 64), dropout by the shared
//! Philox stream; whole BERT and DeBERTa steps in fp32 and with bf16
//! activations; AdamW over every tensor with the clip; bit-identical losses
//! over 20 steps.
//!
//! Needs feature `cuda` and a GPU: every test is `#[ignore]`d, and the GPU
//! bundle runs them with `--include-ignored` (steps `ops` and
//! `determinism`).

#![cfg(feature = "cuda")]

mod common;

use std::path::Path;

use common::{Rand, assert_grads_close, random_batch, rel_err, time_seed};
use gpu_mem::Config;
use trainer::backend::cpu::{CpuBackend, CpuBuf};
use trainer::backend::cuda::{CudaBackend, CudaBuf};
use trainer::backend::row_slots::NO_SLOT;
use trainer::backend::{
    AdamWStep, AttentionInputs, AttentionShape, Backend, Kernels, MatmulPrecision, SparseRows,
};
use trainer::batch::Batch;
use trainer::config::BertConfig;
use trainer::memory::BufKind;
use trainer::model::deberta::DebertaConfig;
use trainer::model::{Classifier, HeadConfig, Mode, ModelConfig};
use trainer::rng::RngKey;
use trainer::train::{OptimizerConfig, StepContext, train_step};

/// Relative tolerance of a fused fp32 operation: the GPU sums in another
/// order (tiles of keys, warp reductions) than the CPU.
const TOL: f64 = 1e-5;
/// Relative tolerance of a whole fp32 step (a dozen operations deep).
const TOL_STEP: f64 = 1e-4;
/// Relative tolerance with 16-bit activations: both sides round to the same
/// format, but a value near a rounding boundary can land on either side
/// after a differently ordered fp32 sum.
const TOL_16: f64 = 2e-2;

/// The same data on both backends, both running the fused kernels.
struct Pair {
    cpu: CpuBackend<f32>,
    gpu: CudaBackend,
    r: Rand,
    seed: u64,
}

type Both = (CpuBuf<f32>, CudaBuf);

impl Pair {
    fn at(precision: MatmulPrecision) -> Pair {
        let seed = time_seed();
        let gpu = CudaBackend::new(0, Config::default())
            .expect("CUDA backend on device 0")
            .with_matmul_precision(precision)
            .expect("the device runs this precision")
            .with_kernels(Kernels::Fused)
            // An op that leaves part of its overwritten output unwritten
            // shows up as NaN against the CPU.
            .with_poisoned_scratch(true);
        Pair {
            cpu: CpuBackend::<f32>::new().for_step(precision, Kernels::Fused),
            gpu,
            r: Rand::new(seed, 11),
            seed,
        }
    }

    fn from(&self, kind: BufKind, v: &[f64]) -> Both {
        let mut c = self.cpu.alloc("c", kind, v.len());
        let mut g = self.gpu.alloc("g", kind, v.len());
        self.cpu.upload(&mut c, v);
        self.gpu.upload(&mut g, v);
        (c, g)
    }

    fn random(&mut self, kind: BufKind, n: usize) -> Both {
        let v = self.r.normals(n);
        self.from(kind, &v)
    }

    /// An output: the GPU side poisoned with NaN, so an element the kernel
    /// does not write fails the comparison.
    fn out(&self, kind: BufKind, n: usize) -> Both {
        let c = self.cpu.alloc("c", kind, n);
        let mut g = self.gpu.alloc("g", kind, n);
        self.gpu.fill(&mut g, f64::NAN);
        (c, g)
    }

    fn close(&self, what: &str, b: &Both, tol: f64) {
        let cpu = self.cpu.download(&b.0);
        let gpu = self.gpu.download(&b.1);
        self.gpu.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        let bad = gpu.iter().position(|v| !v.is_finite());
        assert!(
            bad.is_none(),
            "{what}: non-finite GPU output at {bad:?} (unwritten?); seed {}",
            self.seed
        );
        let err = rel_err(&gpu, &cpu);
        assert!(
            err <= tol,
            "{what}: relative error {err:.3e} > {tol:e}; seed {} (MEMTUNE_TEST_SEED)",
            self.seed
        );
    }
}

/// Attention forward and backward at shapes that end mid-tile, with padded
/// sequences (one of a single token), heads of 32 and 64, dropout off and
/// on; fp32 (the SIMT kernels) and bf16 and fp16 activations (the
/// tensor-core kernels, one instruction each, whose dropout shares each
/// Philox block between lanes when s % 4 == 0: lengths 128 and 200; 77 and
/// 5 take the per-element path).
#[test]
#[ignore = "needs a CUDA device"]
fn fused_attention_matches_cpu_forward_and_backward() {
    let cases = [
        (2, 77, 3, 64, vec![77, 40]),
        (3, 128, 2, 32, vec![128, 1, 65]),
        (1, 5, 4, 32, vec![5]),
        (2, 200, 1, 64, vec![131, 200]),
    ];
    let precisions = [
        (MatmulPrecision::Fp32, TOL),
        (MatmulPrecision::Bf16, TOL_16),
        (MatmulPrecision::Fp16, TOL_16),
    ];
    for ((b, s, heads, head_dim, lens), (precision, tol)) in cases
        .iter()
        .flat_map(|c| precisions.iter().map(move |p| (c.clone(), *p)))
    {
        let mut p = Pair::at(precision);
        for dropout in [0.0, 0.1] {
            let shape = AttentionShape {
                b,
                s,
                heads,
                head_dim,
                scale: 1.0 / (head_dim as f64).sqrt(),
                dropout,
            };
            let key = (dropout > 0.0).then_some(RngKey {
                seed: p.seed,
                step: 3,
                stream: 5,
            });
            let what =
                format!("attention {precision:?} b{b} s{s} h{heads} d{head_dim} dropout {dropout}");
            let mask: Vec<u32> = (0..b * s).map(|t| (t % s < lens[t / s]) as u32).collect();
            let mut cm = p.cpu.alloc_ids("m", mask.len());
            let mut gm = p.gpu.alloc_ids("m", mask.len());
            p.cpu.upload_ids(&mut cm, &mask);
            p.gpu.upload_ids(&mut gm, &mask);
            let n = shape.len();
            let q = p.random(BufKind::Activation, n);
            let k = p.random(BufKind::Activation, n);
            let v = p.random(BufKind::Activation, n);
            let mut out = p.out(BufKind::Activation, n);
            let mut lse = p.out(BufKind::Statistic, shape.rows());
            let cx = AttentionInputs {
                q: &q.0,
                k: &k.0,
                v: &v.0,
                mask: &cm,
                key,
            };
            let gx = AttentionInputs {
                q: &q.1,
                k: &k.1,
                v: &v.1,
                mask: &gm,
                key,
            };
            p.cpu.attention_forward(&shape, &cx, &mut out.0, &mut lse.0);
            p.gpu.attention_forward(&shape, &gx, &mut out.1, &mut lse.1);
            p.close(&format!("{what}: out"), &out, tol);
            p.close(&format!("{what}: lse"), &lse, tol);
            let dout = p.random(BufKind::Workspace, n);
            let mut delta = p.out(BufKind::Statistic, shape.rows());
            let mut dq = p.out(BufKind::Workspace, n);
            let mut dk = p.out(BufKind::Workspace, n);
            let mut dv = p.out(BufKind::Workspace, n);
            p.cpu.attention_backward(
                &shape,
                &cx,
                &out.0,
                &dout.0,
                &lse.0,
                &mut delta.0,
                &mut dq.0,
                &mut dk.0,
                &mut dv.0,
            );
            p.gpu.attention_backward(
                &shape,
                &gx,
                &out.1,
                &dout.1,
                &lse.1,
                &mut delta.1,
                &mut dq.1,
                &mut dk.1,
                &mut dv.1,
            );
            p.close(&format!("{what}: delta"), &delta, tol);
            p.close(&format!("{what}: dq"), &dq, tol);
            p.close(&format!("{what}: dk"), &dk, tol);
            p.close(&format!("{what}: dv"), &dv, tol);
        }
    }
}

/// Bias+GELU, and the residual block's bias+dropout+residual+LayerNorm
/// forward and backward: rows a warp holds (768, 1024, and 384, which
/// leaves half the lanes a group short) and rows of widths that are no
/// multiple of 8, which take the block-per-row kernels.
#[test]
#[ignore = "needs a CUDA device"]
fn fused_bias_gelu_and_residual_layernorm_match_cpu() {
    let mut p = Pair::at(MatmulPrecision::Fp32);
    for (rows, n) in [(37, 768), (5, 100), (64, 1024), (7, 384), (3, 30)] {
        let mut pre = p.random(BufKind::Activation, rows * n);
        let bias = p.random(BufKind::Weight, n);
        let mut out = p.out(BufKind::Activation, rows * n);
        p.cpu.bias_gelu_forward(&mut pre.0, &bias.0, &mut out.0);
        p.gpu.bias_gelu_forward(&mut pre.1, &bias.1, &mut out.1);
        p.close(&format!("bias_gelu {rows}x{n}: pre"), &pre, TOL);
        p.close(&format!("bias_gelu {rows}x{n}: out"), &out, TOL);

        for dropout in [0.0, 0.1] {
            let key = (dropout > 0.0).then_some(RngKey {
                seed: p.seed,
                step: 2,
                stream: 9,
            });
            let what = format!("residual_layernorm {rows}x{n} dropout {dropout}");
            let mut sum = p.random(BufKind::Activation, rows * n);
            let residual = p.random(BufKind::Activation, rows * n);
            let gamma = p.random(BufKind::Weight, n);
            let beta = p.random(BufKind::Weight, n);
            let mut out = p.out(BufKind::Activation, rows * n);
            let mut mean = p.out(BufKind::Statistic, rows);
            let mut rstd = p.out(BufKind::Statistic, rows);
            p.cpu.residual_layernorm_forward(
                &mut sum.0,
                &bias.0,
                &residual.0,
                dropout,
                key,
                &gamma.0,
                &beta.0,
                1e-12,
                &mut out.0,
                &mut mean.0,
                &mut rstd.0,
            );
            p.gpu.residual_layernorm_forward(
                &mut sum.1,
                &bias.1,
                &residual.1,
                dropout,
                key,
                &gamma.1,
                &beta.1,
                1e-12,
                &mut out.1,
                &mut mean.1,
                &mut rstd.1,
            );
            p.close(&format!("{what}: sum"), &sum, TOL);
            p.close(&format!("{what}: out"), &out, TOL);
            p.close(&format!("{what}: mean"), &mean, TOL);
            p.close(&format!("{what}: rstd"), &rstd, TOL);

            let dout = p.random(BufKind::Workspace, rows * n);
            let mut d_sum = p.out(BufKind::Workspace, rows * n);
            let mut d_branch = p.out(BufKind::Workspace, rows * n);
            // Accumulated into: start from the same non-zero values.
            let mut dgamma = p.random(BufKind::Grad, n);
            let mut dbeta = p.random(BufKind::Grad, n);
            p.cpu.residual_layernorm_backward(
                &dout.0,
                &sum.0,
                &gamma.0,
                &mean.0,
                &rstd.0,
                dropout,
                key,
                &mut d_sum.0,
                (dropout > 0.0).then_some(&mut d_branch.0),
                &mut dgamma.0,
                &mut dbeta.0,
            );
            p.gpu.residual_layernorm_backward(
                &dout.1,
                &sum.1,
                &gamma.1,
                &mean.1,
                &rstd.1,
                dropout,
                key,
                &mut d_sum.1,
                (dropout > 0.0).then_some(&mut d_branch.1),
                &mut dgamma.1,
                &mut dbeta.1,
            );
            p.close(&format!("{what}: d_sum"), &d_sum, TOL);
            if dropout > 0.0 {
                p.close(&format!("{what}: d_branch"), &d_branch, TOL);
            }
            p.close(&format!("{what}: dgamma"), &dgamma, TOL);
            p.close(&format!("{what}: dbeta"), &dbeta, TOL);
        }
    }
}

/// fp32 weights of odd sizes cast to 16 bits together (four a launch, then
/// the fifth) land as the CPU's casts and, to the bit, as one cast each.
#[test]
#[ignore = "needs a CUDA device"]
fn weights_cast_together_match_cpu_and_one_at_a_time() {
    for precision in [MatmulPrecision::Bf16, MatmulPrecision::Fp16] {
        let mut p = Pair::at(precision);
        let sizes = [1, 7, 768, 1000, 4099];
        let weights: Vec<Both> = sizes
            .iter()
            .map(|&n| p.random(BufKind::Weight, n))
            .collect();
        let mut cpu: Vec<_> = sizes
            .iter()
            .map(|&n| p.out(BufKind::Workspace, n))
            .collect();
        let (mut c, mut g): (Vec<_>, Vec<_>) = cpu.drain(..).unzip();
        let cpu_src: Vec<_> = weights.iter().map(|w| &w.0).collect();
        let gpu_src: Vec<_> = weights.iter().map(|w| &w.1).collect();
        p.cpu.cast_all(&cpu_src, &mut c);
        p.gpu.cast_all(&gpu_src, &mut g);
        for (i, both) in c.into_iter().zip(g).enumerate() {
            let mut one = p.gpu.alloc("one", BufKind::Workspace, sizes[i]);
            p.gpu.cast(gpu_src[i], &mut one);
            assert_eq!(
                p.gpu.download(&one),
                p.gpu.download(&both.1),
                "{precision:?} weight {i}: together differs from alone"
            );
            p.close(
                &format!("{precision:?} weight {i} of {}", sizes[i]),
                &both,
                TOL,
            );
        }
    }
}

/// One AdamW call over tensors of odd sizes, with and without weight
/// decay, a gradient scale, and the clip active (1.0) or not (1e6, none).
#[test]
#[ignore = "needs a CUDA device"]
fn fused_adamw_over_all_tensors_matches_cpu() {
    let mut p = Pair::at(MatmulPrecision::Fp32);
    let sizes = [1, 3, 768, 1000, 4099, 65_537];
    let decay: Vec<bool> = (0..sizes.len()).map(|i| i % 2 == 0).collect();
    let step = AdamWStep {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
        t: 7,
    };
    for clip in [None, Some(1.0), Some(1e6)] {
        let host = |r: &mut Rand, square: bool| -> Vec<Vec<f64>> {
            sizes
                .iter()
                .map(|&n| {
                    r.normals(n)
                        .into_iter()
                        .map(|x| if square { x * x } else { x })
                        .collect()
                })
                .collect()
        };
        let (params, grads, m, v) = (
            host(&mut p.r, false),
            host(&mut p.r, false),
            host(&mut p.r, false),
            host(&mut p.r, true),
        );
        // Tensor 3 as a table of 25 rows of 40 with a row-sparse gradient:
        // 10 of its rows have a slot, in another order than theirs.
        let width = 40;
        let slots: Vec<u32> = (0..25u32)
            .map(|r| {
                if r % 5 < 2 {
                    9 - (r / 5 * 2 + r % 5)
                } else {
                    NO_SLOT
                }
            })
            .collect();
        let sparse_grads = {
            let mut g = grads.clone();
            g[3] = p.r.normals(10 * width);
            g
        };
        fn upload<B: Backend>(be: &B, kind: BufKind, values: &[Vec<f64>]) -> Vec<B::Buf> {
            values
                .iter()
                .map(|x| {
                    let mut b = be.alloc("t", kind, x.len());
                    be.upload(&mut b, x);
                    b
                })
                .collect()
        }
        #[allow(clippy::too_many_arguments)]
        fn run<B: Backend>(
            be: &B,
            tensors: [&[Vec<f64>]; 4],
            decay: &[bool],
            step: &AdamWStep,
            clip: Option<f64>,
            sparse: Option<(usize, &[u32], usize)>,
        ) -> [Vec<Vec<f64>>; 3] {
            let mut params = upload(be, BufKind::Weight, tensors[0]);
            let grads = upload(be, BufKind::Grad, tensors[1]);
            let mut m = upload(be, BufKind::OptimizerState, tensors[2]);
            let mut v = upload(be, BufKind::OptimizerState, tensors[3]);
            let slots = sparse.map(|(_, slots, _)| {
                let mut ids = be.alloc_ids("slots", slots.len());
                be.upload_ids(&mut ids, slots);
                ids
            });
            let sparse = sparse
                .zip(slots.as_ref())
                .map(|((tensor, _, width), slots)| SparseRows {
                    tensor,
                    slots,
                    width,
                });
            be.adamw_all(
                &mut params,
                &grads,
                &mut m,
                &mut v,
                decay,
                step,
                0.5,
                clip,
                sparse,
            );
            let down = |bufs: &[B::Buf]| bufs.iter().map(|b| be.download(b)).collect();
            [down(&params), down(&m), down(&v)]
        }
        for sparse in [None, Some((3, &slots[..], width))] {
            let g = if sparse.is_some() {
                &sparse_grads
            } else {
                &grads
            };
            let tensors = [&params[..], &g[..], &m[..], &v[..]];
            let cpu = run(&p.cpu, tensors, &decay, &step, clip, sparse);
            let gpu = run(&p.gpu, tensors, &decay, &step, clip, sparse);
            p.gpu.check().unwrap();
            for (name, (c, g)) in ["param", "m", "v"].iter().zip(cpu.iter().zip(&gpu)) {
                for (i, (c, g)) in c.iter().zip(g).enumerate() {
                    let err = rel_err(g, c);
                    assert!(
                        g.iter().all(|x| x.is_finite()) && err <= TOL,
                        "adamw_all clip {clip:?} row-sparse {} tensor {i} ({}): {name} differs \
                         by {err:.3e}; seed {}",
                        sparse.is_some(),
                        sizes[i],
                        p.seed
                    );
                }
            }
        }
    }
}

fn bert() -> ModelConfig {
    let mut c = BertConfig::tiny(64, 2, 2, 128, 40);
    // Room for the 70-token batch: longer than one attention tile.
    c.max_position_embeddings = 128;
    c.hidden_dropout_prob = 0.1;
    c.attention_probs_dropout_prob = 0.1;
    c.into()
}

/// Relative attention with c2p and p2c, dropout on every site.
fn deberta() -> ModelConfig {
    let json = r#"{"model_type": "deberta-v2", "vocab_size": 40, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 96,
        "max_position_embeddings": 128, "type_vocab_size": 2, "relative_attention": true,
        "position_buckets": 16, "max_relative_positions": 64, "share_att_key": true,
        "pos_att_type": ["p2c", "c2p"], "norm_rel_ebd": "layer_norm",
        "position_biased_input": false, "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "pooler_dropout": 0.1, "cls_dropout": 0.1}"#;
    DebertaConfig::from_json(json, Path::new("tiny.json"))
        .unwrap()
        .into()
}

fn head() -> HeadConfig {
    HeadConfig {
        num_labels: 3,
        hidden: vec![],
    }
}

/// Padded sequences of 70 tokens (one of a single token), 3 classes.
fn batch(seed: u64) -> Batch {
    let mut r = Rand::new(seed, 3);
    random_batch(&mut r, &[70, 33, 1, 52], 70, 40, 3)
}

/// A model of `config` with weights larger than the initialisation's, the
/// same on every backend (so attention is far from uniform).
fn model<'m, B: Backend + 'm>(
    be: &'m B,
    config: &ModelConfig,
    seed: u64,
) -> Box<dyn Classifier<B> + 'm> {
    let mut model = config.build_random(be, &head(), seed).unwrap();
    let mut r = Rand::new(seed, 7);
    let params = model.params_mut();
    for i in 0..params.info.len() {
        let values: Vec<f64> = r
            .normals(params.info[i].numel())
            .iter()
            .map(|v| 0.2 * v)
            .collect();
        be.upload(&mut params.values[i], &values);
    }
    model
}

/// The loss and every gradient of one forward and backward.
fn loss_and_grads<B: Backend>(be: &B, config: &ModelConfig, seed: u64) -> (f64, Vec<Vec<f64>>) {
    let mut m = model(be, config, 11);
    let _ctx = StepContext::new(be, &mut *m, OptimizerConfig::Sgd, None, None, false, 0);
    let mode = Mode::Train { seed, step: 2 };
    let loss = m
        .train_batch(be, &batch(seed), None, 2.5, mode, false)
        .unwrap();
    let grads = m.params().grads.iter().map(|g| be.download(g)).collect();
    (loss, grads)
}

fn compare_step(config: &ModelConfig, family: &str, precision: MatmulPrecision, tol: f64) {
    let p = Pair::at(precision);
    let (lc, gc) = loss_and_grads(&p.cpu, config, p.seed);
    let (lg, gg) = loss_and_grads(&p.gpu, config, p.seed);
    p.gpu.check().unwrap();
    let what = format!("{family} fused {precision:?}");
    println!("{what}: loss cpu {lc:.6} gpu {lg:.6}");
    assert!(
        lc.is_finite() && (lg - lc).abs() <= tol * lc.abs(),
        "{what}: loss {lg} vs {lc}; seed {}",
        p.seed
    );
    assert_grads_close(&what, &gc, &gg, 5.0 * tol, p.seed);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_fused_bert_step_matches_cpu_in_fp32_and_bf16() {
    compare_step(&bert(), "bert", MatmulPrecision::Fp32, TOL_STEP);
    compare_step(&bert(), "bert", MatmulPrecision::Bf16, TOL_16);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_fused_deberta_step_matches_cpu_in_fp32_and_bf16() {
    compare_step(&deberta(), "deberta", MatmulPrecision::Fp32, TOL_STEP);
    compare_step(&deberta(), "deberta", MatmulPrecision::Bf16, TOL_16);
}

/// `steps` training steps of two micro-batches (AdamW over every tensor in
/// one call, clip 1.0, the word-embedding gradient row-sparse over both).
fn train<B: Backend>(be: &B, config: &ModelConfig, seed: u64, steps: usize) -> Vec<f64> {
    let mut m = model(be, config, seed);
    let mut ctx = StepContext::new(
        be,
        &mut *m,
        OptimizerConfig::default(),
        None,
        Some(1.0),
        false,
        seed,
    );
    let b = [batch(seed), batch(seed + 1)];
    (0..steps)
        .map(|_| {
            let step = train_step(be, &mut *m, &mut ctx, &[&b[0], &b[1]], 1e-3);
            step.unwrap().loss
        })
        .collect()
}

#[test]
#[ignore = "needs a CUDA device"]
fn fused_optimizer_steps_match_cpu() {
    let p = Pair::at(MatmulPrecision::Fp32);
    let lc = train(&p.cpu, &bert(), p.seed, 4);
    let lg = train(&p.gpu, &bert(), p.seed, 4);
    p.gpu.check().unwrap();
    println!("fused AdamW losses: cpu {lc:?}, gpu {lg:?}");
    for (a, b) in lc.iter().zip(&lg) {
        assert!(
            (a - b).abs() <= TOL_STEP * a.abs(),
            "losses {lc:?} vs {lg:?}; seed {}",
            p.seed
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_same_seed_gives_bit_identical_fused_losses_over_20_steps() {
    for precision in [MatmulPrecision::Fp32, MatmulPrecision::Bf16] {
        let p = Pair::at(precision);
        for config in [bert(), deberta()] {
            let first = train(&p.gpu, &config, p.seed, 20);
            let second = train(&p.gpu, &config, p.seed, 20);
            p.gpu.check().unwrap();
            assert!(first.iter().all(|l| l.is_finite()), "{first:?}");
            assert_eq!(first, second, "{precision:?}; seed {}", p.seed);
        }
    }
}
