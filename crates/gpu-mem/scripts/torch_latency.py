"""Median latency of PyTorch's caching allocator (alloc + free pair), for
comparison with gpu-mem's examples/gpu_latency.rs.

Usage: python torch_latency.py SIZE [SIZE ...]
Prints one JSON line per size: {"size": N, "median_ns": X, "python_call_ns": Y}
where python_call_ns is the median cost of two empty Python calls (the
interpreter overhead included in median_ns).
"""

import json
import statistics
import sys
import time

import torch

PAIRS = 20_000


def median_pair_ns(fn):
    fn()  # warm up: the first call creates the segment
    samples = []
    for _ in range(PAIRS):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples)


def main():
    sizes = [int(s) for s in sys.argv[1:]]
    if not sizes:
        sys.exit("usage: torch_latency.py SIZE [SIZE ...]")
    if not torch.cuda.is_available():
        sys.exit("torch sees no CUDA device")
    device = torch.cuda.current_device()
    stream = torch.cuda.current_stream(device)

    def nothing():
        pass

    overhead = median_pair_ns(lambda: (nothing(), nothing()))
    for size in sizes:
        def pair(size=size):
            ptr = torch.cuda.caching_allocator_alloc(size, device, stream)
            torch.cuda.caching_allocator_delete(ptr)

        print(json.dumps({"size": size, "median_ns": median_pair_ns(pair), "python_call_ns": overhead}))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
