//! DeBERTa's relative-position ops on the CPU backend: the scatter is the
//! exact adjoint of the gather (f64 central differences), the mask multiply
//! is its own backward, and results are bit-identical for any thread count.

mod common;

use common::{Rand, assert_close, time_seed};
use trainer::backend::cpu::{CpuBackend, CpuBuf};
use trainer::backend::{Backend, RelPosShape};
use trainer::memory::BufKind;

type Be = CpuBackend<f64>;
const H: f64 = 1e-5;
const TOL: f64 = 1e-6;

fn buf<T: trainer::float::Float>(be: &CpuBackend<T>, data: &[f64]) -> CpuBuf<T> {
    let mut b = be.alloc("t", BufKind::Workspace, data.len());
    be.upload(&mut b, data);
    b
}

fn ids<T: trainer::float::Float>(be: &CpuBackend<T>, data: &[u32]) -> CpuBuf<u32> {
    let mut b = be.alloc_ids("ids", data.len());
    be.upload_ids(&mut b, data);
    b
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn shape(transpose: bool) -> RelPosShape {
    RelPosShape {
        b: 2,
        heads: 3,
        s: 5,
        span2: 4,
        transpose,
    }
}

/// A random bucket table (the ops take any table, not only DeBERTa's).
fn table(r: &mut Rand, sh: &RelPosShape) -> Vec<u32> {
    (0..sh.s * sh.s).map(|_| r.below(sh.span2) as u32).collect()
}

#[test]
fn rel_pos_scatter_is_the_gradient_of_the_gather() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 1);
    for transpose in [false, true] {
        let sh = shape(transpose);
        let (rel_len, scores_len) = (
            sh.heads * sh.b * sh.s * sh.span2,
            sh.b * sh.heads * sh.s * sh.s,
        );
        let idx = table(&mut r, &sh);
        let rel = r.normals(rel_len);
        let base = r.normals(scores_len);
        let w = r.normals(scores_len);
        let alpha = 0.37;
        let f = |x: &[f64]| {
            let mut out = buf(&be, &base);
            be.rel_pos_gather(&sh, alpha, &buf(&be, x), &ids(&be, &idx), &mut out);
            dot(&out.data, &w)
        };
        let numeric: Vec<f64> = (0..rel_len)
            .map(|i| {
                let mut x = rel.clone();
                x[i] += H;
                let plus = f(&x);
                x[i] -= 2.0 * H;
                (plus - f(&x)) / (2.0 * H)
            })
            .collect();
        let mut drel = buf(&be, &vec![f64::NAN; rel_len]);
        be.rel_pos_scatter(&sh, alpha, &buf(&be, &w), &ids(&be, &idx), &mut drel);
        assert_close(
            &format!("drel (transpose {transpose})"),
            &drel.data,
            &numeric,
            TOL,
            seed,
        );
        // The gather accumulates onto the scores: f(0) is the base alone.
        assert!((f(&vec![0.0; rel_len]) - dot(&base, &w)).abs() < 1e-12);
    }
}

#[test]
fn rel_pos_gather_reads_the_documented_element() {
    let be = Be::new();
    let sh = shape(true);
    let mut r = Rand::new(7, 2);
    let idx = table(&mut r, &sh);
    let rel: Vec<f64> = (0..sh.heads * sh.b * sh.s * sh.span2)
        .map(|v| v as f64)
        .collect();
    let mut out = buf(&be, &vec![0.0; sh.b * sh.heads * sh.s * sh.s]);
    be.rel_pos_gather(&sh, 1.0, &buf(&be, &rel), &ids(&be, &idx), &mut out);
    let (bi, h, i, j) = (1, 2, 3, 4);
    let k = idx[j * sh.s + i] as usize;
    let expected = rel[((h * sh.b + bi) * sh.s + j) * sh.span2 + k];
    assert_eq!(
        out.data[((bi * sh.heads + h) * sh.s + i) * sh.s + j],
        expected
    );
}

#[test]
fn mask_rows_zeroes_masked_tokens_and_is_its_own_backward() {
    let seed = time_seed();
    let be = Be::new();
    let mut r = Rand::new(seed, 3);
    let (tokens, n) = (6, 4);
    let mask = [1, 1, 0, 1, 0, 0];
    let x = r.normals(tokens * n);
    let w = r.normals(tokens * n);
    let f = |x: &[f64]| {
        let mut b = buf(&be, x);
        be.mask_rows(&mut b, &ids(&be, &mask), n);
        dot(&b.data, &w)
    };
    let numeric: Vec<f64> = (0..x.len())
        .map(|i| {
            let mut p = x.clone();
            p[i] += H;
            let plus = f(&p);
            p[i] -= 2.0 * H;
            (plus - f(&p)) / (2.0 * H)
        })
        .collect();
    let mut dx = buf(&be, &w);
    be.mask_rows(&mut dx, &ids(&be, &mask), n);
    assert_close("mask_rows", &dx.data, &numeric, TOL, seed);
}

#[test]
fn rel_pos_ops_are_bit_identical_for_any_thread_count() {
    let seed = time_seed();
    let mut r = Rand::new(seed, 4);
    let sh = RelPosShape {
        b: 3,
        heads: 4,
        s: 37,
        span2: 16,
        transpose: true,
    };
    let idx = table(&mut r, &sh);
    let rel = r.normals(sh.heads * sh.b * sh.s * sh.span2);
    let scores = r.normals(sh.b * sh.heads * sh.s * sh.s);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let be = CpuBackend::<f32>::new();
            let t = ids(&be, &idx);
            let mut out = buf(&be, &scores);
            be.rel_pos_gather(&sh, 0.25, &buf(&be, &rel), &t, &mut out);
            let mut drel = be.alloc("drel", BufKind::Workspace, rel.len());
            be.rel_pos_scatter(&sh, 0.25, &out, &t, &mut drel);
            (out.data.clone(), drel.data.clone())
        })
    };
    let one = run(1);
    assert_eq!(one, run(2), "seed {seed}");
    assert_eq!(one, run(5), "seed {seed}");
}
