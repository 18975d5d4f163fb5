//! Dense layers (`y = x W^T + b`, HF weight layout `[out, in]`) and the
//! dropout helpers, written once over the backend operations.

use crate::backend::{Backend, MatmulShape};
use crate::memory::BufKind;
use crate::rng::RngKey;

/// Indices of a dense layer's weight and bias in the parameter store.
#[derive(Clone, Copy, Debug)]
pub struct Dense {
    /// The weight's index, shape `[out, inp]`.
    pub w: usize,
    /// The bias's index, shape `[out]`.
    pub b: usize,
    /// Input features per row.
    pub inp: usize,
    /// Output features per row.
    pub out: usize,
}

impl Dense {
    /// `out = x W^T + b` for `rows` rows.
    pub fn forward<B: Backend>(
        &self,
        be: &B,
        values: &[B::Buf],
        x: &B::Buf,
        rows: usize,
        out: &mut B::Buf,
    ) {
        self.forward_cast(be, values, None, x, rows, out);
    }

    /// [`Dense::forward`] reading `copy`, the weight already in `x`'s type
    /// (`weight_operands`; `None`: cast here if the types differ), which
    /// is freed after the product.
    pub fn forward_cast<B: Backend>(
        &self,
        be: &B,
        values: &[B::Buf],
        copy: Option<B::Buf>,
        x: &B::Buf,
        rows: usize,
        out: &mut B::Buf,
    ) {
        self.project(be, values, copy, x, rows, out);
        be.bias_add(out, &values[self.b], self.out);
    }

    /// `out = x W^T`, the product without the bias (which a fused operation
    /// adds), reading `copy` as [`Dense::forward_cast`] does.
    pub fn project<B: Backend>(
        &self,
        be: &B,
        values: &[B::Buf],
        copy: Option<B::Buf>,
        x: &B::Buf,
        rows: usize,
        out: &mut B::Buf,
    ) {
        let shape = MatmulShape {
            batch: 1,
            m: rows,
            n: self.out,
            k: self.inp,
            trans_a: false,
            trans_b: true,
        };
        let copy = copy.or_else(|| weight_operand(be, &values[self.w], x));
        be.matmul(
            &shape,
            1.0,
            x,
            copy.as_ref().unwrap_or(&values[self.w]),
            0.0,
            out,
        );
    }

    /// Accumulates `dW += dy^T x`, `db += colsum(dy)`; if `dx` is given,
    /// writes (or with `accumulate`, adds) `dy W` into it.
    #[allow(clippy::too_many_arguments)]
    pub fn backward<B: Backend>(
        &self,
        be: &B,
        values: &[B::Buf],
        grads: &mut [B::Buf],
        dy: &B::Buf,
        x: &B::Buf,
        rows: usize,
        dx: Option<(&mut B::Buf, bool)>,
    ) {
        self.backward_cast(be, values, grads, None, dy, x, rows, dx);
    }

    /// [`Dense::backward`] whose input gradient reads `copy` as
    /// [`Dense::forward_cast`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn backward_cast<B: Backend>(
        &self,
        be: &B,
        values: &[B::Buf],
        grads: &mut [B::Buf],
        copy: Option<B::Buf>,
        dy: &B::Buf,
        x: &B::Buf,
        rows: usize,
        dx: Option<(&mut B::Buf, bool)>,
    ) {
        let dw = MatmulShape {
            batch: 1,
            m: self.out,
            n: self.inp,
            k: rows,
            trans_a: true,
            trans_b: false,
        };
        be.matmul(&dw, 1.0, dy, x, 1.0, &mut grads[self.w]);
        be.bias_backward(dy, &mut grads[self.b], self.out);
        if let Some((dx, accumulate)) = dx {
            self.input_grad(be, values, copy, dy, rows, dx, accumulate);
        }
    }

    /// Writes (or with `accumulate`, adds) `dy W` into `dx`: the input's
    /// gradient alone, for a caller that frees the input (which the
    /// weight's gradient reads) before it allocates `dx`; reads `copy` as
    /// [`Dense::forward_cast`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn input_grad<B: Backend>(
        &self,
        be: &B,
        values: &[B::Buf],
        copy: Option<B::Buf>,
        dy: &B::Buf,
        rows: usize,
        dx: &mut B::Buf,
        accumulate: bool,
    ) {
        let shape = MatmulShape {
            batch: 1,
            m: rows,
            n: self.inp,
            k: self.out,
            trans_a: false,
            trans_b: false,
        };
        let copy = copy.or_else(|| weight_operand(be, &values[self.w], dy));
        let w = copy.as_ref().unwrap_or(&values[self.w]);
        be.matmul(&shape, 1.0, dy, w, if accumulate { 1.0 } else { 0.0 }, dx);
    }
}

/// The weight `w` as a product with activations `x` reads it: `None` when
/// they share a type (use `w`), else a copy in `x`'s 16-bit type (scratch;
/// `w` stays the fp32 master copy, as mixed precision keeps it).
pub fn weight_operand<B: Backend>(be: &B, w: &B::Buf, x: &B::Buf) -> Option<B::Buf> {
    if be.dtype(w) == be.dtype(x) {
        return None;
    }
    let mut copy = be.alloc_overwritten("weight_16bit", BufKind::Workspace, be.len(w));
    be.cast(w, &mut copy);
    Some(copy)
}

/// [`weight_operand`] of several dense layers' weights at once, allocated
/// in order and cast by one [`Backend::cast_all`] (one launch on a GPU
/// where there were `N`): for a layer's products that follow each other,
/// each copy passed to the method of its product (`copy`), which frees it
/// after the product. `None` each when the weights are `like`'s type already.
pub fn weight_operands<B: Backend, const N: usize>(
    be: &B,
    values: &[B::Buf],
    denses: [&Dense; N],
    like: &B::Buf,
) -> [Option<B::Buf>; N] {
    if denses
        .iter()
        .all(|d| be.dtype(&values[d.w]) == be.dtype(like))
    {
        return std::array::from_fn(|_| None);
    }
    let mut copies: Vec<B::Buf> = denses
        .iter()
        .map(|d| be.alloc_overwritten("weight_16bit", BufKind::Workspace, be.len(&values[d.w])))
        .collect();
    let sources: Vec<&B::Buf> = denses.iter().map(|d| &values[d.w]).collect();
    be.cast_all(&sources, &mut copies);
    let mut copies = copies.into_iter();
    std::array::from_fn(|_| copies.next())
}

/// Dropout into a new buffer when `key` is active, else `None` (the caller
/// uses the input itself).
pub fn dropout_new<B: Backend>(
    be: &B,
    x: &B::Buf,
    p: f64,
    key: Option<RngKey>,
    name: &str,
    kind: BufKind,
) -> Option<B::Buf> {
    let key = key?;
    let mut out = be.alloc_overwritten(name, kind, be.len(x));
    be.dropout_forward(x, &mut out, p, key);
    Some(out)
}

/// Backward of dropout, consuming the incoming gradient.
pub fn dropout_back_owned<B: Backend>(
    be: &B,
    d: B::Buf,
    p: f64,
    key: Option<RngKey>,
    name: &str,
) -> B::Buf {
    match key {
        None => d,
        Some(key) => {
            let mut dx = be.alloc_overwritten(name, BufKind::Workspace, be.len(&d));
            be.dropout_backward(&d, &mut dx, p, key);
            dx
        }
    }
}
