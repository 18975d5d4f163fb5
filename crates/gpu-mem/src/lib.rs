//! A caching CUDA memory allocator with expandable segments, exact
//! statistics, fragmentation metrics and per-instance memory limits.
//!
//! Long studies die of fragmentation and of one trial taking the memory
//! another needed. This allocator caches device memory the way PyTorch's does,
//! can grow segments in place on CUDA's virtual-memory API so that freed
//! memory is not stranded between live blocks, and reports every byte.
//!
//! It deliberately does not know about models, trials or storage; it is
//! usable by any cudarc program, and every rule is testable without a GPU on a
//! simulated device.
