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
