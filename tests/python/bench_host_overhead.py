"""Host time of one dsa op call from Python, next to dsa-bench's figure for the raw C++ call
(`dsa-bench -T 1 --topk 64 --host-overhead`). Enqueue time of N calls, no synchronisation
inside a burst; bursts are short enough that the launch queue never fills."""
import time

import torch

import dsa

T, H, TOPK, N = 1, 16, 64, 16
q_nope = torch.randn(T, H, 512, device="cuda").bfloat16()
q_pe = torch.randn(T, H, 64, device="cuda").bfloat16()
ckv = torch.randn(64, 64, 512, device="cuda").bfloat16()
kpe = torch.randn(64, 64, 64, device="cuda").bfloat16()
idx = torch.randint(0, 64 * 64, (T, TOPK), device="cuda", dtype=torch.int32)
out = torch.empty(T, H, 512, device="cuda", dtype=torch.bfloat16)
lse = torch.empty(T, H, device="cuda")
for name, fn in [("torch.ops.dsa.sparse_mla_forward (allocates out/lse)",
                  lambda: torch.ops.dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, 0.1352)),
                 ("torch.ops.dsa.sparse_mla_forward_out",
                  lambda: torch.ops.dsa.sparse_mla_forward_out(q_nope, q_pe, ckv, kpe, idx, 0.1352, out, lse)),
                 ("dsa.sparse_mla_forward (Python wrapper)",
                  lambda: dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, 0.1352))]:
    best = float("inf")
    for _ in range(20):
        fn()
    for _ in range(50):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        best = min(best, (time.perf_counter() - t0) / N * 1e6)
    torch.cuda.synchronize()
    print(f"host us per call, best of 50 bursts of {N}: {best:6.2f}  {name}")

# Kernel time through the op, as dsa-bench's T64-random case measures it (CUPTI span via
# torch.profiler, L2 flushed before each call): it should match dsa-bench in the same run.
from torch.profiler import ProfilerActivity, profile

T, PAGES = 64, 8462
q_nope = torch.randn(T, H, 512, device="cuda").bfloat16()
q_pe = torch.randn(T, H, 64, device="cuda").bfloat16()
ckv = (torch.randn(PAGES, 64, 512, device="cuda") * 0.5).bfloat16()
kpe = (torch.randn(PAGES, 64, 64, device="cuda") * 0.5).bfloat16()
idx = torch.stack([torch.randperm(PAGES * 64, device="cuda")[:2048] for _ in range(T)]).int()
flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
out64 = torch.empty(T, H, 512, device="cuda", dtype=torch.bfloat16)
lse64 = torch.empty(T, H, device="cuda")
call = lambda: torch.ops.dsa.sparse_mla_forward_out(q_nope, q_pe, ckv, kpe, idx, 0.1352, out64, lse64)
for _ in range(3):
    call()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for r in range(30):
        flush.fill_(r & 127)
        call()
    torch.cuda.synchronize()
events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                key=lambda e: e.time_range.start)
spans, cur = [], None
for e in events:
    if "fill" in e.name.lower():
        if cur:
            spans.append(cur[1] - cur[0])
        cur = None
        continue
    cur = [e.time_range.start, e.time_range.end] if cur is None else [min(cur[0], e.time_range.start),
                                                                     max(cur[1], e.time_range.end)]
if cur:
    spans.append(cur[1] - cur[0])
spans.sort()
print(f"kernel span through the op, T=64 random, L2 flushed, median of {len(spans)}: {spans[len(spans) // 2]:.1f} us "
      "(compare dsa-bench T64-random)")
