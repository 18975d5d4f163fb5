//! Counts of the host's work on a device stream, outside the `cuda`
//! feature so that code timing any backend can carry them.

/// Cumulative counts of the host's work on a backend's stream, from
/// `CudaBackend::host_counters` (the `cuda` feature): enough to tell
/// whether a step is bound by the host's launches (the host rarely waits
/// in synchronisation, so the device idles between launches) or by the
/// device (the host spends most of the step waiting). Counting costs one
/// relaxed atomic add per launch and two clock reads per synchronisation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// Stream synchronisations (`cuStreamSynchronize`): one per
    /// `CudaBackend::check` with nothing pending and one per copy between
    /// host and device (with staged uploads, one per upload that waited
    /// for the ring instead).
    pub syncs: u64,
    /// Wall time the host spent waiting in those synchronisations, in ns,
    /// counting the copy each one follows (a copy to or from pageable
    /// memory can wait for the stream before it returns).
    pub sync_wait_ns: u64,
    /// Kernels of ours launched (`cuLaunchKernel`).
    pub kernel_launches: u64,
    /// cuBLAS products enqueued (each one or more kernels of cuBLAS's).
    pub blas_calls: u64,
}

impl HostCounters {
    /// The counts between `earlier` and `self` (two readings of one
    /// backend, `earlier` first).
    pub fn since(&self, earlier: &HostCounters) -> HostCounters {
        HostCounters {
            syncs: self.syncs.saturating_sub(earlier.syncs),
            sync_wait_ns: self.sync_wait_ns.saturating_sub(earlier.sync_wait_ns),
            kernel_launches: self.kernel_launches.saturating_sub(earlier.kernel_launches),
            blas_calls: self.blas_calls.saturating_sub(earlier.blas_calls),
        }
    }
}
