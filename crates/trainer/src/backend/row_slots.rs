//! Row-sparse gradients of an embedding table.
//!
//! One optimiser step looks up a few thousand of a vocabulary's 30,000 to
//! 250,000 rows, yet a dense gradient of the table holds all of them:
//! 206 MB of fp32 zeros and sums for RoBERTa-large's 50,265 x 1,024 table.
//! [`RowSlots`] gives each row the step looks up a row ("slot") of a
//! compact gradient, in the order a backend's embedding backward meets
//! the rows (the CPU's in token order, the CUDA backend's by id within a
//! micro-batch: the same gradient once expanded), so the gradient needs as
//! many rows as the step has tokens at most. AdamW then reads a
//! row's gradient through its slot, and zero for the rows without one:
//! the update of every row (moments decaying, weight decay) is the dense
//! gradient's, value for value.

/// The slot of a table row the step has not looked up.
pub const NO_SLOT: u32 = u32::MAX;

/// The slots an optimiser step has given a table's rows.
#[derive(Clone, Debug)]
pub struct RowSlots {
    /// For every table row, its slot or [`NO_SLOT`]: the map the optimiser
    /// reads.
    slot_of: Vec<u32>,
    /// The rows with a slot, in slot order.
    rows: Vec<u32>,
}

impl RowSlots {
    /// No slots given, for a table of `table_rows` rows.
    pub fn new(table_rows: usize) -> Self {
        Self {
            slot_of: vec![NO_SLOT; table_rows],
            rows: Vec::new(),
        }
    }

    /// Rows of the table (the vocabulary size), with a slot or not.
    pub fn table_rows(&self) -> usize {
        self.slot_of.len()
    }

    /// Slots given so far.
    pub fn used(&self) -> usize {
        self.rows.len()
    }

    /// Every table row's slot, [`NO_SLOT`] where it has none.
    pub fn slot_of(&self) -> &[u32] {
        &self.slot_of
    }

    /// Replaces each of `ids` by its row's slot, giving the rows without
    /// one the next free slots; at most `capacity` slots in all. On an
    /// error (an id past the table, or more rows than `capacity`) the slots
    /// given before stay and `ids` is left part-way.
    pub fn assign(&mut self, ids: &mut [u32], capacity: usize) -> Result<(), String> {
        let table_rows = self.table_rows();
        for id in ids {
            let slot = self
                .slot_of
                .get_mut(*id as usize)
                .ok_or_else(|| format!("id {id} is past the table's {table_rows} rows"))?;
            if *slot == NO_SLOT {
                if self.rows.len() == capacity {
                    return Err(format!(
                        "the step looks up more than the gradient's {capacity} rows"
                    ));
                }
                *slot = self.rows.len() as u32;
                self.rows.push(*id);
            }
            *id = *slot;
        }
        Ok(())
    }

    /// Takes every slot back (the next step gives them anew).
    pub fn clear(&mut self) {
        for &row in &self.rows {
            self.slot_of[row as usize] = NO_SLOT;
        }
        self.rows.clear();
    }

    /// The dense gradient of the table from the compact one (rows of
    /// `width`), zero in the rows without a slot.
    pub fn expand(&self, compact: &[f64], width: usize) -> Vec<f64> {
        let mut dense = vec![0.0; self.table_rows() * width];
        for (slot, &row) in self.rows.iter().enumerate() {
            let (row, slot) = (row as usize, slot);
            dense[row * width..(row + 1) * width]
                .copy_from_slice(&compact[slot * width..(slot + 1) * width]);
        }
        dense
    }
}

/// The tensor of a multi-tensor AdamW whose gradient is row-sparse: its
/// index in the lists, the device copy of [`RowSlots::slot_of`] and the
/// table's row width.
pub struct SparseRows<'a, Ids> {
    /// Index of the table in the lists of parameters, gradients and moments.
    pub tensor: usize,
    /// Every table row's slot, [`NO_SLOT`] where it has none (`[table_rows]`).
    pub slots: &'a Ids,
    /// Elements per table row.
    pub width: usize,
}

// By hand: a derive would ask `Ids: Copy` of the referenced buffer.
impl<Ids> Clone for SparseRows<'_, Ids> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Ids> Copy for SparseRows<'_, Ids> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_get_slots_in_the_order_first_seen_and_give_them_back() {
        let mut slots = RowSlots::new(10);
        let mut ids = [7, 2, 7, 9];
        slots.assign(&mut ids, 4).unwrap();
        assert_eq!(ids, [0, 1, 0, 2]);
        let mut more = [2, 0];
        slots.assign(&mut more, 4).unwrap();
        assert_eq!(more, [1, 3]);
        assert_eq!(slots.used(), 4);
        assert_eq!(slots.slot_of()[7], 0);
        assert_eq!(slots.slot_of()[5], NO_SLOT);
        let dense = slots.expand(&[1.0, 2.0, 3.0, 4.0], 1);
        assert_eq!(dense, [4.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 3.0]);
        slots.clear();
        assert_eq!(slots.used(), 0);
        assert!(slots.slot_of().iter().all(|&s| s == NO_SLOT));
    }

    #[test]
    fn too_many_rows_or_an_id_past_the_table_is_an_error() {
        let mut slots = RowSlots::new(4);
        let err = slots.assign(&mut [0, 1, 2], 2).unwrap_err();
        assert!(err.contains("more than the gradient's 2 rows"), "{err}");
        let err = RowSlots::new(4).assign(&mut [4], 8).unwrap_err();
        assert!(err.contains("id 4 is past the table's 4 rows"), "{err}");
    }
}
