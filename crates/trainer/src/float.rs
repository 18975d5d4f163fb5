//! The element type of a backend's float buffers: f32 for speed, f64 for
//! gradient checks. Everything a kernel needs from the type is here.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// A real float type the CPU kernels are generic over.
pub trait Float:
    Copy
    + Send
    + Sync
    + Default
    + Debug
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + 'static
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// The type's name, `f32` or `f64` (for messages).
    const NAME: &'static str;
    /// The storage type of a buffer of this float.
    const DTYPE: crate::backend::Dtype;
    /// `x` rounded to this type (to nearest, as an `as` cast).
    fn from_f64(x: f64) -> Self;
    /// The value widened to f64 (exact).
    fn to_f64(self) -> f64;
    /// `e^self`.
    fn exp(self) -> Self;
    /// The natural logarithm.
    fn ln(self) -> Self;
    /// The square root.
    fn sqrt(self) -> Self;
    /// The hyperbolic tangent.
    fn tanh(self) -> Self;
    /// The error function (libm's `erff` or `erf`).
    fn erf(self) -> Self;
    /// The larger of `self` and `other`; when one is NaN, the other (as
    /// the standard `max`).
    fn max(self, other: Self) -> Self;

    /// Row/column-strided GEMM: `C = alpha * A(m x k) * B(k x n) + beta * C`.
    /// With `beta == 0`, `C` is not read.
    ///
    /// # Safety
    /// The pointers with their strides must address valid, non-overlapping
    /// (for `c`) memory of the given shapes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

macro_rules! impl_float {
    ($t:ty, $name:expr, $dtype:expr, $erf:path, $gemm:path) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NAME: &'static str = $name;
            const DTYPE: crate::backend::Dtype = $dtype;
            #[inline]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline]
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
            unsafe fn gemm(
                m: usize,
                k: usize,
                n: usize,
                alpha: Self,
                a: *const Self,
                rsa: isize,
                csa: isize,
                b: *const Self,
                rsb: isize,
                csb: isize,
                beta: Self,
                c: *mut Self,
                rsc: isize,
                csc: isize,
            ) {
                // SAFETY: forwarded contract.
                unsafe { $gemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) }
            }
        }
    };
}

impl_float!(
    f32,
    "f32",
    crate::backend::Dtype::F32,
    libm::erff,
    matrixmultiply::sgemm
);
impl_float!(
    f64,
    "f64",
    crate::backend::Dtype::F64,
    libm::erf,
    matrixmultiply::dgemm
);
