//! Blocks and segments in slabs, addressed by `u32` index.
//!
//! Blocks of one segment form a doubly linked list in address order that
//! tiles the segment's backed bytes exactly; a freed block is merged into its
//! free neighbours, so two free blocks are never adjacent.

use crate::backend::{DevicePtr, StreamId};
use crate::config::PoolKind;

/// "No block" in a `prev`/`next`/`head` link.
pub(crate) const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockState {
    /// In its pool's free index, reusable.
    Free,
    /// Handed out to a caller.
    Allocated,
    /// Freed by its caller, waiting for events on other streams.
    Pending,
}

#[derive(Debug)]
pub(crate) struct Block {
    pub addr: DevicePtr,
    pub size: usize,
    /// Bytes the caller asked for (allocated blocks only).
    pub requested: usize,
    pub stream: StreamId,
    /// Index of `stream`'s free pools in the allocator (saves a search).
    pub stream_slot: u32,
    pub pool: PoolKind,
    pub segment: u32,
    pub prev: u32,
    pub next: u32,
    pub state: BlockState,
    /// Bumped whenever a handle to this slot stops being valid.
    pub generation: u32,
    /// Garbage-collection clock value when the block became free.
    pub free_since: u64,
    /// Streams other than `stream` that used the block (`record_stream`).
    pub stream_uses: Vec<StreamId>,
    /// Events still to complete before a pending block is free.
    pub pending_events: u32,
    pub live: bool,
}

impl Block {
    /// Part of a segment that holds other blocks too.
    #[inline]
    pub fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub base: DevicePtr,
    /// Backed bytes: the allocation (classic) or the mapped prefix (expandable).
    pub size: usize,
    /// Reserved virtual range (expandable only).
    pub va_size: usize,
    pub stream: StreamId,
    pub pool: PoolKind,
    pub expandable: bool,
    /// First block, or NIL when nothing is mapped.
    pub head: u32,
}

/// The block slab.
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    slots: Vec<Block>,
    vacant: Vec<u32>,
}

impl Blocks {
    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &mut self,
        addr: DevicePtr,
        size: usize,
        stream: (StreamId, u32),
        pool: PoolKind,
        segment: u32,
        prev: u32,
        next: u32,
        state: BlockState,
    ) -> u32 {
        let (stream, stream_slot) = stream;
        let fresh = |generation| Block {
            addr,
            size,
            requested: 0,
            stream,
            stream_slot,
            pool,
            segment,
            prev,
            next,
            state,
            generation,
            free_since: 0,
            stream_uses: Vec::new(),
            pending_events: 0,
            live: true,
        };
        match self.vacant.pop() {
            Some(idx) => {
                let generation = self.slots[idx as usize].generation;
                self.slots[idx as usize] = fresh(generation);
                idx
            }
            None => {
                self.slots.push(fresh(0));
                (self.slots.len() - 1) as u32
            }
        }
    }

    pub fn remove(&mut self, idx: u32) {
        let b = &mut self.slots[idx as usize];
        debug_assert!(b.live);
        b.live = false;
        b.generation = b.generation.wrapping_add(1);
        b.stream_uses = Vec::new();
        self.vacant.push(idx);
    }

    #[inline]
    pub fn get(&self, idx: u32) -> &Block {
        &self.slots[idx as usize]
    }

    #[inline]
    pub fn get_mut(&mut self, idx: u32) -> &mut Block {
        &mut self.slots[idx as usize]
    }

    /// The live block at `idx` with `generation`, if the handle is current.
    pub fn lookup(&self, idx: u32, generation: u32) -> Option<&Block> {
        self.slots
            .get(idx as usize)
            .filter(|b| b.live && b.generation == generation)
    }

    pub fn live_count(&self) -> usize {
        self.slots.len() - self.vacant.len()
    }
}

/// The segment slab.
#[derive(Debug, Default)]
pub(crate) struct Segments {
    slots: Vec<Option<Segment>>,
    vacant: Vec<u32>,
}

impl Segments {
    pub fn insert(&mut self, seg: Segment) -> u32 {
        match self.vacant.pop() {
            Some(idx) => {
                self.slots[idx as usize] = Some(seg);
                idx
            }
            None => {
                self.slots.push(Some(seg));
                (self.slots.len() - 1) as u32
            }
        }
    }

    pub fn remove(&mut self, idx: u32) -> Segment {
        let seg = self.slots[idx as usize].take().expect("live segment");
        self.vacant.push(idx);
        seg
    }

    #[inline]
    pub fn get(&self, idx: u32) -> &Segment {
        self.slots[idx as usize].as_ref().expect("live segment")
    }

    #[inline]
    pub fn get_mut(&mut self, idx: u32) -> &mut Segment {
        self.slots[idx as usize].as_mut().expect("live segment")
    }

    pub fn indices(&self) -> Vec<u32> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| i as u32)
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &Segment)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as u32, s)))
    }
}
