"""The dsa PyTorch ops against the FlashInfer-Bench definition's reference formula (float64),
on fresh random inputs, with every edge case of the core issue, torch.compile(fullgraph=True),
CUDA-graph capture/replay, non-contiguous q, reused out= buffers and clear errors."""
import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
dsa = pytest.importorskip("dsa", reason="the dsa extension is not built (pip install --no-build-isolation ./python)")

SM_SCALE = 0.1352337788608801
DEV = "cuda"


def reference(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    """The definition's formula in float64: softmax over valid rows, base-2 lse, zeros/-inf if none."""
    T, H = q_nope.shape[:2]
    rows = ckv_cache.shape[0] * ckv_cache.shape[1]
    ckv = ckv_cache.reshape(-1, 512).double()
    kpe = kpe_cache.reshape(-1, 64).double()
    out = torch.zeros(T, H, 512, dtype=torch.float64, device=q_nope.device)
    lse = torch.full((T, H), -math.inf, dtype=torch.float64, device=q_nope.device)
    for t in range(T):
        idx = sparse_indices[t]
        valid = idx[(idx >= 0) & (idx < rows)].long()
        if valid.numel() == 0:
            continue
        logits = (q_nope[t].double() @ ckv[valid].T + q_pe[t].double() @ kpe[valid].T) * sm_scale
        lse[t] = torch.logsumexp(logits, -1) / math.log(2.0)
        out[t] = torch.softmax(logits, -1) @ ckv[valid]
    return out, lse


def make_inputs(T=3, H=16, topk=2048, page_size=64, num_pages=64, pattern="random", seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q_nope = torch.randn(T, H, 512, generator=g).to(DEV, torch.bfloat16)
    q_pe = torch.randn(T, H, 64, generator=g).to(DEV, torch.bfloat16)
    ckv = (torch.randn(num_pages, page_size, 512, generator=g) * 0.5).to(DEV, torch.bfloat16)
    kpe = (torch.randn(num_pages, page_size, 64, generator=g) * 0.5).to(DEV, torch.bfloat16)
    rows = num_pages * page_size
    idx = torch.full((T, topk), -1, dtype=torch.int32)
    for t in range(T):
        if pattern == "random":
            k = min(topk, rows)
            idx[t, :k] = torch.randperm(rows, generator=g)[:k].int()
        elif pattern == "run":  # page-aligned contiguous run, -1 after
            n = int(torch.randint(1, topk + 1, (1,), generator=g))
            n = min(n, rows)
            start = int(torch.randint(0, max(1, num_pages - (n + page_size - 1) // page_size + 1), (1,), generator=g)) * page_size
            idx[t, :n] = torch.arange(start, min(start + n, rows), dtype=torch.int32)
        elif pattern == "padding":
            pass
        elif pattern == "single":
            idx[t, int(torch.randint(0, topk, (1,), generator=g))] = int(torch.randint(0, rows, (1,), generator=g))
        elif pattern == "middle":  # -1 in the middle
            k = min(topk, rows)
            idx[t, :k] = torch.randperm(rows, generator=g)[:k].int()
            idx[t, topk // 3: topk // 2] = -1
            idx[t, torch.rand(topk, generator=g) < 0.2] = -1
        elif pattern == "duplicates":
            pool = torch.randint(0, rows, (5,), generator=g).int()
            idx[t] = pool[torch.randint(0, 5, (topk,), generator=g)]
        elif pattern == "out_of_range":
            k = min(topk, rows)
            idx[t, :k] = torch.randperm(rows, generator=g)[:k].int()
            bad = torch.rand(topk, generator=g) < 0.2
            idx[t, bad] = torch.tensor([rows, rows + 7, -2, 2**31 - 1], dtype=torch.int32)[
                torch.randint(0, 4, (int(bad.sum()),), generator=g)]
    return q_nope, q_pe, ckv, kpe, idx.to(DEV)


def check(got, ref):
    out, lse = got
    rout, rlse = ref
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert not torch.isnan(out).any() and torch.isfinite(out).all()
    err = (out.double() - rout).abs()
    assert ((err > 1e-2) & (err > 1e-2 * rout.abs())).sum() == 0, f"max abs err {err.max().item()}"
    rel = (out.double() - rout).norm() / rout.norm().clamp_min(1e-30)
    assert rel <= 1e-2 or rout.norm() == 0
    fin = torch.isfinite(rlse)
    assert torch.equal(torch.isfinite(lse), fin), "lse -inf where the reference is finite, or the reverse"
    if fin.any():
        assert (lse.double()[fin] - rlse[fin]).abs().max() <= 1e-2
    assert (lse[~fin] == -math.inf).all()


@pytest.mark.parametrize("H", [16, 32, 64, 128])
@pytest.mark.parametrize("pattern", ["random", "run", "padding", "single", "middle", "duplicates", "out_of_range"])
def test_matches_definition_reference(H, pattern):
    args = make_inputs(T=2, H=H, pattern=pattern, seed=H * 31 + len(pattern))
    check(dsa.sparse_mla_forward(*args, SM_SCALE), reference(*args, SM_SCALE))


@pytest.mark.parametrize("topk,page_size", [(1, 64), (63, 1), (256, 1), (2049, 64)])
def test_odd_topk_and_page_sizes(topk, page_size):
    args = make_inputs(T=5, topk=topk, page_size=page_size, num_pages=4096 // page_size * 2, seed=topk)
    check(dsa.run(*args, SM_SCALE), reference(*args, SM_SCALE))


def test_run_matches_the_definition_signature():
    args = make_inputs(T=4, seed=7)
    out, lse = dsa.run(*args, torch.tensor(SM_SCALE))
    assert out.shape == (4, 16, 512) and lse.shape == (4, 16)
    check((out, lse), reference(*args, SM_SCALE))


def test_non_contiguous_q():
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=3, seed=11)
    big = torch.randn(3, 16, 600, device=DEV).to(torch.bfloat16)
    big[..., :512] = q_nope
    big[..., 512:576] = q_pe
    qn, qp = big[..., :512], big[..., 512:576]
    assert not qn.is_contiguous()
    check(dsa.sparse_mla_forward(qn, qp, ckv, kpe, idx, SM_SCALE), reference(q_nope, q_pe, ckv, kpe, idx, SM_SCALE))


# ---- the joined layouts engines keep (vLLM, FlashMLA): q [T, H, 576], rows ckv | kpe in one row ----
@pytest.mark.parametrize("H,T,cache_dims,index_dims", [(16, 5, 3, 2), (16, 600, 4, 3), (64, 3, 4, 2), (128, 2, 3, 3)])
def test_joined_layouts_give_the_split_calls_bits(H, T, cache_dims, index_dims):
    # Split-K (T = 5, 64 / 128 heads) and shared rows (T = 600 consecutive at 16 heads, Q by TMA at
    # 64 / 128 heads) over strided views of one q and one cache: the same plan, so the same bits.
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=T, H=H, num_pages=16 if T > 100 else 64, pattern="middle", seed=81 + H)
    q, kv = torch.cat([q_nope, q_pe], -1), torch.cat([ckv, kpe], -1)
    kv = kv.unsqueeze(2) if cache_dims == 4 else kv
    joined_idx = idx.unsqueeze(1) if index_dims == 3 else idx
    sharing = "consecutive" if T > 100 else "unknown"
    want = dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE, index_sharing=sharing)
    got = dsa.sparse_mla_forward_joined(q, kv, joined_idx, SM_SCALE, index_sharing=sharing)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    check(got, reference(q_nope, q_pe, ckv, kpe, idx, SM_SCALE))


def test_joined_fp8_cache_with_a_schedule_and_out_buffers():
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=9, H=16, pattern="run", seed=83)
    cache, dequantized = to_fp8_ds_mla(ckv, kpe, torch.float8_e4m3fn)
    q, kv = torch.cat([q_nope, q_pe], -1), cache.unsqueeze(2)  # FlashMLA's [pages, page_size, 1, 656]
    _, _, sched_cache, kpe_view, sched_idx = dsa.split_joined_layout(q, kv, idx.unsqueeze(1))
    assert kpe_view is None and sched_cache.data_ptr() == cache.data_ptr() and sched_idx.dim() == 2
    sched = dsa.sparse_mla_schedule(sched_idx, sched_cache, 16)
    out = torch.full((9, 16, 512), float("nan"), dtype=torch.bfloat16, device=DEV)
    got = dsa.sparse_mla_forward_joined(q, kv, idx.unsqueeze(1), SM_SCALE, out=out, schedule=sched)
    assert got[0].data_ptr() == out.data_ptr()
    check(got, reference(q_nope, q_pe, dequantized, kpe, idx, SM_SCALE))


def test_joined_layouts_in_torch_compile_and_a_cuda_graph():
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=2, seed=84)
    q, kv = torch.cat([q_nope, q_pe], -1), torch.cat([ckv, kpe], -1)
    ref = reference(q_nope, q_pe, ckv, kpe, idx, SM_SCALE)

    @torch.compile(fullgraph=True)
    def f(q, kv, idx):
        out, lse = dsa.sparse_mla_forward_joined(q, kv, idx, SM_SCALE)
        return out * 2, lse + 1

    out2, lse1 = f(q, kv, idx)
    check((out2 / 2, lse1 - 1), ref)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = dsa.sparse_mla_forward_joined(q, kv, idx, SM_SCALE)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check((out, lse), ref)


@pytest.mark.parametrize("mutate,message", [
    (lambda a: a.__setitem__(0, a[0][..., :575]), r"q must be \[T, H, 576\]"),
    (lambda a: a.__setitem__(0, a[0].reshape(-1, 576)), r"q must be \[T, H, 576\]"),
    (lambda a: a.__setitem__(1, a[1][..., :512]), r"kv_cache must be \[pages, page_size, 576\] bf16"),
    (lambda a: a.__setitem__(1, torch.stack([a[1]] * 2, 2)), r"\[pages, page_size, 1, D\] \(one KV head\)"),
    (lambda a: a.__setitem__(1, a[1].view(torch.uint8)), "656"),
    (lambda a: a.__setitem__(2, torch.stack([a[2]] * 2, 1)), r"\[T, 1, topk\] \(one KV head\)"),
    (lambda a: a.__setitem__(2, a[2].long()), "sparse_indices must be Int"),  # the op's own check, after the views
])
def test_joined_layout_errors_are_clear(mutate, message):
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=2, seed=85)
    args = [torch.cat([q_nope, q_pe], -1), torch.cat([ckv, kpe], -1), idx]
    mutate(args)
    with pytest.raises((ValueError, RuntimeError), match=message):
        dsa.sparse_mla_forward_joined(*args, SM_SCALE)


def test_indices_sliced_to_their_valid_length():
    # Left-packed lists (contexts shorter than topk): a caller passes sparse_indices[:, :L], a view
    # with the full row stride. Positions past L hold valid-looking rows that must not be read.
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=6, pattern="run", seed=13)
    idx[:, 300:] = -1  # contexts of at most 300 rows
    L = int(((idx >= 0).int() * torch.arange(1, idx.shape[1] + 1, device=DEV, dtype=torch.int32)).max())
    assert L < idx.shape[1]
    wide = idx.clone()
    wide[:, L:] = torch.arange(idx.shape[1] - L, device=DEV, dtype=torch.int32) % (ckv.shape[0] * ckv.shape[1])
    view = wide[:, :L]
    assert not view.is_contiguous()
    check(dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, view, SM_SCALE), reference(q_nope, q_pe, ckv, kpe, idx, SM_SCALE))


@pytest.mark.parametrize("H,T,index_sharing", [(16, 6, "unknown"), (16, 600, "consecutive"), (64, 3, "unknown")])
def test_topk_length_ends_each_list(H, T, index_sharing):
    # FlashMLA's topk_length: only sparse_indices[t, :topk_length[t]] is used, whatever lies past
    # it (here valid rows); lengths below 0 count as 0, above topk as topk. Split-K, shared rows
    # with a union pass (600 tokens, consecutive), shared rows at 64 heads, and a balanced plan.
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=T, H=H, num_pages=16, seed=17)
    rows = ckv.shape[0] * ckv.shape[1]
    idx = torch.where(idx >= 0, idx, torch.arange(idx.numel(), device=DEV, dtype=torch.int32).view_as(idx) % rows)
    choices = torch.tensor([0, 1, 2, 33, 700, 2048, 5000, -4], dtype=torch.int32, device=DEV)
    lengths = choices[torch.arange(T, device=DEV) % choices.numel()]
    cut = idx.clone()
    cut[torch.arange(idx.shape[1], device=DEV)[None, :] >= lengths.clamp(0, idx.shape[1])[:, None]] = -1
    ref = reference(q_nope, q_pe, ckv, kpe, cut, SM_SCALE)
    got = dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE, index_sharing=index_sharing, topk_length=lengths)
    check(got, ref)
    if T <= 1024:
        sched = dsa.sparse_mla_schedule(idx, ckv, H, topk_length=lengths)
        check(dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE, schedule=sched, topk_length=lengths), ref)
    with pytest.raises(RuntimeError, match=r"topk_length must be \[T\]"):
        dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE, topk_length=lengths[:-1])
    with pytest.raises(RuntimeError, match="topk_length must be Int"):
        dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE, topk_length=lengths.long())


def test_out_buffers_are_reused():
    out = torch.full((3, 16, 512), float("nan"), device=DEV, dtype=torch.bfloat16)
    lse = torch.full((3, 16), float("nan"), device=DEV)
    for seed in (1, 2):
        args = make_inputs(T=3, seed=seed)
        got_out, got_lse = dsa.sparse_mla_forward(*args, SM_SCALE, out=out, lse=lse)
        assert got_out.data_ptr() == out.data_ptr() and got_lse.data_ptr() == lse.data_ptr()
        check((out, lse), reference(*args, SM_SCALE))


def test_torch_compile_fullgraph():
    args = make_inputs(T=2, seed=21)

    @torch.compile(fullgraph=True)
    def f(q_nope, q_pe, ckv, kpe, idx):
        out, lse = torch.ops.dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE)
        return out * 2, lse + 1

    out2, lse1 = f(*args)
    rout, rlse = reference(*args, SM_SCALE)
    check((out2 / 2, lse1 - 1), (rout, rlse))


def test_cuda_graph_capture_and_replay():
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=2, H=64, seed=31)
    dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE)  # warm up outside the graph
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE)
    for seed in (32, 33):
        nq, nqp, nckv, nkpe, nidx = make_inputs(T=2, H=64, seed=seed)
        q_nope.copy_(nq); q_pe.copy_(nqp); ckv.copy_(nckv); kpe.copy_(nkpe); idx.copy_(nidx)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        check((out, lse), reference(nq, nqp, nckv, nkpe, nidx, SM_SCALE))


@pytest.mark.parametrize("mutate,message", [
    (lambda a: a.__setitem__(0, a[0].float()), "q_nope must be BFloat16"),
    (lambda a: a.__setitem__(2, a[2].cpu()), "ckv_cache must be a CUDA tensor"),
    (lambda a: a.__setitem__(4, a[4].long()), "sparse_indices must be Int"),
    (lambda a: a.__setitem__(1, a[1][:, :, :32]), "q_pe must be [T, H, 64]"),
    (lambda a: [a.__setitem__(i, torch.cat([a[i]] * 2, 1)[:, :24].contiguous()) for i in (0, 1)], "num_heads"),
    (lambda a: [a.__setitem__(i, a[i].cpu()) for i in range(5)], "must be a CUDA tensor"),
    (lambda a: a.__setitem__(1, a[1].transpose(1, 2).contiguous().transpose(1, 2)), "contiguous in its last dimension"),
    (lambda a: a.__setitem__(0, torch.cat([a[0], a[0][..., :8]], -1)[..., 4:516]), "16-byte aligned"),
    (lambda a: [a.__setitem__(i, a[i][::2]) for i in (2, 3)], "pages must be contiguous rows"),
])
def test_clear_errors(mutate, message):
    args = list(make_inputs(T=2, seed=41))
    mutate(args)
    with pytest.raises(RuntimeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        dsa.sparse_mla_forward(*args, SM_SCALE)


@pytest.mark.parametrize("index_sharing", ["unknown", "consecutive", "none"])
def test_every_index_sharing_hint(index_sharing):
    # T = 512 at 16 heads: "consecutive" plans the shared-rows kernel there, the others split-K.
    args = make_inputs(T=512, topk=2048, num_pages=64, seed=51)
    check(dsa.sparse_mla_forward(*args, SM_SCALE, index_sharing=index_sharing), reference(*args, SM_SCALE))


def test_bad_index_sharing_is_a_clear_error():
    args = make_inputs(T=2, seed=52)
    with pytest.raises(RuntimeError, match="index_sharing must be 'unknown', 'consecutive'"):
        dsa.sparse_mla_forward(*args, SM_SCALE, index_sharing="prefill")


@pytest.mark.parametrize("pattern", ["random", "run"])
def test_min_valid_entries_hint_even_when_it_does_not_hold(pattern):
    # T = 24 at 16 heads: on an H200 full lists take one CTA per SM; "run" lists are shorter than
    # the hint says, which may cost time but never correctness.
    args = make_inputs(T=24, topk=2048, num_pages=64, pattern=pattern, seed=53)
    check(dsa.sparse_mla_forward(*args, SM_SCALE, min_valid_entries=2048), reference(*args, SM_SCALE))


@pytest.mark.parametrize("count", [2049, -1, 2**32 + 5, -(2**32) + 5])
def test_bad_min_valid_entries_is_a_clear_error(count):
    # 2^32 + 5 and -2^32 + 5 would narrow to a valid 5 as a C int: the op checks the int64 first.
    args = make_inputs(T=2, seed=54)
    with pytest.raises(RuntimeError, match=r"min_valid_entries must be in \[0, topk = 2048\], got " + str(count)):
        dsa.sparse_mla_forward(*args, SM_SCALE, min_valid_entries=count)


def test_balanced_schedule_matches_the_reference_even_when_stale():
    # Mixed lengths (page-aligned runs of 1-2048 rows) at T = 70: the balanced plan's regime.
    args = make_inputs(T=70, H=16, pattern="run", num_pages=64, seed=61)
    ref = reference(*args, SM_SCALE)
    sched = dsa.sparse_mla_schedule(args[4], args[2], 16)
    assert sched.dtype == torch.uint8 and sched.is_cuda
    check(dsa.sparse_mla_forward(*args, SM_SCALE, schedule=sched), ref)
    # A schedule from another step's indices (other counts, the same shape) changes the speed only.
    stale = dsa.sparse_mla_schedule(make_inputs(T=70, H=16, pattern="random", num_pages=64, seed=62)[4], args[2], 16)
    check(dsa.sparse_mla_forward(*args, SM_SCALE, schedule=stale), ref)
    out = torch.empty(70, 16, 512, dtype=torch.bfloat16, device=DEV)
    check(dsa.sparse_mla_forward(*args, SM_SCALE, out=out, schedule=sched), ref)


def test_balanced_schedule_and_forward_in_a_cuda_graph():
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=9, H=32, pattern="run", seed=63)
    dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE, schedule=dsa.sparse_mla_schedule(idx, ckv, 32))
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sched = dsa.sparse_mla_schedule(idx, ckv, 32)
        out, lse = dsa.sparse_mla_forward(q_nope, q_pe, ckv, kpe, idx, SM_SCALE, schedule=sched)
    for seed in (64, 65):
        nq, nqp, nckv, nkpe, nidx = make_inputs(T=9, H=32, pattern="run", seed=seed)
        q_nope.copy_(nq); q_pe.copy_(nqp); ckv.copy_(nckv); kpe.copy_(nkpe); idx.copy_(nidx)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        check((out, lse), reference(nq, nqp, nckv, nkpe, nidx, SM_SCALE))


def test_balanced_schedule_errors_are_clear():
    args = make_inputs(T=4, seed=66)
    sched = dsa.sparse_mla_schedule(args[4], args[2], 16)
    with pytest.raises(RuntimeError, match="schedule_bytes: must be >="):
        dsa.sparse_mla_forward(*args, SM_SCALE, schedule=sched[:16])
    with pytest.raises(RuntimeError, match="schedule must be Byte"):
        dsa.sparse_mla_forward(*args, SM_SCALE, schedule=sched.int())
    with pytest.raises(RuntimeError, match="sparse_indices must be a CUDA tensor"):
        dsa.sparse_mla_schedule(args[4].cpu(), args[2], 16)
    with pytest.raises(RuntimeError, match="num_tokens <= 1024"):
        dsa.sparse_mla_schedule(torch.zeros(1025, 64, dtype=torch.int32, device=DEV), args[2], 16)


def to_fp8_ds_mla(ckv, kpe, dtype=torch.uint8):
    """DeepSeek-V3.2's FP8 cache from bf16 ckv / kpe: each 128-dim block of a row scaled by its
    absolute maximum / 448, as e4m3; rows of 512 e4m3 bytes, 4 fp32 scales and 64 bf16 kpe values.
    Returns the [pages, page_size, 656] cache (uint8 or float8_e4m3fn) and its dequantized ckv."""
    pages, page_size = ckv.shape[:2]
    blocks = ckv.float().reshape(pages, page_size, 4, 128)
    scale = blocks.abs().amax(-1, keepdim=True) / 448.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    e4m3 = (blocks / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    dequantized = (e4m3.float() * scale).reshape(pages, page_size, 512)
    rows = torch.cat([e4m3.reshape(pages, page_size, 512).view(torch.uint8),
                      scale.reshape(pages, page_size, 4).contiguous().view(torch.uint8),
                      kpe.contiguous().view(torch.uint8)], -1)
    assert rows.shape[-1] == 656
    return rows.view(dtype), dequantized


@pytest.mark.parametrize("H", [16, 64])
@pytest.mark.parametrize("pattern", ["random", "middle", "duplicates", "single"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float8_e4m3fn])
def test_fp8_cache_matches_the_reference_of_its_values(H, pattern, dtype):
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=3, H=H, pattern=pattern, seed=H + len(pattern))
    cache, dequantized = to_fp8_ds_mla(ckv, kpe, dtype)
    ref = reference(q_nope, q_pe, dequantized, kpe, idx, SM_SCALE)
    check(dsa.sparse_mla_forward(q_nope, q_pe, cache, None, idx, SM_SCALE), ref)
    out = torch.full((3, H, 512), float("nan"), dtype=torch.bfloat16, device=DEV)
    check(dsa.sparse_mla_forward(q_nope, q_pe, cache, None, idx, SM_SCALE, out=out), ref)


def test_fp8_cache_with_a_balanced_schedule_and_in_a_cuda_graph():
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=9, H=16, pattern="run", seed=71)
    cache, dequantized = to_fp8_ds_mla(ckv, kpe)
    ref = reference(q_nope, q_pe, dequantized, kpe, idx, SM_SCALE)
    check(dsa.sparse_mla_forward(q_nope, q_pe, cache, None, idx, SM_SCALE, schedule=dsa.sparse_mla_schedule(idx, cache, 16)), ref)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = dsa.sparse_mla_forward(q_nope, q_pe, cache, None, idx, SM_SCALE)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check((out, lse), ref)


def test_fp8_cache_errors_are_clear():
    q_nope, q_pe, ckv, kpe, idx = make_inputs(T=2, seed=72)
    cache, _ = to_fp8_ds_mla(ckv, kpe)
    with pytest.raises(RuntimeError, match="kpe_cache must be None with an fp8_ds_mla ckv_cache"):
        dsa.sparse_mla_forward(q_nope, q_pe, cache, kpe, idx, SM_SCALE)
    with pytest.raises(RuntimeError, match="kpe_cache is required with a bf16 ckv_cache"):
        dsa.sparse_mla_forward(q_nope, q_pe, ckv, None, idx, SM_SCALE)
    with pytest.raises(RuntimeError, match="656"):
        dsa.sparse_mla_forward(q_nope, q_pe, cache[..., :640], None, idx, SM_SCALE)
