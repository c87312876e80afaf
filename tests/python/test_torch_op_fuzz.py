"""The dsa PyTorch op on random problems, as `dsa-bench fuzz` checks the C++ API: each case draws
the shape, the cache format and layout, views with gaps for q / out / lse / indices, list lengths,
the sharing hint, a balanced schedule and sm_scale, and is judged against the float64 reference of
test_torch_op.py. What this adds to the C++ fuzzer is the op's own layer (torch_ops.cpp): the
strides it reads off views, None / given out and lse, uint8 and float8 caches. Out and lse are
views into NaN-poisoned buffers, and every element outside them must still be NaN afterwards.

A failing case names its seed: `pytest tests/python/test_torch_op_fuzz.py -k "case_17"`."""
import math
import os
import random

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
dsa = pytest.importorskip("dsa", reason="the dsa extension is not built (pip install --no-build-isolation ./python)")

from test_torch_op import check, reference, to_fp8_ds_mla  # noqa: E402  (pytest puts tests/python on sys.path)

DEV = "cuda"
CASES = int(os.environ.get("DSA_TORCH_FUZZ_CASES", "80"))  # more on a device run: DSA_TORCH_FUZZ_CASES=1000
PATTERNS = ["random", "runs", "padding", "single", "middle", "duplicates", "out_of_range", "short"]


def log_uniform(rng, lo, hi):
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def draw_indices(rng, g, T, topk, rows, pattern):
    """int32 [T, topk] on the CPU: each pattern of the core issue, and lists shorter than topk."""
    idx = torch.full((T, topk), -1, dtype=torch.int32)
    for t in range(T):
        k = min(topk, rows)
        if pattern in ("random", "middle", "out_of_range"):
            idx[t, :k] = torch.randperm(rows, generator=g)[:k].int()
            if pattern == "middle":
                idx[t, torch.rand(topk, generator=g) < 0.3] = -1
            elif pattern == "out_of_range":
                bad = torch.rand(topk, generator=g) < 0.2
                idx[t, bad] = torch.tensor([rows, rows + 5, -2, 2**31 - 1, -2**31], dtype=torch.int32)[
                    torch.randint(0, 5, (int(bad.sum()),), generator=g)]
        elif pattern == "runs":  # a contiguous run of 1..topk rows
            n = rng.randint(1, k)
            start = rng.randint(0, rows - n)
            idx[t, :n] = torch.arange(start, start + n, dtype=torch.int32)
        elif pattern == "single":
            idx[t, rng.randrange(topk)] = rng.randrange(rows)
        elif pattern == "duplicates":
            pool = torch.randint(0, rows, (rng.randint(1, 6),), generator=g).int()
            idx[t] = pool[torch.randint(0, pool.numel(), (topk,), generator=g)]
        elif pattern == "short":  # valid rows up to a per-token length, then -1
            n = rng.randint(0, k)
            idx[t, :n] = torch.randperm(rows, generator=g)[:n].int()
    return idx


def strided_view(rng, g, shape, dtype):
    """A view of `shape` with random values and gaps: contiguous, padded in the last dim, padded in
    dim 1, or with dims 0 and 1 swapped in memory (head-major q)."""
    T, H, D = shape
    kind = rng.choice(["packed", "pad_last", "pad_heads", "swapped"])
    pad = rng.choice((0, 8, 24)) if kind != "packed" else 0
    if kind == "swapped":
        return torch.randn(H, T, D + pad, generator=g).to(DEV, dtype).transpose(0, 1)[..., :D]
    extra_h = rng.randint(1, 3) if kind == "pad_heads" else 0
    return torch.randn(T, H + extra_h, D + pad, generator=g).to(DEV, dtype)[:, :H, :D]


def poisoned_output(rng, T, H):
    """out [T, H, 512] bf16 and lse [T, H] fp32 as views into NaN buffers with gaps (or packed)."""
    pad_d = rng.choice([0, 0, 8, 64])
    pad_h = rng.choice([0, 0, 1, 3])
    head_major = rng.random() < 0.25
    if head_major:
        out_buf = torch.full((H + pad_h, T, 512 + pad_d), float("nan"), dtype=torch.bfloat16, device=DEV)
        out = out_buf.transpose(0, 1)[:, :H, :512]
    else:
        out_buf = torch.full((T, H + pad_h, 512 + pad_d), float("nan"), dtype=torch.bfloat16, device=DEV)
        out = out_buf[:, :H, :512]
    lse_buf = torch.full((T, H + rng.choice([0, 0, 1, 5])), float("nan"), dtype=torch.float32, device=DEV)
    return out, out_buf, lse_buf[:, :H], lse_buf


def outside_is_nan(buf, view):
    """True when every element of buf outside view is still NaN (view shares buf's storage)."""
    assert buf.is_contiguous()
    inside = torch.zeros(buf.shape, dtype=torch.bool, device=buf.device)
    # The view's elements, marked through a view of the (contiguous) mask with the same strides.
    inside.as_strided(view.shape, view.stride(), view.storage_offset() - buf.storage_offset()).fill_(True)
    return bool(torch.isnan(buf.float())[~inside].all())


def draw_case(seed):
    rng = random.Random(seed)
    g = torch.Generator(device="cpu").manual_seed(seed)
    H = rng.choice([16, 32, 64, 128])
    T = log_uniform(rng, 1, 160 if rng.random() < 0.8 else 600)
    topk = log_uniform(rng, 1, 2600)
    while T * topk * H > 2**22 and T > 1:  # the float64 reference's time
        T = max(1, T // 2)
    page_size = rng.choice([1, 2, 16, 64, 100])
    rows_wanted = log_uniform(rng, 1, 20000)
    num_pages = max(1, rows_wanted // page_size)
    rows = num_pages * page_size
    kv = rng.choice(["bf16", "bf16_combined", "fp8_uint8", "fp8_float8", "fp8_wide_rows"])
    pattern = rng.choice(PATTERNS)

    q_nope = strided_view(rng, g, (T, H, 512), torch.bfloat16)
    q_pe = strided_view(rng, g, (T, H, 64), torch.bfloat16)
    scale = rng.choice([0.5, 0.5, 0.05, 1.0])
    if kv == "bf16_combined":  # one [pages, page_size, 576] buffer, ckv and kpe as slices of its rows
        buf = (torch.randn(num_pages, page_size, 576, generator=g) * scale).to(DEV, torch.bfloat16)
        ckv, kpe = buf[..., :512], buf[..., 512:]
    else:
        ckv = (torch.randn(num_pages, page_size, 512, generator=g) * scale).to(DEV, torch.bfloat16)
        kpe = (torch.randn(num_pages, page_size, 64, generator=g) * scale).to(DEV, torch.bfloat16)
    if kv.startswith("fp8"):
        cache, ckv_values = to_fp8_ds_mla(ckv, kpe, torch.float8_e4m3fn if kv == "fp8_float8" else torch.uint8)
        if kv == "fp8_wide_rows":  # rows of 672 bytes, the cache a slice of them
            wide = torch.zeros(num_pages, page_size, 672, dtype=torch.uint8, device=DEV)
            wide[..., :656] = cache
            cache = wide[..., :656]
        args = (q_nope, q_pe, cache, None)
    else:
        ckv_values = ckv
        args = (q_nope, q_pe, ckv, kpe)

    idx_full = draw_indices(rng, g, T, topk, rows, pattern)
    if rng.random() < 0.3:  # the lists as a view with the full row stride of a wider tensor
        wide = torch.randint(0, rows, (T, topk + rng.randint(1, 40)), generator=g, dtype=torch.int32)
        wide[:, :topk] = idx_full
        idx = wide.to(DEV)[:, :topk]
    else:
        idx = idx_full.to(DEV)
    lengths = None
    idx_ref = idx_full.clone()
    if rng.random() < 0.3:  # topk_length: entries past each length are ignored, whatever they hold
        lengths = torch.tensor([rng.choice([rng.randint(0, topk), topk, -3, topk + 9]) for _ in range(T)], dtype=torch.int32)
        cut = torch.arange(topk)[None, :] >= lengths.clamp(0, topk)[:, None]
        idx_ref[cut] = -1
        fill = torch.randint(0, rows, (T, topk), generator=g, dtype=torch.int32)
        idx_host = torch.where(cut, fill, idx_full)  # valid rows past the length: must not be read
        idx.copy_(idx_host.to(DEV))
        lengths = lengths.to(DEV)
    sm_scale = rng.choice([1.0, -1.0]) * rng.uniform(0.02, 0.2) if rng.random() < 0.95 else 0.0
    sharing = rng.choice(["unknown", "consecutive", "none"])
    use_schedule = rng.random() < 0.2  # T <= 600 here, within the schedule's 1024
    given_out = rng.random() < 0.7
    desc = (f"H={H} T={T} topk={topk} page_size={page_size} pages={num_pages} kv={kv} pattern={pattern} "
            f"lengths={lengths is not None} sharing={sharing} schedule={use_schedule} out={given_out} sm_scale={sm_scale:.4f}")
    return dict(rng=rng, H=H, T=T, topk=topk, args=args, ckv_values=ckv_values, kpe=kpe, idx=idx, idx_ref=idx_ref.to(DEV),
                lengths=lengths, sm_scale=sm_scale, sharing=sharing, use_schedule=use_schedule, given_out=given_out,
                desc=desc)


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"case_{s}") for s in range(CASES)])
def test_random_problem(seed):
    c = draw_case(seed)
    q_nope, q_pe = c["args"][0], c["args"][1]
    ref = reference(q_nope, q_pe, c["ckv_values"], c["kpe"], c["idx_ref"], c["sm_scale"])
    kw = dict(index_sharing=c["sharing"], topk_length=c["lengths"])
    if c["use_schedule"]:
        make = lambda: dsa.sparse_mla_schedule(c["idx"], c["args"][2], c["H"], topk_length=c["lengths"])  # noqa: E731
        if 32 < c["topk"] <= 2048:  # the balanced plan's domain: lists of 2 to 64 tiles of 32 rows
            kw["schedule"] = make()
        else:
            with pytest.raises(RuntimeError, match="dsa.sparse_mla_schedule: dsa: balanced: needs topk"):
                make()
    if c["given_out"]:
        out, out_buf, lse, lse_buf = poisoned_output(c["rng"], c["T"], c["H"])
        got = dsa.sparse_mla_forward(*c["args"], c["idx"], c["sm_scale"], out=out, lse=lse, **kw)
        assert got[0].data_ptr() == out.data_ptr() and got[1].data_ptr() == lse.data_ptr(), c["desc"]
        torch.cuda.synchronize()
        assert outside_is_nan(out_buf, out), "a write outside out's view: " + c["desc"]
        assert outside_is_nan(lse_buf, lse), "a write outside lse's view: " + c["desc"]
    else:
        got = dsa.sparse_mla_forward(*c["args"], c["idx"], c["sm_scale"], **kw)
    try:
        check(got, ref)
    except AssertionError as e:
        raise AssertionError(f"{c['desc']}: {e}") from None
