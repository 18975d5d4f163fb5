//! `SimDevice`: a deterministic host-side model of a GPU's memory.
//!
//! It tracks address ranges only (no data): classic allocations, virtual
//! reservations and mapped pages, against a capacity. Addresses come from a
//! bump pointer and are never reused, so a stale pointer can never alias a
//! new allocation in tests. Failures can be injected (with the `testing`
//! feature, fail the Nth `map` or `malloc`; shrink the capacity). Stream work is modelled as an epoch:
//! events recorded before [`SimDevice::complete_all_work`] (or any
//! synchronisation) are done, later ones are pending.

use crate::backend::{Backend, BackendError, DevicePtr, MemInfo, StreamId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// Where simulated addresses start (looks like a CUDA device address).
const BASE_ADDRESS: u64 = 0x7f00_0000_0000;

#[derive(Debug)]
struct SimState {
    capacity: usize,
    granularity: usize,
    used: usize,
    next_address: u64,
    classic: BTreeMap<DevicePtr, usize>,
    reservations: BTreeMap<DevicePtr, usize>,
    mapped_pages: BTreeSet<DevicePtr>,
    maps: u64,
    mallocs: u64,
    fail_map_at: Option<u64>,
    fail_malloc_at: Option<u64>,
    epoch: u64,
    syncs: u64,
    no_virtual_memory: Option<String>,
}

impl SimState {
    /// Whether `size` more bytes of physical memory fit in the capacity.
    fn has_room_for(&self, size: usize) -> bool {
        self.used
            .checked_add(size)
            .is_some_and(|used| used <= self.capacity)
    }
}

/// A simulated device; see the module doc.
#[derive(Debug)]
pub struct SimDevice {
    state: Mutex<SimState>,
}

/// A simulated event: done once the work epoch has moved past it.
#[derive(Debug)]
pub struct SimEvent {
    epoch: u64,
}

impl SimDevice {
    /// A device of `capacity` bytes mapping pages of `granularity` bytes
    /// (a power of two, as every CUDA device's is).
    ///
    /// # Panics
    ///
    /// When `granularity` is not a power of two (0 included).
    pub fn new(capacity: usize, granularity: usize) -> Self {
        assert!(
            granularity.is_power_of_two(),
            "granularity must be a power of two"
        );
        SimDevice {
            state: Mutex::new(SimState {
                capacity,
                granularity,
                used: 0,
                next_address: BASE_ADDRESS,
                classic: BTreeMap::new(),
                reservations: BTreeMap::new(),
                mapped_pages: BTreeSet::new(),
                maps: 0,
                mallocs: 0,
                fail_map_at: None,
                fail_malloc_at: None,
                epoch: 0,
                syncs: 0,
                no_virtual_memory: None,
            }),
        }
    }

    /// A device without virtual memory management (as a GPU under a
    /// sandbox that lacks it): `reserve` fails and
    /// [`Backend::virtual_memory_unsupported`] gives `reason`.
    pub fn without_virtual_memory(self, reason: &str) -> Self {
        self.lock().no_virtual_memory = Some(reason.to_string());
        self
    }

    /// A device like an 80 GB H100: 80 GiB, 2 MiB pages.
    pub fn h100() -> Self {
        SimDevice::new(80 << 30, 2 << 20)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        // A panic while holding this lock leaves plain data; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Change the capacity (may go below what is in use: later requests fail).
    pub fn set_capacity(&self, capacity: usize) {
        self.lock().capacity = capacity;
    }

    /// Make the `n`th `map` call from now fail with out-of-memory (1 = next).
    #[cfg(feature = "testing")]
    pub fn fail_nth_map(&self, n: u64) {
        let mut s = self.lock();
        s.fail_map_at = Some(s.maps + n.max(1));
    }

    /// Make the `n`th `malloc` call from now fail with out-of-memory (1 = next).
    #[cfg(feature = "testing")]
    pub fn fail_nth_malloc(&self, n: u64) {
        let mut s = self.lock();
        s.fail_malloc_at = Some(s.mallocs + n.max(1));
    }

    /// Finish all queued work: every event recorded so far is done.
    pub fn complete_all_work(&self) {
        self.lock().epoch += 1;
    }

    /// Bytes of physical memory in use (classic segments plus mapped pages).
    pub fn used(&self) -> usize {
        self.lock().used
    }

    /// Number of `synchronize`/`event_wait` calls so far.
    pub fn sync_count(&self) -> u64 {
        self.lock().syncs
    }

    /// Number of live reservations (virtual ranges).
    pub fn reservation_count(&self) -> usize {
        self.lock().reservations.len()
    }

    /// Whether every byte of `[addr, addr + size)` is backed by physical
    /// memory: inside one classic allocation, or on mapped pages.
    pub fn is_backed(&self, addr: DevicePtr, size: usize) -> bool {
        let s = self.lock();
        if size == 0 {
            return true;
        }
        // A range past the end of the address space is backed nowhere.
        let Some(end) = addr.checked_add(size as u64) else {
            return false;
        };
        if let Some((&base, &len)) = s.classic.range(..=addr).next_back()
            && end <= base + len as u64
        {
            return true;
        }
        let g = s.granularity as u64;
        let mut page = addr & !(g - 1);
        while page < end {
            if !s.mapped_pages.contains(&page) {
                return false;
            }
            // Mapped pages lie inside reservations, which end (guard page
            // included) inside the address space.
            page += g;
        }
        true
    }

    /// A fresh page-aligned address range of `size` bytes, or out-of-memory
    /// when the rest of the 64-bit address space cannot hold it (wrapping
    /// around would hand out ranges that overlap live ones).
    fn bump(s: &mut SimState, size: usize) -> Result<DevicePtr, BackendError> {
        let g = s.granularity as u64;
        // Leave a guard page so that neighbouring ranges never touch.
        let range = s.next_address.checked_next_multiple_of(g).and_then(|addr| {
            let next = addr
                .checked_add(size as u64)?
                .checked_add(g)?
                .checked_next_multiple_of(g)?;
            Some((addr, next))
        });
        let Some((addr, next)) = range else {
            return Err(BackendError::OutOfMemory { requested: size });
        };
        s.next_address = next;
        Ok(addr)
    }

    fn check_range(s: &SimState, addr: DevicePtr, size: usize) -> Result<(), BackendError> {
        let g = s.granularity as u64;
        if !addr.is_multiple_of(g) || !(size as u64).is_multiple_of(g) || size == 0 {
            return Err(BackendError::Invalid(format!(
                "range {addr:#x}+{size} is not a whole number of {g}-byte pages"
            )));
        }
        let inside = s
            .reservations
            .range(..=addr)
            .next_back()
            .is_some_and(|(&base, &len)| {
                addr.checked_add(size as u64)
                    .is_some_and(|end| end <= base + len as u64)
            });
        if !inside {
            return Err(BackendError::Invalid(format!(
                "range {addr:#x}+{size} is outside every reservation"
            )));
        }
        Ok(())
    }
}

impl Backend for SimDevice {
    type Event = SimEvent;

    fn mem_info(&self) -> Result<MemInfo, BackendError> {
        let s = self.lock();
        Ok(MemInfo {
            free: s.capacity.saturating_sub(s.used),
            total: s.capacity,
        })
    }

    fn granularity(&self) -> usize {
        self.lock().granularity
    }

    fn malloc(&self, size: usize) -> Result<DevicePtr, BackendError> {
        let mut s = self.lock();
        s.mallocs += 1;
        if s.fail_malloc_at == Some(s.mallocs) || !s.has_room_for(size) {
            return Err(BackendError::OutOfMemory { requested: size });
        }
        if size == 0 {
            return Err(BackendError::Invalid("malloc of 0 bytes".into()));
        }
        let addr = SimDevice::bump(&mut s, size)?;
        s.used += size;
        s.classic.insert(addr, size);
        Ok(addr)
    }

    fn free(&self, ptr: DevicePtr, size: usize) -> Result<(), BackendError> {
        let mut s = self.lock();
        match s.classic.remove(&ptr) {
            Some(len) if len == size => {
                s.used -= len;
                Ok(())
            }
            Some(len) => {
                s.classic.insert(ptr, len);
                Err(BackendError::Invalid(format!(
                    "free of {ptr:#x} with size {size}, allocated {len}"
                )))
            }
            None => Err(BackendError::Invalid(format!(
                "free of unknown pointer {ptr:#x}"
            ))),
        }
    }

    fn reserve(&self, size: usize) -> Result<DevicePtr, BackendError> {
        let mut s = self.lock();
        if let Some(reason) = &s.no_virtual_memory {
            return Err(BackendError::Driver {
                call: "cuMemAddressReserve",
                message: format!("not supported: {reason}"),
            });
        }
        if size == 0 || !size.is_multiple_of(s.granularity) {
            return Err(BackendError::Invalid(format!(
                "reservation of {size} bytes is not a whole number of pages"
            )));
        }
        let addr = SimDevice::bump(&mut s, size)?;
        s.reservations.insert(addr, size);
        Ok(addr)
    }

    fn release_reservation(&self, base: DevicePtr, size: usize) -> Result<(), BackendError> {
        let mut s = self.lock();
        if s.reservations.get(&base) != Some(&size) {
            return Err(BackendError::Invalid(format!(
                "no reservation {base:#x}+{size}"
            )));
        }
        let end = base + size as u64;
        if s.mapped_pages.range(base..end).next().is_some() {
            return Err(BackendError::Invalid(format!(
                "reservation {base:#x} released with pages still mapped"
            )));
        }
        s.reservations.remove(&base);
        Ok(())
    }

    fn map(&self, addr: DevicePtr, size: usize) -> Result<(), BackendError> {
        let mut s = self.lock();
        SimDevice::check_range(&s, addr, size)?;
        s.maps += 1;
        if s.fail_map_at == Some(s.maps) || !s.has_room_for(size) {
            return Err(BackendError::OutOfMemory { requested: size });
        }
        let g = s.granularity as u64;
        let end = addr + size as u64;
        if s.mapped_pages.range(addr..end).next().is_some() {
            return Err(BackendError::Invalid(format!(
                "map of {addr:#x}+{size} overlaps mapped pages"
            )));
        }
        let mut page = addr;
        while page < end {
            s.mapped_pages.insert(page);
            page += g;
        }
        s.used += size;
        Ok(())
    }

    fn unmap(&self, addr: DevicePtr, size: usize) -> Result<(), BackendError> {
        let mut s = self.lock();
        SimDevice::check_range(&s, addr, size)?;
        let g = s.granularity as u64;
        let end = addr + size as u64;
        let pages = (size as u64 / g) as usize;
        if s.mapped_pages.range(addr..end).count() != pages {
            return Err(BackendError::Invalid(format!(
                "unmap of {addr:#x}+{size} covers unmapped pages"
            )));
        }
        let mut page = addr;
        while page < end {
            s.mapped_pages.remove(&page);
            page += g;
        }
        s.used -= size;
        Ok(())
    }

    fn synchronize(&self, _stream: StreamId) -> Result<(), BackendError> {
        let mut s = self.lock();
        s.syncs += 1;
        s.epoch += 1;
        Ok(())
    }

    fn synchronize_device(&self) -> Result<(), BackendError> {
        self.synchronize(StreamId(0))
    }

    fn record_event(&self, _stream: StreamId) -> Result<SimEvent, BackendError> {
        Ok(SimEvent {
            epoch: self.lock().epoch,
        })
    }

    fn event_done(&self, event: &SimEvent) -> Result<bool, BackendError> {
        Ok(self.lock().epoch > event.epoch)
    }

    fn event_wait(&self, event: &SimEvent) -> Result<(), BackendError> {
        let mut s = self.lock();
        s.syncs += 1;
        if s.epoch <= event.epoch {
            s.epoch = event.epoch + 1;
        }
        Ok(())
    }

    fn virtual_memory_unsupported(&self) -> Option<String> {
        self.lock().no_virtual_memory.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 2 << 20;

    #[test]
    fn malloc_beyond_the_capacity_fails_without_overflowing_usage() {
        let device = SimDevice::new(64 * PAGE, PAGE);
        device.malloc(PAGE).unwrap();
        assert_eq!(
            device.malloc(usize::MAX),
            Err(BackendError::OutOfMemory {
                requested: usize::MAX
            })
        );
        assert_eq!(device.used(), PAGE);
        assert_eq!(device.mem_info().unwrap().free, 63 * PAGE);
    }

    #[test]
    fn reservations_past_the_address_space_fail_instead_of_wrapping() {
        let device = SimDevice::new(usize::MAX, PAGE);
        let half = 1usize << 63;
        let first = device.reserve(half).unwrap();
        assert_eq!(
            device.reserve(half),
            Err(BackendError::OutOfMemory { requested: half })
        );
        // A range that fits still comes after the first one, not inside it.
        let next = device.reserve(PAGE).unwrap();
        assert!(next >= first + half as u64, "{next:#x} overlaps {first:#x}");
        assert_eq!(device.reservation_count(), 2);
    }

    #[test]
    fn reservations_are_aligned_to_pages_larger_than_the_base_address_alignment() {
        let page = 1usize << 41;
        let device = SimDevice::new(usize::MAX, page);
        let base = device.reserve(page).unwrap();
        assert!(base.is_multiple_of(page as u64), "{base:#x}");
        device.map(base, page).unwrap();
        assert!(device.is_backed(base, page));
    }

    #[test]
    fn ranges_that_run_past_the_address_space_are_refused() {
        let device = SimDevice::new(usize::MAX, PAGE);
        let base = device.reserve(2 * PAGE).unwrap();
        let huge = usize::MAX & !(PAGE - 1);
        assert!(matches!(
            device.map(base, huge),
            Err(BackendError::Invalid(_))
        ));
        assert!(matches!(
            device.unmap(base, huge),
            Err(BackendError::Invalid(_))
        ));
        assert!(!device.is_backed(u64::MAX - 10, 100));
        assert!(!device.is_backed(base, usize::MAX));
        assert_eq!(device.used(), 0);
    }
}
