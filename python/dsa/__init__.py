"""dsa: sparse MLA attention (DeepSeek Sparse Attention) for Hopper, as PyTorch ops.

torch.ops.dsa.sparse_mla_forward(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale,
                                 index_sharing="unknown", schedule=None, topk_length=None,
                                 min_valid_entries=0)
    -> (out, lse)                      functional; what torch.compile and CUDA graphs see
torch.ops.dsa.sparse_mla_forward_out(..., sm_scale, out, lse, index_sharing="unknown", schedule=None,
                                     topk_length=None, min_valid_entries=0) -> ()
                                       writes caller buffers
torch.ops.dsa.sparse_mla_schedule(sparse_indices, ckv_cache, num_heads, topk_length=None) -> schedule (uint8)
                                       a balanced forward's schedule, once per decode step
dsa.sparse_mla_forward_joined(q, kv_cache, sparse_indices, sm_scale, ...) -> (out, lse)
                                       the same forward on the joined layouts engines keep
                                       (q [T, H, 576], the cache's rows ckv | kpe in one row);
                                       dsa.split_joined_layout gives the views it passes on

Shapes: q_nope [T, H, 512] bf16, q_pe [T, H, 64] bf16, ckv_cache [pages, page_size, 512] bf16,
kpe_cache [pages, page_size, 64] bf16, or an FP8 cache in DeepSeek-V3.2's layout (fp8_ds_mla):
ckv_cache [pages, page_size, 656] uint8 or float8_e4m3fn (512 e4m3 values, 4 fp32 scales per 128
dims, 64 bf16 rope values per row) and kpe_cache None; sparse_indices [T, topk] int32 (flat rows
page * page_size + offset, -1 = padding); out [T, H, 512] bf16, lse [T, H] fp32 (base 2).
topk_length (FlashMLA's argument of that name): None, or int32 [T] on the same device, token t's
list length: only sparse_indices[t, :topk_length[t]] is used (clamped to [0, topk]), whatever the
entries past it hold. Pass the same tensor to sparse_mla_schedule and the forward.
index_sharing tells the planner what the caller knows of the index lists: "consecutive" for
prefill and for decode with several tokens per request (MTP: a request's consecutive tokens
share most of their rows; at 16 heads -12 to -34 % against "unknown" on an H100, docs/perf.md
"MTP decode batches"), "none" for a decode batch of one token per request (no row listed twice),
"unknown" (the default) when the call may be either. It matters at 16 heads, and at 32 with
topk < 1024, only.
min_valid_entries (0: unknown) is a second hint: every token's list holds at least this many valid
entries, in [0, topk]. An engine knows it from its sequence lengths (a decode token's list holds
min(context, topk) rows). With full lists (min_valid_entries = topk) 16 heads over a bf16 cache on
an H200 take one CTA per SM further: lists of 2048 up to T = 33 (-4 to -16 %), lists of 1024 up to
T = 66 (-2 to -12 %; docs/perf.md "Full lists", "Full lists of 1024"); on any device 16-head
full lists of at most 768 run one split at T = 133-165 (bf16 -5 to -19 %, fp8 0 to -14 % on an
H200); a hint above a split's share of the list also spares the combine its count of every
list, which unhinted plans now run beside the main kernel (hinted fp8 over full lists 0-2 %
faster, docs/perf.md run 779). A hint that does not hold costs time, never correctness.
schedule= runs the balanced plan instead of the planner's (dsa::SparseMlaPlan::balanced): each
token's splits sized by its valid rows. Make it once per decode step from any layer's indices
(sparse_mla_schedule) and pass it to every layer; it pays for decode batches of mixed lengths
from ~64 tokens at 16 heads (32 at 32 heads), is about even at 8-16 tokens and loses at 32 and
on full random lists (docs/perf.md, "Balanced splits").
"""
import torch

from . import _C  # noqa: F401  (registers torch.ops.dsa.*)

__all__ = ["sparse_mla_forward", "sparse_mla_forward_joined", "split_joined_layout", "sparse_mla_schedule", "run"]


def sparse_mla_schedule(sparse_indices, ckv_cache, num_heads, *, topk_length=None):
    """The balanced forward's schedule (a uint8 tensor), made on the current CUDA stream from one
    layer's indices; pass it as schedule= to every layer's forward of the same decode step."""
    return torch.ops.dsa.sparse_mla_schedule(sparse_indices, ckv_cache, int(num_heads), topk_length)


def sparse_mla_forward(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale, *, out=None, lse=None,
                       index_sharing="unknown", schedule=None, topk_length=None, min_valid_entries=0):
    """Sparse MLA forward on the current CUDA stream. Returns (out, lse); with out=/lse= given,
    writes into them (and returns them), allocating whichever is missing. index_sharing:
    "unknown", "consecutive" (prefill, MTP decode) or "none" (decode, one token per request), the planner's
    hint. schedule: from sparse_mla_schedule, for the balanced plan. topk_length: int32 [T], each
    token's list length. min_valid_entries: every token's list holds at least this many valid
    entries (0: unknown), the planner's second hint."""
    if out is None and lse is None:
        return torch.ops.dsa.sparse_mla_forward(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, float(sm_scale),
                                                index_sharing, schedule, topk_length, int(min_valid_entries))
    T, H = q_nope.shape[0], q_nope.shape[1]
    if out is None:
        out = torch.empty((T, H, 512), dtype=torch.bfloat16, device=q_nope.device)
    if lse is None:
        lse = torch.empty((T, H), dtype=torch.float32, device=q_nope.device)
    torch.ops.dsa.sparse_mla_forward_out(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, float(sm_scale), out, lse,
                                         index_sharing, schedule, topk_length, int(min_valid_entries))
    return out, lse


def split_joined_layout(q, kv_cache, sparse_indices):
    """Views of the joined layouts vLLM and FlashMLA keep as this library's separate arguments:
    q [T, H, 576] bf16 (each head's nope | rope values in one row) -> q_nope, q_pe; kv_cache with
    each row's ckv | kpe in one row, bf16 [pages, page_size, 576] -> ckv_cache, kpe_cache, or
    fp8_ds_mla [pages, page_size, 656] (uint8 / float8_e4m3fn) -> itself, None. FlashMLA's
    dimension of one KV head is accepted too: kv_cache [pages, page_size, 1, D], sparse_indices
    [T, 1, topk]. Nothing is copied. Returns (q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices);
    the last three also serve sparse_mla_schedule."""
    if q.dim() != 3 or q.shape[-1] != 576:
        raise ValueError(f"dsa.split_joined_layout: q must be [T, H, 576] (nope | rope), got {list(q.shape)}")
    if kv_cache.dim() == 4:
        if kv_cache.shape[2] != 1:
            raise ValueError("dsa.split_joined_layout: a 4-dimensional kv_cache must be [pages, page_size, 1, D] "
                             f"(one KV head), got {list(kv_cache.shape)}")
        kv_cache = kv_cache.select(2, 0)
    if sparse_indices.dim() == 3:
        if sparse_indices.shape[1] != 1:
            raise ValueError("dsa.split_joined_layout: 3-dimensional sparse_indices must be [T, 1, topk] "
                             f"(one KV head), got {list(sparse_indices.shape)}")
        sparse_indices = sparse_indices.select(1, 0)
    fp8 = kv_cache.dtype in (torch.uint8, torch.float8_e4m3fn)
    if kv_cache.dim() != 3 or kv_cache.shape[-1] != (656 if fp8 else 576):
        raise ValueError("dsa.split_joined_layout: kv_cache must be [pages, page_size, 576] bf16 (ckv | kpe) or "
                         f"[pages, page_size, 656] uint8 / float8_e4m3fn (fp8_ds_mla), got {list(kv_cache.shape)} "
                         f"{kv_cache.dtype}")
    ckv_cache, kpe_cache = (kv_cache, None) if fp8 else (kv_cache[..., :512], kv_cache[..., 512:])
    return q[..., :512], q[..., 512:], ckv_cache, kpe_cache, sparse_indices


def sparse_mla_forward_joined(q, kv_cache, sparse_indices, sm_scale, **kwargs):
    """sparse_mla_forward on the joined layouts (split_joined_layout): it plans and computes
    exactly what sparse_mla_forward does on separate tensors. kwargs are sparse_mla_forward's
    (out=, lse=, index_sharing=, schedule=, topk_length=, min_valid_entries=). Returns (out, lse)
    in this library's terms: lse in base 2, -inf for a token with no valid index (FlashMLA's
    current reference returns the natural log, +inf there, and a max_logits this library does
    not compute)."""
    return sparse_mla_forward(*split_joined_layout(q, kv_cache, sparse_indices), sm_scale, **kwargs)


def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    """FlashInfer-Bench entry point for dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64 (and
    its ps1 / topk variants): returns (output, lse)."""
    if isinstance(sm_scale, torch.Tensor):
        sm_scale = sm_scale.item()
    return torch.ops.dsa.sparse_mla_forward(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, float(sm_scale))
