//! Placement: which of the runner's devices a trial runs on. One
//! [`Packer`] per device keeps that device's leases; a [`DeviceSet`] asks
//! each of them about a trial and picks one. One device is the case N = 1
//! of the same code.
//!
//! The rules, for a trial offered with its effective batch and its
//! predicted peak per (device, micro-batch):
//! - **Fit**: a device *fits* the trial when its micro-batch 1 fits the
//!   empty device ([`Admission::Infeasible`] otherwise). A trial that fits
//!   no live device is [`Placement::Infeasible`].
//! - **Choice**: among the devices where it can start now, the one that
//!   gives it the largest micro-batch (the least split step, so a trial
//!   whose batch fits only the big card goes there when it has room), then
//!   the least loaded (fewest trials running: they share its compute),
//!   then the best fit (least memory left free after its lease, which keeps
//!   the larger holes for larger trials), then the lowest index.
//! - **Order**: trials wait in the order they were offered. A waiting trial
//!   reserves the live devices it fits: a trial offered after it may not
//!   start on those, so a trial that fits only the 80 GiB card is not
//!   overtaken there by smaller ones (and starts once enough of that card
//!   frees), while the trials behind it go on elsewhere. On one device this
//!   is first come, first served.
//! - **How many wait**: at most one per live device, and only while some
//!   live device is not reserved ([`DeviceSet::may_offer_more`]): beyond
//!   that a new trial could start nowhere.
//! - **Draining**: a failed device takes no more trials; the trials leased
//!   there lose their leases ([`DeviceSet::drain`]) and the caller retries
//!   them elsewhere. A device is judged failed after
//!   [`DEVICE_ERRORS_TO_DRAIN`] device errors in a row
//!   ([`DeviceSet::device_error`]); a trial ending normally on it resets
//!   the count.
//!
//! Pure: no processes, clocks or devices. The runner (`super::runner`) and
//! the simulation (`super::simulate`) drive it.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use super::packing::{Admission, DeviceBudget, FitPolicy, Lease, Packer, Price};

/// Device errors in a row (no trial ending normally on the device between
/// them) after which a device is drained. One sticky error poisons its
/// worker's context, not the device: it costs its trial, as on a single
/// device. A second in a row says the device itself is failing.
pub const DEVICE_ERRORS_TO_DRAIN: usize = 2;

/// How a device that can take a trial now ranks (smaller is better): the
/// larger micro-batch, then fewer trials already there, then less memory
/// left free after the lease.
type ChoiceKey = (std::cmp::Reverse<usize>, usize, u64);

/// Where a trial goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Start it now on `device` with this lease.
    Admit { device: usize, lease: Lease },
    /// It fits some live device but cannot start on any now: offer it
    /// again after a release. It keeps its place in the queue.
    Wait,
    /// Micro-batch 1 fits no live device. `needed` and `capacity` are those
    /// of the largest live device (capacity 0 when every device is
    /// drained).
    Infeasible { needed: u64, capacity: u64 },
}

#[derive(Debug)]
struct Slot {
    packer: Packer,
    /// Why the device was drained.
    drained: Option<String>,
    /// Device errors since a trial last ended normally here.
    errors_in_a_row: usize,
}

/// The runner's devices, each with its own [`Packer`]; see the module doc.
#[derive(Debug)]
pub struct DeviceSet {
    slots: Vec<Slot>,
    /// Trials that must wait, in the order offered, with the live devices
    /// each fits (what it reserves).
    waiting: Vec<(u64, Vec<usize>)>,
    /// The device holding each leased trial.
    holders: BTreeMap<u64, usize>,
}

impl DeviceSet {
    /// One device per budget, indexed in that order (at least one).
    pub fn new(budgets: impl IntoIterator<Item = DeviceBudget>, policy: FitPolicy) -> Self {
        let slots: Vec<Slot> = budgets
            .into_iter()
            .map(|b| Slot {
                packer: Packer::with_policy(b, policy),
                drained: None,
                errors_in_a_row: 0,
            })
            .collect();
        assert!(!slots.is_empty(), "a device set has at least one device");
        Self {
            slots,
            waiting: Vec::new(),
            holders: BTreeMap::new(),
        }
    }

    /// Number of devices, drained ones included.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Always false: a set has at least one device.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn budget(&self, device: usize) -> &DeviceBudget {
        self.slots[device].packer.budget()
    }

    /// Why `device` was drained; `None` while it takes trials.
    pub fn drained(&self, device: usize) -> Option<&str> {
        self.slots[device].drained.as_deref()
    }

    /// The devices still taking trials.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.slots.len()).filter(|&d| self.slots[d].drained.is_none())
    }

    /// Bytes leased on `device`.
    pub fn leased_bytes(&self, device: usize) -> u64 {
        self.slots[device].packer.leased_bytes()
    }

    /// Bytes leased on every device.
    pub fn total_leased(&self) -> u64 {
        self.slots.iter().map(|s| s.packer.leased_bytes()).sum()
    }

    /// Trials holding a lease on `device`.
    pub fn running(&self, device: usize) -> usize {
        self.slots[device].packer.running()
    }

    /// The device holding trial `id`'s lease.
    pub fn device_of(&self, id: u64) -> Option<usize> {
        self.holders.get(&id).copied()
    }

    /// Trial `id`'s lease, if it holds one.
    pub fn lease(&self, id: u64) -> Option<&Lease> {
        let device = self.device_of(id)?;
        self.slots[device].packer.lease(id)
    }

    /// Trials waiting for a device, in order.
    pub fn waiting(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().map(|(id, _)| *id)
    }

    /// Whether a trial not yet offered could start anywhere: fewer trials
    /// wait than there are live devices, and some live device is reserved
    /// by none of them.
    pub fn may_offer_more(&self) -> bool {
        let live: Vec<usize> = self.live().collect();
        self.waiting.len() < live.len()
            && live
                .iter()
                .any(|d| !self.waiting.iter().any(|(_, fits)| fits.contains(d)))
    }

    /// Offers trial `id` (effective batch `effective_batch`, micro-batches
    /// in `micro`, see [`Packer::try_admit_within`]); `peak_of(device,
    /// micro)` is its predicted peak in bytes on that device. A trial
    /// already waiting keeps its place; a new one joins the back. Offering a
    /// trial that holds a lease replaces that lease.
    pub fn place(
        &mut self,
        id: u64,
        effective_batch: usize,
        micro: RangeInclusive<usize>,
        peak_of: &mut dyn FnMut(usize, usize) -> u64,
    ) -> Placement {
        self.place_with(id, &mut |packer, device| {
            packer.try_admit_within(id, effective_batch, micro.clone(), &mut |m| {
                peak_of(device, m)
            })
        })
    }

    /// [`DeviceSet::place`] with each micro-batch's [`Price`] on a device
    /// (`price_of(device, micro)`: the study runner's replayed runs, whose
    /// limit is the allocator's reserved peak) instead of a peak and the
    /// budget's allowance; see [`Packer::try_admit_priced`].
    pub fn place_priced(
        &mut self,
        id: u64,
        effective_batch: usize,
        micro: RangeInclusive<usize>,
        price_of: &mut dyn FnMut(usize, usize) -> Price,
    ) -> Placement {
        self.place_with(id, &mut |packer, device| {
            packer.try_admit_priced(id, effective_batch, micro.clone(), &mut |m| {
                price_of(device, m)
            })
        })
    }

    /// The placement rules of the module doc, with `admit(packer, device)`
    /// asking one device's packer for trial `id` (it may be asked twice
    /// for the chosen device: once to compare, once to lease).
    fn place_with(
        &mut self,
        id: u64,
        admit: &mut dyn FnMut(&mut Packer, usize) -> Admission,
    ) -> Placement {
        self.release(id);
        let position = self
            .waiting
            .iter()
            .position(|(w, _)| *w == id)
            .unwrap_or(self.waiting.len());
        let mut reserved = vec![false; self.slots.len()];
        for (_, fits) in &self.waiting[..position] {
            for &d in fits {
                reserved[d] = true;
            }
        }
        let mut fits = Vec::new();
        let mut best: Option<(ChoiceKey, usize)> = None;
        // (needed, usable) on the largest live device, for an infeasible trial.
        let mut largest: Option<(u64, u64)> = None;
        for (device, slot) in self.slots.iter_mut().enumerate() {
            if slot.drained.is_some() {
                continue;
            }
            let answer = admit(&mut slot.packer, device);
            match answer {
                Admission::Admit(lease) => {
                    fits.push(device);
                    let packer = &slot.packer;
                    let key = (
                        std::cmp::Reverse(lease.micro_batch),
                        packer.running() - 1,
                        packer.budget().usable() - packer.leased_bytes(),
                    );
                    slot.packer.release(id);
                    if !reserved[device] && best.as_ref().is_none_or(|(k, _)| key < *k) {
                        best = Some((key, device));
                    }
                }
                Admission::Wait => fits.push(device),
                Admission::Infeasible { needed, capacity } => {
                    if largest.is_none_or(|(_, c)| capacity > c) {
                        largest = Some((needed, capacity));
                    }
                }
            }
        }
        if let Some((_, device)) = best {
            let answer = admit(&mut self.slots[device].packer, device);
            let Admission::Admit(lease) = answer else {
                unreachable!("the same offer to the same packer is admitted again")
            };
            self.withdraw(id);
            self.holders.insert(id, device);
            return Placement::Admit { device, lease };
        }
        if fits.is_empty() {
            self.withdraw(id);
            let (needed, capacity) = largest.unwrap_or((0, 0));
            return Placement::Infeasible { needed, capacity };
        }
        match self.waiting.get_mut(position) {
            Some(entry) => entry.1 = fits,
            None => self.waiting.push((id, fits)),
        }
        Placement::Wait
    }

    /// Returns trial `id`'s lease (no-op when it holds none).
    pub fn release(&mut self, id: u64) {
        if let Some(device) = self.holders.remove(&id) {
            self.slots[device].packer.release(id);
        }
    }

    /// Trial `id` no longer waits (it was re-enqueued, or taken over).
    pub fn withdraw(&mut self, id: u64) {
        self.waiting.retain(|(w, _)| *w != id);
    }

    /// A trial on `device` ended normally: the device works.
    pub fn device_ok(&mut self, device: usize) {
        self.slots[device].errors_in_a_row = 0;
    }

    /// A trial on `device` failed with a device error. `true` when that
    /// makes [`DEVICE_ERRORS_TO_DRAIN`] in a row: the caller drains it.
    pub fn device_error(&mut self, device: usize) -> bool {
        let slot = &mut self.slots[device];
        slot.errors_in_a_row += 1;
        slot.drained.is_none() && slot.errors_in_a_row >= DEVICE_ERRORS_TO_DRAIN
    }

    /// Takes `device` out of service for `why`: it takes no more trials,
    /// and the trials leased there lose their leases. Returns those trials'
    /// ids, for the caller to stop and retry elsewhere.
    pub fn drain(&mut self, device: usize, why: &str) -> Vec<u64> {
        self.slots[device].drained = Some(why.to_string());
        let ids: Vec<u64> = self
            .holders
            .iter()
            .filter(|&(_, &d)| d == device)
            .map(|(&id, _)| id)
            .collect();
        for &id in &ids {
            self.release(id);
        }
        for (_, fits) in &mut self.waiting {
            fits.retain(|&d| d != device);
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::packing::GIB;

    fn budget(capacity: u64) -> DeviceBudget {
        DeviceBudget {
            capacity,
            safety_margin: 0,
            process_overhead: 0,
            max_workers: 8,
            allocator_slack: 0.0,
            allocator_floor: 0,
        }
    }

    /// A trial's peak: `fixed` GiB plus `per_row` GiB per row, on any device.
    fn peak(fixed: u64, per_row: u64) -> impl FnMut(usize, usize) -> u64 {
        move |_, m| fixed * GIB + per_row * GIB * m as u64
    }

    #[test]
    fn one_device_is_first_come_first_served() {
        let mut set = DeviceSet::new([budget(10 * GIB)], FitPolicy::FreeNow);
        assert!(set.may_offer_more());
        let Placement::Admit { device: 0, lease } = set.place(1, 4, 1..=4, &mut peak(2, 1)) else {
            panic!("the empty device fits it")
        };
        assert_eq!(lease.micro_batch, 4);
        // 4 GiB free: trial 2 needs 9 at micro-batch 1, so it waits.
        assert_eq!(set.place(2, 4, 1..=4, &mut peak(8, 1)), Placement::Wait);
        assert!(!set.may_offer_more());
        set.release(1);
        assert!(matches!(
            set.place(2, 4, 1..=4, &mut peak(8, 1)),
            Placement::Admit { device: 0, .. }
        ));
        assert!(set.may_offer_more());
        assert_eq!(
            set.place(3, 4, 1..=4, &mut peak(10, 1)),
            Placement::Infeasible {
                needed: 11 * GIB,
                capacity: 10 * GIB
            }
        );
    }

    #[test]
    fn a_trial_goes_where_its_micro_batch_is_largest_then_to_the_least_loaded() {
        let mut set = DeviceSet::new(
            [budget(24 * GIB), budget(24 * GIB), budget(80 * GIB)],
            FitPolicy::FreeNow,
        );
        // Batch 32 needs 34 GiB: only the big card runs it unsplit.
        let Placement::Admit { device, lease } = set.place(1, 32, 1..=32, &mut peak(2, 1)) else {
            panic!("fits")
        };
        assert_eq!((device, lease.micro_batch), (2, 32));
        // A small trial: the same micro-batch everywhere, so the least
        // loaded, then the tighter fit: the first 24 GiB card.
        let small = &mut peak(1, 1);
        assert!(matches!(
            set.place(2, 4, 1..=4, small),
            Placement::Admit { device: 0, .. }
        ));
        assert!(matches!(
            set.place(3, 4, 1..=4, small),
            Placement::Admit { device: 1, .. }
        ));
        assert_eq!(set.device_of(3), Some(1));
        assert_eq!(set.lease(3).map(|l| l.micro_batch), Some(4));
    }

    #[test]
    fn a_trial_that_fits_only_the_big_card_waits_for_it_without_stopping_the_others() {
        let mut set = DeviceSet::new(
            [budget(24 * GIB), budget(24 * GIB), budget(80 * GIB)],
            FitPolicy::FreeNow,
        );
        // Fill the big card with two 35 GiB trials.
        for id in [1, 2] {
            assert!(matches!(
                set.place(id, 1, 1..=1, &mut peak(34, 1)),
                Placement::Admit { device: 2, .. }
            ));
        }
        // 40 GiB at micro-batch 1: only the big card, which has 10 free.
        let big = &mut peak(39, 1);
        assert_eq!(set.place(3, 1, 1..=1, big), Placement::Wait);
        assert_eq!(set.waiting().collect::<Vec<_>>(), [3]);
        assert!(set.may_offer_more(), "the small cards are not reserved");
        // A small trial behind it would fit the big card's 10 GiB, but the
        // big card is reserved: it starts on a small one.
        assert!(matches!(
            set.place(4, 1, 1..=1, &mut peak(1, 1)),
            Placement::Admit { device: 0, .. }
        ));
        set.release(1);
        // 45 GiB free: trial 3 goes first.
        assert!(matches!(
            set.place(3, 1, 1..=1, big),
            Placement::Admit { device: 2, .. }
        ));
        assert_eq!(set.waiting().count(), 0);
    }

    #[test]
    fn waiting_trials_are_bounded_by_the_devices_they_could_use() {
        let mut set = DeviceSet::new([budget(24 * GIB), budget(80 * GIB)], FitPolicy::FreeNow);
        for id in [1, 2] {
            assert!(matches!(
                set.place(id, 1, 1..=1, &mut peak(20, 1)),
                Placement::Admit { .. }
            ));
        }
        // Both fit only the big card: the first reserves it, the second
        // waits behind; then no device is free of reservations.
        assert_eq!(set.place(3, 1, 1..=1, &mut peak(60, 1)), Placement::Wait);
        assert!(set.may_offer_more());
        assert_eq!(set.place(4, 1, 1..=1, &mut peak(22, 1)), Placement::Wait);
        assert!(!set.may_offer_more(), "two trials wait for two devices");
        // Re-offered, a trial keeps its place: 4 cannot pass 3 on the big card.
        set.release(2);
        assert_eq!(set.place(4, 1, 1..=1, &mut peak(22, 1)), Placement::Wait);
        assert!(matches!(
            set.place(3, 1, 1..=1, &mut peak(60, 1)),
            Placement::Admit { device: 1, .. }
        ));
        set.release(1);
        assert!(matches!(
            set.place(4, 1, 1..=1, &mut peak(22, 1)),
            Placement::Admit { device: 0, .. }
        ));
    }

    #[test]
    fn a_priced_placement_leases_the_price_limit_on_the_device_it_names() {
        let mut set = DeviceSet::new([budget(8 * GIB), budget(16 * GIB)], FitPolicy::FreeNow);
        // The allocator reserves 2 GiB over the requested peak: 8 rows
        // need 12 GiB, which only the 16 GiB device has.
        let mut price = |device: usize, m: usize| {
            assert!(device < 2);
            let peak = 2 * GIB + GIB * m as u64;
            Price {
                peak,
                limit: peak + 2 * GIB,
            }
        };
        let Placement::Admit { device, lease } = set.place_priced(1, 8, 1..=8, &mut price) else {
            panic!("fits")
        };
        assert_eq!((device, lease.micro_batch, lease.accumulation), (1, 8, 1));
        assert_eq!(
            (lease.predicted_peak, lease.limit, lease.bytes),
            (10 * GIB, 12 * GIB, 12 * GIB)
        );
        assert_eq!(set.leased_bytes(1), 12 * GIB);
        // The next one: the 4 GiB left there fit no row (one needs 5);
        // the 8 GiB device fits 4 rows, twice a step.
        let Placement::Admit { device, lease } = set.place_priced(2, 8, 1..=8, &mut price) else {
            panic!("fits")
        };
        assert_eq!((device, lease.micro_batch, lease.accumulation), (0, 4, 2));
    }

    #[test]
    fn a_drained_device_gives_back_its_trials_and_takes_no_more() {
        let mut set = DeviceSet::new([budget(24 * GIB), budget(24 * GIB)], FitPolicy::FreeNow);
        let small = &mut peak(1, 1);
        for id in 1..=4 {
            assert!(matches!(
                set.place(id, 1, 1..=1, small),
                Placement::Admit { .. }
            ));
        }
        assert!(!set.device_error(1), "one error is its trial's");
        set.device_ok(1);
        assert!(!set.device_error(1));
        assert!(set.device_error(1), "two in a row drain it");
        let mut gone = set.drain(1, "lost");
        gone.sort_unstable();
        assert_eq!(gone, [2, 4]);
        assert_eq!((set.running(1), set.leased_bytes(1)), (0, 0));
        assert_eq!(set.drained(1), Some("lost"));
        assert_eq!(set.live().collect::<Vec<_>>(), [0]);
        for id in [2, 4] {
            assert!(matches!(
                set.place(id, 1, 1..=1, small),
                Placement::Admit { device: 0, .. }
            ));
        }
        // Fitting only a drained device is fitting nothing.
        let mut by_device = |d: usize, _m: usize| if d == 1 { GIB } else { 30 * GIB };
        assert!(matches!(
            set.place(5, 1, 1..=1, &mut by_device),
            Placement::Infeasible { .. }
        ));
        set.drain(0, "lost");
        assert_eq!(
            set.place(6, 1, 1..=1, small),
            Placement::Infeasible {
                needed: 0,
                capacity: 0
            }
        );
    }
}
