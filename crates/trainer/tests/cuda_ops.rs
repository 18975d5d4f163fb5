//! The CUDA backend against the CPU reference (`CpuBackend<f32>`): every
//! operation forward and backward on fresh random inputs, with the GPU's
//! outputs poisoned (NaN) before each run, relative error
//! `||gpu - cpu|| / ||cpu||` under 1e-5; dropout masks identical; a full
//! training step of a 2-layer model; bit-identical losses over 20 steps.
//!
//! Needs feature `cuda` and a GPU: the GPU tests are `#[ignore]`d, so
//! `cargo test` lists them as ignored; `cargo xtask gpu-test` bundles them
//! and runs them on the device machine with `--include-ignored`.
//! `missing_driver_is_a_clean_error` runs wherever libcuda is absent.

#![cfg(feature = "cuda")]

mod common;

use common::{Rand, assert_close, assert_grads_near_exact, random_batch, rel_err, time_seed};
use gpu_mem::{Config, MemoryLimit};
use trainer::backend::cpu::{CpuBackend, CpuBuf};
use trainer::backend::cuda::{CudaBackend, CudaBuf, CudaError, CudaIds};
use trainer::backend::{
    AdamWStep, Backend, Failure, LossTargets, MatmulPrecision, MatmulShape, RelPosShape, RowSlots,
};
use trainer::config::BertConfig;
use trainer::memory::BufKind;
use trainer::model::{BertClassifier, DeviceBatch, HeadConfig, Mode};
use trainer::rng::RngKey;

/// Relative tolerance of an fp32 operation.
const TOL: f64 = 1e-5;
/// Relative tolerance at 16-bit matrix products: the rounding is the same
/// on both sides, the order of fp32 accumulation is not (and a tensor
/// core's conversion may differ from round-to-nearest-even in ties).
const TOL_16: f64 = 1e-2;

/// The same data on both backends.
struct Pair {
    cpu: CpuBackend<f32>,
    gpu: CudaBackend,
    r: Rand,
    seed: u64,
}

type Both = (CpuBuf<f32>, CudaBuf);

impl Pair {
    fn new() -> Pair {
        Pair::at(MatmulPrecision::Fp32)
    }

    /// Both backends with matrix products at `precision` (the CPU's
    /// emulated).
    fn at(precision: MatmulPrecision) -> Pair {
        let seed = time_seed();
        // Poisoned: an op that leaves part of its overwritten output
        // unwritten shows up as NaN against the CPU.
        let gpu = CudaBackend::new(0, Config::default())
            .expect("CUDA backend on device 0")
            .with_poisoned_scratch(true);
        Pair {
            cpu: CpuBackend::new().with_matmul_precision(precision),
            gpu: gpu
                .with_matmul_precision(precision)
                .expect("the device runs this precision"),
            r: Rand::new(seed, 7),
            seed,
        }
    }

    fn from(&self, v: &[f64]) -> Both {
        let mut c = self.cpu.alloc("c", BufKind::Workspace, v.len());
        let mut g = self.gpu.alloc("g", BufKind::Workspace, v.len());
        self.cpu.upload(&mut c, v);
        self.gpu.upload(&mut g, v);
        (c, g)
    }

    fn random(&mut self, n: usize) -> Both {
        let v = self.r.normals(n);
        self.from(&v)
    }

    /// An output: the GPU side poisoned with NaN, so an element the kernel
    /// does not write fails the comparison.
    fn out(&self, n: usize) -> Both {
        let c = self.cpu.alloc("c", BufKind::Workspace, n);
        let mut g = self.gpu.alloc("g", BufKind::Workspace, n);
        self.gpu.fill(&mut g, f64::NAN);
        (c, g)
    }

    fn ids(&self, v: &[u32]) -> (CpuBuf<u32>, CudaIds) {
        let mut c = self.cpu.alloc_ids("c", v.len());
        let mut g = self.gpu.alloc_ids("g", v.len());
        self.cpu.upload_ids(&mut c, v);
        self.gpu.upload_ids(&mut g, v);
        (c, g)
    }

    fn close(&self, what: &str, b: &Both, tol: f64) {
        let cpu = self.cpu.download(&b.0);
        let gpu = self.gpu.download(&b.1);
        self.gpu.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            gpu.iter().all(|v| v.is_finite()),
            "{what}: non-finite GPU output (unwritten elements?); seed {}",
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

#[test]
fn missing_driver_is_a_clean_error() {
    // SAFETY: only tries to load the library.
    if unsafe { cudarc_present() } {
        eprintln!("skipping missing_driver_is_a_clean_error: libcuda is present");
        return;
    }
    match CudaBackend::new(0, Config::default()) {
        Err(CudaError::MissingLibrary(msg)) => assert!(msg.contains("libcuda"), "{msg}"),
        other => panic!("expected MissingLibrary, got {other:?}"),
    }
}

unsafe fn cudarc_present() -> bool {
    unsafe { gpu_mem::cuda::cudarc::driver::sys::is_culib_present() }
}

#[test]
#[ignore = "needs a CUDA device"]
fn elementwise_bias_norm_and_optimisers_match_cpu() {
    let mut p = Pair::new();
    let n = 3 * 1000 + 7;
    let (a, b) = (p.random(n), p.random(n));
    let mut out = p.out(n);
    p.cpu.add(&a.0, &b.0, &mut out.0);
    p.gpu.add(&a.1, &b.1, &mut out.1);
    p.close("add", &out, TOL);

    let mut acc = p.random(n);
    p.cpu.add_assign(&mut acc.0, &a.0);
    p.gpu.add_assign(&mut acc.1, &a.1);
    p.close("add_assign", &acc, TOL);

    p.cpu.scale(&mut acc.0, -0.37);
    p.gpu.scale(&mut acc.1, -0.37);
    p.close("scale", &acc, TOL);

    let mut filled = p.out(n);
    p.cpu.fill(&mut filled.0, 0.25);
    p.gpu.fill(&mut filled.1, 0.25);
    p.close("fill", &filled, 0.0);

    // One launch over several tensors: lengths with and without a 16-byte
    // tail, shorter than one word, and empty.
    let lens = [n, 4096, 3, 1, 0, 769];
    let mut many: Vec<Both> = lens.iter().map(|&len| p.out(len)).collect();
    let (mut cpu, mut gpu): (Vec<_>, Vec<_>) = many.drain(..).unzip();
    p.cpu.fill_all(&mut cpu, -1.5);
    p.gpu.fill_all(&mut gpu, -1.5);
    for (i, both) in cpu.into_iter().zip(gpu).enumerate() {
        p.close(&format!("fill_all tensor {i}"), &both, 0.0);
    }

    let (sc, sg) = (p.cpu.sum_squares(&a.0), p.gpu.sum_squares(&a.1));
    assert!((sc - sg).abs() <= 1e-9 * sc, "sum_squares {sc} vs {sg}");
    assert_eq!(sg, p.gpu.sum_squares(&a.1), "sum_squares is deterministic");

    let cols = 97;
    let rows = 41;
    let mut x = p.random(rows * cols);
    let bias = p.random(cols);
    p.cpu.bias_add(&mut x.0, &bias.0, cols);
    p.gpu.bias_add(&mut x.1, &bias.1, cols);
    p.close("bias_add", &x, TOL);
    let mut dbias = p.random(cols);
    p.cpu.bias_backward(&x.0, &mut dbias.0, cols);
    p.gpu.bias_backward(&x.1, &mut dbias.1, cols);
    p.close("bias_backward", &dbias, TOL);
    // Again onto the same gradient: the split reduction's counters must be
    // back at zero for the second launch to add anything.
    p.cpu.bias_backward(&x.0, &mut dbias.0, cols);
    p.gpu.bias_backward(&x.1, &mut dbias.1, cols);
    p.close("bias_backward twice", &dbias, TOL);
    // 13 chunks: the last block's row phases add two chunks or one.
    let (rows, cols) = (100, 40);
    let mid = p.random(rows * cols);
    let mut dbias = p.random(cols);
    p.cpu.bias_backward(&mid.0, &mut dbias.0, cols);
    p.gpu.bias_backward(&mid.1, &mut dbias.1, cols);
    p.close("bias_backward 100 rows", &dbias, TOL);
    // A tall one (4096 rows: 64 chunks) with a column count of the models.
    let (rows, cols) = (4096, 768 + 8);
    let tall = p.random(rows * cols);
    let mut dbias = p.random(cols);
    for round in 0..2 {
        p.cpu.bias_backward(&tall.0, &mut dbias.0, cols);
        p.gpu.bias_backward(&tall.1, &mut dbias.1, cols);
        p.close(
            &format!("bias_backward 4096 rows, round {round}"),
            &dbias,
            TOL,
        );
    }
    // The 8-element kernels over a length that is not a multiple of 8,
    // with a bias whose width is not either.
    let cols = 13;
    let mut x = p.random(cols * 31);
    let bias = p.random(cols);
    p.cpu.bias_add(&mut x.0, &bias.0, cols);
    p.gpu.bias_add(&mut x.1, &bias.1, cols);
    p.close("bias_add, 13 columns", &x, TOL);

    let grad = p.random(n);
    let mut param = p.random(n);
    let m0: Vec<f64> = p.r.normals(n).iter().map(|v| v * 0.1).collect();
    let v0: Vec<f64> = p.r.normals(n).iter().map(|v| v * v * 0.01).collect();
    let (mut m, mut v) = (p.from(&m0), p.from(&v0));
    let step = AdamWStep {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
        t: 3,
    };
    p.cpu
        .adamw(&mut param.0, &grad.0, &mut m.0, &mut v.0, &step);
    p.gpu
        .adamw(&mut param.1, &grad.1, &mut m.1, &mut v.1, &step);
    p.close("adamw param", &param, TOL);
    p.close("adamw m", &m, TOL);
    p.close("adamw v", &v, TOL);
    p.cpu.sgd(&mut param.0, &grad.0, 0.05);
    p.gpu.sgd(&mut param.1, &grad.1, 0.05);
    p.close("sgd", &param, TOL);
}

/// At every precision (16-bit products against the CPU's emulation), on
/// a shape large enough for the tensor cores to take.
#[test]
#[ignore = "needs a CUDA device"]
fn matmul_matches_cpu_for_every_transpose_beta_and_precision() {
    for precision in MatmulPrecision::ALL {
        let mut p = Pair::at(precision);
        let tol = if precision == MatmulPrecision::Fp32 {
            TOL
        } else {
            TOL_16
        };
        for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
            for beta in [0.0, 0.5] {
                let s = MatmulShape {
                    batch: 3,
                    m: 65,
                    n: 47,
                    k: 129,
                    trans_a,
                    trans_b,
                };
                let a = p.random(s.batch * s.m * s.k);
                let b = p.random(s.batch * s.k * s.n);
                let mut c = if beta == 0.0 {
                    p.out(s.batch * s.m * s.n)
                } else {
                    p.random(s.batch * s.m * s.n)
                };
                p.cpu.matmul(&s, 0.7, &a.0, &b.0, beta, &mut c.0);
                p.gpu.matmul(&s, 0.7, &a.1, &b.1, beta, &mut c.1);
                let err = rel_err(&p.gpu.download(&c.1), &p.cpu.download(&c.0));
                eprintln!("{precision} matmul {s:?} beta {beta}: rel err {err:.2e}");
                p.close(&format!("{precision} matmul {s:?} beta {beta}"), &c, tol);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn layernorm_matches_cpu() {
    let mut p = Pair::new();
    let (rows, n) = (37, 96);
    let x = p.random(rows * n);
    let gamma = p.random(n);
    let beta = p.random(n);
    let (mut out, mut mean, mut rstd) = (p.out(rows * n), p.out(rows), p.out(rows));
    p.cpu.layernorm_forward(
        &x.0,
        &gamma.0,
        &beta.0,
        n,
        1e-12,
        &mut out.0,
        &mut mean.0,
        &mut rstd.0,
    );
    p.gpu.layernorm_forward(
        &x.1,
        &gamma.1,
        &beta.1,
        n,
        1e-12,
        &mut out.1,
        &mut mean.1,
        &mut rstd.1,
    );
    p.close("layernorm out", &out, TOL);
    p.close("layernorm mean", &mean, TOL);
    p.close("layernorm rstd", &rstd, TOL);
    let dout = p.random(rows * n);
    let mut dx = p.out(rows * n);
    let (mut dg, mut db) = (p.random(n), p.random(n));
    p.cpu.layernorm_backward(
        &dout.0, &x.0, &gamma.0, &mean.0, &rstd.0, n, &mut dx.0, &mut dg.0, &mut db.0,
    );
    p.gpu.layernorm_backward(
        &dout.1, &x.1, &gamma.1, &mean.1, &rstd.1, n, &mut dx.1, &mut dg.1, &mut db.1,
    );
    p.close("layernorm dx", &dx, TOL);
    p.close("layernorm dgamma", &dg, TOL);
    p.close("layernorm dbeta", &db, TOL);
}

#[test]
#[ignore = "needs a CUDA device"]
fn attention_permutes_and_masked_softmax_match_cpu() {
    let mut p = Pair::new();
    let (b, s, heads, dh) = (3, 37, 4, 8);
    let x = p.random(b * s * heads * dh);
    let mut y = p.out(x.0.data.len());
    p.cpu.permute_heads(&x.0, &mut y.0, b, s, heads);
    p.gpu.permute_heads(&x.1, &mut y.1, b, s, heads);
    p.close("permute_heads", &y, 0.0);
    let mut z = p.out(x.0.data.len());
    p.cpu.unpermute_heads(&y.0, &mut z.0, b, s, heads);
    p.gpu.unpermute_heads(&y.1, &mut z.1, b, s, heads);
    p.close("unpermute_heads", &z, 0.0);

    // Sequence 0 full, 1 padded, 2 entirely masked (all-zero rows).
    let lens = [s, 11, 0];
    let mask: Vec<u32> = lens
        .iter()
        .flat_map(|&l| (0..s).map(move |t| (t < l) as u32))
        .collect();
    let mask = p.ids(&mask);
    let scores = p.random(b * heads * s * s);
    let scale = 1.0 / (dh as f64).sqrt();
    let mut probs = p.out(b * heads * s * s);
    p.cpu
        .softmax_forward(&scores.0, &mask.0, b, heads, s, scale, &mut probs.0);
    p.gpu
        .softmax_forward(&scores.1, &mask.1, b, heads, s, scale, &mut probs.1);
    p.close("softmax_forward", &probs, TOL);
    let dprobs = p.random(b * heads * s * s);
    let mut ds = p.out(b * heads * s * s);
    p.cpu
        .softmax_backward(&dprobs.0, &probs.0, s, scale, &mut ds.0);
    p.gpu
        .softmax_backward(&dprobs.1, &probs.1, s, scale, &mut ds.1);
    p.close("softmax_backward", &ds, TOL);
}

#[test]
#[ignore = "needs a CUDA device"]
fn activations_match_cpu() {
    let mut p = Pair::new();
    let n = 4099;
    let x = p.random(n);
    let dout = p.random(n);
    let mut y = p.out(n);
    p.cpu.gelu_forward(&x.0, &mut y.0);
    p.gpu.gelu_forward(&x.1, &mut y.1);
    p.close("gelu_forward", &y, TOL);
    let mut dx = p.out(n);
    p.cpu.gelu_backward(&x.0, &dout.0, &mut dx.0);
    p.gpu.gelu_backward(&x.1, &dout.1, &mut dx.1);
    p.close("gelu_backward", &dx, TOL);
    // In place (the fused FFN backward's): the GPU's own out-of-place
    // values, to the bit, and the CPU's within tolerance.
    let mut d = p.random(n);
    let mut apart = p.out(n);
    p.gpu.gelu_backward(&x.1, &d.1, &mut apart.1);
    p.cpu.gelu_backward_in_place(&x.0, &mut d.0);
    p.gpu.gelu_backward_in_place(&x.1, &mut d.1);
    p.close("gelu_backward_in_place", &d, TOL);
    assert_eq!(
        p.gpu.download(&d.1),
        p.gpu.download(&apart.1),
        "gelu_backward in place differs from out of place on the GPU"
    );
    let mut t = p.out(n);
    p.cpu.tanh_forward(&x.0, &mut t.0);
    p.gpu.tanh_forward(&x.1, &mut t.1);
    p.close("tanh_forward", &t, TOL);
    let mut dt = p.out(n);
    p.cpu.tanh_backward(&t.0, &dout.0, &mut dt.0);
    p.gpu.tanh_backward(&t.1, &dout.1, &mut dt.1);
    p.close("tanh_backward", &dt, TOL);
    let mut r = p.out(n);
    p.cpu.relu_forward(&x.0, &mut r.0);
    p.gpu.relu_forward(&x.1, &mut r.1);
    p.close("relu_forward", &r, TOL);
    let mut dr = p.out(n);
    p.cpu.relu_backward(&r.0, &dout.0, &mut dr.0);
    p.gpu.relu_backward(&r.1, &dout.1, &mut dr.1);
    p.close("relu_backward", &dr, TOL);
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropout_masks_are_the_cpus() {
    let mut p = Pair::new();
    let n = 10_001; // not a multiple of 4: the last Philox block is partial
    let x = p.random(n);
    let key = RngKey {
        seed: p.seed,
        step: (1 << 33) + 5,
        stream: 19,
    };
    for prob in [0.1, 0.5] {
        let mut y = p.out(n);
        p.cpu.dropout_forward(&x.0, &mut y.0, prob, key);
        p.gpu.dropout_forward(&x.1, &mut y.1, prob, key);
        let (c, g) = (p.cpu.download(&y.0), p.gpu.download(&y.1));
        assert_eq!(c, g, "dropout forward p={prob}; seed {}", p.seed);
        let mut dx = p.out(n);
        p.cpu.dropout_backward(&x.0, &mut dx.0, prob, key);
        p.gpu.dropout_backward(&x.1, &mut dx.1, prob, key);
        assert_eq!(
            p.cpu.download(&dx.0),
            p.gpu.download(&dx.1),
            "dropout backward"
        );
    }
    p.gpu.check().unwrap();
}

#[test]
#[ignore = "needs a CUDA device"]
fn random_weights_are_the_cpus() {
    let p = Pair::new();
    let n = 1_000_003; // odd: the grid's last block is partial
    let key = RngKey {
        seed: p.seed,
        step: u64::MAX,
        stream: 3,
    };
    let zeroed = 1_024..1_792;
    let mut w = p.out(n);
    p.cpu.fill_normal(&mut w.0, &key, 0.02, zeroed.clone());
    p.gpu.fill_normal(&mut w.1, &key, 0.02, zeroed.clone());
    let (c, g) = (p.cpu.download(&w.0), p.gpu.download(&w.1));
    let mut differing = 0;
    for (i, (c, g)) in c.iter().zip(&g).enumerate() {
        if zeroed.contains(&i) {
            assert_eq!((*c, *g), (0.0, 0.0), "element {i} of the zeroed row");
        } else if c != g {
            // CUDA's double log/cos against the host's libm: an ulp of a
            // double, so at most one ulp of the stored f32.
            assert!(
                (c - g).abs() <= c.abs() * f32::EPSILON as f64,
                "element {i}: cpu {c} gpu {g}; seed {}",
                p.seed
            );
            differing += 1;
        }
    }
    assert!(differing < 10, "{differing} of {n} differ; seed {}", p.seed);
    p.gpu.check().unwrap();
}

#[test]
#[ignore = "needs a CUDA device"]
fn embeddings_cls_and_pooling_match_cpu() {
    let mut p = Pair::new();
    let (vocab, dim, b, s) = (50, 40, 3, 9);
    let table = p.random(vocab * dim);
    // Repeated ids, so the scatter-add backward sums several rows.
    let ids: Vec<u32> = (0..b * s).map(|_| p.r.below(7) as u32 * 7).collect();
    let ids = p.ids(&ids);
    let mut out = p.out(b * s * dim);
    p.cpu
        .embedding_forward(&ids.0, &table.0, dim, &mut out.0, false);
    p.gpu
        .embedding_forward(&ids.1, &table.1, dim, &mut out.1, false);
    p.close("embedding_forward", &out, 0.0);
    p.cpu
        .embedding_forward(&ids.0, &table.0, dim, &mut out.0, true);
    p.gpu
        .embedding_forward(&ids.1, &table.1, dim, &mut out.1, true);
    p.close("embedding_forward accumulate", &out, TOL);
    let dout = p.random(b * s * dim);
    let mut dtable = p.random(vocab * dim);
    p.cpu
        .embedding_backward(&ids.0, &dout.0, dim, &mut dtable.0, None);
    p.gpu
        .embedding_backward(&ids.1, &dout.1, dim, &mut dtable.1, None);
    p.close("embedding_backward", &dtable, TOL);
    // Row-sparse, twice into the same rows (micro-batches of one step):
    // each backend gives slots in its own order, so the expanded gradients
    // are compared.
    let mut slots = (RowSlots::new(vocab), RowSlots::new(vocab));
    let n = 2 * b * s * dim;
    let mut compact = (
        p.cpu.alloc("c", BufKind::Grad, n),
        p.gpu.alloc("g", BufKind::Grad, n),
    );
    for _ in 0..2 {
        p.cpu
            .embedding_backward(&ids.0, &dout.0, dim, &mut compact.0, Some(&mut slots.0));
        p.gpu
            .embedding_backward(&ids.1, &dout.1, dim, &mut compact.1, Some(&mut slots.1));
    }
    assert_eq!(slots.0.used(), slots.1.used());
    let cpu = slots.0.expand(&p.cpu.download(&compact.0), dim);
    let gpu = slots.1.expand(&p.gpu.download(&compact.1), dim);
    assert_close("embedding_backward row-sparse", &gpu, &cpu, TOL, 0);
    // One id in most rows (BERT's token types), over a width that is not a
    // multiple of the kernel's 32 columns: every row phase and column block.
    let (tokens, wide) = (300, 72);
    let most: Vec<u32> = (0..tokens)
        .map(|t| if t % 10 == 0 { 4 } else { 1 })
        .collect();
    let most = p.ids(&most);
    let dout = p.random(tokens * wide);
    let mut dtable = p.random(5 * wide);
    p.cpu
        .embedding_backward(&most.0, &dout.0, wide, &mut dtable.0, None);
    p.gpu
        .embedding_backward(&most.1, &dout.1, wide, &mut dtable.1, None);
    p.close("embedding_backward, one id in most rows", &dtable, TOL);

    let x = p.random(b * s * dim);
    let mut cls = p.out(b * dim);
    p.cpu.cls_forward(&x.0, &mut cls.0, b, s);
    p.gpu.cls_forward(&x.1, &mut cls.1, b, s);
    p.close("cls_forward", &cls, 0.0);
    let mut dx = p.out(b * s * dim);
    p.cpu.cls_backward(&cls.0, &mut dx.0, b, s);
    p.gpu.cls_backward(&cls.1, &mut dx.1, b, s);
    p.close("cls_backward", &dx, 0.0);
    let mask: Vec<u32> = (0..b * s).map(|i| (i % s < 2 + i / s * 3) as u32).collect();
    let mask = p.ids(&mask);
    let mut pooled = p.out(b * dim);
    p.cpu.mean_pool(&x.0, &mask.0, b, s, &mut pooled.0);
    p.gpu.mean_pool(&x.1, &mask.1, b, s, &mut pooled.1);
    p.close("mean_pool", &pooled, TOL);
}

#[test]
#[ignore = "needs a CUDA device"]
fn cross_entropy_matches_cpu_with_and_without_weights() {
    let mut p = Pair::new();
    let (rows, classes) = (33, 3);
    let logits = p.random(rows * classes);
    let labels: Vec<u32> = (0..rows).map(|_| p.r.below(classes) as u32).collect();
    let labels = p.ids(&labels);
    let weights = p.from(&[0.7, 1.9, 1.2]);
    for w in [None, Some(&weights)] {
        let tc = LossTargets::new(&labels.0, w.map(|w| &w.0), classes, 2.5);
        let tg = LossTargets::new(&labels.1, w.map(|w| &w.1), classes, 2.5);
        let lc = p.cpu.cross_entropy_forward(&logits.0, &tc);
        let lg = p.gpu.cross_entropy_forward(&logits.1, &tg);
        assert!((lc - lg).abs() <= TOL * lc.abs(), "loss {lc} vs {lg}");
        let mut d = p.out(rows * classes);
        p.cpu.cross_entropy_backward(&logits.0, &tc, 0.5, &mut d.0);
        p.gpu.cross_entropy_backward(&logits.1, &tg, 0.5, &mut d.1);
        p.close("cross_entropy_backward", &d, TOL);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_bad_label_is_a_typed_error_and_the_backend_recovers() {
    let mut p = Pair::new();
    let logits = p.random(4 * 2);
    let (_, labels) = p.ids(&[0, 1, 2, 1]);
    let loss = p
        .gpu
        .cross_entropy_forward(&logits.1, &LossTargets::new(&labels, None, 2, 4.0));
    assert!(loss.is_nan());
    match p.gpu.check() {
        Err(CudaError::Invalid { message, .. }) => {
            assert!(message.contains("label 2"), "{message}")
        }
        other => panic!("expected an invalid-label error, got {other:?}"),
    }
    // Not sticky: the next operations run.
    let (_, ok) = p.ids(&[0, 1, 1, 1]);
    let loss = p
        .gpu
        .cross_entropy_forward(&logits.1, &LossTargets::new(&ok, None, 2, 4.0));
    assert!(loss.is_finite());
    p.gpu.check().unwrap();
}

/// Buffers that their first op overwrites are NaN until then when
/// poisoned, in each stored type (fp32, and bf16 activations under the
/// fused kernels), and zeroed buffers are zero.
#[test]
#[ignore = "needs a CUDA device"]
fn overwritten_buffers_are_poisoned_when_asked_and_zeroed_ones_are_zero() {
    use trainer::backend::Kernels;
    let fp32 = CudaBackend::new(0, Config::default()).expect("CUDA backend on device 0");
    let bf16 = CudaBackend::new(0, Config::default())
        .and_then(|b| b.with_matmul_precision(MatmulPrecision::Bf16))
        .expect("bf16 products")
        .with_kernels(Kernels::Fused);
    for gpu in [fp32, bf16] {
        let gpu = gpu.with_poisoned_scratch(true);
        // Odd lengths: the fills cover the last element too.
        for len in [1, 77, 4099] {
            let zeroed = gpu.alloc("zeroed", BufKind::Activation, len);
            let poisoned = gpu.alloc_overwritten("poisoned", BufKind::Activation, len);
            let what = format!("{} activations of {len}", gpu.dtype(&poisoned));
            assert!(gpu.download(&zeroed).iter().all(|v| *v == 0.0), "{what}");
            let back = gpu.download(&poisoned);
            assert!(
                back.len() == len && back.iter().all(|v| v.is_nan()),
                "{what}"
            );
        }
        gpu.check().unwrap();
    }
}

/// A buffer over the allocator's limit is a recorded out-of-memory with
/// gpu-mem's report, not an unwind; every figure is printed, so a failure
/// says why.
#[test]
#[ignore = "needs a CUDA device"]
fn out_of_memory_is_gpu_mems_typed_error() {
    let config = Config {
        limit: Some(MemoryLimit::Bytes(64 << 20)),
        ..Config::default()
    };
    let gpu = CudaBackend::new(0, config).expect("backend");
    let before = gpu.allocator().stats();
    eprintln!(
        "before: {} bytes reserved, {} allocated (cuBLAS workspace, norm partials)",
        before.reserved_bytes.all.current, before.allocated_bytes.all.current
    );
    let big = gpu.alloc("too big", BufKind::Activation, 20 << 20);
    assert!(
        gpu.failed(),
        "an 80 MiB buffer under a 64 MiB limit was allocated"
    );
    assert!(gpu.download(&big).iter().all(|v| v.is_nan()));
    drop(big);
    match gpu.take_failure() {
        Err(Failure::OutOfMemory(e)) => {
            eprintln!("the typed error: {e}");
            let report = e
                .allocator
                .as_deref()
                .unwrap_or_else(|| panic!("no allocator report in the out-of-memory: {e:?}"));
            eprintln!("gpu-mem's report: {report}");
            assert_eq!(e.buffer, "too big", "{e:?}");
            assert_eq!(e.requested, 80 << 20, "{e:?}");
            assert_eq!(e.limit, 64 << 20, "{e:?}");
            assert_eq!(report.requested, 80 << 20, "{report:?}");
        }
        other => panic!("expected an out-of-memory failure, got {other:?}"),
    }
    assert!(!gpu.failed());
    let small = gpu.alloc("small", BufKind::Activation, 1024);
    assert_eq!(gpu.download(&small), vec![0.0; 1024]);
    gpu.check()
        .unwrap_or_else(|e| panic!("the backend did not recover: {e}"));
}

fn tiny_model() -> (BertConfig, HeadConfig) {
    let config = BertConfig::tiny(32, 2, 4, 64, 40);
    let head = HeadConfig {
        num_labels: 3,
        hidden: vec![16],
    };
    (config, head)
}

/// `steps` AdamW steps of the tiny model on one batch; the loss of each.
fn train<B: Backend>(be: &B, seed: u64, steps: u64, grads_out: &mut Vec<Vec<f64>>) -> Vec<f64> {
    let (config, head) = tiny_model();
    let mut r = Rand::new(seed, 3);
    let mut model = BertClassifier::new_random(be, &config, &head, seed).unwrap();
    let batch = random_batch(&mut r, &[7, 4, 2], 7, config.vocab_size, 3);
    let device = DeviceBatch::upload(be, &config, 3, &batch).unwrap();
    model.alloc_grads(be);
    let mut m: Vec<B::Buf> = model
        .params
        .values
        .iter()
        .map(|v| be.alloc("m", BufKind::OptimizerState, be.len(v)))
        .collect();
    let mut v: Vec<B::Buf> = model
        .params
        .values
        .iter()
        .map(|x| be.alloc("v", BufKind::OptimizerState, be.len(x)))
        .collect();
    let mut losses = Vec::new();
    for t in 1..=steps {
        model.zero_grads(be);
        let mode = Mode::Train { seed, step: t };
        losses.push(model.forward_backward(be, &device, None, 3.0, mode, false));
        if t == 1 {
            *grads_out = model.params.grads.iter().map(|g| be.download(g)).collect();
        }
        for i in 0..model.params.values.len() {
            let step = AdamWStep {
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: if model.params.info[i].decay {
                    0.01
                } else {
                    0.0
                },
                t,
            };
            be.adamw(
                &mut model.params.values[i],
                &model.params.grads[i],
                &mut m[i],
                &mut v[i],
                &step,
            );
        }
    }
    losses
}

/// Uploads through the pinned ring (the default) land
/// as the synchronous ones do: queued behind long products, back to back
/// until the ring has wrapped several times (so a ring that did not wait
/// for its earlier copies would overwrite them before they ran), one
/// larger than the ring, then training steps equal to the bit.
#[test]
#[ignore = "needs a CUDA device"]
fn staged_uploads_land_as_synchronous_ones() {
    use trainer::backend::cuda::staging::{RING_BYTES, Uploads};
    let staged = CudaBackend::new(0, Config::default())
        .and_then(|b| b.with_uploads(Uploads::Staged))
        .expect("CUDA backend with staged uploads");
    let mut r = Rand::new(time_seed(), 11);
    // 3 MiB to 5 MiB each, 48 MiB in all: the 16 MiB ring wraps.
    let uploads: Vec<Vec<f32>> = (0..12usize)
        .map(|k| {
            let n = (3 << 18) + k * 37_003;
            (0..n).map(|_| r.uniform() as f32).collect()
        })
        .collect();
    let mut bufs: Vec<CudaBuf> = uploads
        .iter()
        .map(|d| staged.alloc("staged", BufKind::Activation, d.len()))
        .collect();
    // Tens of milliseconds of products ahead of the copies on the stream.
    let side = 4096;
    let (a, b) = (
        staged.alloc("a", BufKind::Activation, side * side),
        staged.alloc("b", BufKind::Activation, side * side),
    );
    let mut c = staged.alloc("c", BufKind::Activation, side * side);
    let shape = MatmulShape {
        batch: 1,
        m: side,
        n: side,
        k: side,
        trans_a: false,
        trans_b: false,
    };
    staged.check().unwrap();
    let before = staged.host_counters();
    for _ in 0..20 {
        staged.matmul(&shape, 1.0, &a, &b, 0.0, &mut c);
    }
    for (buf, data) in bufs.iter_mut().zip(&uploads) {
        staged.upload_f32(buf, data);
    }
    let during = staged.host_counters().since(&before);
    eprintln!(
        "{} uploads behind the products: {} waits for the ring ({:.1} ms)",
        uploads.len(),
        during.syncs,
        during.sync_wait_ns as f64 / 1e6
    );
    assert!(
        during.syncs < uploads.len() as u64,
        "every upload waited: the staged path was not taken"
    );
    let mut sent: Vec<(CudaBuf, Vec<f32>)> = bufs.into_iter().zip(uploads).collect();
    let big = RING_BYTES / 4 + 5;
    let data: Vec<f32> = (0..big).map(|i| i as f32).collect();
    let mut buf = staged.alloc("larger than the ring", BufKind::Activation, big);
    staged.upload_f32(&mut buf, &data);
    sent.push((buf, data));
    for (k, (buf, data)) in sent.iter().enumerate() {
        let back = staged.download(buf);
        let same = back.iter().zip(data).all(|(a, &b)| *a == b as f64);
        assert!(same && back.len() == data.len(), "upload {k} differs");
    }
    staged.check().unwrap();
    let sync = CudaBackend::new(0, Config::default())
        .and_then(|b| b.with_uploads(Uploads::Synchronous))
        .expect("CUDA backend with synchronous uploads");
    let (mut g_sync, mut g_staged) = (Vec::new(), Vec::new());
    let l_sync = train(&sync, 5, 3, &mut g_sync);
    let l_staged = train(&staged, 5, 3, &mut g_staged);
    staged.check().unwrap();
    assert_eq!(l_staged, l_sync, "losses");
    assert_eq!(g_staged, g_sync, "gradients of the first step");
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_training_step_of_a_two_layer_model_matches_cpu() {
    let p = Pair::new();
    let (mut gc, mut gg) = (Vec::new(), Vec::new());
    let lc = train(&p.cpu, p.seed, 2, &mut gc);
    let lg = train(&p.gpu, p.seed, 2, &mut gg);
    p.gpu.check().unwrap();
    for (a, b) in lc.iter().zip(&lg) {
        assert!(
            (a - b).abs() <= 1e-5 * a.abs(),
            "losses {lc:?} vs {lg:?}; seed {}",
            p.seed
        );
    }
    // Gradients pass through a dozen ops; 1e-4 leaves room for fp32
    // reordering (the per-op bar is 1e-5), measured from the exact
    // gradient because a cancelling one is that far off on the CPU too.
    let mut exact = Vec::new();
    train(&CpuBackend::<f64>::new(), p.seed, 1, &mut exact);
    assert_grads_near_exact("fp32 step", &exact, &gc, &gg, 1e-4, p.seed);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_bf16_training_step_matches_the_cpus_emulation() {
    let p = Pair::at(MatmulPrecision::Bf16);
    let (mut gc, mut gg) = (Vec::new(), Vec::new());
    let lc = train(&p.cpu, p.seed, 2, &mut gc);
    let lg = train(&p.gpu, p.seed, 2, &mut gg);
    p.gpu.check().unwrap();
    eprintln!("bf16 losses: cpu {lc:?}, gpu {lg:?}");
    for (a, b) in lc.iter().zip(&lg) {
        assert!(
            (a - b).abs() <= TOL_16 * a.abs(),
            "losses {lc:?} vs {lg:?}; seed {}",
            p.seed
        );
    }
    for (i, (a, b)) in gc.iter().zip(&gg).enumerate() {
        assert_close(&format!("bf16 grad {i}"), b, a, 5e-2, p.seed);
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_same_seed_gives_bit_identical_losses_over_20_steps() {
    let p = Pair::new();
    let mut ignored = Vec::new();
    let first = train(&p.gpu, p.seed, 20, &mut ignored);
    let second = train(&p.gpu, p.seed, 20, &mut ignored);
    p.gpu.check().unwrap();
    assert!(first.iter().all(|l| l.is_finite()));
    assert_eq!(first, second, "seed {}", p.seed);
}

#[test]
#[ignore = "needs a CUDA device"]
fn deberta_relative_position_ops_match_cpu() {
    let mut p = Pair::new();
    let (b, heads, s, span) = (3, 4, 37, 8);
    let (c2p, p2c) = trainer::model::deberta::positions::bucket_tables(s, span, span as i64, 16);
    for (transpose, table) in [(false, c2p), (true, p2c)] {
        let shape = RelPosShape {
            b,
            heads,
            s,
            span2: 2 * span,
            transpose,
        };
        let idx = p.ids(&table);
        let rel = p.random(heads * b * s * 2 * span);
        let mut scores = p.random(b * heads * s * s);
        p.cpu
            .rel_pos_gather(&shape, 0.3, &rel.0, &idx.0, &mut scores.0);
        p.gpu
            .rel_pos_gather(&shape, 0.3, &rel.1, &idx.1, &mut scores.1);
        p.close(
            &format!("rel_pos_gather (transpose {transpose})"),
            &scores,
            TOL,
        );
        let mut drel = p.out(heads * b * s * 2 * span);
        p.cpu
            .rel_pos_scatter(&shape, 0.3, &scores.0, &idx.0, &mut drel.0);
        p.gpu
            .rel_pos_scatter(&shape, 0.3, &scores.1, &idx.1, &mut drel.1);
        p.close(
            &format!("rel_pos_scatter (transpose {transpose})"),
            &drel,
            TOL,
        );
    }
    let n = 24;
    let mask: Vec<u32> = (0..b * s).map(|t| (t % 5 != 0) as u32).collect();
    let mask = p.ids(&mask);
    let mut x = p.random(b * s * n);
    p.cpu.mask_rows(&mut x.0, &mask.0, n);
    p.gpu.mask_rows(&mut x.1, &mask.1, n);
    p.close("mask_rows", &x, 0.0);
}
