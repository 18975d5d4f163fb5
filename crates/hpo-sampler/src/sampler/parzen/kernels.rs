//! A per-kernel array that is cheap to edit at either end.
//!
//! An estimator keeps one value per kernel in a dozen arrays, in id
//! (trial-number) order, and [`Parzen::update`] edits them all when a few
//! trials leave or join. In a study whose history slides (its oldest
//! trials leave it), the kernel that leaves is the first: a `Vec` would
//! shift every other value of every array, on every ask. `Kernels` keeps
//! spare room before its first value as well as after its last, and an
//! edit moves whichever side of it is shorter. It reads as a slice.
//!
//! [`Parzen::update`]: super::Parzen::update

use std::ops::{Deref, DerefMut};

#[derive(Debug, Clone, Default)]
pub(super) struct Kernels<T> {
    /// The values are `buf[start..]`.
    buf: Vec<T>,
    start: usize,
}

impl<T: Copy> Kernels<T> {
    /// Removes and returns the value at `i`, moving the values before it
    /// or those after it, whichever are fewer.
    pub fn remove(&mut self, i: usize) -> T {
        let len = self.len();
        assert!(i < len, "removal index {i} out of {len}");
        let at = self.start + i;
        let value = self.buf[at];
        if i < len / 2 {
            self.buf.copy_within(self.start..at, self.start + 1);
            self.start += 1;
            // Give the spare room back once it exceeds the values (each
            // value then moves once per as many removals: amortised O(1)).
            if self.start > len {
                self.buf.drain(..self.start);
                self.start = 0;
            }
        } else {
            self.buf.remove(at);
        }
        value
    }

    /// Inserts `value` at `i`, moving the values before it (into the spare
    /// room at the front, if any) or those after it, whichever are fewer.
    pub fn insert(&mut self, i: usize, value: T) {
        let len = self.len();
        assert!(i <= len, "insertion index {i} out of {len}");
        if i < len / 2 && self.start > 0 {
            self.start -= 1;
            self.buf
                .copy_within(self.start + 1..self.start + 1 + i, self.start);
            self.buf[self.start + i] = value;
        } else {
            self.buf.insert(self.start + i, value);
        }
    }
}

impl<T> Deref for Kernels<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.buf[self.start..]
    }
}

impl<T> DerefMut for Kernels<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.start..]
    }
}

impl<'a, T> IntoIterator for &'a Kernels<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, T> IntoIterator for &'a mut Kernels<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl<T> From<Vec<T>> for Kernels<T> {
    fn from(buf: Vec<T>) -> Self {
        Kernels { buf, start: 0 }
    }
}

impl<T> FromIterator<T> for Kernels<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Vec::from_iter(iter).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Any sequence of edits leaves the same values as on a `Vec`.
    #[test]
    fn edits_match_a_vec() {
        let mut rng = Rng::seed_from(11);
        for case in 0..200 {
            let n = case % 40;
            let mut want: Vec<u32> = (0..n as u32).collect();
            let mut got: Kernels<u32> = want.clone().into();
            for step in 0..300u32 {
                let len = want.len();
                let pick =
                    |rng: &mut Rng, n: usize| (rng.next_f64() * n as f64) as usize % n.max(1);
                // Mostly sliding (the first leaves, one joins at the end),
                // with edits anywhere.
                match (rng.next_f64() * 4.0) as u32 {
                    0 if len > 0 => {
                        assert_eq!(got.remove(0), want.remove(0));
                    }
                    1 if len > 0 => {
                        let i = pick(&mut rng, len);
                        assert_eq!(got.remove(i), want.remove(i));
                    }
                    2 => {
                        want.push(1000 + step);
                        got.insert(len, 1000 + step);
                    }
                    _ => {
                        let i = pick(&mut rng, len + 1).min(len);
                        want.insert(i, 2000 + step);
                        got.insert(i, 2000 + step);
                    }
                }
                assert_eq!(&*got, &want[..], "case {case}, step {step}");
            }
        }
    }
}
