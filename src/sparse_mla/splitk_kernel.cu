// Sparse MLA forward, split-K gather-attention + combine (bf16 or fp8_ds_mla KV cache, mma.sync m16n8k16).
//
// One CTA = one token x one group of 16 heads x one chunk of index positions ("split").
//   1. The chunk's raw indices are loaded first (they head the critical path: indices -> rows),
//      then Q (16 heads x 576) is staged in shared memory by cp.async.
//   2. The indices are compacted in shared memory (ballot + popc, in position order): -1,
//      out-of-range values, positions past the token's length (topk_lengths) and padding
//      anywhere cost nothing after this. With the plan's row order the CTA's rows are then
//      sorted by their top bits (below).
//   3. Tiles of block_keys valid rows (ckv|kpe = 1152 B each) are gathered by 16-byte cp.async
//      into padded shared rows, STAGES deep; Q moves into registers as mma A fragments, warp w
//      keeping dims [144w, 144w+144) for the whole CTA.
//   4. Scores: warp w computes the partial S = Q[:, its dims] K[:, its dims]^T for all keys of
//      the tile; the 4 partials are summed through shared memory, so every warp holds the full S
//      and runs the same online softmax (base 2). With a split softmax (fp8 always, bf16 by the
//      plan; v29, v30) warp w sums and exponentiates only its own quarter of the keys, and the
//      rows' maxima and P meet in shared memory.
//   5. Output: warp w accumulates O[:, 128w .. 128w+128) += P V, V read by ldmatrix.trans.
//   6. Epilogue: bf16 out + lse when splits == 1 (the tile staged in shared memory by stmatrix,
//      written as whole rows), else bf16 partials straight from the fragments + the split's
//      fp32 lse, which a combine kernel (programmatic dependent launch) merges in fp32.
// Lists of at most 2 valid rows (kLeanRows) in a CTA that writes bf16 skip steps 3-6 after the
// compaction: each warp finishes 4 heads with FMAs from registers (lean_rows_forward).
// Lead tokens (plan.lead_tokens, splits > 1): the first tokens' CTAs come first, in lead_splits
// runs of lead_chunk positions (1: the whole list, written as bf16 out + lse); the later tokens'
// take `splits` of `chunk`, and each set of partials has its own combine.
// Fused rows (plan.fused_rows > 0, splits > 1): every CTA reads its token's whole index list
// and compacts it; a token with at most fused_rows valid rows is finished by split 0 alone
// (bf16 out + lse, no partials), the other splits leave at once, and the combine, counting the
// same indices before it waits, skips the token. Otherwise a split takes its own run of the
// compacted list, so its rows, and its result, are those of the unfused path bit for bit.
//
// History (H100, dsa-bench, CUPTI kernel span, L2 flushed; docs/perf.md has the full tables).
// Cases: T=1 with 2048 random rows | T=64 random | T=1024 random | T=4096 prefill (8192-row prefix).
//   v1 0d1b435  25.9 us | 108.5 | 1253.8 | 4858   BK 32/64 picked by T, 2 stages, serial combine
//   v2 0db44e2  13.1    |  73.6 |  835.8 | 2166   block-wide combine, warp-per-row tile loads,
//                                                 one-wave planner, 32-key tiles at every T
//   v3 03f2696  11.6    |  78.8 |  835.2 | 2172   combine over (token, head, 128 dims), PDL at start
//   v4 ac6f7a2  10.1    |  74.1 |  843.4 | 2395   16-key tiles x 4 stages: no gain (L2-bound), reverted
//   v5 ea692a8  10.1    |  72.3 |  835.5 | 2147   indices loaded first, epilogue via shared memory
//   v6           10.0    |  71.5 |  825.7 |   -    row gathers ask L2 for whole 128-byte lines
//                                                 (.L2::128B; prefill runs shared-rows since v5)
//   v7            9.9    |  71.2 |    -   |   -    fused rows: T=1 with 2 valid rows 9.0 -> 5.6 us,
//                                                 T=16 with 100 rows each 19.8 -> 14.0 (runs 83-84)
//   v8 9b5cda2  10.1    |  70.2 |  617.6 |   -    row order from 2^17 pairs: each CTA sorts its rows
//                                                 by their top 6 bits (cub, 2 passes), co-resident CTAs
//                                                 sweep the cache together and rows that several tokens
//                                                 list meet in L2: T=256 218.0 -> 159.8 (runs 141-148)
//   v9           10.1    |  70.2 |  611.1 |   -    row order by one counting pass (block_bucket_compact)
//                                                 instead of cub's 2 radix passes, same order; the
//                                                 combine skips empty splits' never-written partials
//                                                 (DRAM reads): T=8 runs 15.2 -> 14.1, T=4 of 33 rows
//                                                 13.6 -> 10.6, T=64 runs 51.8 -> 49.9 (runs 155-156)
//   v10 (balanced) a plan whose splits a per-step schedule sizes by each token's valid rows
//                  (make_sparse_mla_schedule, opt-in): runs of 1-2048 rows T=64 / 128 50.3 / 89.3
//                  -> 45.7 / 78.4, 300 rows each T=64 28.5 -> 22.6 (run 186)
//   v11          9.8    |  70.0 |  606.7 |   -    epilogue: the bf16 tile staged by stmatrix (8 per warp,
//                                                 not 32 stores), rows stored at a fixed stride, rcp / lg2
//                                                 approximations (no slow-path branches); the fused CTA's
//                                                 epilogue 0.97 -> 0.49 us, T=1 2-valid 5.6 -> 5.1-5.2
//                                                 (runs 206-208)
//   v12           9.5    |  69.8 |    -   |   -    fp32 partials stored straight from the fragments (a
//                                                 quad writes one whole sector; no staging, no barrier):
//                                                 T=8 runs 13.9 -> 13.5, T=4 of 33 rows 10.5 -> 10.0
//                                                 (run 209)
//   v13 21e033c  9.6    |  69.7 |  605.4 |   -    lists of at most 2 rows without the tile pipeline: each
//                                                 warp takes 4 heads, rows and Q into registers, scores by
//                                                 FMAs and one warp reduction, stores from registers; T=1
//                                                 with 1 / 2 valid rows 5.1 -> 4.0-4.1 / 4.3-4.4, T=1024 of
//                                                 2 rows 31.1 -> 27.1, 128 heads 2 rows 5.8 -> 5.2; 3-4 rows
//                                                 5.1 -> 5.2 (runs 214-218). The count at run time for up
//                                                 to 4 rows issued every row's predicated code (4 rows 5.8,
//                                                 run 214); templates up to 4 rows: 3 rows -0.4 us, 4 rows
//                                                 0, 2 rows and T=64 +0.1-0.2 (run 225)
//   v14 6a7f886  fp8_ds_mla caches (kFp8 instances; bf16 PTX unchanged): tiles converted in place,
//                exactly, scales applied to each warp's S block and P in fp32. fp8 vs bf16 (runs
//                302-303): T=1 random 9.8 vs 9.5, T=16 24.8 vs 29.7, T=64 61.7 vs 69.7, T=256 196.5
//                vs 159.1, T=1024 754-759 vs 610: the conversion pass (~140 us at T=1024) binds
//                from T=256. Raw stages + one bf16 tile (two tiles in flight): 1-2 % slower.
//   v15          fp8 without the pass: fragments read the e4m3 bytes (ldmatrix, ldmatrix.trans + prmt)
//                and convert in registers, f16 MMAs (Q's block f16 x 2^-shift, P scaled per key by
//                scale / the tile's largest). Run 305, A/B twice: T=1024 754 -> 648 (bf16 603-605),
//                T=256 195-197 -> 166-168 (159), T=64 62 -> 57 (70), T=16 24.8 -> 23.7 (29.9), T=8
//                runs 15.2 -> 13.7 (13.6-14.2), T=1 random 9.8 -> 9.4 (9.5), runs T=1024 473 -> 412 (475).
//   v16 7bb97e2  fp8: a row's kpe and scales copies one predicated cp.async (was an if / else if):
//                run 336, A/B twice: T=1024 632 -> 604-605, T=256 166-168 -> 159, T=64 55.7 -> 54.5,
//                T=8 runs 13.6 -> 13.2; targets suite (run 338): fp8 / bf16 T=1 9.3 / 9.5, T=64
//                54.4 / 69.5, T=256 155.4 / 159.1, T=1024 598.2 / 607.1.
//   v17          fp8: rows in slots of their own 656 bytes, as stored (were in bf16's 1168-byte slots):
//                runs 342-343, fp8 at 16 heads, planner (row order from T=64) / --sharing none: T=64
//                54.3 -> 52.9 / 54.8 -> 53.8, T=256 155.1 -> 145.8 / 161.9 -> 152.8, T=1024 598.4 ->
//                560.5 / 606.8 -> 573.6; T <= 16 and bf16 unchanged. 3 or 4 stages in the space saved:
//                T=1024 a further -1 %, T <= 64 +3-7 %.
//   v18 493fe02  fp8: 64-row tiles (2 stages, 2 CTAs per SM, 224 registers) on splits of >= 1024
//                positions, half as many rounds of the tile's chain: run 349, fp8 at 16 heads vs
//                d14d2b9, T=96 87.9 -> 78.4, T=256 154.8 -> 135.0, T=1024 598.2 -> 510.8, 32 heads
//                T=128 151.3 -> 131.3; shorter splits keep 32 rows (64 there: T=1 / 16 / 64 +9 / +5
//                / +5 %, run 344).
//   v19          fp8: the upper e4m3 pair of a register converted in place (F2FP .H1, no shift): run 354,
//                T=256 135.0-136.0 -> 130.0-130.6, T=1024 507.4-513.4 -> 483.8-486.0, 32 heads T=128
//                130.7 -> 125.7.
//   v20          softmax on raw scores (the logit scale in exp2's FFMA, Q negated for a negative
//                scale), O rescaled only when a row's max grows; fp8 lets the max trail by up to 8
//                (log2) and keeps O in units of the largest block scale so far, so most tiles skip
//                the rescale: runs 356-357, fp8 T=1024 486.6-488.1 -> 476.1-480.4, T=256 129.9-130.2
//                -> 127.2-127.3, 32 heads T=128 124.8 -> 122.3-122.8 (predicted -4 to -7 %: the
//                multiplies were not the chain's long pole); bf16 within noise (L2-bound).
//   v21 9b8bcee  per-token list lengths (topk_lengths): without them unchanged (targets suite
//                within 0.3 % of 7b950bb, run 384); with them T <= 8 +0.5-1.1 us, T=64 +0.5,
//                T >= 256 and prefill within 0.3 % (run 384). Placements of the cut: the length
//                loaded first and branched on (55a1d3d, run 381): 2-valid 4.3 -> 4.9; loaded after
//                the indices, masked before Q's copies (v21): 5.3; folded into the valid test after
//                them (24c1143, run 388): 5.0, but 0.2-0.3 us slower without lengths (a branch
//                between the index loads and Q's copies, which ptxas had hoisted), reverted.
//   v22 a0577d8  the length by one predicated ld.global.nc (ptx::ld_nc_s32_or) after the index
//                loads, clamped and applied after Q's copies: Q issued 1.62 -> 1.32 us after
//                entry with lengths (the compiler had put the clamp beside a plain load); with
//                lengths 2-valid 4.9 -> 4.4, T=1 random 10.0 -> 9.6-9.7, T=8 14.2 -> 13.7, T=64
//                70.4-70.5 -> 69.7-69.9, as without them (run 392). Loaded after Q's copies
//                instead (lengths-after-q, run 389): 5.1, and T=1 random +0.2 without lengths.
//   v23          partials in bf16 (partials.cuh; fp32 lse, the merge in fp32), a quad's two tiles of a
//                row per whole sector: A/B twice (run 409, us): T=8 runs 13.7-13.8 -> 13.2, T=2 / 4
//                / 16 random 11.6 / 17.2 / 29.8 -> 11.2 / 16.8 / 29.2, T=128 110.4-110.9 -> 107.6-107.8,
//                64 heads T=1 15.3 -> 14.8; fp8 T=1 / 8 9.4 / 12.8 -> 9.2 / 12.3; T=1 random, T=32
//                and T=64 within 0.2 us, T=64 runs +0.3. rel-L2 vs float64 1.3e-3 -> 2.3e-3. First
//                try (run 407): T=1 random 9.7 -> 11.2, from half-sector stores (+0.4 us per CTA)
//                and a combine whose select around each load and its widening serialised its loads.
//   v24 8118f01  past whole waves of one split (at most half a wave more, the planner's): the
//                whole waves' tokens unsplit (an unsplit CTA reads its whole list), the tokens
//                past them split, partials for those only (SparseMlaPlan::lead_tokens). 16 heads
//                random (run 463, us): T = 265 / 300 / 529 / 800 266.5 / 292.7 / 410.2 / 561.5 ->
//                167.0 / 199.7 / 315.9 / 474.6; fp8 T = 265 210.1 -> 132.3; 32 heads topk 512
//                T = 133 74.5 -> 54.6. The targets' plans are unchanged.
//   v25 4319b4d  lead tokens in lead_splits runs of lead_chunk (the lead tokens' CTAs first, a
//                combine per set of partials): just past half a wave half a wave of tokens in 2
//                splits, the later ones in >= 8. 16 heads (run 466, us): T = 133 / 150 141.9 /
//                146.1 -> 114.8 / 132.8, fp8 T = 133 121.5 -> 86.3, runs T = 150 118.5 -> 99.8.
//   v26 331efc7  (plans only) past whole waves by 1/2-2/3 of a wave, the tokens past them in 3 splits
//                over two rounds (the planner's two_rounds_rule: lists of 2048; bf16 for a tail of
//                <= 11/20): run 470 (us), 16 heads T = 397 / 409 296.4 / 297.1 -> 285.6 / 289.4,
//                fp8 T = 397 / 440 / 700 244.4 / 245.6 / 361.3 -> 222.5 / 237.1 / 349.4.
//   v27 a7bb9ad, 3d5e3ed (plans only) on fast memory (the H200) bf16 tails of 11/20-2/3 of a
//                wave take two rounds too, and the half-wave lead needs only 4 later splits
//                (lists of 2048). H200, runs 508 / 515 (us): 16 heads T = 420 / 700 283.6 /
//                420.3 -> 257.7 / 397.6, T = 170 / 190 142.0 / 142.6 -> 121.2 / 131.8.
//   v29          fp8: the softmax split over the warps by keys: warp w sums the partial S of its own
//                BK/32 n-tiles only, the rows' maxima meet in shared memory, w exponentiates its own
//                keys and writes P (fp32) for all; each warp scales P by its block's key scales. Two
//                barriers more per tile, ~1/4 of the softmax's instructions, 243 -> 201 registers.
//                Runs 544-545, A/B twice (us): H200 fp8 separate requests T = 264 / 1024 / 2048
//                126.6 / 470 / 923.6 -> 117.8 / 425.6 / 840.8, random T = 256 / 1024 124 / 474 ->
//                111.5 / 424.5; H100 random T = 256 / 1024 128.7 / 479 -> 119.4 / 438.4, separate
//                requests T = 1024 571.6 -> 562.3; T <= 64 within 0.3 us on both.
//   v28          fp8 row gathers without .L2::128B (bf16 rows keep it): a 656-byte row spans 6
//                128-byte lines, so L2 read 1.63 GB from DRAM where 1.50 (64-byte granules) serve.
//                Run 534, fp8 separate requests (sequences, hint none), A/B: T = 264 / 528 / 1024 /
//                2048 163.4 / 314.2 / 596.0 / 1195.3 -> 156.2 / 300.6 / 570.8 / 1141.1, T = 64
//                54.5 -> 53.1 (.L2::64B the same).
//   v30          bf16 may split its softmax too (SparseMlaPlan::split_softmax: on fast memory and on
//                split calls), P as bf16 pairs in the exchange area. Runs 548 and 550, A/B twice (us):
//                H200 random T = 128 / 256 / 512 / 1024 86.4 / 145.8 / 284.9 / 555.3 -> 83.7 /
//                137.9 / 269.3 / 527.0, T = 8 runs 13.0 -> 12.8; H100 T = 8 runs 13.3 -> 13.0,
//                T = 64 70.2 -> 69.4, but unsplit T = 512 / 1024 random 308.4 / 612.6 -> 312.5 /
//                639.0 (so off there); separate requests within 0.4 % on both.
//   v31 a7ca842  row gathers without a branch per row: the side chunks (kpe; fp8 scales and kpe) by one
//                predicated cp.async (an if compiled to a branch and reconvergence per row), fp8 rows
//                by a fixed trip count (bf16 keeps its bounded loop: the fixed one cost the H100's
//                unsplit random lists +1.6 %, run 561). Runs 562-563 (us): fp8 H200 random T = 256 /
//                1024 112.0 / 426.8 -> 107.1 / 400.4, separate requests T = 1024 434.9 -> 416.4; H100
//                random T = 256 / 1024 119.0 / 439.3 -> 114.4 / 423.2; bf16 unchanged. 2de8602: bf16
//                with a split softmax takes the fixed trip count too (run 565, H200 random T = 256 /
//                512 / 1024 137.5 / 267.9 / 526.1 -> 135.1 / 259.8 / 508.2; T = 8 runs +0.15 us).
//   v32 4b79544  (plans only) one-tile splits only while the grid fits one CTA per SM (two tiles a
//                split past it), and lists of <= 64 unsplit. Runs 595 / 597, H100 / H200 (us): 32
//                heads T = 2 topk 2048 15.4 -> 11.6 / 15.0 -> 11.0, 16 heads T = 4 17.1 -> 13.5,
//                topk 64 16 heads T = 132 15.4 -> 10.8 / 13.9 -> 9.2; every moved case faster.
//   v33 b9697a5  (plans only) lists of <= 4 tiles in one-tile splits or whole; lists of <= 512 past
//                one CTA per SM in splits of >= 4 tiles or as many as fit one CTA per SM. Run 603,
//                H100 (us): topk 128 16 heads T = 132 20.4 -> 16.2, topk 96 T = 90 15.5 -> 11.3, topk
//                512 T = 33 20.5 -> 18.7; moved cases -29 to +6 % bf16, -30 to +2.4 % fp8.
//   v34 c6d5764  (plans only) longer lists in two-tile splits past one CTA per SM take v33's rule
//                too. Runs 611-612, H200 / H100 (us): 128 heads T = 1 topk 2048 14.85 / 15.2 -> 13.3 /
//                13.95, 16 heads T = 8 random 16.9 / 19.8 -> 15.85 / 18.55; moved cases -10.5 to +1.5 %
//                bf16, -9.4 to +5.3 % fp8 (mixed lengths at 64 / 128 heads); targets T = 8 runs
//                bf16 -4.2 %, fp8 +4.1 % (run 614).
//   v35 6f1f99a  one-split plans of lists of <= 32 positions (a caller's topk = L) run an instance
//                of their own that counts the list by one ballot per warp and sends 0-2 rows to
//                the lean path without block_compact. As a branch in every instance (453f53e, run
//                624) T = 1 random lost 2.1 %; as an instance the other 33 kernels' SASS is v34's.
//                Run 625, H100: hinted 2-valid 4.1 -> 3.95 us bf16, 4.05 -> 3.8 fp8; rest +-0.8 %.
//   v36 329b1e0  tiny lists of 3-32 rows compacted by warp 0 from the count's ballot (one barrier,
//                not block_compact). v35 had cost such lists +1-3 % (run 628); run 629 against v34:
//                -5.5 to -9.1 % at T <= 64, -1 to -6 % at T = 1000-2047; hinted 2-valid 3.9 / 3.8.
//   v37 6aa879d  position-order compaction scanned by every warp (block_compact_scan: one barrier
//                fewer, the prefixes in registers). Run 631 against v36: T <= 16 plans -0.5 to
//                -1.9 % (about 0.1-0.2 us), T >= 64 within +-0.6 %.
//   v38 90448a5  CompactScan::before by masks (v37's had put the struct in local memory, 16-byte
//                stack frames); the tiny instance back to v36's code, whose 2-row lists v37 had
//                made ~0.1 us slower (runs 633-635). Small T vs v37 -1.1 to +1.0 %.
//   v39          two stages in position order: tile it + 1 asked for before tile it lands (two tiles
//                in flight while a CTA waits, one barrier more per tile). H200, runs 711-712, A/B
//                twice (us): T = 8 runs 14.0 -> 13.6, T = 4 of 33 rows 6.8 -> 6.5, the targets' T = 8
//                12.35 -> 12.1, T = 1 random 8.95 -> 8.85, fp8 random T = 16 / 32 19.5 / 27.9 -> 19.2 /
//                27.35, fp8 topk 512 T = 103 25.8 -> 24.1; bf16 random T = 64 53.35 -> 53.65, topk 512
//                T = 103 30.75 -> 31.3. Row order kept the old order (with it, bf16 T = 128 / 1024
//                random +1.5 / +2.0 %). Over the sweep (run 715) 16-head bf16 CTAs of many tiles
//                lost up to 6.5 % (topk 512 T = 176), separate requests up to 5.8 % (run 716): since
//                run 717 a 16-head bf16 CTA of more than 6 tiles keeps the old order (a run-time
//                choice; split-K's sweep cases -0.86 -> -0.76 % on average, worst +6.5 -> +2.2 %).
//   v40          the early issue chosen by the plan (SparseMlaPlan::early_issue) and the launcher's
//                instance, not per CTA (that choice cost the old order's plans 1-2 %, run 719;
//                T = 53 / 62 runs -1.6 %, topk 512 T = 176 -1.1 %, run 720), and on where the
//                grid fits one CTA per SM (H200). With it the planner splits 16-head bf16 lists of
//                2048 at T = 9-16 one CTA per SM (run 722, H200, us): T = 16 random 23.65 -> 21.5,
//                sequences 23.8 -> 21.4, runs 18.1 -> 17.95; T = 9 random 17.6 -> 16.25; T = 11
//                runs 16.15 -> 16.4, the one loss.
//   v41 bb598c4, 42169f2 (plans only) full lists (SparseMlaProblem::min_valid_entries = topk) one
//                CTA per SM in splits of up to 16 tiles on fast memory, T = 17-33 (run 725, H200,
//                us): random T = 20 / 26 / 33 27.0 / 34.8 / 36.1 -> 25.05 / 29.3 / 33.75; unhinted
//                T = 25-26 in 8-tile splits, not 10 of 7 (run 729): random 33.45 / 34.65 -> 29.75 /
//                30.55, runs 23.05 / 24.55 -> 23.75 / 24.05.
//   v42 (plans; SASS identical) full lists of 1024 too, where one CTA per SM fills 3/4 of the
//                SMs (T = 17-44, 50-66; run 731, H200, us): random T = 18 / 24 / 60 17.45 / 20.65 /
//                33.5 -> 15.7 / 18.6 / 32.35. A balanced CTA calls split_k_early_issue (params.h).
//   v43 (plans only) 32 heads one CTA per SM in splits of <= 8 tiles on fast memory, T = 5-8 (run
//                734, H200, us): random T = 8 19.05 -> 18.1, sequences 19.1 -> 18.0, runs 17.95 ->
//                17.45; T = 6-7 mixed runs +2.1 / +2.6 %.
//   v44 (plans only) lists of 2048 on fast memory in one-tile splits only while their grid fills
//                half the SMs: 16 heads T = 2, 32 heads T = 1 in 32 two-tile splits (run 745, H200,
//                us): T = 2 random 10.1 -> 9.6 (fp8 9.5 -> 9.2), 32 heads T = 1 9.45 -> 9.0.
//   v45 (plans only) under the full-lists hint, 16-head lists of <= 768 in one split instead of
//                the half-wave lead (T = 133-165; run 750, H200, us): topk 512 T = 165 random 48.9
//                -> 39.85 (fp8 39.2 -> 34.1), T = 150 separate requests 46.25 -> 38.8.
//   v46 c347c3a (plans only) no fused rows where min_valid_entries exceeds the chunk (no token
//                could fuse): each split reads and compacts only its chunk of the list, the combine
//                counts nothing. Run 763, H200, hinted separate requests (us): fp8 T = 16 / 24 19.2 /
//                24.6 -> 18.5 / 23.6, T = 8 13.5 -> 13.3; bf16 T = 1 / 4 / 32 8.8 / 11.65 / 34.15 ->
//                8.7 / 11.5 / 33.35; T >= 48 within +-1 %.
//   v47 1c4b4aa  the many-splits combine in 4-warp blocks at 1-2 parts, which fit beside a main
//                grid of two CTAs per SM, so that their count of each list for fused rows runs
//                during the main kernel, not after it (run 773, H200, unhinted, us): fp8 16 heads
//                T = 16 19.15 -> 17.7, 32 heads T = 8 17.7 -> 15.9, 64 heads T = 3 15.75 -> 14.5,
//                128 heads T = 2 17.55 -> 15.7; T = 8 mixed runs bf16 12.05 -> 11.8.
//   v48 7a54563, 92a4160  launched with the largest shared-memory carve-out when the 4-warp
//                combine follows: the driver's own carve-out for two hinted fp8 CTAs (60 KB
//                each) left that combine no room beside them (runs 779, 783, H200, us): hinted
//                fp8 64 heads T = 3 16.4 -> 14.4, 32 heads T = 8 16.65 -> 15.75, 128 heads T = 2
//                16.4 -> 15.55, 16 heads T = 16 separate requests 18.5 -> 17.5; unhinted lists
//                of 1024 in 11 splits fp8 16.15 -> 14.95 (T = 20); before the 256-thread
//                combines it cost 1.6-2.9 % (run 782), so those plans keep the driver's.
// Gather floor in the same runs: 4.9 | 61.2 | 764.6 | 1138. Peer (Triton split-K, run 2):
// 12.9 | 78.5 | 826.3 | 1834.
// Tried and not kept (docs/perf.md): fused marks, the combine finding fused tokens by a mark
// from split 0 instead of its count, which waits for a full grid's CTAs to leave (runs 770-771:
// fp8 full lists -3 to -7 %, mixed lengths +2 to +5 %); splits other than 0 reading only their
// chunk and a 32-position witness (run 768: bf16 T <= 8 +2 to +9 %); lead tokens in more splits
// filling a plan's idle slots (run 737: +4 to +16 % on full lists); a wgmma S for fp8, weighed
// first by what-ifs (runs 738, 740: without S's e4m3 side at all T = 1024 only -6 % on separate
// requests, -12.5 % random);
// cp.async.ca row gathers (run 29: T64 -3 %, prefill +3 %);
// row order's sort in one pass of 7 radix bits (run 149: T=256 -0.8 us, T=1024 +5);
// splits merged in thread-block clusters through distributed shared memory instead of the
// combine (run 38, 4d09c20: T=1 12.4, T=64 88 us, slower everywhere below T=128); the
// prologue's parameter reads batched (run 40: within noise); a shared-rows kernel for prefill,
// 4 tokens per CTA gathering the union of their rows once, each token picking its rows from the
// tile by per-lane ldmatrix addresses (run 42, 76bc4a5: prefill 4393 vs 2169 us, issue-bound).
// Runs 66-70: the combine's trigger moved or dropped and its loads in one round
// (all within 0.2 us: the combine's ~2.4 us is its own launch and L2 round trip, not PDL);
// rows by cp.async.bulk (TMA, one copy per row part; +1-3 % at T >= 64, +1.1 us at T=1 2-valid);
// .L2::256B (+1-2 %: kpe's 128-byte rows over-fetch); tile 0 gathered straight from the raw
// index positions before the compaction (T=1 unchanged, 2-valid +0.3 us: the first index load
// alone takes ~2.2 us after entry and the rows another ~2.2, the compaction was never in the way).
// Run 108: each unsplit CTA's list radix-sorted by row first, so that co-resident CTAs sweep
// the cache together and shared rows meet in L2: T = 256 / 512 / 1024 random unchanged. Wrong:
// the same lists sorted on the host ran 218 -> 156 and 827 -> 594 us (run 141), so that variant
// cannot have run its sort; it is v8 below, verified by a test that the order changes results.
// Runs 163-164: splits sized on the device by each token's valid rows (a count kernel, then
// every CTA computing the schedule after its PDL wait): the slowest CTA's loop at T = 64 runs
// 37 -> 30 us, but rows were requested ~4 us later; T = 8 runs 13.8 -> 18.3, T = 64 runs 50.4
// -> 55.6, T = 1 random 10.3 -> 15.1 (design.md: a schedule made once per decode step instead).
// Run 173: the prologue filling both stages (tile 1 asked with tile 0): T = 8 runs unchanged
// (its rows are DRAM-bound, not a chain of round trips), 2-valid +0.2 us. Run 177: the
// parameters the prologue reads first moved to the struct's first 112 bytes: within 0.1 us.
// Run 196: the fused T = 1 CTAs' index list loaded as their first instructions (first load at
// SASS instruction 26, not 137): 2-valid 5.6 -> 5.9, T = 1 random 10.0 -> 10.4; the list itself
// arrives ~2 us after its loads are issued.
// Runs 201-207: a single CTA's chain is bound by its instructions (~2700 SASS, ~0.3 per cycle
// per warp) more than by memory: with the L2 not flushed its phases take the same time. Loops
// rolled to fetch less code: unchanged. Q's copies as 8 + 1 per thread at fixed offsets (no
// division, one address): the compiler then issues them before the index loads, and even kept
// behind them, Q is issued 0.3 us later and 2-valid is 0.3 us slower.
// Runs 220-222: a short chunk's valid rows prefetched to L2 as their indices arrive, before the
// compaction: bulk prefetches slower everywhere below T = 16 (T = 1 random 9.6 -> 10.8); line
// prefetches T = 1 random 9.6 -> 9.2 but 2 rows 4.4 -> 4.7, T = 8 runs 13.5 -> 14.2; one line
// per row slower too: every form holds up the compaction (2.06 -> 2.6-2.8 us after entry with 2
// rows, even with only two prefetches in the CTA).
// Run 237: 5 stages of 32-row tiles (~214 KB, one CTA per SM) for unsplit T = 64, so that a
// CTA streams its whole token with 4 tiles in flight: 96 us against the planner's 69.6 (2 stages
// unsplit: 108). Its loads alone take 72.9 us, 35 GB/s: a CTA of 4 warps keeps ~50 KB of
// cp.async in flight however many stages it owns (Q reached registers at 7.6 us, behind them).
// Runs 231-235, T = 64 random (row order): tile 0 gathered before the sort made the sort finish
// 4 us later (its shared-memory rounds wait behind the tile's copies, as the compaction waited
// behind the prefetches above): T = 64 +0.6 us. Q copied after the sort, and the sort as a warp
// multisplit (counts in registers, no match.any): the sort no sooner. Fused rows' idle splits
// copying Q only after the count: 2-valid unchanged, T = 1 random +0.4 us.
// Runs 280-288: splits other than 0 compacting only their own chunk: T = 1 random -0.1 to -0.2,
// 2-valid +0.1 us. Q as 32 bulk copies on an mbarrier (branch bulk-q-experiment): issued 0.7 us
// sooner, but the list landed later (compacted 2.05 -> 2.29 us), 2-valid 4.4 -> 4.6. Tiles as 64
// per-row bulk copies, 5 stages, one CTA per SM (branch bulk-tiles-experiment): 2.9 us per tile
// with 4 in flight, T = 1024 random 609 -> 1473 us. The 2-valid CTA alone in its grid
// (--splits 1) takes 4.0 us against the planner's 4.3-4.4: the other CTAs' start and the grid.
// Run 289: 4 producer warps (cp.async on per-stage mbarriers), 5 stages, one CTA per SM (branch
// producer-warps-experiment): unsplit T = 64 107.7 -> 76.9 us, but T = 1024 random 612 -> 789
// (an SM gathers at ~32-36 GB/s either way, on the H200 too: 547 -> 613; run 290).
// Runs 663-667 (H200, branch last-split-merge-experiment): no combine for 2-8 splits, the last
// split of a (token, head group) to arrive (one acq_rel atomic per CTA) merging the partials:
// T = 64 random 53.6 -> 58.6 us at best, T = 32 35.2 -> 43.4. One 4-warp CTA copies its 16 x
// splits KB at ~13-21 GB/s and merges them in latency-bound chains, 7-11 us where the combine's
// warps on every SM take ~3.6.
// Runs 673-675 (H200): the combine released per token by per-split flags (a release store after
// each split CTA's barrier, the combine's warps polling; branch combine-flags-experiment): T = 1
// random 8.9 -> 10.4, T = 4-16 +1.4-1.8, T >= 32 unchanged: the fence and the flag's trip take
// longer than PDL's ~0.65 us release. Split partials staged by stmatrix and stored as whole rows
// (branch staged-partials-experiment): T = 1 +0.1, fp8 +0.4, 'stored' at the same time.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "common/block_compact.cuh"
#include "dsa/sparse_mla.h"
#include "sparse_mla/params.h"
#include "sparse_mla/partials.cuh"
#include "sparse_mla/fp8_rows.cuh"
#include "sparse_mla/share_choice.cuh"

namespace dsa::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// fp8: O is rescaled only when a row's running max grows by more than this (log2): P <= 2^8.
constexpr float kFp8RescaleSlack = 8.f;
constexpr int kQkDim = kCkvDim + kKpeDim;                // 576
constexpr int kChunksPerRow = kQkDim * 2 / 16;           // 72 x 16 B per gathered row
constexpr int kCkvChunks = kCkvDim * 2 / 16;             // 64
constexpr int kRowBytes = kQkDim * 2 + 16;               // 1168: +16 B keeps ldmatrix conflict-free
constexpr int kDimsPerWarpQk = kQkDim / kWarps;          // 144 = 9 k-steps of 16
constexpr int kKStepsPerWarp = kDimsPerWarpQk / 16;      // 9
constexpr int kDimsPerWarpV = kCkvDim / kWarps;          // 128
constexpr int kMaxChunk = SparseMlaPlan::kMaxChunk;
// Row stride of the bf16 output tile staged in shared memory by the epilogue (+8 elements: the
// 8 rows of an stmatrix land in different banks).
constexpr int kStagedStrideBf16 = kCkvDim + 8;
constexpr int kIdxPerThread = kMaxChunk / kThreads;      // 16
static_assert(kQkDim % (16 * kWarps) == 0, "QK dims must split evenly over warps");
static_assert(kFusedChunkAlign == 32, "block_compact_scan counts valid items per warp ballot (32 positions)");

// A gathered row's shared slot: a bf16 row padded to kRowBytes; an fp8_ds_mla row as it is stored,
// kFp8RowBytes = 41 x 16 bytes (odd, so 8 consecutive slots' 16-byte chunks fall in distinct banks
// for ldmatrix).
template <bool kFp8>
constexpr int kSlotBytes = kFp8 ? kFp8RowBytes : kRowBytes;
static_assert(kFp8RowBytes % 32 == 16, "fp8 slots: an odd number of 16-byte chunks");

// Tile geometry for one block_keys value; the one place sizes are derived.
template <int BK, int STAGES, bool kFp8 = false>
struct TileShape {
  static_assert(BK % 16 == 0 && BK >= 16 && BK <= 64, "block_keys");
  static constexpr int kTileBytes = BK * kSlotBytes<kFp8>;
  static constexpr int kQBytes = kHeadGroup * kRowBytes;
  static constexpr int kExchangeBytes = kWarps * kHeadGroup * BK * 4;
  static constexpr int kScratchBytes = kQBytes > kExchangeBytes ? kQBytes : kExchangeBytes;
  static_assert(STAGES * kTileBytes >= kHeadGroup * kStagedStrideBf16 * 2, "epilogue staging fits the tiles");
  static constexpr int smem_bytes(int chunk) {
    return STAGES * kTileBytes + kScratchBytes + ((chunk * 4 + 15) / 16) * 16;
  }
};

// ---- fp8_ds_mla rows (KvCacheFormat::fp8_ds_mla) ----------------------------------------------
// A gathered fp8 row keeps its cache layout in a slot of its own size (kSlotBytes): e4m3 values
// at bytes [0, 512), the 4 scales at kFp8ScalesOffset, kpe (bf16) at kFp8KpeOffset: 57 % of a
// bf16 tile's shared memory, and 5-6 % faster from T = 256 than the same rows in bf16 slots (runs
// 342-343; not the L1 share the smaller footprint leaves: the largest shared-memory carve-out
// measured the same). The MMAs read the e4m3 values straight from there and convert each
// fragment in registers (one cvt per pair, to f16), on f16 MMAs; the scales stay in fp32 outside
// them:
// - S: warp w's Q dims are ckv block w (dims [128 w, 128 w + 128), one scale per key) and then kpe
//   dims [16 w, 16 w + 16). A B fragment is one ldmatrix row of 4 e4m3 bytes (dims 4c .. 4c + 3 of
//   a 16-dim step for thread c = lane % 4), which the A fragment matches by taking the same dims
//   (k order permuted, which a dot product ignores). Q's block is f16 scaled by a power of two
//   (its largest element to [2^14, 2^15)); the partial S is multiplied by 2^shift x each key's
//   scale, then the kpe step (bf16) adds to it.
// - P V over block w: V comes by ldmatrix.trans of the e4m3 bytes (a thread gets two keys x two
//   adjacent dims, one prmt splits them by dim), so O's n8 tiles hold even and odd dims of each
//   16-dim chunk; P is f16, multiplied per key by scale / m, m the largest scale of the block so
//   far, and O is kept in units of m (rescaled with alpha when m grows).
// Run 361: S on e4m3 MMAs (m16n8k32, Q as two exact e4m3 parts, no B conversions) was 24-30 %
// slower: ptxas emulates that MMA on sm_90 (conversions and two f16 HMMAs; no QMMA in the SASS).
// Run 297 dequantized each value to bf16 (e4m3 x scale, rounded) and ran the bf16 math: one-row
// lists missed the lse tolerance (0.0135 against 0.01). Runs 298-303 converted each tile to exact
// bf16 in shared memory first (a pass of loads, stores and a barrier): T = 1024 754 us (bf16 610).
// A slot's byte offset of qk dim d (a multiple of 8): bf16 rows keep ckv then kpe; fp8 rows their
// kpe at kFp8KpeOffset (their ckv bytes are e4m3, at offset d).
template <bool kFp8>
__device__ __forceinline__ int slot_offset(int d) {
  return kFp8 ? (d < kCkvDim ? d : kFp8KpeOffset + (d - kCkvDim) * 2) : d * 2;
}
static_assert(kFp8ScaleDims * kWarps == kCkvDim, "a scale block per warp");

// Gathers `count` (<= BK) rows listed in rows[] into a tile, one row per warp at a time: lanes
// take ckv chunks l and l+32, lanes 0-7 the kpe chunk. Rows past count are zero-filled so that
// masked keys multiply finite zeros. L2 fetches whole 128-byte lines for bf16 rows (-1 % at T >= 64).
// kFp8: the row's 41 chunks as they are stored, lane l chunk l and lanes 0-8 chunk 32 + l (the
// scales and kpe).
template <int BK, bool kFp8, bool kFixedRowLoop>
__device__ __forceinline__ void load_tile(const SparseMlaParams& p, uint8_t* tile, const int* rows, int count) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t base = ptx::smem_addr(tile) + lane * 16;
  static_assert(kFp8RowBytes == (32 + 9) * 16 && kFp8ScalesOffset == 512, "fp8 rows: 32 e4m3 chunks, then 9 of scales and kpe");
  static_assert(BK % kWarps == 0, "whole rows per warp");
  // The side chunks (kpe; fp8: scales and kpe) go to a few lanes by one predicated copy: an `if`
  // around the copy compiled to a branch and its reconvergence for every row.
  const auto load_row = [&](int r) {
    const bool live = r < count;
    const int64_t row = live ? rows[r] : 0;
    const uint32_t bytes = live ? 16u : 0u;
    if constexpr (kFp8) {
      const uint8_t* src = reinterpret_cast<const uint8_t*>(p.ckv) + row * p.ckv_row_stride + lane * 16;
      const uint32_t dst = base + r * kFp8RowBytes;
      // No .L2::128B here: a 656-byte row at its 656-byte stride spans 6 such lines (768 B) where
      // DRAM's 64-byte granules give 704 B; the hint read 1.09x the bytes and cost 3-5 % (run 534).
      ptx::cp_async_16(dst, src, bytes);
      // One copy for scales and kpe: as an if / else if between kpe and scale lanes it cost 4-5 %
      // at T >= 256 (run 336).
      ptx::cp_async_16_if(lane <= kKpeDim * 2 / 16, dst + kFp8ScalesOffset, src + kFp8ScalesOffset, bytes);
    } else {
      const uint16_t* ckv = p.ckv + row * p.ckv_row_stride + lane * 8;
      const uint32_t dst = base + r * kRowBytes;
      ptx::cp_async_16_l2_128b(dst, ckv, bytes);
      ptx::cp_async_16_l2_128b(dst + 512, ckv + 256, bytes);
      ptx::cp_async_16_l2_128b_if(lane < kKpeDim * 2 / 16, dst + kCkvDim * 2, p.kpe + row * p.kpe_row_stride + lane * 8, bytes);
    }
  };
  // kFixedRowLoop (fp8, and bf16 with a split softmax, where the warps' instruction chains bind):
  // a fixed trip count, with no bound test and branch per row. With the predicated copy fp8 ran
  // -3 to -6 % on the H200 and -3.5 % on the H100's random lists (runs 562-563), split bf16 on the
  // H200 -2 to -3.4 % from T = 256 (run 565). bf16 that repeats its softmax (the H100's unsplit
  // lists) keeps the bounded loop: the fixed one cost its random lists +1.6 % at T = 1024 (run 561).
  if constexpr (kFixedRowLoop) {
#pragma unroll
    for (int i = 0; i < BK / kWarps; ++i) load_row(warp + i * kWarps);
  } else {
#pragma unroll
    for (int r = warp; r < BK; r += kWarps) load_row(r);
  }
}

// ---- balanced split-K's schedule (SparseMlaPlan::balanced, params.h) ---------------------------
__device__ __forceinline__ int warp_sum(int v) { return __reduce_add_sync(0xffffffffu, v); }

// Token t's whole index list, kPer entries per thread of a kBlock-thread block (entry u * kBlock
// + tid), every load in flight before any is used; -1 past topk and past the token's length.
template <int kPer, int kBlock>
__device__ __forceinline__ void load_token_list(const SparseMlaParams& p, int64_t t, int32_t (&r)[kPer]) {
  const int32_t* idx = p.indices + t * p.indices_token_stride;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int k = u * kBlock + threadIdx.x;
    r[u] = k < p.topk ? __ldg(idx + k) : -1;
  }
  const int len = list_length(p, t);  // after the index loads: they must not wait for it
#pragma unroll
  for (int u = 0; u < kPer; ++u)
    if (u * kBlock + static_cast<int>(threadIdx.x) >= len) r[u] = -1;
}

// Token t's valid rows (names_a_row, as the compaction decides) and, for chunks of `chunk`
// positions (0: none; a multiple of 32), which chunks hold one: a block of kBlock threads reads the
// whole list (topk <= kMaxChunk), every load in flight. Every thread gets the block's answer.
struct ListCount {
  int valid;
  uint64_t live_chunks;  // bit c: chunk c holds a valid row (chunk > 0, at most 64 chunks)
};
template <int kBlock>
__device__ __forceinline__ ListCount count_token_list(const SparseMlaParams& p, int t, int chunk) {
  constexpr int kPer = kMaxChunk / kBlock, kBlockWarps = kBlock / 32;
  static_assert(kPer * kBlock == kMaxChunk, "a whole list per block");
  __shared__ int s_warp_valid[kBlockWarps];
  __shared__ uint64_t s_warp_live[kBlockWarps];
  int32_t r[kPer];
  load_token_list<kPer, kBlock>(p, t, r);
  int n = 0;
  uint64_t live = 0;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const unsigned any = __ballot_sync(0xffffffffu, names_a_row(r[u], p.num_rows));
    n += __popc(any);
    // The warp's 32 positions lie in one chunk.
    if (any != 0 && chunk > 0) live |= uint64_t{1} << ((u * kBlock + threadIdx.x / 32 * 32) / chunk);
  }
  if (threadIdx.x % 32 == 0) {
    s_warp_valid[threadIdx.x / 32] = n;
    s_warp_live[threadIdx.x / 32] = live;
  }
  __syncthreads();
  ListCount c{0, 0};
#pragma unroll
  for (int w = 0; w < kBlockWarps; ++w) c.valid += s_warp_valid[w], c.live_chunks |= s_warp_live[w];
  return c;
}

// Token t's valid rows into token_rows[t], one block per token.
__global__ void __launch_bounds__(kThreads) sparse_mla_count_rows_kernel(const SparseMlaParams p) {
  const ListCount c = count_token_list<kThreads>(p, blockIdx.x, 0);
  if (threadIdx.x == 0) p.token_rows[blockIdx.x] = c.valid;
}

// One block: the schedule from token_rows (params.h's rule). Thread i takes tokens [i * per,
// i * per + per): the total tiles (one reduction), then the splits under all kBalancedCandidates
// tiles-per-split values at once (one reduction), then each token's first slot (one scan); it
// writes the header, every slot's (token, split, splits) and every token's (first slot, splits).
__global__ void __launch_bounds__(kThreads) sparse_mla_schedule_kernel(const SparseMlaParams p) {
  constexpr int BK = kPlannerBlockKeys;
  constexpr int kPer = kBalancedMaxTokens / kThreads;
  static_assert(kPer * kThreads == kBalancedMaxTokens, "tokens per thread");
  __shared__ int s_sums[kWarps][kBalancedCandidates + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int T = p.num_tokens, slots = p.balanced_slots, max_tiles = p.splits;
  const int per = (T + kThreads - 1) / kThreads;
  const int first = threadIdx.x * per;
  const int present = max(0, min(per, T - first));  // tokens of this thread
  int tiles[kPer];
  int my_tiles = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (j >= present) break;
    tiles[j] = (__ldcg(p.token_rows + first + j) + BK - 1) / BK;
    my_tiles += tiles[j];
  }
  my_tiles = warp_sum(my_tiles);
  if (lane == 0) s_sums[warp][kBalancedCandidates] = my_tiles;
  __syncthreads();
  int total = 0;  // <= 1024 tokens x 64 tiles
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += s_sums[w][kBalancedCandidates];
  const int k0 = balanced_first_candidate(total, slots, max_tiles);
  int n[kBalancedCandidates] = {};
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (j >= present) break;
#pragma unroll
    for (int c = 0; c < kBalancedCandidates; ++c) n[c] += balanced_splits_of(tiles[j], k0 + c);
  }
#pragma unroll
  for (int c = 0; c < kBalancedCandidates; ++c) {
    n[c] = warp_sum(n[c]);
    if (lane == 0) s_sums[warp][c] = n[c];
  }
  __syncthreads();
  int k = balanced_fallback(total, slots, T, max_tiles);
#pragma unroll
  for (int c = kBalancedCandidates - 1; c >= 0; --c) {  // the smallest candidate that fits
    int sum = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += s_sums[w][c];
    if (k0 + c <= max_tiles && sum <= slots) k = k0 + c;
  }
  int mine = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (j >= present) break;
    mine += balanced_splits_of(tiles[j], k);
  }
  int before = mine;  // inclusive scan over the warp, then the warps before
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, before, o);
    if (lane >= o) before += y;
  }
  __syncthreads();  // everyone has read s_sums
  if (lane == 31) s_sums[warp][0] = before;
  __syncthreads();
  int start = before - mine;
  for (int w = 0; w < warp; ++w) start += s_sums[w][0];
  int4* slot_table = p.schedule + 1;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (j >= present) break;
    const int splits = balanced_splits_of(tiles[j], k);
    p.token_splits[first + j] = make_int2(start, splits);
    for (int s = 0; s < splits; ++s) slot_table[start + s] = make_int4(first + j, s, splits, 0);
    start += splits;
  }
  int used = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) used += s_sums[w][0];
  for (int i = used + threadIdx.x; i < slots; i += kThreads) slot_table[i] = make_int4(-1, 0, 0, 0);
  if (threadIdx.x == 0) p.schedule[0] = make_int4(T, slots, p.num_heads / kHeadGroup, kScheduleMagic);
}

// ---- lists of at most 2 rows: plain FMAs, no tile pipeline -------------------------------------
// A CTA that writes its token's bf16 output itself (fused rows, or one split per token) and holds
// at most kLeanRows rows skips the pipeline: the tile's math and the staged epilogue took 1.1 us
// of instruction latency for 2 rows (4 barriers, the scores' exchange, stmatrix staging; perf.md
// runs 201-204). Warp w takes heads 4w .. 4w+3 whole, so nothing crosses warps: lane l holds ckv
// dims [8l, 8l+8) and [256+8l, 256+8l+8) and (l < 8) kpe dims [8l, 8l+8) of every row and head,
// a score is one warp reduction, and the output's 16 dims per lane and head are stored from
// registers as two 16-byte vectors (a warp's store is 512 contiguous bytes). The row count is a
// template argument: a version for up to 4 rows with the count at run time issued every row's
// predicated code and ran 2 rows in 4.9 us, 4 rows in 5.8 (the tile path: 5.1; run 214).
constexpr int kLeanRows = 2;
constexpr int kLeanHeads = kHeadGroup / kWarps;  // heads per warp
constexpr int kLeanDims = 24;                    // dims per lane and row: 2 ckv vectors + 1 kpe vector (lanes 0-7)

// The 8 bf16 of a 16-byte vector as floats.
__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// A lean row's part for lane l as three 16-byte bf16 vectors: ckv dims [8l, 8l + 8) and
// [256 + 8l, 256 + 8l + 8), and (l < 8) kpe dims [8l, 8l + 8), else zeros; with fp8_ds_mla v[0]
// holds the 16 e4m3 bytes of those ckv dims and `scale` their two scales (unset for bf16), which
// lean_ckv_to_float turns into floats once they are needed.
template <bool kFp8>
__device__ __forceinline__ void load_lean_row(const SparseMlaParams& p, int64_t row, uint4 (&v)[3], float (&scale)[2]) {
  const int lane = threadIdx.x % 32;
  v[2] = make_uint4(0u, 0u, 0u, 0u);
  if constexpr (kFp8) {
    const uint8_t* src = reinterpret_cast<const uint8_t*>(p.ckv) + row * p.ckv_row_stride;
    const uint2 lo = __ldg(reinterpret_cast<const uint2*>(src) + lane);
    const uint2 hi = __ldg(reinterpret_cast<const uint2*>(src + kCkvDim / 2) + lane);
    const float* scales = reinterpret_cast<const float*>(src + kFp8ScalesOffset);
    v[0] = make_uint4(lo.x, lo.y, hi.x, hi.y);
    scale[0] = __ldg(scales + lane * 8 / kFp8ScaleDims);
    scale[1] = __ldg(scales + (kCkvDim / 2 + lane * 8) / kFp8ScaleDims);
    if (lane < kKpeDim * 2 / 16) v[2] = __ldg(reinterpret_cast<const uint4*>(src + kFp8KpeOffset) + lane);
  } else {
    const uint4* ckv = reinterpret_cast<const uint4*>(p.ckv + row * p.ckv_row_stride) + lane;
    v[0] = __ldg(ckv);
    v[1] = __ldg(ckv + 32);
    if (lane < kKpeDim * 2 / 16) v[2] = __ldg(reinterpret_cast<const uint4*>(p.kpe + row * p.kpe_row_stride) + lane);
  }
}
// Lean ckv values as floats: the two 8-dim vectors of load_lean_row (fp8_ds_mla: its e4m3 bytes
// times their scales, in fp32).
template <bool kFp8>
__device__ __forceinline__ void lean_ckv_to_float(const uint4 (&v)[3], const float (&scale)[2], float* f) {
  if constexpr (kFp8) {
    const uint32_t w[4] = {v[0].x, v[0].y, v[0].z, v[0].w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint2 h4 = ptx::e4m3x4_to_f16x4(w[i / 2]);
      const uint32_t h = i % 2 ? h4.y : h4.x;
      const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&h));
      f[2 * i] = x.x * scale[i / 4];
      f[2 * i + 1] = x.y * scale[i / 4];
    }
  } else {
    bf16x8_to_float(v[0], f);
    bf16x8_to_float(v[1], f + 8);
  }
}

// Rows rows[0 .. N) (compacted in shared memory, or a tiny list's in registers) of token t
// against heads h0 .. h0+15, whose Q is (or is being) staged at s_q
// by the CTA's cp.async group: bf16 out and lse. Waits for every cp.async of the CTA. Timeline
// points: 3 Q staged, 4 Q in registers, 5 scores (the rows landed), 6 stored.
template <int N, bool kFp8, typename Mark>
__device__ __forceinline__ void lean_rows_forward(const SparseMlaParams& p, const int* rows, int t, int h0,
                                                  const uint8_t* s_q, Mark mark) {
  static_assert(N >= 0 && N <= kLeanRows, "lean row count");
  constexpr int kN = N > 0 ? N : 1;  // array extents
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool has_pe = lane < kKpeDim * 2 / 16;
  // The rows into registers first, every load in flight (they head the chain).
  uint4 raw[kN][3];
  float ckv_scale[kN][2];  // fp8_ds_mla
#pragma unroll
  for (int r = 0; r < N; ++r) load_lean_row<kFp8>(p, rows[r], raw[r], ckv_scale[r]);
  ptx::cp_async_wait<0>();
  __syncthreads();  // Q staged by every thread's copies
  mark(3);
  float s[kLeanHeads][kN];
  if constexpr (N > 0) {
    float q[kLeanHeads][kLeanDims];
#pragma unroll
    for (int h = 0; h < kLeanHeads; ++h) {
      const uint4* src = reinterpret_cast<const uint4*>(s_q + (warp * kLeanHeads + h) * kRowBytes) + lane;
      bf16x8_to_float(src[0], q[h]);
      bf16x8_to_float(src[32], q[h] + 8);
      uint4 pe = make_uint4(0u, 0u, 0u, 0u);
      if (has_pe) pe = src[64];
      bf16x8_to_float(pe, q[h] + 16);
    }
    mark(4);
    // Scores: this lane's dims (4 N independent chains), then the warp's sum, which every lane gets.
#pragma unroll
    for (int r = 0; r < N; ++r) {
      float k[kLeanDims];
      lean_ckv_to_float<kFp8>(raw[r], ckv_scale[r], k);
      bf16x8_to_float(raw[r][2], k + 16);
#pragma unroll
      for (int h = 0; h < kLeanHeads; ++h) {
        float acc = 0.f;
#pragma unroll
        for (int d = 0; d < kLeanDims; ++d) acc = fmaf(q[h][d], k[d], acc);
        s[h][r] = acc;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int r = 0; r < N; ++r)
#pragma unroll
        for (int h = 0; h < kLeanHeads; ++h) s[h][r] += __shfl_xor_sync(0xffffffffu, s[h][r], o);
    mark(5);
  }
  // Softmax (base 2) and O = P V: 16 dims per lane and head. One row: its weight is 1.
  const float scale = p.scale_log2;
  float v[kN][16];
#pragma unroll
  for (int r = 0; r < N; ++r) lean_ckv_to_float<kFp8>(raw[r], ckv_scale[r], v[r]);
#pragma unroll
  for (int h = 0; h < kLeanHeads; ++h) {
    float o[16], lse;
    if constexpr (N == 0) {
#pragma unroll
      for (int i = 0; i < 16; ++i) o[i] = 0.f;
      lse = -INFINITY;
    } else if constexpr (N == 1) {
#pragma unroll
      for (int i = 0; i < 16; ++i) o[i] = v[0][i];
      lse = s[h][0] * scale;
    } else {
      float m = s[h][0] * scale;
#pragma unroll
      for (int r = 1; r < N; ++r) m = fmaxf(m, s[h][r] * scale);
      float w[kN], l = 0.f;
#pragma unroll
      for (int r = 0; r < N; ++r) {
        w[r] = ptx::exp2_approx(s[h][r] * scale - m);
        l += w[r];
      }
      const float inv = ptx::rcp_approx(l);  // l >= 1
#pragma unroll
      for (int r = 0; r < N; ++r) w[r] *= inv;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        float acc = 0.f;
#pragma unroll
        for (int r = 0; r < N; ++r) acc = fmaf(w[r], v[r][i], acc);
        o[i] = acc;
      }
      lse = m + ptx::lg2_approx(l);
    }
    const int head = h0 + warp * kLeanHeads + h;
    uint32_t b[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) b[i] = ptx::pack_bf16x2(o[2 * i], o[2 * i + 1]);
    uint4* dst = reinterpret_cast<uint4*>(p.out + t * p.out_token_stride + head * p.out_head_stride) + lane;
    dst[0] = make_uint4(b[0], b[1], b[2], b[3]);
    dst[32] = make_uint4(b[4], b[5], b[6], b[7]);
    if (lane == 0) p.lse[t * p.lse_token_stride + head] = lse;
  }
  mark(6);
}

// The dissection variants leave the tile loop early on purpose ("loop is not reachable").
#pragma nv_diag_suppress 128
// kStage < kStageFull builds the dissection variants of dsa-bench (--stage): the kernel stops
// after loading tiles, after the scores, or after the softmax, keeping the work alive by
// folding it into l_run (the lse output).
// kRowOrder: the plan's row order (p.row_order_bits > 0), a separate instantiation: the sort's
// code in the kernel, even skipped, cost T = 1 0.1-0.2 us (run 148).
// kBalanced: the plan's balanced schedule (p.balanced_slots > 0): the CTA's (token, split,
// splits) come from the schedule's slot table, and its split takes an even share of the token's
// row tiles.
// kFp8: an fp8_ds_mla cache (p.kv_fp8), 32- or 64-row tiles and the full kernel only: the
// fragments read the e4m3 bytes and convert them in registers, and the block scales enter S and
// P (docs/design.md, FP8).
// kSplitSoftmax: the softmax split over the warps by keys (step 4 above; SparseMlaPlan::
// split_softmax): always with kFp8, by the plan's choice for bf16; 32- or 64-row tiles.
// ---- the online softmax's steps on a warp's S fragments (rows g and g + 8, keys of n-tile j) ---
// The 4 warps' partial S of n-tile j, summed (the exchange holds warp w's tile j at w * n_tiles + j).
__device__ __forceinline__ void sum_partials(const float4* s_exchange, int n_tiles, int j, int lane, float (&acc)[4]) {
  float4 sum = s_exchange[j * 32 + lane];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    const float4 v = s_exchange[(w * n_tiles + j) * 32 + lane];
    sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
  }
  acc[0] = sum.x; acc[1] = sum.y; acc[2] = sum.z; acc[3] = sum.w;
}
// Keys of n-tile j at or past keys_left (only in a tile's last n-tiles) to -inf.
__device__ __forceinline__ void mask_keys(float (&acc)[4], int j, int quad_col, int keys_left) {
#pragma unroll
  for (int e = 0; e < 4; ++e)
    if (j * 8 + quad_col + (e & 1) >= keys_left) acc[e] = -INFINITY;
}
// Rows g and g + 8's max over N n-tiles, across the quad.
template <int N>
__device__ __forceinline__ void quad_row_max(const float (&acc)[N][4], float (&mx)[2]) {
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    mx[0] = fmaxf(mx[0], fmaxf(acc[j][0], acc[j][1]));
    mx[1] = fmaxf(mx[1], fmaxf(acc[j][2], acc[j][3]));
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
  }
}
// The running max moved to max(m, tile max); alpha rescales what was summed before (0 on the
// first tile, where O and l are 0).
__device__ __forceinline__ void raise_running_max(float (&m_run)[2], float (&l_run)[2], const float (&tile_max)[2], float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m_run[r], tile_max[r]);
    alpha[r] = ptx::exp2_approx(m_run[r] - m_new);
    m_run[r] = m_new;
    l_run[r] *= alpha[r];
  }
}
template <int N>
__device__ __forceinline__ void scale_rows(float (&o)[N][4], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    o[j][0] *= alpha[0]; o[j][1] *= alpha[0];
    o[j][2] *= alpha[1]; o[j][3] *= alpha[1];
  }
}
// bf16's exact running max: O and l rescaled only when some row's max grows (a warp-uniform branch).
template <int N>
__device__ __forceinline__ void follow_exact_max(float (&m_run)[2], float (&l_run)[2], const float (&tile_max)[2], float (&o)[N][4]) {
  if (__any_sync(0xffffffffu, tile_max[0] > m_run[0] || tile_max[1] > m_run[1])) {
    float alpha[2];
    raise_running_max(m_run, l_run, tile_max, alpha);
    scale_rows(o, alpha);
  }
}
// exp2(s c - m) of an n-tile's fragment (one FFMA each), added to the row sums.
__device__ __forceinline__ float4 tile_weights(const float (&acc)[4], float s_scale, const float (&m_run)[2], float (&l_run)[2]) {
  const float4 p = make_float4(ptx::exp2_approx(fmaf(acc[0], s_scale, -m_run[0])), ptx::exp2_approx(fmaf(acc[1], s_scale, -m_run[0])),
                               ptx::exp2_approx(fmaf(acc[2], s_scale, -m_run[1])), ptx::exp2_approx(fmaf(acc[3], s_scale, -m_run[1])));
  l_run[0] += p.x + p.y;
  l_run[1] += p.z + p.w;
  return p;
}

// __launch_bounds__(128, 2): two CTAs per SM, as the ~100 KB of shared memory of 16- and 32-row
// tiles allows, which still leaves ptxas up to 255 registers; without the minimum it capped the
// 32-row kernels at 168 registers and spilled once the epilogue used stmatrix.
// kTinyList: the instance for one-split plans of lists of at most 32 positions (tiny_list below);
// the other instances do not carry its code (in their prologue it cost T = 1 random 0.2 us, run 624).
template <int BK, int STAGES, int kStage = kStageFull, bool kRowOrder = false, bool kBalanced = false, bool kFp8 = false,
          bool kSplitSoftmax = kFp8, bool kTinyList = false, bool kShareProbe = false, bool kEarlyIssue = true>
__global__ void __launch_bounds__(kThreads, 2) sparse_mla_splitk_kernel(const SparseMlaParams p) {
  static_assert(!kTinyList || (kStage == kStageFull && !kRowOrder && !kBalanced), "tiny lists: the full kernel, position order");
  static_assert(!kShareProbe || (kStage == kStageFull && !kBalanced && !kTinyList && share_probe_split_k_tiles_fit(BK, kFp8)),
                "a share probe's half: whole lists in its tiles");
  static_assert(!(kRowOrder && kBalanced), "a balanced schedule reads rows in position order");
  static_assert(!kFp8 || kSplitSoftmax, "fp8 always splits its softmax");
  static_assert(!kSplitSoftmax || (BK >= 32 && kStage == kStageFull), "a split softmax: whole n-tiles per warp, the full kernel");
  static_assert(!kFp8 || ((BK == 32 || BK == 64) && kStage == kStageFull), "fp8 instances: 32- or 64-row tiles, full kernel");
  using Shape = TileShape<BK, STAGES, kFp8>;
  constexpr int kSlot = kSlotBytes<kFp8>;
  // load_tile's fixed row loop where the warps' instruction chains bind (fp8, split softmax).
  constexpr bool kFixedRowLoop = kFp8 || kSplitSoftmax;
  constexpr int kNTiles = BK / 8;  // n8 tiles of keys
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* s_tiles = smem;
  uint8_t* s_scratch = smem + STAGES * Shape::kTileBytes;  // Q staging, then the S exchange
  int* s_rows = reinterpret_cast<int*>(s_scratch + Shape::kScratchBytes);
  __shared__ int s_offsets[kIdxPerThread * kWarps + 1];

  const long long clock_entry = clock64();
  long long* timeline = p.timeline != nullptr && threadIdx.x == 0 ? p.timeline + (int64_t)blockIdx.x * kTimelinePoints : nullptr;
  auto mark = [&](int point) {
    if (timeline != nullptr) timeline[point] = clock64() - clock_entry;
  };
  const auto mark_exit = [&] {  // every way out of the CTA
    if (timeline != nullptr) timeline[7] = ptx::globaltimer_ns();
  };
  if (timeline != nullptr) timeline[0] = ptx::globaltimer_ns(), timeline[8] = ptx::sm_id();
  // A share-probe plan's half (share_choice.cuh), launched after the main kernel: its own
  // instances, as the check alone cost the other plans' T <= 8 0.2-0.5 µs (run 693).
  if constexpr (kShareProbe) {
    if (share_probe_picks_shared_rows(p)) {
      share_probe_leave();
      mark_exit();
      return;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int head_groups = p.num_heads / kHeadGroup;
  const int hg = blockIdx.x % head_groups;
  const int h0 = hg * kHeadGroup;
  // The combine (if any) may be scheduled now: its blocks are small and wait in
  // griddepcontrol.wait for this grid's memory, so its launch latency hides behind our work.
  if (p.splits > 1) ptx::launch_dependents();
  int t, split, token_splits = p.splits;  // token_splits: this CTA's token's (balanced)
  bool lead = false;  // a lead token's CTA (SparseMlaPlan::lead_tokens): lead_splits of lead_chunk
  if constexpr (kBalanced) {
    const int slot = blockIdx.x / head_groups;
    const int4 header = __ldcg(p.schedule), entry = __ldcg(p.schedule + 1 + slot);
    if (header.x != p.num_tokens || header.y != p.balanced_slots || header.z != head_groups || header.w != kScheduleMagic)
      __trap();  // not a schedule make_sparse_mla_schedule wrote for this plan
    if (entry.x < 0) {  // a slot left over
      mark_exit();
      return;
    }
    t = entry.x, split = entry.y, token_splits = entry.z;
  } else {  // (token, split) slots, the lead tokens' first
    const int slot = static_cast<int>(blockIdx.x / head_groups), lead_slots = p.lead_tokens * p.lead_splits;
    lead = slot < lead_slots;
    t = lead ? slot / p.lead_splits : p.lead_tokens + (slot - lead_slots) / p.splits;
    split = lead ? slot % p.lead_splits : (slot - lead_slots) % p.splits;
  }
  const bool unsplit = lead && p.lead_splits == 1;  // the token's whole list: out and lse, no partials

  // 1. Raw indices into registers first: they head the critical path (indices -> rows), so
  //    their DRAM latency should overlap everything else in the prologue.
  //    With fused rows on, every CTA reads the token's whole list (topk <= kMaxChunk): it
  //    counts the token's valid rows and finds its own chunk's rows in the compaction.
  const int chunk = lead ? p.lead_chunk : p.chunk;
  const int pos0 = kBalanced ? 0 : split * chunk;
  const int npos = min(chunk, p.topk - pos0);
  const bool whole_list = kBalanced || p.fused_rows > 0;
  const int nlist = whole_list ? p.topk : npos;
  const int32_t* idx = p.indices + t * p.indices_token_stride + (whole_list ? 0 : pos0);
  // Item j of a thread: position j * kThreads + tid, or with row order (warp * 16 + j) * 32 +
  // lane, each warp a contiguous run, as block_bucket_compact wants. Either way one warp's load
  // is 128 contiguous bytes.
  const auto position = [&](int j) -> int {
    return kRowOrder ? (warp * kIdxPerThread + j) * 32 + lane : j * kThreads + static_cast<int>(threadIdx.x);
  };
  int my_row[kIdxPerThread];
#pragma unroll
  for (int j = 0; j < kIdxPerThread; ++j) {
    const int q = position(j);
    my_row[j] = (kRowOrder || j * kThreads < nlist) && q < nlist ? __ldg(idx + q) : -1;
  }
  // A list of at most 32 positions that this CTA reads alone (one split of position order, no
  // lead tokens, no fused rows; the launcher picks the kTinyList instance only then, and the
  // test repeats it) is read whole by every warp (warp 0's load above; the others hit the same
  // 128 bytes), so that one ballot counts and ranks it: a list of at most kLeanRows rows goes
  // to the lean path without the block's compaction (its barriers and scan; a hinted 2-valid
  // token, topk = 2, 4.1 -> 3.95 us, run 625), and warp 0 compacts a longer one alone.
  const bool tiny_list = kTinyList && !whole_list && p.splits == 1 && p.lead_tokens == 0 && nlist <= 32;
  const int tiny_row = tiny_list && warp > 0 && lane < nlist ? __ldg(idx + lane) : -1;
  // The token's length (topk_lengths): one predicated load after the indices', first used after
  // Q's copies are issued (below), so neither waits for it. Any use before them (a branch on it,
  // or the clamp the compiler put beside the load) held Q's copies back by the load's latency:
  // T = 1 with 2 valid rows took 4.9-5.4 us with lengths, 4.4 without (runs 384, 389-392).
  const int raw_length = ptx::ld_nc_s32_or(p.topk_lengths, t, p.topk);

  // 2. Q -> shared (group 0 of cp.async).
  {
    const uint32_t base = ptx::smem_addr(s_scratch);
    for (int c = threadIdx.x; c < kHeadGroup * kChunksPerRow; c += kThreads) {
      const int h = c / kChunksPerRow, col = c - h * kChunksPerRow;
      const uint16_t* src =
          col < kCkvChunks
              ? p.q_nope + t * p.q_nope_token_stride + (h0 + h) * p.q_nope_head_stride + col * 8
              : p.q_pe + t * p.q_pe_token_stride + (h0 + h) * p.q_pe_head_stride + (col - kCkvChunks) * 8;
      ptx::cp_async_16(base + h * kRowBytes + col * 16, src);
    }
    ptx::cp_async_commit();
  }
  mark(1);

  // Positions at or past the token's length are padding. A split past the length gets 0, not a
  // negative end (position() is compared as an int).
  const int listed_end = max(0, clamp_list_length(p, raw_length) - (whole_list ? 0 : pos0));
  if (listed_end < nlist) {
#pragma unroll
    for (int j = 0; j < kIdxPerThread; ++j)
      if (position(j) >= listed_end) my_row[j] = -1;
  }

  int lean_row[kLeanRows] = {0, 0};  // kTinyList: the lean path's rows, in registers
  bool lean_rows_held = false;       // a tiny list's (below): nlisted <= kLeanRows, lean_row set
  // 3. Compact the valid indices: in position order (deterministic), or with the plan's row order
  //    by the row's top bits, position order within equal bits (one counting sort).
  bool valid[kIdxPerThread];
#pragma unroll
  for (int j = 0; j < kIdxPerThread; ++j) valid[j] = names_a_row(my_row[j], p.num_rows);
  int nlisted;  // valid rows among the positions read
  CompactScan<kIdxPerThread * kWarps> list_scan{};  // position order: valid rows before position 32 k
  if constexpr (kRowOrder) {
    unsigned warp_listed = 0;
#pragma unroll
    for (int j = 0; j < kIdxPerThread; ++j) warp_listed += __popc(__ballot_sync(0xffffffffu, valid[j]));
    if (lane == 0) s_offsets[warp] = static_cast<int>(warp_listed);
    __syncthreads();  // the warps' totals written
    nlisted = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) nlisted += s_offsets[w];
  } else {
    if constexpr (kTinyList) {
      if (tiny_list) {  // the same list, count and rows in every warp
        const int r = warp == 0 ? my_row[0] : (lane < listed_end ? tiny_row : -1);
        const unsigned listed = __ballot_sync(0xffffffffu, names_a_row(r, p.num_rows));
        nlisted = __popc(listed);
        if (nlisted <= kLeanRows) {
          lean_rows_held = true;
          const unsigned rest = listed & (listed - 1u);  // without the first row
          lean_row[0] = __shfl_sync(0xffffffffu, r, listed != 0u ? __ffs(listed) - 1 : 0);
          lean_row[1] = __shfl_sync(0xffffffffu, r, rest != 0u ? __ffs(rest) - 1 : 0);
        } else {
          // 3-32 rows: the ballot ranks them, so warp 0 compacts the list alone, one barrier
          // where block_compact takes three and a scan (lists of 32 rows cost +1-3 % with it,
          // run 628).
          if (warp == 0 && ((listed >> lane) & 1u)) s_rows[__popc(listed & ((1u << lane) - 1u))] = r;
          __syncthreads();  // s_rows complete
        }
      }
    }
    if (!tiny_list) {
      // The tiny instance keeps block_compact (its scan in s_offsets) and lean_rows_held: with
      // block_compact_scan and the flag derived from tiny_list its lists of 2 rows ran ~0.1 us
      // slower, the hinted 2-valid token 3.9 -> 4.0 (runs 633, 635). Its SASS is v36's.
      if constexpr (kTinyList) {
        nlisted = block_compact<kIdxPerThread, kThreads>(valid, s_offsets, [&](int rank, int j) { s_rows[rank] = my_row[j]; });
      } else {
        list_scan = block_compact_scan<kIdxPerThread, kThreads>(valid, s_offsets, [&](int rank, int j) { s_rows[rank] = my_row[j]; });
        nlisted = list_scan.total;
      }
      __syncthreads();  // s_rows complete
    }
  }
  int row0 = 0, nvalid = nlisted;
  bool fused = false;  // this CTA finishes the token alone and writes bf16 out + lse
  if constexpr (kBalanced) {
    // Split s of S takes tiles [s * tiles / S, (s + 1) * tiles / S) of the compacted list.
    fused = token_splits == 1;
    if (!fused) {
      const int tiles = (nlisted + BK - 1) / BK;
      row0 = split * tiles / token_splits * BK;
      nvalid = max(0, min(nlisted, (split + 1) * tiles / token_splits * BK) - row0);
    }
  } else if (unsplit) {
    fused = true;
  } else if (whole_list) {
    if (nlisted <= p.fused_rows) {
      if (split != 0) {  // split 0 does it; the combine skips the token too
        ptx::cp_async_wait<0>();  // Q's copies must land before the CTA exits
        mark_exit();
        return;
      }
      fused = true;
    } else if (!kRowOrder) {
      // list_scan.before(g) (the tiny instance: s_offsets[g]) = valid rows before position 32 g;
      // splits start on multiples of 32 (kFusedChunkAlign), so this split's rows are one run of
      // s_rows.
      row0 = kTinyList ? s_offsets[pos0 / kFusedChunkAlign] : list_scan.before(pos0 / kFusedChunkAlign);
      const int pos_end = pos0 + npos;
      nvalid = (pos_end >= p.topk ? nlisted : kTinyList ? s_offsets[pos_end / kFusedChunkAlign] : list_scan.before(pos_end / kFusedChunkAlign)) - row0;
    }
  }
  if constexpr (kRowOrder) {
    // Rows in ascending order of the cache's top bits: the CTAs that run together then sweep
    // the cache together, and rows several tokens list meet in L2 (T = 256 / 1024 random at 16
    // heads: 218 / 825 -> 160 / 621 us, docs/perf.md run 142). One counting pass gives the order
    // of a stable radix sort over those bits, cub's 2-pass sort's before run 155 (0.5 us sooner).
    static_assert((kRowOrderBuckets * kWarps + 1) * 4 <= STAGES * Shape::kTileBytes, "the counts fit the tiles");
    const bool split_only = whole_list && !fused;  // of the token's whole list, this split's positions
    bool keep[kIdxPerThread];
    int bucket[kIdxPerThread];
#pragma unroll
    for (int j = 0; j < kIdxPerThread; ++j) {
      const int q = position(j);
      keep[j] = valid[j] && (!split_only || (q >= pos0 && q < pos0 + npos));
      bucket[j] = my_row[j] >> p.row_order_shift;
    }
    nvalid = block_bucket_compact<kIdxPerThread, kThreads, kRowOrderBuckets>(
        keep, bucket, reinterpret_cast<int*>(s_tiles), [&](int rank, int j) { s_rows[rank] = my_row[j]; });
    __syncthreads();  // s_rows complete; the counts read (the tiles free again)
  }
  const int* rows = s_rows + row0;
  mark(2);
  // Splits merged by the combine write partials (partials.cuh); every other CTA writes bf16 out + lse.
  const bool split_out = p.splits > 1 && !fused;
  if constexpr (kStage == kStageFull) {
    if (!split_out && nvalid <= kLeanRows) {
      static_assert(kLeanRows == 2, "one case per row count");
      if constexpr (kTinyList) {
        if (!lean_rows_held)  // compacted into s_rows (a tiny list that reaches here held <= kLeanRows rows: set above)
#pragma unroll
          for (int r = 0; r < kLeanRows; ++r) lean_row[r] = r < nvalid ? rows[r] : 0;
      }
      // kTinyList: the rows in registers. The other instances read s_rows, as they did before
      // the tiny instance existed (df0bd64).
      const int* lean_rows = kTinyList ? lean_row : rows;
      if (nvalid == 0)
        lean_rows_forward<0, kFp8>(p, lean_rows, t, h0, s_scratch, mark);
      else if (nvalid == 1)
        lean_rows_forward<1, kFp8>(p, lean_rows, t, h0, s_scratch, mark);
      else
        lean_rows_forward<2, kFp8>(p, lean_rows, t, h0, s_scratch, mark);
      mark_exit();
      return;
    }
  }

  // 4. Prologue: first STAGES-1 tiles in flight.
  const int ntiles = (nvalid + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ntiles) load_tile<BK, kFp8, kFixedRowLoop>(p, s_tiles + s * Shape::kTileBytes, rows + s * BK, min(BK, nvalid - s * BK));
    ptx::cp_async_commit();
  }

  // Q fragments into registers (group 0 is the oldest: waiting for STAGES-1 left covers it).
  ptx::cp_async_wait<STAGES - 1>();
  __syncthreads();
  // Warp w's Q dims, k-step kk: [144 w, 144 w + 144), or with fp8 ckv block w and then kpe dims
  // [16 w, 16 w + 16) (the per-key scale multiplies the block's partial before the kpe step).
  const auto qk_dim = [&](int kk) {
    if constexpr (kFp8) return kk < kFp8ScaleDims / 16 ? warp * kFp8ScaleDims + kk * 16 : kCkvDim + warp * 16;
    return warp * kDimsPerWarpQk + kk * 16;
  };
  static_assert(!kFp8 || kKStepsPerWarp == kFp8ScaleDims / 16 + 1, "fp8: a block's 8 k-steps and one kpe step per warp");
  uint32_t q_frag[kKStepsPerWarp][4];
  {
    const uint32_t base = ptx::smem_addr(s_scratch);
#pragma unroll
    for (int kk = 0; kk < kKStepsPerWarp; ++kk) {
      if (kFp8 && kk < kFp8ScaleDims / 16) continue;  // below, as f16
      const int dim = qk_dim(kk) + (lane / 16) * 8;
      ptx::ldmatrix_x4(q_frag[kk], base + (lane % 16) * kRowBytes + dim * 2);
    }
  }
  // fp8: Q's block w as f16 x 2^-q_shift, A fragments in the permuted k order of the e4m3 B
  // fragments: thread (g, c) takes dims 4c .. 4c + 3 of each 16-dim step, rows g and g + 8.
  float s_unshift = 1.f;  // 2^q_shift, which S's block partial is multiplied by
  if constexpr (kFp8) {
    const int g = lane / 4, c = lane % 4;
    float q[kFp8ScaleDims / 16][2][4];
    float amax = 0.f;
#pragma unroll
    for (int kk = 0; kk < kFp8ScaleDims / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint2 v = *reinterpret_cast<const uint2*>(s_scratch + (g + 8 * r) * kRowBytes + (qk_dim(kk) + 4 * c) * 2);
        q[kk][r][0] = __uint_as_float(v.x << 16), q[kk][r][1] = __uint_as_float(v.x & 0xffff0000u);
        q[kk][r][2] = __uint_as_float(v.y << 16), q[kk][r][3] = __uint_as_float(v.y & 0xffff0000u);
#pragma unroll
        for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(q[kk][r][i]));
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const int q_shift = f16_shift(amax);  // amax x 2^-q_shift in [2^14, 2^15)
    const float down = ldexpf(1.f, -q_shift);
    s_unshift = ldexpf(1.f, q_shift);
#pragma unroll
    for (int kk = 0; kk < kFp8ScaleDims / 16; ++kk) {
      q_frag[kk][0] = ptx::pack_f16x2(q[kk][0][0] * down, q[kk][0][1] * down);  // row g, logical k 2c, 2c + 1
      q_frag[kk][1] = ptx::pack_f16x2(q[kk][1][0] * down, q[kk][1][1] * down);  // row g + 8
      q_frag[kk][2] = ptx::pack_f16x2(q[kk][0][2] * down, q[kk][0][3] * down);  // row g, logical k 2c + 8, 2c + 9
      q_frag[kk][3] = ptx::pack_f16x2(q[kk][1][2] * down, q[kk][1][3] * down);
    }
  }
  // Scores stay raw until the softmax's FFMA multiplies them by s_scale >= 0: a negative scale
  // negates Q instead (exact), a zero one becomes FLT_MIN (every weight 1 either way).
  const float s_scale = fmaxf(fabsf(p.scale_log2), FLT_MIN);
  if (p.scale_log2 < 0.f) {
#pragma unroll
    for (int kk = 0; kk < kKStepsPerWarp; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) q_frag[kk][i] ^= 0x80008000u;  // both halves' sign bits (bf16 or f16)
  }
  mark(3);

  float o_acc[kDimsPerWarpV / 8][4];
#pragma unroll
  for (int j = 0; j < kDimsPerWarpV / 8; ++j) o_acc[j][0] = o_acc[j][1] = o_acc[j][2] = o_acc[j][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};  // rows g and g+8 (g = lane / 4), base-2 logits
  float o_unit = 0.f, inv_unit = 0.f;  // fp8: o_acc holds O / o_unit, the largest scale of this warp's block so far
  float l_run[2] = {0.f, 0.f};              // this thread's part of the row sums

  // Lane -> row/col offsets of the ldmatrix addresses.
  const int k_key = (lane & 7) + ((lane >> 4) << 3), k_dim = ((lane >> 3) & 1) * 8;  // K (B, non-trans)
  const int v_key = (lane & 7) + (((lane >> 3) & 1) << 3), v_dim = (lane >> 4) * 8;  // V (B, trans)
  const int quad_col = (lane % 4) * 2;
  float4* s_exchange = reinterpret_cast<float4*>(s_scratch);
  // kSplitSoftmax: each warp sums and exponentiates its own kOwnTiles n-tiles of keys instead of
  // repeating the whole tile's softmax, at the price of two barriers more per tile. Where the
  // warps' instruction chains bind it pays: fp8 -7 to -10 % on the H200 and -8 % at T = 1024
  // random on the H100 (runs 544-545), bf16 on the H200 -3 to -5 % on random lists and on the
  // H100 -1 to -2 % on split calls; where the H100's L2 binds long bf16 CTAs it does not
  // (T = 1024 random unsplit +4 %; run 548). The planner's choice: SparseMlaPlan::split_softmax.
  constexpr int kOwnTiles = kNTiles / kWarps;
  static_assert(!kSplitSoftmax || kNTiles % kWarps == 0, "split softmax: whole n-tiles per warp");
  // Split softmax: each warp's value of rows g and g + 8 (a quad's first lane holds them) meets
  // every other warp's, behind a barrier: the tile maxima in the loop, the row sums after it.
  __shared__ __align__(16) float s_warp_rows[kSplitSoftmax ? kHeadGroup : 1][kWarps];
  const auto rows_of_all_warps = [&](float row_g, float row_g8, float4 (&all)[2]) {
    if constexpr (kSplitSoftmax) {
      const int g = lane / 4;
      if (lane % 4 == 0) s_warp_rows[g][warp] = row_g, s_warp_rows[g + 8][warp] = row_g8;
      __syncthreads();
      all[0] = *reinterpret_cast<const float4*>(s_warp_rows[g]);
      all[1] = *reinterpret_cast<const float4*>(s_warp_rows[g + 8]);
    }
  };

  // Two stages in position order (v39): tile it + 1 is asked for as soon as tile it - 1's stage is
  // free, before tile it has landed, so two tiles are in flight while the CTA waits, for one
  // barrier more per tile. CTAs bound by their own round trips gain (short calls, mixed
  // lengths, 32+ heads, whose head groups meet in L2, fp8, and one CTA per SM); 16-head bf16 CTAs
  // of more than kEarlyIssueMaxTiles tiles two to an SM keep the old order: where each streams
  // its own rows from DRAM (full lists) it lost 1-6.5 % (runs 715-716). The plan says which
  // (SparseMlaPlan::early_issue, params.h split_k_early_issue) and the launcher picks the
  // instance (kEarlyIssue); a balanced schedule's CTA decides by its own tile count. Row order
  // keeps the old order too (its bf16 lists of 2048 lost 1.5-2 %, run 711), as do more stages,
  // whose later tiles are in flight already. Tile 1 asked for with tile 0 in the prologue, ahead
  // of Q's fragments, was slower (-1 to +3.2 %, run 713).
  const bool early_issue = kEarlyIssue && STAGES == 2 && !kRowOrder &&
                           (!kBalanced || split_k_early_issue(kFp8, head_groups * kHeadGroup, ntiles, false));
  for (int it = 0; it < ntiles; ++it) {
    // Tile it+1 goes to the stage tile it-1 left: asked for after tile it landed, or (early) before.
    if (!early_issue) {
      ptx::cp_async_wait<STAGES - 2>();
      __syncthreads();  // tile `it` visible to all; everyone is done with tile it-1 and with Q
    } else if (it > 0) {
      __syncthreads();  // everyone is done with tile it-1: its stage takes tile it+1
    }
    {
      const int nt = it + STAGES - 1;
      if (nt < ntiles)
        load_tile<BK, kFp8, kFixedRowLoop>(p, s_tiles + (nt % STAGES) * Shape::kTileBytes, rows + nt * BK, min(BK, nvalid - nt * BK));
      ptx::cp_async_commit();
    }
    if (early_issue) {
      ptx::cp_async_wait<1>();  // every group but tile it+1's: tile it has landed
      __syncthreads();  // tile `it` visible to all; everyone is done with Q
    }
    uint8_t* const tile_bytes = s_tiles + (it % STAGES) * Shape::kTileBytes;
    const uint32_t tile = ptx::smem_addr(tile_bytes);
    if (it == 0) mark(4);
    if constexpr (kStage == kStageLoad) continue;

    // 4. Partial scores over this warp's 144 dims, all BK keys.
    float s_acc[kNTiles][4];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) s_acc[j][0] = s_acc[j][1] = s_acc[j][2] = s_acc[j][3] = 0.f;
    // fp8: this warp's block scale of this thread's 2 keys per n-tile (S's and P's columns).
    float key_scale[kFp8 ? kNTiles : 1][2];
#pragma unroll
    for (int kk = 0; kk < kKStepsPerWarp; ++kk) {
      if constexpr (kFp8) {
        if (kk < kFp8ScaleDims / 16) {  // e4m3 block w: lane l reads key 32 h + l's 16 bytes (4 n8 tiles of 8 keys)
          static_assert(BK % 32 == 0, "fp8: ldmatrix_x4 reads 32 keys");
#pragma unroll
          for (int h = 0; h < BK / 32; ++h) {
            uint32_t e[4];
            ptx::ldmatrix_x4(e, tile + (h * 32 + lane) * kSlot + qk_dim(kk));
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const uint2 b = ptx::e4m3x4_to_f16x4(e[j]);
              ptx::mma_f16_16816(s_acc[4 * h + j], q_frag[kk], b.x, b.y);
            }
          }
          if (kk == kFp8ScaleDims / 16 - 1) {  // the block's sum times 2^q_shift x its scale, before the kpe step
            const uint8_t* scales = tile_bytes + kFp8ScalesOffset + warp * 4;
#pragma unroll
            for (int j = 0; j < kNTiles; ++j)
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                key_scale[j][c] = *reinterpret_cast<const float*>(scales + (j * 8 + quad_col + c) * kSlot);
                s_acc[j][c] *= key_scale[j][c] * s_unshift;
                s_acc[j][c + 2] *= key_scale[j][c] * s_unshift;
              }
          }
          continue;
        }
      }
      const int dim = qk_dim(kk) + k_dim;
#pragma unroll
      for (int nb = 0; nb < BK / 16; ++nb) {
        uint32_t b[4];
        ptx::ldmatrix_x4(b, tile + (nb * 16 + k_key) * kSlot + slot_offset<kFp8>(dim));
        ptx::mma_bf16_16816(s_acc[2 * nb], q_frag[kk], b[0], b[1]);
        ptx::mma_bf16_16816(s_acc[2 * nb + 1], q_frag[kk], b[2], b[3]);
      }
    }
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
      s_exchange[(warp * kNTiles + j) * 32 + lane] = make_float4(s_acc[j][0], s_acc[j][1], s_acc[j][2], s_acc[j][3]);
    __syncthreads();
    uint32_t p_frag[BK / 16][4];
    if constexpr (kSplitSoftmax) {
      // Warp w sums and exponentiates only its own kOwnTiles n-tiles of keys; the rows' maxima
      // meet in s_warp_rows, and the P values (fp32, before any block scale) in the exchange area,
      // which every warp has read its partial sums from by then.
      float own[kOwnTiles][4];
      const int keys_left = nvalid - it * BK;
#pragma unroll
      for (int jo = 0; jo < kOwnTiles; ++jo) {
        sum_partials(s_exchange, kNTiles, warp * kOwnTiles + jo, lane, own[jo]);
        if (keys_left < BK) mask_keys(own[jo], warp * kOwnTiles + jo, quad_col, keys_left);
      }
      float own_max[2];
      quad_row_max(own, own_max);
      float4 maxima[2];
      rows_of_all_warps(own_max[0], own_max[1], maxima);  // its barrier: every warp has read its partials
      float tile_max[2];
#pragma unroll
      for (int r = 0; r < 2; ++r)  // finite: every tile has a valid key
        tile_max[r] = fmaxf(fmaxf(maxima[r].x, maxima[r].y), fmaxf(maxima[r].z, maxima[r].w)) * s_scale;
      if constexpr (kFp8) {
        // The running max is the same in every warp (the same tile maxima). It may trail a tile's max
        // by up to kFp8RescaleSlack, so most tiles skip O's 64 multiplies (P, f16, stays below 2^8).
        // P is multiplied per key by its block scale / o_unit, the largest scale of this warp's block
        // so far, and O is kept in units of o_unit: each warp's unit moves on its own and rescales
        // only this warp's O.
        const bool m_grows = __any_sync(0xffffffffu, tile_max[0] > m_run[0] + kFp8RescaleSlack || tile_max[1] > m_run[1] + kFp8RescaleSlack);
        float m_tile = 0.f;
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) m_tile = fmaxf(m_tile, fmaxf(fabsf(key_scale[j][0]), fabsf(key_scale[j][1])));
        m_tile = fmaxf(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, 1));  // the quad's lanes hold the tile's keys
        m_tile = fmaxf(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, 2));
        const float unit_new = fmaxf(o_unit, m_tile);
        if (m_grows || unit_new > o_unit) {
          float alpha[2] = {1.f, 1.f};
          if (m_grows) raise_running_max(m_run, l_run, tile_max, alpha);
          // Every scale so far 0: their values are 0, P x 0 either way, and O stays 0 until a scale
          // is not (a unit of 1 here would flush the P of later, tiny scales in f16).
          inv_unit = unit_new > 0.f ? 1.f / unit_new : 0.f;
          const float o_ratio = o_unit * inv_unit;  // 0 on the first tile, where O is 0
          alpha[0] *= o_ratio, alpha[1] *= o_ratio;
          o_unit = unit_new;
          scale_rows(o_acc, alpha);
        }
#pragma unroll
        for (int jo = 0; jo < kOwnTiles; ++jo)  // l: this warp's keys only; the warps' sums meet after the loop
          s_exchange[(warp * kOwnTiles + jo) * 32 + lane] = tile_weights(own[jo], s_scale, m_run, l_run);
        __syncthreads();  // every warp's P visible
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          const float4 pj = s_exchange[j * 32 + lane];
          const float c0 = key_scale[j][0] * inv_unit, c1 = key_scale[j][1] * inv_unit;
          p_frag[j / 2][(j % 2) * 2 + 0] = ptx::pack_f16x2(pj.x * c0, pj.y * c1);
          p_frag[j / 2][(j % 2) * 2 + 1] = ptx::pack_f16x2(pj.z * c0, pj.w * c1);
        }
      } else {  // bf16: the exact max (as below), P as bf16 pairs in the exchange area
        follow_exact_max(m_run, l_run, tile_max, o_acc);
        uint2* const s_p = reinterpret_cast<uint2*>(s_exchange);
#pragma unroll
        for (int jo = 0; jo < kOwnTiles; ++jo) {
          const float4 pj = tile_weights(own[jo], s_scale, m_run, l_run);
          s_p[(warp * kOwnTiles + jo) * 32 + lane] = make_uint2(ptx::pack_bf16x2(pj.x, pj.y), ptx::pack_bf16x2(pj.z, pj.w));
        }
        __syncthreads();  // every warp's P visible
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          const uint2 pj = s_p[j * 32 + lane];
          p_frag[j / 2][(j % 2) * 2 + 0] = pj.x;
          p_frag[j / 2][(j % 2) * 2 + 1] = pj.y;
        }
      }
    } else {  // bf16: every warp sums the whole S and runs the same softmax
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) sum_partials(s_exchange, kNTiles, j, lane, s_acc[j]);

      if constexpr (kStage == kStageScores) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) l_run[0] += s_acc[j][0] + s_acc[j][1] + s_acc[j][2] + s_acc[j][3];
        continue;
      }

      // Online softmax, base 2, on raw scores: exp2(s c - m) is one FFMA (c = |scale_log2|, Q
      // negated for a negative scale) and each row's tile max is scaled once. Keys past nvalid
      // (only in the last tile) are -inf. O and l are rescaled only when some row's max grows (the
      // branch is warp-uniform). bf16 keeps the exact max: its P is bf16, and a max key's weight of
      // exactly 1 keeps the largest term free of rounding (with fp8's slack,
      // Fp8AgreesWithTheBf16CacheOfItsValues' bf16-fp8 difference grew to 2.2e-3, and bf16 gained
      // nothing: it is L2-bound, perf.md run 357).
      const int keys_left = nvalid - it * BK;
      if (keys_left < BK) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) mask_keys(s_acc[j], j, quad_col, keys_left);
      }
      float tile_max[2];
      quad_row_max(s_acc, tile_max);
      tile_max[0] *= s_scale, tile_max[1] *= s_scale;  // finite: every tile has a valid key
      follow_exact_max(m_run, l_run, tile_max, o_acc);
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const float4 pj = tile_weights(s_acc[j], s_scale, m_run, l_run);
        // C fragment of n-tile j -> half of the A fragment of k-step j/2.
        p_frag[j / 2][(j % 2) * 2 + 0] = ptx::pack_bf16x2(pj.x, pj.y);
        p_frag[j / 2][(j % 2) * 2 + 1] = ptx::pack_bf16x2(pj.z, pj.w);
      }
    }
    if constexpr (kStage == kStageSoftmax) continue;

    // 5. O[:, this warp's 128 dims] += P V.
    if constexpr (kFp8) {
      // ldmatrix.trans of e4m3 bytes: matrix (keys 8i .. 8i + 7 of the k-step, 16 dims) gives a thread
      // keys 2c, 2c + 1 at dims 2g, 2g + 1 of the chunk; prmt pairs the keys per dim. o_acc[2 D] holds
      // chunk D's even dims (n = g is dim 16 D + 2 g), o_acc[2 D + 1] its odd dims.
#pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks) {
#pragma unroll
        for (int nd = 0; nd < kDimsPerWarpV / 32; ++nd) {
          uint32_t e[4];
          ptx::ldmatrix_x4_trans(e, tile + (ks * 16 + v_key) * kSlot + warp * kDimsPerWarpV + nd * 32 +
                                        (lane >> 4) * 16);
          uint2 v[4];  // .x: keys 2c, 2c + 1 at the even dim, .y: at the odd dim
#pragma unroll
          for (int i = 0; i < 4; ++i) v[i] = ptx::e4m3x4_to_f16x4(__byte_perm(e[i], 0u, 0x3120));
#pragma unroll
          for (int half = 0; half < 2; ++half) {  // chunks 2 nd and 2 nd + 1: matrices (0, 1) and (2, 3)
            const int chunk = 2 * nd + half;
            ptx::mma_f16_16816(o_acc[2 * chunk], p_frag[ks], v[2 * half].x, v[2 * half + 1].x);
            ptx::mma_f16_16816(o_acc[2 * chunk + 1], p_frag[ks], v[2 * half].y, v[2 * half + 1].y);
          }
        }
      }
      continue;
    }
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
#pragma unroll
      for (int nd = 0; nd < kDimsPerWarpV / 16; ++nd) {
        uint32_t b[4];
        const int dim = warp * kDimsPerWarpV + nd * 16 + v_dim;
        ptx::ldmatrix_x4_trans(b, tile + (ks * 16 + v_key) * kSlot + dim * 2);
        ptx::mma_bf16_16816(o_acc[2 * nd], p_frag[ks], b[0], b[1]);
        ptx::mma_bf16_16816(o_acc[2 * nd + 1], p_frag[ks], b[2], b[3]);
      }
    }
  }
  ptx::cp_async_wait<0>();  // nothing may be in flight when the CTA exits
  mark(5);

  // 6. Epilogue: normalise; partials go straight from the fragments, a quad's two adjacent
  //    tiles of a row per whole 32-byte sector (partials.cuh); the bf16 tile is staged in
  //    shared memory (the pipeline buffers are free now) and written as whole rows with 16-byte
  //    stores: its fragments' 4-byte stores, half a sector per quad, took 0.8 us per CTA at T=1
  //    (dsa-bench --timeline).
  float inv_l[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
  if constexpr (kSplitSoftmax) {  // each warp summed its own keys' weights
    float4 sums[2];
    rows_of_all_warps(l_run[0], l_run[1], sums);
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = (sums[r].x + sums[r].y) + (sums[r].z + sums[r].w);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool any = l_run[r] > 0.f;
    inv_l[r] = any ? ptx::rcp_approx(l_run[r]) : 0.f;
    if constexpr (kFp8) inv_l[r] *= o_unit;  // O from units of the last tile's largest scale
    lse[r] = any ? m_run[r] + ptx::lg2_approx(l_run[r]) : -INFINITY;
  }
  // fp8: row g + 8 r's 4 adjacent dims 16 D + 2 quad_col .. + 3 of chunk D, normalised: even dims
  // from o_acc[2 D], odd from o_acc[2 D + 1].
  const auto fp8_dims4 = [&](int chunk, int r) {
    return make_float4(o_acc[2 * chunk][2 * r] * inv_l[r], o_acc[2 * chunk + 1][2 * r] * inv_l[r],
                       o_acc[2 * chunk][2 * r + 1] * inv_l[r], o_acc[2 * chunk + 1][2 * r + 1] * inv_l[r]);
  };
  const int g = lane / 4;
  // The partial slot of head h0 + i: params.h's, or balanced [split slot, H].
  const auto slot_of_head = [&](int i) {
    return kBalanced ? (int64_t)(blockIdx.x / head_groups) * p.num_heads + h0 + i : partial_slot(p, t, h0 + i, split);
  };
  if (split_out) {
    // Partials straight from the fragments: a quad fills one whole sector per store.
    if (nvalid > 0) {  // the combine never reads O of an empty split
#pragma unroll
      for (int r = 0; r < 2; ++r) {  // rows g and g + 8
        const int64_t dst = slot_of_head(g + 8 * r) * kCkvDim + warp * kDimsPerWarpV;
        if constexpr (kFp8) {  // dims 16 D + 2 quad_col .. + 3: a quad's 4 x 8 bytes are one whole sector
#pragma unroll
          for (int chunk = 0; chunk < kDimsPerWarpV / 16; ++chunk)
            store_partial4(p.partial_out, dst + 2 * quad_col + chunk * 16, fp8_dims4(chunk, r));
        } else {
#pragma unroll
          for (int j = 0; j < kDimsPerWarpV / 8; j += 2)
            store_partial_tiles(p.partial_out, dst + j * 8, o_acc[j][2 * r] * inv_l[r], o_acc[j][2 * r + 1] * inv_l[r],
                                o_acc[j + 1][2 * r] * inv_l[r], o_acc[j + 1][2 * r + 1] * inv_l[r], true);
        }
      }
    }
    if (lane % 4 == 0 && warp == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) p.partial_lse[slot_of_head(g + 8 * r)] = lse[r];
    }
  } else {
    __syncthreads();  // every warp is done reading the tiles
    // stmatrix: matrices (rows 0-7, n-tile j), (8-15, j), (0-7, j+1), (8-15, j+1); lane l gives row
    // l % 8 (+8 for l / 8 odd) of matrix l / 8.
    const int row = (lane & 7) + ((lane >> 3) & 1) * 8, col = warp * kDimsPerWarpV + (lane >> 4) * 8;
    const uint32_t base = ptx::smem_addr(s_tiles) + (row * kStagedStrideBf16 + col) * 2;
    if constexpr (kFp8) {  // 4 adjacent dims per row and chunk: 8-byte stores
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int chunk = 0; chunk < kDimsPerWarpV / 16; ++chunk) {
          const float4 o = fp8_dims4(chunk, r);
          *reinterpret_cast<uint2*>(reinterpret_cast<uint16_t*>(s_tiles) + (g + 8 * r) * kStagedStrideBf16 + warp * kDimsPerWarpV +
                                    chunk * 16 + 2 * quad_col) = make_uint2(ptx::pack_bf16x2(o.x, o.y), ptx::pack_bf16x2(o.z, o.w));
        }
    } else {
#pragma unroll
      for (int j = 0; j < kDimsPerWarpV / 8; j += 2)
        ptx::stmatrix_x4(base + j * 16, ptx::pack_bf16x2(o_acc[j][0] * inv_l[0], o_acc[j][1] * inv_l[0]),
                         ptx::pack_bf16x2(o_acc[j][2] * inv_l[1], o_acc[j][3] * inv_l[1]),
                         ptx::pack_bf16x2(o_acc[j + 1][0] * inv_l[0], o_acc[j + 1][1] * inv_l[0]),
                         ptx::pack_bf16x2(o_acc[j + 1][2] * inv_l[1], o_acc[j + 1][3] * inv_l[1]));
    }
    if (warp == 0 && lane % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) p.lse[t * p.lse_token_stride + h0 + g + 8 * r] = lse[r];
    }
    __syncthreads();
    // Whole rows with 16-byte stores, two heads per round (128 threads x 8 = 2 x 512), addresses
    // stepping by a fixed stride.
    static_assert(kThreads * 8 == 2 * kCkvDim, "epilogue store rounds");
    const int h = threadIdx.x / (kCkvDim / 8), c = threadIdx.x % (kCkvDim / 8);
    const uint16_t* src = reinterpret_cast<const uint16_t*>(s_tiles) + h * kStagedStrideBf16 + c * 8;
    uint16_t* dst = p.out + t * p.out_token_stride + (h0 + h) * p.out_head_stride + c * 8;
#pragma unroll
    for (int k = 0; k < kHeadGroup / 2; ++k)
      *reinterpret_cast<uint4*>(dst + k * 2 * p.out_head_stride) =
          *reinterpret_cast<const uint4*>(src + k * 2 * kStagedStrideBf16);
  }
  mark(6);
  mark_exit();
}

#pragma nv_diag_default 128

// ---- combine: lse = log2 sum_s 2^lse_s, out = sum_s 2^(lse_s - lse) out_s --------------------
// A split with no valid row has lse_s = -inf and never wrote its out_s: its weight is 0 and its
// (garbage) values are dropped by a select, never multiplied, so NaN bits cannot leak in.
// Partial values are loaded together with the lse values (no dependent round trip).

// Few splits (<= 8): one warp per (token, head), every split's loads in flight at once.
constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;
constexpr int kFewSplits = 8;

// Fused rows: whether split 0 finished token t alone (at most fused_rows valid indices), and
// which splits hold a valid row. Both are pure functions of the indices, so the combine
// repeats the main kernel's count instead of waiting for it: it runs before
// griddepcontrol.wait, while the main kernel works. A split with no row writes no partial
// output, and loading those never-written slots reads DRAM, not L2 (T = 8 of runs 1-2048:
// 55 of 128 splits empty; 15.2 -> 14.1 us, run 156). Every block's threads share t (H is a
// multiple of the 8 heads a few-splits block takes). With fused rows, splits <= 64: split-K's
// start on 32-position boundaries (topk <= 2048), shared rows' take whole 32-entry tiles.
struct TokenSplits {
  bool fused;         // split 0 wrote the token's out and lse
  uint64_t live;      // bit s: split s has a valid index (wrote its partial output)
};
template <int kBlockThreads>
__device__ __forceinline__ TokenSplits token_splits(const SparseMlaParams& p, int t) {
  static_assert(kMaxChunk / kFusedChunkAlign <= 64, "a split mask per token");
  // Split-K's splits are chunks of 32-position groups; shared rows set no chunk, their mask comes
  // from the tile count below.
  const ListCount c = count_token_list<kBlockThreads>(p, t, p.splits_over_entries ? 0 : p.chunk);
  const int total = c.valid;
  uint64_t live = c.live_chunks;
  if (p.splits_over_entries) {  // shared rows: split s takes tiles [s * per_split, ...) of the token's
    const int tiles = (total + kSharedRowsTileEntries - 1) / kSharedRowsTileEntries;
    const int per_split = shared_rows_split_tiles(tiles, p.splits);
    const int live_splits = per_split > 0 ? (tiles + per_split - 1) / per_split : 0;
    live = live_splits >= 64 ? ~uint64_t{0} : (uint64_t{1} << live_splits) - 1;
  }
  return {total <= p.fused_rows, live};
}

// A combine block's fused-rows check, before any wait: true if split 0 finished token t alone
// (the block has nothing to merge and returns; one that another combine follows waits first);
// else `live` becomes the splits that hold a result.
template <int kBlockThreads = kCombineThreads>
__device__ __forceinline__ bool fused_token_done(const SparseMlaParams& p, int t, uint64_t& live) {
  const TokenSplits ts = token_splits<kBlockThreads>(p, t);
  if (ts.fused) {
    if (p.combine_before_another) ptx::wait_prerequisites();
    return true;
  }
  live = ts.live;
  return false;
}

// acc[i] += 2^(ls[u] - m) v[u][i] over the splits u that hold a result (lse > -inf); an empty
// split's values were never written, so they are selected away, never multiplied. Returns the
// sum of the weights.
template <int kN, int kV>
__device__ __forceinline__ float add_weighted_splits(float4 (&acc)[kV], const float (&ls)[kN],
                                                     const uint2 (&v)[kN][kV], float m) {
  float sum = 0.f;
#pragma unroll
  for (int u = 0; u < kN; ++u) {
    const bool live = ls[u] != -INFINITY;
    const float w = live ? exp2f(ls[u] - m) : 0.f;
    sum += w;
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const float4 x = widen_partial4(v[u][i]);
      acc[i].x += live ? w * x.x : 0.f; acc[i].y += live ? w * x.y : 0.f;
      acc[i].z += live ? w * x.z : 0.f; acc[i].w += live ? w * x.w : 0.f;
    }
  }
  return sum;
}

// One round of an online merge: m rises to the round's largest lse, l and acc are rescaled to it,
// then the round's splits are added. A round with nothing valid so far changes nothing.
template <int kN, int kV>
__device__ __forceinline__ void merge_round(float& m, float& l, float4 (&acc)[kV], const float (&ls)[kN],
                                            const uint2 (&v)[kN][kV]) {
  float m_new = m;
#pragma unroll
  for (int u = 0; u < kN; ++u) m_new = fmaxf(m_new, ls[u]);
  if (m_new == -INFINITY) return;
  const float scale = exp2f(m - m_new);  // m = -inf -> 0
  l *= scale;
#pragma unroll
  for (int i = 0; i < kV; ++i) acc[i].x *= scale, acc[i].y *= scale, acc[i].z *= scale, acc[i].w *= scale;
  l += add_weighted_splits(acc, ls, v, m_new);
  m = m_new;
}

// Head h of token t's merged output acc / l as bf16 at dims dim0 + 128 i, and (write_lse) its
// lse m + log2 l; m = -inf (no split held a valid row, acc = 0): zeros and -inf.
template <int kV>
__device__ __forceinline__ void store_merged_head(const SparseMlaParams& p, int t, int h, int dim0, const float4 (&acc)[kV],
                                                  float m, float l, bool write_lse) {
  const bool any = m != -INFINITY;
  const float inv = any ? 1.f / l : 0.f;
  uint16_t* out = p.out + t * p.out_token_stride + h * p.out_head_stride + dim0;
#pragma unroll
  for (int i = 0; i < kV; ++i)
    *reinterpret_cast<uint2*>(out + i * 128) = make_uint2(ptx::pack_bf16x2(acc[i].x * inv, acc[i].y * inv),
                                                          ptx::pack_bf16x2(acc[i].z * inv, acc[i].w * inv));
  if (write_lse) p.lse[t * p.lse_token_stride + h] = any ? m + log2f(l) : -INFINITY;
}

// Balanced splits: head h of token t's run of split slots in the schedule (split s's partial at
// slot first + s * step). The schedule was made before the call: read it before the wait.
struct SlotRun {
  int splits;
  int64_t first, step;
};
__device__ __forceinline__ SlotRun balanced_slot_run(const SparseMlaParams& p, int t, int h) {
  const int2 run = __ldcg(p.token_splits + t);
  return {run.y, (int64_t)run.x * p.num_heads + h, p.num_heads};
}

__global__ void __launch_bounds__(kCombineThreads) sparse_mla_combine_few_kernel(const SparseMlaParams p) {
  const int lane = threadIdx.x % 32;
  // H is a multiple of 8: the grid holds exactly T x H warps, one token per block.
  const int64_t th = (int64_t)blockIdx.x * kCombineWarps + threadIdx.x / 32;
  const int t = static_cast<int>(th / p.num_heads), h = static_cast<int>(th % p.num_heads);
  uint64_t live = ~uint64_t{0};  // splits whose partial output to load
  if (p.fused_rows > 0 && fused_token_done(p, t, live)) return;  // split 0 wrote it
  ptx::wait_prerequisites();
  const float* lse_s = p.partial_lse + th * p.splits;
  const int64_t po = th * p.splits * kCkvDim + lane * 4;
  float ls[kFewSplits];
  uint2 v[kFewSplits][4];
#pragma unroll
  for (int u = 0; u < kFewSplits; ++u) {
    ls[u] = u < p.splits ? lse_s[u] : -INFINITY;
    const bool load = u < p.splits && ((live >> u) & 1u);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      v[u][i] = load ? load_partial4(p.partial_out, po + u * kCkvDim + i * 128) : make_uint2(0u, 0u);
  }
  float mx = -INFINITY;
#pragma unroll
  for (int u = 0; u < kFewSplits; ++u) mx = fmaxf(mx, ls[u]);
  float4 acc[4] = {};
  if (mx == -INFINITY) {  // every split empty: zeros and -inf
    store_merged_head(p, t, h, lane * 4, acc, mx, 0.f, lane == 0);
    return;
  }
  const float sum = add_weighted_splits(acc, ls, v, mx);
  store_merged_head(p, t, h, lane * 4, acc, mx, sum, lane == 0);
}

// Balanced splits (p.balanced_slots > 0): one warp per (token, head), like the few-splits
// combine, over the token's run of slots (1-64) in rounds of kFewSplits loads in flight. The run
// comes from the schedule, made before the call, so it is read before the wait. A token of one
// split was written by its CTA. Launched for calls of more than kCombineBlocksTarget heads, where
// a block per head over 64 slots, the many-splits combine's way, lost 4 waves at T x H = 1024
// heads (a what-if, docs/perf.md runs 169-170); smaller calls take sparse_mla_combine_many_kernel.
__global__ void __launch_bounds__(kCombineThreads) sparse_mla_combine_runs_kernel(const SparseMlaParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t th = (int64_t)blockIdx.x * kCombineWarps + threadIdx.x / 32;
  const int t = static_cast<int>(th / p.num_heads), h = static_cast<int>(th % p.num_heads);
  if (t >= p.num_tokens) return;  // the grid's last block may hold warps past T x H
  const SlotRun run = balanced_slot_run(p, t, h);
  if (run.splits == 1) return;  // its one split wrote it
  ptx::wait_prerequisites();
  float m = -INFINITY, l = 0.f;
  float4 acc[4] = {};
  for (int s0 = 0; s0 < run.splits; s0 += kFewSplits) {
    float ls[kFewSplits];
    uint2 v[kFewSplits][4];
#pragma unroll
    for (int u = 0; u < kFewSplits; ++u) {
      const bool in = s0 + u < run.splits;
      const int64_t slot = run.first + (s0 + u) * run.step;
      ls[u] = in ? p.partial_lse[slot] : -INFINITY;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        v[u][i] = in ? load_partial4(p.partial_out, slot * kCkvDim + lane * 4 + i * 128) : make_uint2(0u, 0u);
    }
    merge_round(m, l, acc, ls, v);
  }
  store_merged_head(p, t, h, lane * 4, acc, m, l, lane == 0);
}

// Many splits: one block per (token, head, 512 / kParts dims). Warp w of W merges splits w, w+W, ...
// online (4 in flight), then warp 0 merges the W warps through shared memory. kParts keeps the
// grid near one block per main-kernel slot: at T = 1, 4 parts make 64 blocks (one part, 16
// blocks, took 10.9 us against 10.1); at T = 16, one part makes 256 blocks where 4 made 1024:
// 29.3 against 31.3 us (run 85; T = 2-8 within 0.2 us either way).
// kBalanced: the token's run of slots from the schedule (combine_runs' layout), for small calls
// whose runs are long: the run's loads are spread over 8 warps instead of one warp's rounds.
// kBlockThreads 128 (split-K with 1 or 2 parts, kCombineSmallBlockMaxParts): 4 warps per block,
// whose 128 x <= 80 registers fit beside two main CTAs on an SM (of 176-206 registers: 14-18 K
// of the 64 K left), so that every block counts its token's list for fused rows while the main
// kernel runs. A 256-thread block fits only as main CTAs leave, and its count then ran after the
// main kernel: fp8 16 heads T = 16 -7.0 %, 32 heads T = 8 -10.4 %, 64 heads T = 3 -8.9 %, 128
// heads T = 2 -10.2 % with 128 (docs/perf.md run 772). With 4 parts (T <= 4 at 16 heads) the
// 256-thread blocks already fit beside the main grid, and 4 warps merge 64 splits in more rounds
// (T = 1 random +8 %); shared rows' main CTAs leave less room (64 / 128 heads +3-5 %).
constexpr int kCombineBlocksTarget = 256;  // ~ the main kernel's 2 CTAs x 132 SMs
constexpr int kCombineUnroll = 4;
constexpr int kCombineSmallBlockThreads = 128;
constexpr int kCombineSmallBlockMaxParts = 2;

// The many-splits combine's blocks per (token, head) for a plan whose tokens all take p.splits
// splits: about one block per main-kernel slot.
inline int combine_parts(const SparseMlaParams& p) {
  const int64_t heads = (int64_t)p.num_tokens * p.num_heads;
  return heads * 4 <= kCombineBlocksTarget ? 4 : heads * 2 <= kCombineBlocksTarget ? 2 : 1;
}

// Whether that plan's combine takes the 4-warp blocks made to fit beside split-K's grid.
inline bool combine_takes_small_blocks(const SparseMlaParams& p) {
  return p.balanced_slots == 0 && p.splits > kFewSplits && combine_parts(p) <= kCombineSmallBlockMaxParts &&
         !p.splits_over_entries;
}

// The combines a main kernel with splits is followed by, each over tokens of one split count:
// with lead tokens (params.h) the lead tokens' when they split, then the later tokens'. f gets
// each one's view of the params, in launch order.
template <typename F>
void for_each_combine(const SparseMlaParams& p, F&& f) {
  if (p.lead_tokens > 0 && p.lead_splits > 1) f(lead_tokens_view(p));
  if (p.num_tokens > p.lead_tokens) f(later_tokens_view(p));
}

template <int kParts, bool kBalanced = false, int kBlockThreads = kCombineThreads>
__global__ void __launch_bounds__(kBlockThreads) sparse_mla_combine_many_kernel(const SparseMlaParams p) {
  constexpr int kVec = kCkvDim / kParts / 128;  // float4 per lane
  constexpr int kBlockWarps = kBlockThreads / 32;
  __shared__ float s_m[kBlockWarps], s_l[kBlockWarps];
  __shared__ float4 s_acc[kBlockWarps][kVec][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t th = blockIdx.x / kParts;
  const int part = blockIdx.x % kParts;
  const int t = static_cast<int>(th / p.num_heads), h = static_cast<int>(th % p.num_heads);
  uint64_t live = ~uint64_t{0};  // splits whose partial output to load (fused rows: splits <= 64)
  int splits = p.splits;         // this token's
  int64_t slot0 = th * p.splits, slot_step = 1;  // split s's partial slot: slot0 + s * slot_step
  if constexpr (kBalanced) {
    const SlotRun run = balanced_slot_run(p, t, h);
    if (run.splits == 1) return;  // its one split wrote it
    splits = run.splits, slot0 = run.first, slot_step = run.step;
  } else if (p.fused_rows > 0 && fused_token_done<kBlockThreads>(p, t, live)) {  // split 0 wrote it
    return;
  }
  ptx::wait_prerequisites();
  const int dim0 = part * (kCkvDim / kParts) + lane * 4;  // + i * 128
  float m = -INFINITY, l = 0.f;
  float4 acc[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = warp; s0 < splits; s0 += kBlockWarps * kCombineUnroll) {
    float ls[kCombineUnroll];
    uint2 v[kCombineUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kCombineUnroll; ++u) {
      const int s = s0 + kBlockWarps * u;
      const int64_t slot = slot0 + s * slot_step;
      ls[u] = s < splits ? p.partial_lse[slot] : -INFINITY;
      // Fused rows: s < 64. A balanced split with no row (a schedule from other counts) has
      // lse = -inf, and merge_round drops its values by a select.
      const bool load = s < splits && (kBalanced || p.fused_rows == 0 || ((live >> s) & 1u));
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        v[u][i] = load ? load_partial4(p.partial_out, dim0 + slot * kCkvDim + i * 128) : make_uint2(0u, 0u);
    }
    merge_round(m, l, acc, ls, v);
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) s_acc[warp][i][lane] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  float mx = -INFINITY;
#pragma unroll
  for (int w = 0; w < kBlockWarps; ++w) mx = fmaxf(mx, s_m[w]);
  float sum = 0.f;
  float4 o[kVec] = {};
  if (mx != -INFINITY) {  // else every split was empty: zeros and -inf
#pragma unroll
    for (int w = 0; w < kBlockWarps; ++w) {
      const float scale = exp2f(s_m[w] - mx);  // a warp that saw nothing has m = -inf, l = 0, acc = 0
      sum += s_l[w] * scale;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float4 a = s_acc[w][i][lane];
        o[i].x += a.x * scale; o[i].y += a.y * scale; o[i].z += a.z * scale; o[i].w += a.w * scale;
      }
    }
  }
  store_merged_head(p, t, h, dim0, o, mx, sum, lane == 0 && part == 0);
}

// Pipeline depth per tile size, chosen so two CTAs fit an SM's 228 KB where they can:
// 16-key tiles x 4 stages (3 tiles in flight) ~ 102 KB, 32 x 2 ~ 102 KB, 64 x 2 ~ 176 KB; fp8's
// 32 x 2 ~ 69 KB, 64 x 2 ~ 110 KB. fp8 with 3 or 4 stages of 32 rows: -1 % at T = 1024, +3-7 %
// at T <= 64 (runs 342-343).
template <int BK>
constexpr int kStagesFor = BK == 16 ? 4 : 2;

template <int BK, int kStage = kStageFull, bool kRowOrder = false, bool kBalanced = false, bool kFp8 = false,
          bool kSplitSoftmax = kFp8, bool kTinyList = false, bool kShareProbe = false, bool kEarlyIssue = true>
void launch_splitk_instance(const SparseMlaParams& p, cudaStream_t stream) {
  constexpr int kStages = kStagesFor<BK>;
  using Shape = TileShape<BK, kStages, kFp8>;
  constexpr auto kernel =
      sparse_mla_splitk_kernel<BK, kStages, kStage, kRowOrder, kBalanced, kFp8, kSplitSoftmax, kTinyList, kShareProbe, kEarlyIssue>;
  const int smem = Shape::smem_bytes(splitk_listed_positions(kBalanced || p.fused_rows > 0 || p.lead_tokens > 0, p.topk, p.chunk));
  // The opt-in limit for the largest chunk, once per device (a device past the helper's 64 bits
  // on every launch; this launcher's own per-thread table of 64 had never raised it there).
  raise_smem_limit_once<kernel>(Shape::smem_bytes(kMaxChunk));
  const int64_t token_ctas =
      kBalanced ? p.balanced_slots : lead_split_ctas(p.num_tokens, p.splits, p.lead_tokens, p.lead_splits);
  const int64_t ctas = token_ctas * (p.num_heads / kHeadGroup);
  if constexpr (kShareProbe) {  // after the main kernel (share_choice.cuh)
    launch_dependent(kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), smem, stream, p);
    return;
  }
  bool small_block_combine = false;
  if (p.splits > 1) for_each_combine(p, [&](const SparseMlaParams& v) { small_block_combine |= combine_takes_small_blocks(v); });
  if (small_block_combine) {
    // The 4-warp combine follows, made to fit beside this grid's CTAs so that its work before
    // griddepcontrol.wait and its launch hide behind ours. The driver sizes the carve-out to
    // our CTAs alone: two fp8 CTAs of 60 KB (a hint's chunk-only list) got one the combine did
    // not fit beside, and it ended 1-2 us later (docs/perf.md runs 777-778). Not before the
    // 256-thread combines, whose blocks do not fit beside two CTAs either way: with it, lists
    // of 512 in 8 splits ran 1.6-2.9 % slower (run 782).
    launch_with_max_shared_carveout(kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), smem, stream, p);
    return;
  }
  kernel<<<static_cast<unsigned>(ctas), kThreads, smem, stream>>>(p);
  DSA_CUDA_CHECK(cudaGetLastError());
}

// The instances that exist: every tile size with or without row order; a balanced schedule with
// the planner's 32-row tiles; a split softmax (fp8 always, bf16 by the plan) with 32- or 64-row
// tiles; the stage variants (diagnostics) with 32-row tiles, bf16, the softmax repeated; tiny
// lists (one split of <= 32 positions) with 32-row tiles; a share probe's half (one split, bf16
// in 32-row tiles, fp8 in 32- or 64-row ones, with or without row order; a split softmax).
// plan_sparse_mla only plans these; a hand-made plan that is not one throws.
template <int BK, int kStage, bool kFp8, bool kSplitSoftmax>
void launch_splitk_format(const SparseMlaParams& p, cudaStream_t stream) {
  if (p.share_line_permille > 0) {
    if constexpr (kStage == kStageFull && share_probe_split_k_tiles_fit(BK, kFp8)) {
      // Position order: bf16's half takes the old order without a twin for short lists (its
      // plan's early_issue is false): its 16-head CTAs read whole lists, long where probes pay.
      if (p.balanced_slots == 0 && p.splits == 1 && p.lead_tokens == 0)
        return p.row_order_bits > 0 ? launch_splitk_instance<BK, kStage, true, false, kFp8, kSplitSoftmax, false, true>(p, stream)
                                    : launch_splitk_instance<BK, kStage, false, false, kFp8, kSplitSoftmax, false, true, kFp8>(p, stream);
    }
    throw Error("a share probe's split_k half runs one split of whole lists in 32-row tiles (bf16) or 32- or 64-row tiles (fp8)");
  }
  if (p.balanced_slots > 0) {
    if constexpr (BK == kPlannerBlockKeys && kStage == kStageFull)
      return launch_splitk_instance<BK, kStage, false, true, kFp8, kSplitSoftmax>(p, stream);
    throw Error("a balanced schedule runs the full kernel with 32-row tiles only");
  }
  if (p.row_order_bits > 0) return launch_splitk_instance<BK, kStage, true, false, kFp8, kSplitSoftmax>(p, stream);
  if constexpr (BK == kPlannerBlockKeys && kStage == kStageFull) {
    // One split per token over lists of at most 32 positions (a caller's topk = L): the tiny-list
    // instance, whose CTAs count such a list by one ballot per warp (the kernel's tiny_list).
    if (p.splits == 1 && p.lead_tokens == 0 && p.fused_rows <= 0 && std::min(p.chunk, p.topk) <= 32)
      return launch_splitk_instance<BK, kStage, false, false, kFp8, kSplitSoftmax, true>(p, stream);
  }
  // The old order where the plan says so (SparseMlaPlan::early_issue); only two-stage bf16
  // instances have the choice.
  if constexpr (!kFp8 && kStagesFor<BK> == 2) {
    if (!p.early_issue)
      return launch_splitk_instance<BK, kStage, false, false, kFp8, kSplitSoftmax, false, false, false>(p, stream);
  }
  launch_splitk_instance<BK, kStage, false, false, kFp8, kSplitSoftmax>(p, stream);
}

template <int BK, int kStage = kStageFull>
void launch_splitk(const SparseMlaParams& p, cudaStream_t stream) {
  if (!p.kv_fp8 && !p.split_softmax) return launch_splitk_format<BK, kStage, false, false>(p, stream);
  if constexpr ((BK == 32 || BK == 64) && kStage == kStageFull)
    return p.kv_fp8 ? launch_splitk_format<BK, kStage, true, true>(p, stream) : launch_splitk_format<BK, kStage, false, true>(p, stream);
  throw Error(p.kv_fp8 ? "an fp8_ds_mla cache runs the full kernel with 32- or 64-row tiles only (balanced: 32)"
                       : "a split softmax runs the full kernel with 32- or 64-row tiles only");
}

}  // namespace

int splitk_smem_bytes(int block_keys, int chunk, bool fp8) {
  if (fp8)
    return block_keys == 64 ? TileShape<64, kStagesFor<64>, true>::smem_bytes(chunk)
                            : TileShape<32, kStagesFor<32>, true>::smem_bytes(chunk);
  switch (block_keys) {
    case 16: return TileShape<16, kStagesFor<16>>::smem_bytes(chunk);
    case 32: return TileShape<32, kStagesFor<32>>::smem_bytes(chunk);
    default: return TileShape<64, kStagesFor<64>>::smem_bytes(chunk);
  }
}

void launch_sparse_mla_splitk(const SparseMlaParams& p, cudaStream_t stream, int stage) {
  if (p.num_tokens == 0) return;
  if (stage != kStageFull && p.block_keys != kPlannerBlockKeys)
    throw Error("stage variants exist for block_keys " + std::to_string(kPlannerBlockKeys) + " only");
  switch (stage) {
    case kStageLoad: launch_splitk<kPlannerBlockKeys, kStageLoad>(p, stream); break;
    case kStageScores: launch_splitk<kPlannerBlockKeys, kStageScores>(p, stream); break;
    case kStageSoftmax: launch_splitk<kPlannerBlockKeys, kStageSoftmax>(p, stream); break;
    default:
      switch (p.block_keys) {
        case 16: launch_splitk<16>(p, stream); break;
        case 32: launch_splitk<32>(p, stream); break;
        default: launch_splitk<64>(p, stream); break;
      }
  }
  if (p.splits > 1) launch_sparse_mla_combine(p, stream);
}

void launch_sparse_mla_schedule(const SparseMlaParams& p, cudaStream_t stream) {
  sparse_mla_count_rows_kernel<<<static_cast<unsigned>(p.num_tokens), kThreads, 0, stream>>>(p);
  DSA_CUDA_CHECK(cudaGetLastError());
  sparse_mla_schedule_kernel<<<1, kThreads, 0, stream>>>(p);
  DSA_CUDA_CHECK(cudaGetLastError());
}

// The many-splits combine for kParts = parts (4, 2 or 1).
template <bool kBalanced>
auto combine_many_for(int parts) {
  return parts == 4 ? sparse_mla_combine_many_kernel<4, kBalanced>
         : parts == 2 ? sparse_mla_combine_many_kernel<2, kBalanced>
                      : sparse_mla_combine_many_kernel<1, kBalanced>;
}

namespace {
// The combine of a plan whose tokens all take p.splits splits.
void launch_combine_of(const SparseMlaParams& p, cudaStream_t stream) {
  const int64_t heads = (int64_t)p.num_tokens * p.num_heads;
  const int parts = combine_parts(p);
  if (p.balanced_slots > 0) {
    // Up to ~2 blocks per SM, a block per head: a run of up to 64 slots is loaded by 8 warps at
    // once, not in a warp's rounds of 8. With more heads, a warp per head keeps more of them in
    // flight (a block per head lost 4 waves at T x H = 1024, runs 169-170).
    if (heads <= kCombineBlocksTarget) {
      launch_dependent(combine_many_for<true>(parts), dim3(static_cast<unsigned>(heads * parts)), dim3(kCombineThreads), 0,
                       stream, p);
    } else {
      launch_dependent(sparse_mla_combine_runs_kernel, dim3(static_cast<unsigned>((heads + kCombineWarps - 1) / kCombineWarps)),
                       dim3(kCombineThreads), 0, stream, p);
    }
    return;
  }
  const bool few = p.splits <= kFewSplits;
  if (combine_takes_small_blocks(p)) {  // blocks that fit beside the main grid
    launch_dependent(parts == 2 ? sparse_mla_combine_many_kernel<2, false, kCombineSmallBlockThreads>
                                : sparse_mla_combine_many_kernel<1, false, kCombineSmallBlockThreads>,
                     dim3(static_cast<unsigned>(heads * parts)), dim3(kCombineSmallBlockThreads), 0, stream, p);
    return;
  }
  const dim3 grid(static_cast<unsigned>(few ? (heads + kCombineWarps - 1) / kCombineWarps : heads * parts));
  launch_dependent(few ? sparse_mla_combine_few_kernel : combine_many_for<false>(parts), grid, dim3(kCombineThreads), 0, stream, p);
}

}  // namespace

// Each combine waits for the kernel before it: with lead tokens the second for the first, which
// waits for the main kernel.
void launch_sparse_mla_combine(const SparseMlaParams& p, cudaStream_t stream) {
  for_each_combine(p, [&](const SparseMlaParams& v) { launch_combine_of(v, stream); });
}

}  // namespace dsa::detail
