//! Every backend operation's backward against central finite differences
//! of its forward, in f64 on the CPU backend, on fresh random inputs.

mod common;

use common::{Rand, assert_close, time_seed};
use trainer::backend::cpu::{CpuBackend, CpuBuf};
use trainer::backend::{AdamWStep, Backend, LossTargets, MatmulShape, RowSlots};
use trainer::memory::BufKind;
use trainer::rng::RngKey;

type Be = CpuBackend<f64>;
const H: f64 = 1e-5;
const TOL: f64 = 1e-6;

fn buf(be: &Be, data: &[f64]) -> CpuBuf<f64> {
    let mut b = be.alloc("t", BufKind::Workspace, data.len());
    be.upload(&mut b, data);
    b
}

fn ids(be: &Be, data: &[u32]) -> CpuBuf<u32> {
    let mut b = be.alloc_ids("ids", data.len());
    be.upload_ids(&mut b, data);
    b
}

/// Central differences of `f` with respect to every element of `inputs[which]`.
fn numeric(inputs: &[Vec<f64>], which: usize, f: &dyn Fn(&[Vec<f64>]) -> f64) -> Vec<f64> {
    let mut x = inputs.to_vec();
    (0..inputs[which].len())
        .map(|i| {
            let orig = x[which][i];
            x[which][i] = orig + H;
            let plus = f(&x);
            x[which][i] = orig - H;
            let minus = f(&x);
            x[which][i] = orig;
            (plus - minus) / (2.0 * H)
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn matmul_all_transposes_and_batches() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 1);
    let (batch, m, n, k) = (2, 3, 4, 5);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let s = MatmulShape {
            batch,
            m,
            n,
            k,
            trans_a: ta,
            trans_b: tb,
        };
        let inputs = vec![
            r.normals(batch * m * k),
            r.normals(batch * k * n),
            r.normals(batch * m * n),
        ];
        let w = r.normals(batch * m * n);
        let f = |x: &[Vec<f64>]| {
            let mut c = buf(&be, &x[2]);
            be.matmul(&s, 0.7, &buf(&be, &x[0]), &buf(&be, &x[1]), 0.5, &mut c);
            dot(&c.data, &w)
        };
        let (a, b, dc) = (buf(&be, &inputs[0]), buf(&be, &inputs[1]), buf(&be, &w));
        // The backward formulas the model uses, via the same op.
        let mut da = be.alloc("da", BufKind::Workspace, batch * m * k);
        let mut db = be.alloc("db", BufKind::Workspace, batch * k * n);
        let sa = if !ta {
            MatmulShape {
                batch,
                m,
                n: k,
                k: n,
                trans_a: false,
                trans_b: !tb,
            }
        } else {
            MatmulShape {
                batch,
                m: k,
                n: m,
                k: n,
                trans_a: tb,
                trans_b: true,
            }
        };
        if !ta {
            be.matmul(&sa, 0.7, &dc, &b, 0.0, &mut da)
        } else {
            be.matmul(&sa, 0.7, &b, &dc, 0.0, &mut da)
        }
        let sb = if !tb {
            MatmulShape {
                batch,
                m: k,
                n,
                k: m,
                trans_a: !ta,
                trans_b: false,
            }
        } else {
            MatmulShape {
                batch,
                m: n,
                n: k,
                k: m,
                trans_a: true,
                trans_b: ta,
            }
        };
        if !tb {
            be.matmul(&sb, 0.7, &a, &dc, 0.0, &mut db)
        } else {
            be.matmul(&sb, 0.7, &dc, &a, 0.0, &mut db)
        }
        let what = format!("matmul ta={ta} tb={tb}");
        assert_close(
            &format!("{what} dA"),
            &da.data,
            &numeric(&inputs, 0, &f),
            TOL,
            seed,
        );
        assert_close(
            &format!("{what} dB"),
            &db.data,
            &numeric(&inputs, 1, &f),
            TOL,
            seed,
        );
        let dcin: Vec<f64> = w.iter().map(|v| 0.5 * v).collect();
        assert_close(
            &format!("{what} dC"),
            &dcin,
            &numeric(&inputs, 2, &f),
            TOL,
            seed,
        );
    }
}

#[test]
fn large_matmul_matches_naive_in_f32() {
    // Exercises the multi-threaded block split.
    let seed = time_seed();
    let be = CpuBackend::<f32>::new();
    let mut r = Rand::new(seed, 2);
    let (m, n, k) = (130, 200, 70);
    let a: Vec<f64> = r.normals(m * k);
    let b: Vec<f64> = r.normals(n * k);
    let s = MatmulShape {
        batch: 1,
        m,
        n,
        k,
        trans_a: false,
        trans_b: true,
    };
    let (mut ab, mut bb) = (
        be.alloc("a", BufKind::Workspace, m * k),
        be.alloc("b", BufKind::Workspace, n * k),
    );
    be.upload(&mut ab, &a);
    be.upload(&mut bb, &b);
    let mut c = be.alloc("c", BufKind::Workspace, m * n);
    be.matmul(&s, 1.0, &ab, &bb, 0.0, &mut c);
    let naive: Vec<f64> = (0..m * n)
        .map(|ij| (0..k).map(|p| a[ij / n * k + p] * b[ij % n * k + p]).sum())
        .collect();
    assert_close("large matmul", &be.download(&c), &naive, 1e-5, seed);
}

#[test]
fn bias_add_and_backward() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 3);
    let (rows, n) = (7, 37);
    let inputs = vec![r.normals(rows * n), r.normals(n)];
    let w = r.normals(rows * n);
    let f = |x: &[Vec<f64>]| {
        let mut o = buf(&be, &x[0]);
        be.bias_add(&mut o, &buf(&be, &x[1]), n);
        dot(&o.data, &w)
    };
    let mut db = buf(&be, &vec![0.0; n]);
    be.bias_backward(&buf(&be, &w), &mut db, n);
    assert_close("bias", &db.data, &numeric(&inputs, 1, &f), TOL, seed);
}

#[test]
fn layernorm_backward() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 4);
    let (rows, n) = (5, 19);
    let inputs = vec![r.normals(rows * n), r.normals(n), r.normals(n)];
    let w = r.normals(rows * n);
    let f = |x: &[Vec<f64>]| {
        let mut o = buf(&be, &vec![0.0; rows * n]);
        let (mut mu, mut rs) = (buf(&be, &vec![0.0; rows]), buf(&be, &vec![0.0; rows]));
        be.layernorm_forward(
            &buf(&be, &x[0]),
            &buf(&be, &x[1]),
            &buf(&be, &x[2]),
            n,
            1e-12,
            &mut o,
            &mut mu,
            &mut rs,
        );
        dot(&o.data, &w)
    };
    let (x, g, b) = (
        buf(&be, &inputs[0]),
        buf(&be, &inputs[1]),
        buf(&be, &inputs[2]),
    );
    let mut o = buf(&be, &vec![0.0; rows * n]);
    let (mut mu, mut rs) = (buf(&be, &vec![0.0; rows]), buf(&be, &vec![0.0; rows]));
    be.layernorm_forward(&x, &g, &b, n, 1e-12, &mut o, &mut mu, &mut rs);
    let mut dx = buf(&be, &vec![0.0; rows * n]);
    let (mut dg, mut dbeta) = (buf(&be, &vec![0.0; n]), buf(&be, &vec![0.0; n]));
    be.layernorm_backward(
        &buf(&be, &w),
        &x,
        &g,
        &mu,
        &rs,
        n,
        &mut dx,
        &mut dg,
        &mut dbeta,
    );
    assert_close(
        "layernorm dx",
        &dx.data,
        &numeric(&inputs, 0, &f),
        TOL,
        seed,
    );
    assert_close(
        "layernorm dgamma",
        &dg.data,
        &numeric(&inputs, 1, &f),
        TOL,
        seed,
    );
    assert_close(
        "layernorm dbeta",
        &dbeta.data,
        &numeric(&inputs, 2, &f),
        TOL,
        seed,
    );
}

#[test]
fn masked_softmax_with_padding() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 5);
    let (b, heads, s) = (2, 3, 5);
    // Sequence 1 has two padding keys.
    let mask = ids(&be, &[1, 1, 1, 1, 1, 1, 1, 1, 0, 0]);
    let scale = 0.37;
    let inputs = vec![r.normals(b * heads * s * s)];
    let w = r.normals(b * heads * s * s);
    let fwd = |x: &[f64]| {
        let mut p = buf(&be, &vec![0.0; x.len()]);
        be.softmax_forward(&buf(&be, x), &mask, b, heads, s, scale, &mut p);
        p
    };
    let f = |x: &[Vec<f64>]| dot(&fwd(&x[0]).data, &w);
    let probs = fwd(&inputs[0]);
    for row in probs.data.chunks(s).skip(heads * s) {
        assert_eq!(
            (row[3], row[4]),
            (0.0, 0.0),
            "padding keys get exactly zero probability"
        );
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
    let mut ds = buf(&be, &vec![0.0; w.len()]);
    be.softmax_backward(&buf(&be, &w), &probs, s, scale, &mut ds);
    assert_close("softmax", &ds.data, &numeric(&inputs, 0, &f), TOL, seed);
}

#[test]
fn gelu_tanh_relu_dropout_backward() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 6);
    let n = 41;
    let inputs = vec![r.normals(n).iter().map(|v| 2.0 * v).collect::<Vec<_>>()];
    let w = r.normals(n);
    let key = RngKey {
        seed,
        step: 3,
        stream: 9,
    };
    type Fwd = fn(&Be, &CpuBuf<f64>, &mut CpuBuf<f64>, RngKey);
    let cases: [(&str, Fwd); 4] = [
        ("gelu", |be, x, o, _| be.gelu_forward(x, o)),
        ("tanh", |be, x, o, _| be.tanh_forward(x, o)),
        ("relu", |be, x, o, _| be.relu_forward(x, o)),
        ("dropout", |be, x, o, k| be.dropout_forward(x, o, 0.3, k)),
    ];
    for (what, fwd) in cases {
        let run = |x: &[f64]| {
            let mut o = buf(&be, &vec![0.0; n]);
            fwd(&be, &buf(&be, x), &mut o, key);
            o
        };
        let f = |x: &[Vec<f64>]| dot(&run(&x[0]).data, &w);
        let (x, out, dout) = (buf(&be, &inputs[0]), run(&inputs[0]), buf(&be, &w));
        let mut dx = buf(&be, &vec![0.0; n]);
        match what {
            "gelu" => be.gelu_backward(&x, &dout, &mut dx),
            "tanh" => be.tanh_backward(&out, &dout, &mut dx),
            "relu" => be.relu_backward(&out, &dout, &mut dx),
            _ => be.dropout_backward(&dout, &mut dx, 0.3, key),
        }
        assert_close(what, &dx.data, &numeric(&inputs, 0, &f), TOL, seed);
        if what == "gelu" {
            let mut d = buf(&be, &w);
            be.gelu_backward_in_place(&x, &mut d);
            assert_eq!(d.data, dx.data, "gelu_backward in place (seed {seed})");
        }
    }
    // GELU is the exact erf form: GELU(1) = 0.5 * (1 + erf(1/sqrt 2)).
    let mut o = buf(&be, &[0.0]);
    be.gelu_forward(&buf(&be, &[1.0]), &mut o);
    assert!(
        (o.data[0] - 0.841_344_746_068_542_9).abs() < 1e-15,
        "{}",
        o.data[0]
    );
}

#[test]
fn dropout_mask_is_independent_of_thread_count() {
    let seed = time_seed();
    let key = RngKey {
        seed,
        step: 11,
        stream: 4,
    };
    let n = 100_003;
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let be = CpuBackend::<f32>::new();
            let mut x = be.alloc("x", BufKind::Workspace, n);
            be.fill(&mut x, 1.0);
            let mut o = be.alloc("o", BufKind::Workspace, n);
            be.dropout_forward(&x, &mut o, 0.1, key);
            o.data.clone()
        })
    };
    let one = run(1);
    assert_eq!(one, run(2), "seed {seed}");
    assert_eq!(one, run(3), "seed {seed}");
    let kept = one.iter().filter(|v| **v != 0.0).count() as f64 / n as f64;
    assert!((kept - 0.9).abs() < 0.01, "keep rate {kept}, seed {seed}");
}

#[test]
fn embedding_permute_cls_backward() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 7);
    let (vocab, dim) = (6, 8);
    let tokens: Vec<u32> = (0..10).map(|_| r.below(vocab) as u32).collect();
    let id_buf = ids(&be, &tokens);
    let inputs = vec![r.normals(vocab * dim)];
    let w = r.normals(tokens.len() * dim);
    let f = |x: &[Vec<f64>]| {
        let mut o = buf(&be, &vec![0.0; tokens.len() * dim]);
        be.embedding_forward(&id_buf, &buf(&be, &x[0]), dim, &mut o, false);
        dot(&o.data, &w)
    };
    let mut dt = buf(&be, &vec![0.0; vocab * dim]);
    be.embedding_backward(&id_buf, &buf(&be, &w), dim, &mut dt, None);
    assert_close("embedding", &dt.data, &numeric(&inputs, 0, &f), TOL, seed);
    // Row-sparse: a row per distinct id, the same sums.
    let mut slots = RowSlots::new(vocab);
    let mut compact = buf(&be, &vec![0.0; tokens.len() * dim]);
    let d = buf(&be, &w);
    be.embedding_backward(&id_buf, &d, dim, &mut compact, Some(&mut slots));
    let distinct = tokens
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(slots.used(), distinct, "seed {seed}");
    assert_eq!(slots.expand(&compact.data, dim), dt.data, "seed {seed}");

    let (b, s, heads, dh) = (2, 3, 2, 4);
    let n = b * s * heads * dh;
    let inputs = vec![r.normals(n)];
    let w = r.normals(n);
    let f = |x: &[Vec<f64>]| {
        let mut o = buf(&be, &vec![0.0; n]);
        be.permute_heads(&buf(&be, &x[0]), &mut o, b, s, heads);
        dot(&o.data, &w)
    };
    let mut dx = buf(&be, &vec![0.0; n]);
    be.unpermute_heads(&buf(&be, &w), &mut dx, b, s, heads);
    assert_close(
        "permute_heads",
        &dx.data,
        &numeric(&inputs, 0, &f),
        TOL,
        seed,
    );

    let h = heads * dh;
    let w = r.normals(b * h);
    let f = |x: &[Vec<f64>]| {
        let mut o = buf(&be, &vec![0.0; b * h]);
        be.cls_forward(&buf(&be, &x[0]), &mut o, b, s);
        dot(&o.data, &w)
    };
    let mut dx = buf(&be, &vec![0.0; n]);
    be.cls_backward(&buf(&be, &w), &mut dx, b, s);
    assert_close("cls", &dx.data, &numeric(&inputs, 0, &f), TOL, seed);
}

#[test]
fn weighted_cross_entropy_backward() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 8);
    let (rows, classes) = (6, 3);
    let labels: Vec<u32> = (0..rows).map(|_| r.below(classes) as u32).collect();
    let lb = ids(&be, &labels);
    let weights = buf(&be, &[0.5, 2.0, 1.3]);
    let denom = labels
        .iter()
        .map(|&y| [0.5, 2.0, 1.3][y as usize])
        .sum::<f64>();
    let inputs = vec![r.normals(rows * classes)];
    for wopt in [None, Some(&weights)] {
        let targets = LossTargets::new(&lb, wopt, classes, denom);
        let f = |x: &[Vec<f64>]| be.cross_entropy_forward(&buf(&be, &x[0]), &targets);
        let mut d = buf(&be, &vec![0.0; rows * classes]);
        be.cross_entropy_backward(&buf(&be, &inputs[0]), &targets, 1.0, &mut d);
        assert_close(
            "cross entropy",
            &d.data,
            &numeric(&inputs, 0, &f),
            TOL,
            seed,
        );
    }
    // Uniform logits: loss = ln(classes) per unit weight.
    let zero = buf(&be, &vec![0.0; rows * classes]);
    let l = be.cross_entropy_forward(
        &zero,
        &LossTargets::new(&lb, Some(&weights), classes, denom),
    );
    assert!((l - (classes as f64).ln()).abs() < 1e-12);
}

#[test]
fn adamw_matches_scalar_reference_and_clipping_scales() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 9);
    let n = 20;
    let (p0, g) = (r.normals(n), r.normals(n));
    let (mut p, gb) = (buf(&be, &p0), buf(&be, &g));
    let (mut m, mut v) = (buf(&be, &vec![0.0; n]), buf(&be, &vec![0.0; n]));
    let (mut pr, mut mr, mut vr) = (p0.clone(), vec![0.0; n], vec![0.0; n]);
    for t in 1..=3 {
        let s = AdamWStep {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            t,
        };
        be.adamw(&mut p, &gb, &mut m, &mut v, &s);
        for i in 0..n {
            // PyTorch AdamW, written out.
            pr[i] *= 1.0 - s.lr * s.weight_decay;
            mr[i] = 0.9 * mr[i] + 0.1 * g[i];
            vr[i] = 0.999 * vr[i] + 0.001 * g[i] * g[i];
            let mhat = mr[i] / (1.0 - 0.9f64.powi(t as i32));
            let vhat = vr[i] / (1.0 - 0.999f64.powi(t as i32));
            pr[i] -= s.lr * mhat / (vhat.sqrt() + s.eps);
        }
    }
    assert_close("adamw", &p.data, &pr, 1e-12, seed);

    let mut grads = vec![buf(&be, &[3.0, 0.0]), buf(&be, &[4.0])];
    let norm = trainer::backend::clip_global_norm(&be, &mut grads, 1.0);
    assert_eq!(norm, 5.0);
    assert_close(
        "clip",
        &[grads[0].data[0], grads[1].data[0]],
        &[0.6, 0.8],
        1e-15,
        seed,
    );
}

#[test]
fn mean_pool_ignores_padding() {
    let be = Be::new();
    let x = buf(
        &be,
        &[
            1.0, 2.0, 3.0, 4.0, 100.0, 100.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        ],
    );
    let mask = ids(&be, &[1, 1, 0, 1, 1, 1]);
    let mut o = buf(&be, &[0.0; 4]);
    be.mean_pool(&x, &mask, 2, 3, &mut o);
    assert_eq!(o.data, vec![2.0, 3.0, 7.0, 8.0]);
}
