// Sparse MLA attention (DeepSeek Sparse Attention) forward on Hopper.
//
// Per token t, head h, over the valid entries k of indices[t, :]:
//   logit[k] = sm_scale * (q_nope[t,h] . ckv[row_k] + q_pe[t,h] . kpe[row_k])
//   out[t,h] = softmax(logit) @ ckv[rows]            (bf16, 512 wide)
//   lse[t,h] = log2(sum_k exp(logit[k]))              (fp32, base 2)
// A row index r is valid when 0 <= r < num_pages * page_size. Anything else (-1 padding, or an
// out-of-range value) is skipped and never read; count_invalid_indices() reports the out-of-range
// ones for callers who want to check. With SparseMlaProblem::topk_lengths a token's list ends at
// its length. A token with no valid entry gets out = 0 and lse = -inf.
// Duplicate indices count once per occurrence (as the dense formula over the index list does).
// The cache is bf16 (ckv and kpe rows) or FP8 in DeepSeek-V3.2's layout (KvCacheFormat), whose
// ckv values are fp8 e4m3 x an fp32 scale per 128 dims.
//
// Usage:
//   dsa::SparseMlaProblem p;  ... fill pointers and sizes ...
//   dsa::SparseMlaPlan plan = dsa::plan_sparse_mla(p);        // host only, cheap, cacheable
//   void* ws; cudaMalloc(&ws, plan.workspace_bytes);           // caller owns the workspace
//   dsa::sparse_mla_forward(p, plan, ws, plan.workspace_bytes, stream);
// Decode batches of mixed lengths may instead plan with PlanChoice::balanced and make a
// schedule once per step (make_sparse_mla_schedule, then p.schedule and p.schedule_bytes; see
// SparseMlaPlan).
// The forward call allocates nothing, never synchronises the host and can be captured in a graph.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "dsa/error.h"

namespace dsa {

inline constexpr int kCkvDim = 512;  // latent width: K (with kpe) and V
inline constexpr int kKpeDim = 64;   // rope part of K
inline constexpr int kHeadGroup = 16;  // heads one tile of the kernel computes (mma M)

// How the KV cache stores a row.
enum class KvCacheFormat {
  bf16,        // ckv_cache bf16 [rows, 512] and kpe_cache bf16 [rows, 64]
  fp8_ds_mla,  // DeepSeek-V3.2's FP8 cache (FlashMLA's, vLLM's fp8_ds_mla): ckv_cache holds rows of
               // kFp8RowBytes = 656 bytes: 512 fp8 e4m3 ckv values, 4 fp32 scales (scale j for
               // dims [128 j, 128 j + 128)), 64 bf16 kpe values; ckv[d] = e4m3[d] * scale[d / 128].
               // kpe_cache is null (the kpe part is in the row). The split_k kernel reads the
               // e4m3 values exactly and applies the scales in fp32; shared_rows converts them
               // to f16 (e4m3 x scale rounded to 11 bits, so |scale| <= 146 keeps them finite;
               // docs/design.md, "FP8 KV cache").
};
inline constexpr int kFp8RowBytes = 656;        // one fp8_ds_mla row
inline constexpr int kFp8ScaleDims = 128;       // ckv dims per fp32 scale
inline constexpr int kFp8ScalesOffset = 512;    // bytes: the 4 fp32 scales
inline constexpr int kFp8KpeOffset = 528;       // bytes: the 64 bf16 kpe values

// What the caller knows of its index lists; the planner sees no indices, and at 16 heads, and 32
// with lists of fewer than 1024 positions, the best kernel depends on how much consecutive
// tokens' lists overlap (docs/perf.md, runs 105 and 117-118). At 32 heads with lists of 1024 or
// more, and at 64 and 128 heads, it does not matter: see SparseMlaKernel::shared_rows.
enum class IndexSharing {
  unknown,      // the planner's default: shared_rows for 16 heads at T >= 2048 (prefill sizes;
                // an fp8_ds_mla cache: never), for 32 heads with topk 512-1023 from T >= 256
  consecutive,  // consecutive tokens belong to one sequence and list many of the same rows
                // (prefill, chunked prefill, a decode batch of several tokens per request: MTP):
                // shared_rows for 16 heads from T >= 512 in whole waves, and with a bf16 cache and
                // topk 2048 from T >= 117 (on 132 SMs) with each 4-token group's union split where
                // its waves are not full (not on an H200, whose split-K gathers faster: there
                // ~25 % shared rows lost up to 25 %; docs/perf.md "MTP decode batches"); 32 as
                // unknown, whatever the topk
  none,         // no two tokens list the same row (a decode batch of one token per request):
                // split_k at 16 heads, and at 32 with topk < 1024, without row order (which gains
                // nothing there; docs/perf.md, "Separate requests"). Where a request has several
                // tokens (MTP drafts), they share rows: say consecutive (above)
};

// All strides are in elements; 0 means "packed" (the default layout given in each comment).
// The last dimension of every tensor is contiguous.
struct SparseMlaProblem {
  int num_tokens = 0;  // T >= 0 (0 is a no-op)
  int num_heads = 0;   // H in {16, 32, 64, 128}
  int topk = 0;        // index entries per token, >= 1
  int page_size = 0;   // rows per page, >= 1
  int num_pages = 0;   // pages in the cache, >= 1; rows = num_pages * page_size < 2^31
  float sm_scale = 0.f;

  const void* q_nope = nullptr;  // bf16 [T, H, 512]
  int64_t q_nope_token_stride = 0, q_nope_head_stride = 0;  // packed: H*512, 512
  const void* q_pe = nullptr;    // bf16 [T, H, 64]
  int64_t q_pe_token_stride = 0, q_pe_head_stride = 0;      // packed: H*64, 64

  KvCacheFormat kv_format = KvCacheFormat::bf16;
  const void* ckv_cache = nullptr;  // bf16 [num_pages, page_size, 512]; fp8_ds_mla: bytes [num_pages, page_size, 656]
  int64_t ckv_row_stride = 0;       // packed: 512 (576 for a cache that stores ckv|kpe rows);
                                    // fp8_ds_mla: in bytes, a multiple of 16, packed 656
  const void* kpe_cache = nullptr;  // bf16 [num_pages, page_size, 64]; fp8_ds_mla: nullptr
  int64_t kpe_row_stride = 0;       // packed: 64; fp8_ds_mla: 0

  const int32_t* indices = nullptr;  // int32 [T, topk], flat rows page * page_size + offset
  int64_t indices_token_stride = 0;  // packed: topk
  // Optional, int32 [T] in device memory (FlashMLA's topk_length): token t's list is its first
  // min(max(topk_lengths[t], 0), topk) entries, and the entries past that are ignored whatever
  // they hold (stale rows included). nullptr: every token lists all topk entries.
  const int32_t* topk_lengths = nullptr;

  void* out = nullptr;  // bf16 [T, H, 512]
  int64_t out_token_stride = 0, out_head_stride = 0;  // packed: H*512, 512
  float* lse = nullptr;  // fp32 [T, H], base-2 log-sum-exp
  int64_t lse_token_stride = 0;  // packed: H
  IndexSharing index_sharing = IndexSharing::unknown;  // a hint for the planner only
  // A hint for the planner only: every token's list holds at least this many valid entries, in
  // [0, topk]; 0 (the default): unknown. An engine knows it from its sequence lengths (a decode
  // token's indexer names min(context, topk) rows). A hint that does not hold costs time, never
  // correctness. Used today: on an H200-class device, 16 heads over a bf16 cache with full lists
  // (min_valid_entries = topk) split one CTA per SM further: lists of 2048 up to T = 33, lists of
  // 1024 up to T = 66 (132 SMs), where lists of unknown length keep two CTAs per SM from T = 17
  // (docs/perf.md, "Full lists"); on any device, 16-head full lists of at most 768 run one split
  // where unknown lengths take the half-wave lead (T = 133-165 on 132 SMs; "Full lists of 512-768").
  int min_valid_entries = 0;
  // A balanced plan's schedule (SparseMlaPlan::balanced): the buffer make_sparse_mla_schedule
  // wrote for this plan, and its size in bytes (>= plan.schedule_bytes; the forward refuses a
  // smaller one). nullptr and 0 for every other plan.
  const void* schedule = nullptr;
  size_t schedule_bytes = 0;
};

// What the planner needs to know about the device; from_device() reads it off a CUDA device.
struct DeviceInfo {
  int sm_count = 0;
  int max_smem_per_block = 0;  // opt-in limit, bytes
  int cc_major = 0, cc_minor = 0;
  // Peak DRAM bandwidth, GB/s (2 x the memory clock x the bus width): where a plan bound by
  // memory races one bound by instructions (32 heads' one- and 2-token groups) the planner weighs
  // them by it. <= 0: unknown, planned as an H100 SXM's (3352).
  int memory_bandwidth_gbs = 0;
  // The device's answers, queried once per process and device (later calls cost no driver call);
  // throws dsa::Error without a usable device.
  static DeviceInfo from_device(int device);
};

// The two kernels of the forward.
enum class SparseMlaKernel {
  split_k,      // one CTA per (token, 16 heads, index chunk); splits merged by a combine kernel.
                // Just past whole waves of one split, or half a wave, the first tokens and the
                // later ones take different splits (SparseMlaPlan::lead_tokens)
  shared_rows,  // one CTA per 64 query rows on wgmma with M = 64: 4 consecutive tokens x 16 heads,
                // 2 tokens x 32 heads, or one token's 64 heads (two CTAs at 128; at 32 heads
                // below the union's line one token's 32 heads and 32 idle rows). A row several
                // of the CTA's tokens list is gathered and read once for all (prefill, where the
                // tokens of a sequence share rows); with one token per CTA every row is read
                // once per token, not once per 16 heads. The planner picks it:
                //  - 16 heads: never for IndexSharing::none, for unknown only with topk >= 512,
                //    and then only where the forward's share probe says the tokens share
                //    enough rows (SparseMlaPlan::share_probe);
                //    from T >= 2048 (512 for consecutive; 8192 for unknown over an fp8_ds_mla
                //    cache) when its CTAs fill >= 90 % of whole waves; for consecutive with a
                //    bf16 cache and topk 2048 also from T >= 117 in up to 4 splits per group
                //    (below 10/8 of the H100's bandwidth);
                //  - 32 heads with topk >= 1024, whatever the hint, from T >= 16: one token per
                //    CTA up to 1.7 waves (T <= 1.7 x the SM count); past them a bf16 cache 2
                //    tokens per CTA or one (below; by a count of waves that the device's memory
                //    bandwidth weighs: one on an H200), an fp8_ds_mla cache one; with topk 512-1023
                //    2 tokens per CTA as at 16 heads for the hint, from T >= 256 in whole waves;
                //  - 64 and 128 heads, whatever the hint: from 2^17 (head block, index position)
                //    pairs (head blocks: T x H / 16), from 2^13 and 12 head blocks for a bf16 cache
                //    with topk >= 256, from 3 x 2^14 for fp8_ds_mla with topk >= 1024, or more
                //    head blocks than two per SM (at topk 2048 on an H100: T >= 3 at 64 heads and
                //    T >= 2 at 128; fp8_ds_mla T >= 6 and 3).
                // One-token CTAs split each token's entries when there are fewer CTAs than SMs (on
                // at most 3/4 of them, or 8 splits). Just past whole waves (up to half a wave
                // more) those waves run unsplit and only the tokens past them are split, as many
                // CTAs as fit the SMs, or up to 2/3 of a wave more 3 splits over two rounds
                // (SparseMlaPlan::lead_tokens); no union pass. 64 heads bf16 do so past 1-6
                // whole waves (any number on an H200: DeviceInfo::memory_bandwidth_gbs), 128
                // heads and fp8_ds_mla past any number, 32 heads past 1 and,
                // past 2 or more, where their waves cost less than 2-token CTAs'. Otherwise 32
                // heads keep one-token CTAs unsplit up to 1.7 waves, 64 and 128 heads take the
                // union pass.
                // Limits: topk <= 2048, num_pages * page_size < 2^28, cache row strides < 2^31
                // elements (bytes for fp8_ds_mla)
};

// The kernel configuration for one problem shape on one device.
struct SparseMlaPlan {
  int num_tokens = 0, num_heads = 0, topk = 0;  // the shape it was made for
  SparseMlaKernel kernel = SparseMlaKernel::split_k;
  int block_keys = 0;    // KV rows per pipeline tile (16, 32 or 64): the planner's 32, or 64 for an
                         // fp8_ds_mla cache on split_k splits of >= 1024 positions
  int splits = 0;        // split_k: index chunks per token; shared_rows: runs of each group's union
                         // tiles. > 1 adds a combine kernel
  int chunk = 0;         // split_k: index positions per split (<= kMaxChunk); shared_rows: union
                         // entries per split for a full list (whole 32-entry tiles, <= topk)
  int ctas = 0;          // blocks of the main kernel
  int launches = 0;      // kernels one forward call launches, in stream order (profilers group by it):
                         // split_k 1, + 1 combine when splits > 1; shared_rows: the union pass if
                         // any, the order pass (one split, union pass), main, + 1 combine (splits > 1);
                         // + 1 combine for lead tokens in lead_splits > 1; + 2 with share_probe
                         // (the probe first, split_k last)
  // With splits > 1: a token with at most this many valid indices is finished by its first
  // split alone, with no merge (each CTA counts the token's valid indices on the device; the
  // others and the combine skip it). 0: off (splits == 1; split_k: topk > kMaxChunk or a chunk
  // that is not a multiple of 32 positions; shared_rows: fewer than 64 heads).
  int fused_rows = 0;
  // shared_rows: whether a union pass builds each group's rows before the main kernel (then,
  // with one split, an order pass ranks the groups). false for one-token groups (64 and 128
  // heads; the planner's at 32) when the CTAs fit one wave, in the planner's plans with
  // lead_tokens, and at 32 heads up to 1.7 waves of them: each CTA compacts its token's
  // index list itself, one kernel and round trip fewer.
  bool union_pass = false;
  // With splits > 1 (shared_rows without a union pass, split_k not balanced with topk <=
  // kMaxChunk): tokens [0, lead_tokens) take lead_splits splits each (1: the token whole, a CTA
  // per group or head group; split_k: lead_splits runs of whole tiles), their CTAs first, and
  // the later tokens `splits` each; both are merged, each by its own combine. The planner's just
  // past whole waves (by at most half a wave): shared_rows' whole waves of one-token groups,
  // split_k's whole waves of one split (lists of 512-2048) unsplit, the tokens past them split
  // into as many CTAs as fit the SMs the last whole wave frees (on an H100: 32 heads T = 133 132
  // unsplit and 64 splits of a tile, 128.9 µs against 169.2 with 3 equal splits of every token;
  // 16 heads T = 265 264 unsplit, 167.0 against 266.5 with one split); and just past half a
  // wave (split_k; shared_rows at 128 heads with topk >= 1536, and at 32 and 64 with topk 2048
  // for an fp8_ds_mla cache or on an H200), where one split per token would leave half
  // the SMs idle, half a wave of tokens in 2 splits and the later ones in as many as fit after
  // them (at least 8, or 4 for split_k with topk 2048 on an H200; 16 heads T = 133: 114.8 µs
  // against 141.9). Past whole waves by half to
  // 2/3 of a wave the tokens past them take 3 splits over two rounds where that pays (128
  // heads; fp8 at 64 heads; lists of 2048 at 16 and 32 heads; bf16 only for a tail of at most
  // 11/20 of a wave, except on an H200): 128 heads T = 100 173.6 µs against 197.3. 0: every
  // token split alike.
  int lead_tokens = 0;
  int lead_splits = 1;
  // Whether the CTAs gather their rows in ascending order of the row's top bits (the cache's row
  // range in 64 parts) instead of index-position order: split_k sorts each CTA's valid rows,
  // shared_rows at 64 and 128 heads each token's list in the union pass (unions of several
  // tokens are always in row order). The CTAs that run together then sweep the cache together,
  // and a row several tokens list is read from DRAM once and from L2 by the others. It costs a
  // sort: one counting pass per split_k CTA, a radix sort per token in the union pass. The
  // planner's: on when the call holds >= 2^17 (token, position) pairs (over 150 MB of rows, 3x the L2) and the hint is unknown, for split_k and
  // for shared_rows at 64 heads (at 128 its main kernel is bound by its MMAs); off for none (no
  // row is shared) and consecutive (the rows are in L2 already). On fast memory (an H200) split_k
  // sorts only at 16 heads with lists of >= 1024 positions, and later: bf16 lists of >= 2048 from
  // 1.25 x 2^17 pairs, of 1024-2047 from 1.5 x 2^17; fp8 from 2^18, or 1.75 x 2^17 for 1024-2047.
  bool row_order = false;
  // split_k: each token's splits sized by its valid rows (decode batches of mixed lengths, where
  // the tokens with full lists would hold the call up while the CTAs of short ones idle). The
  // caller makes a schedule once per decode step (make_sparse_mla_schedule: a token's valid
  // count, min(context, topk), is the same in every layer) and passes it in
  // SparseMlaProblem::schedule. The main kernel's `ctas` are one wave of split slots (two per SM,
  // at least one per token); the schedule gives each token the smallest number of 32-row tiles
  // per split whose splits fit them, and each split an even share of its token's tiles. Results
  // do not depend on the counts the schedule was made from, only the speed: a schedule made
  // from another layer's or another step's indices of the same shape is still correct. The
  // planner never picks it (PlanChoice::balanced turns it on). Measured on the H100 (docs/perf.md,
  // "Balanced splits"): mixed lengths at 16 heads T = 64 / 128 -9 / -12 %, 300 rows each at
  // T = 64 -21 %, 32 heads T = 32 -17 %, T = 8 / 16 at 16 heads -3 / -1 % (run 223); slower at
  // T = 32 at 16 heads (+5 %), at T = 256 (+2 %) and for full random lists (T = 1 / 4: +9 / +3 %).
  // Needs topk <= kMaxChunk and T <= kBalancedMaxTokens; excludes row_order and fused_rows.
  bool balanced = false;
  // split_k: each 16-head CTA's softmax split over its 4 warps by keys (each warp exponentiates a
  // quarter of the tile's keys; the rows' maxima and P meet in shared memory, two barriers more
  // per tile) instead of repeated in every warp. Where the warps' instruction chains bind it
  // pays, where the H100's L2 binds long CTAs it does not. The planner's: always for an
  // fp8_ds_mla cache (which splits whatever the plan says); for bf16 with 32- or 64-row tiles on
  // fast memory (H200: random lists T = 128-1024 -3 to -5 %) and where every token's list is
  // split (H100: T = 8 runs / T = 64 random -2 / -1 %, against +4 % unsplit at T = 1024 random);
  // docs/perf.md runs 548 and 550.
  bool split_softmax = false;
  // split_k over a bf16 cache, position order (no row_order), 32- or 64-row tiles: each CTA asks
  // for tile it + 1 before tile it lands, two tiles in flight while it waits. The planner's: on
  // for 32+ heads, for CTAs of at most 6 tiles, and on fast memory (an H200) where the grid fits
  // one CTA per SM; off for other 16-head CTAs of more tiles, which stream their rows from DRAM
  // and lost up to 6.5 % to it two to an SM (H200, docs/perf.md runs 715-722). An fp8_ds_mla
  // cache always issues early, and a balanced schedule's CTAs choose by their own tile counts,
  // whatever this says. Either value gives the same results; only the speed differs.
  bool early_issue = false;
  // Unhinted (IndexSharing::unknown) 16-head calls where the planner takes shared rows
  // (T >= 2048, fp8 8192; lists of >= 512): whether they pay depends on how many rows
  // consecutive tokens share, which the planner cannot see (H200: split-K 12-26 % faster where
  // tokens share little, shared rows 7-59 % where they share most; docs/perf.md runs 685-687; fp8
  // runs 702-703). With line_permille > 0 the forward first samples the share on the device (16
  // groups of 4 tokens, as sample_group_sharing), then launches this plan's shared-rows kernels
  // and a one-split split_k plan with the tiles, row order and split softmax below; the CTAs of
  // the kernel not chosen leave at once. Shared rows run where the groups' unions keep at most
  // line_permille / 1000 of their entries (the planner's: bf16 710 on fast memory, 800 else;
  // fp8_ds_mla 520, whose split_k reads less); otherwise split_k. The caller's hint
  // (consecutive, none) or a forced kernel turns it off (an unhinted fp8 call then keeps
  // split_k).
  struct ShareProbe {
    int line_permille = 0;  // 0: off
    int split_k_block_keys = 0;
    bool split_k_row_order = false, split_k_split_softmax = false;
  } share_probe;
  size_t schedule_bytes = 0;  // balanced: the schedule buffer make_sparse_mla_schedule fills; else 0
  // split_k: a partial per split (bf16 output, fp32 lse: 1028 bytes per head), 0 when
  // splits == 1; shared_rows: with a union pass each group's row
  // union (48 KB per group at topk 2048), its size and the order the groups run in, then the
  // partials of its splits when splits > 1; with share_probe, then the probe's counts.
  size_t workspace_bytes = 0;
  static constexpr int kMaxChunk = 2048;
  static constexpr int kMaxSplits = 4096;
  static constexpr int kBalancedMaxTokens = 1024;
};

// A configuration forced instead of the planner's (tuning, tests): 0 keeps the planner's choice.
struct PlanChoice {
  int block_keys = 0;  // 16, 32 or 64 (fp8_ds_mla: 32 or 64)
  int splits = 0;      // index chunks per token, >= ceil(topk / kMaxChunk); with kernel forced to
                       // shared_rows, 0 means 1 (the planner's splits only where it picks the kernel)
  enum class Kernel { planner, split_k, shared_rows } kernel = Kernel::planner;
  int fused_rows = 0;  // -1: off; N in [1, kMaxChunk]: this threshold (needs a plan where it can be on)
  int row_order = 0;   // -1: off; 1: on (split_k, or shared_rows at 64+ heads with a union pass)
  int balanced = 0;    // 1: a balanced split_k plan (SparseMlaPlan::balanced); 0 or -1: not
  int split_softmax = 0;  // -1: off (bf16 only); 1: on (32- or 64-row tiles); either forces split_k
};

// Pure function of shape, device, hints and cache format (validated; an fp8_ds_mla cache
// has its own kernel thresholds, see SparseMlaKernel, and wider split_k tiles on long splits):
// what tests call without a GPU. Throws dsa::Error for an unsupported shape or device, or a
// choice that cannot run (naming it).
SparseMlaPlan plan_sparse_mla(int num_tokens, int num_heads, int topk, const DeviceInfo& dev,
                              const PlanChoice& choice = {}, IndexSharing sharing = IndexSharing::unknown,
                              KvCacheFormat kv_format = KvCacheFormat::bf16, int min_valid_entries = 0);
// Validates the problem and plans it (with its index_sharing and min_valid_entries) for the
// current CUDA device.
SparseMlaPlan plan_sparse_mla(const SparseMlaProblem& problem);

// Throws dsa::Error naming the first bad argument (null pointer, alignment below 16 bytes,
// unsupported H, negative sizes, overlapping strides).
void validate(const SparseMlaProblem& problem);

// Launches the forward on `stream`. `workspace` must hold plan.workspace_bytes (16-byte aligned).
void sparse_mla_forward(const SparseMlaProblem& problem, const SparseMlaPlan& plan, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);

// For a balanced plan (SparseMlaPlan::balanced): counts each token's valid indices in
// problem.indices and writes the schedule of split slots into `schedule` (plan.schedule_bytes,
// 16-byte aligned, device memory the caller owns), asynchronously on `stream`. Once per decode
// step serves every layer of it; then set problem.schedule and problem.schedule_bytes for each
// forward call. It reads only the problem's shape, page_size, num_pages, indices and
// indices_token_stride (the other pointers may be null). Allocates nothing and can be captured
// in a graph.
void make_sparse_mla_schedule(const SparseMlaProblem& problem, const SparseMlaPlan& plan, void* schedule,
                              size_t schedule_bytes, cudaStream_t stream);

// Adds to *d_count (device int64, caller zeroes it) the number of entries of indices[T, topk]
// outside [-1, num_rows), over all topk entries of each list (no topk_lengths). Asynchronous on
// `stream`.
void count_invalid_indices(const int32_t* indices, int num_tokens, int topk, int64_t token_stride,
                           int64_t num_rows, long long* d_count, cudaStream_t stream);
// The same count over a host array.
int64_t count_invalid_indices_host(const int32_t* indices, int num_tokens, int topk,
                                   int64_t token_stride, int64_t num_rows);

// How much consecutive tokens share, sampled: adds to d_counts[0] the distinct valid rows and to
// d_counts[1] the valid entries of `samples` groups of 4 consecutive tokens spread evenly over
// indices[T, topk] (the middle group of each of `samples` equal spans; every group when there
// are fewer). d_counts[0] / d_counts[1] is the share of its entries a group's union keeps (1: no
// sharing, 0.25: 4 identical lists), what decides whether shared rows (IndexSharing::consecutive)
// pay at 16 heads: on an H200 they won up to ~65 % and lost from ~77 %, on an H100 they came out
// even at ~80 % on prefixes (docs/perf.md runs 555, 686-687). The forward's share probe
// (SparseMlaPlan::share_probe) counts the same way. Exact for a cache of at most 2^17 rows;
// above, each group's distinct rows are estimated from a 2^17-bit hash bitmap (linear counting:
// a standard error of ~16 rows for a group of 8192 entries). d_counts: device int64 [2], zeroed
// by the caller; topk <= 2048; samples >= 1; one CTA per sample, asynchronous on `stream`.
void sample_group_sharing(const int32_t* indices, int num_tokens, int topk, int64_t token_stride, int64_t num_rows,
                          int samples, long long* d_counts, cudaStream_t stream);

// A deliberately simple fp32 GPU kernel (one block per token and head, obvious loops) that
// verifies cases too large for the CPU reference. Allocates its own scratch; not for speed.
void sparse_mla_reference_gpu(const SparseMlaProblem& problem, cudaStream_t stream);

}  // namespace dsa
