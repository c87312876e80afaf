// Sparse MLA forward for tokens that share rows (prefill) and for 64 or 128 heads: one CTA = 64
// query rows x all their index positions, on the tensor cores' wgmma with M = 64. The rows are 4
// consecutive "head blocks" (params.h: one token's 16 heads each, numbered token-major): at
// H = 16 four tokens, at 32 two tokens' 32 heads, at 64 one token's heads, at 128 half of them.
// Below, "token" means a head block: the kernel unites the 4 blocks' index lists, which at
// H >= 64 are one list, so nothing is masked and each row is read once per 64 heads (split-K
// reads it per 16).
//
// The split-K kernel gathers every (token, row) pair through L2 on its own and is bound by L2 in
// prefill (docs/perf.md: its load stage alone takes ~1990 us at T = 4096). Here a row that several
// of the CTA's tokens picked crosses L2 once and is read from shared memory once for all four:
//   1. A first kernel (the union pass) turns each group's 4 x topk indices into keys
//      ((row - the group's lowest row) << 2 | token), sorts them (cub::BlockRadixSort over the
//      bits the group's row span needs; a bitmap of the span instead when it is < 32768 rows)
//      and writes the group's union to the workspace: each distinct row is one "union entry",
//      in row order, so the result is deterministic. Without
//      repeated (row, token) keys, the usual case, entry e is the word row << 4 | the bits of
//      the tokens that list it. A token that lists a row k times has k keys and weight k in its
//      softmax: then the record holds the keys and each entry's first key, and the scores
//      warpgroup counts keys per tile. At H >= 64 the union is the token's valid indices in
//      position order (no sort; a row listed twice is two entries), or with the plan's
//      row_order sorted by the row's top bits (64 heads T = 256 / 1024 random: 243 / 911 ->
//      226 / 841 us, docs/perf.md run 144). A one-CTA order pass then
//      lists the groups by union size, largest first. The main kernel waits for both (programmatic dependent launch), takes the
//      group its rank names (a decode batch's groups differ up to 8x in work), loads Q and
//      copies the group's record into shared memory.
//   2. Three warpgroups split the work (FlashAttention-3's warp specialisation):
//      - the scores warpgroup keeps Q[:, 0:384] of the 64 rows in registers (96 registers; the
//        other 192 dims stay in shared memory) and for each tile of 32 entries computes
//        S = Q K^T (wgmma m64n32k16, A from registers), masks the entries a row's token did not
//        list (weight 0 -> -inf; warp w holds rows 16w..16w+15 = token w), runs the online
//        softmax (base 2) and hands P (bf16) and the rescale factors over in shared memory;
//      - the two output warpgroups gather the tiles (16-byte cp.async into the 128-byte-swizzled
//        layout wgmma reads, 4 stages; entries past the end zero-filled; warpgroup g loads the
//        columns only it and the scores read, so it refills a stage without waiting for the
//        other) and accumulate O[:, 256g .. 256g+256) += P V (wgmma m64n256k16, V = the ckv part
//        of the same tile as an N-major operand), issuing the next gathers before they wait for
//        P; P V of tile j starts once the scores warpgroup has issued S of tile j + 1, so it runs
//        beside that warpgroup's softmax instead of in the way of its wgmmas; the scores
//        warpgroup sees tiles two ahead of the P it hands over.
//      mbarriers hand tiles and P over: every writing (or reading) thread arrives (release),
//      the waiters acquire; compute-sanitizer's racecheck and synccheck follow that.
//   3. Epilogue: normalise, stage the 64 x 512 bf16 tile in shared memory, write whole rows and
//      the lse. One CTA owns its tokens' heads, unless the plan splits each group's union tiles
//      (few groups, small T at 64 and 128 heads): then each split writes bf16 partials and the
//      split-K combine merges them; a short list (fused_rows) is done by split 0 alone. Just past
//      whole waves (the planner's, by up to half a wave, or 2/3 with 3 splits in two rounds)
//      the first CTAs each take a group whole and only the tokens past them are split; just past half a
//      wave the first tokens take 2 splits and the later ones more (p.lead_tokens,
//      lead_splits). At 64 and 128 heads with one wave of
//      CTAs (or just past it) there is no union or order pass: each CTA compacts its token's list
//      itself and gathers its first two tiles while Q is still landing.
//   At 32 heads below the union's line (up to 1.7 waves, and past 2 or more whole waves with
//      lead tokens: the planner's) a CTA is one token's 32 heads in rows 0-31 of the 64-head
//      layout: no union pass, as at 64 heads; rows 32-63 idle.
//   4. fp8_ds_mla caches (kFp8 instances): each output warpgroup gathers its half of a row's 656
//      bytes (256 e4m3 values into the upper half of its columns, 8 lanes to a 128-byte row as a
//      bf16 gather; the 4 scales; its 32 kpe values, bf16, where a bf16 row keeps them) and,
//      once they have landed (before it waits for P of the tile two back), converts the e4m3
//      chunks in place to f16 x their block's scale (cvt.rn.f16x2.e4m3x2, mul.rn.f16x2). Q is
//      f16 times 2^-shift (the CTA's largest element to [2^14, 2^15)), S's ckv k-steps are f16
//      wgmmas, its kpe ones bf16, and S is multiplied by 2^shift; P is f16, and P V reads it
//      from shared memory (wgmma's A operand), which leaves the output warpgroups the registers
//      the conversion needs. The f16 values round e4m3 x scale to 11 bits (a split-K fp8 tile
//      is exact): logits carry a relative error of ~2^-12, an lse error of ~1e-3 at the tests'
//      sizes (run 318). A scale above 146 (e4m3 x scale > 65504) overflows f16: caches
//      quantized as scale = amax / 448 from values below 65504 never hold one.
// The tensor cores compute every (query row, entry) pair, also those of entries another token
// listed: at the bench's prefill overlap (uniform random subsets of a prefix, ~1/3 shared)
// that is ~2.4x the useful MMA work, traded for 0.6x the L2 traffic and shared-memory reads
// served to four tokens at once.
// Limits (the planner's): topk <= 2048, num_rows < 2^28 (the entry word packs the row and the tokens),
// cache row strides < 2^31 elements (a row's byte offset is one 32 x 32 -> 64-bit multiply).
//
// History (H100, dsa-bench, CUPTI kernel span, L2 flushed; docs/perf.md has the tables).
// T = 4096 prefill (8192-row prefix), split-K in the same run in brackets.
//   v0 76bc4a5  mma.sync, M = 16 per token, each token's warps picking its rows from the union
//               tile by per-lane ldmatrix addresses: 4393 us (2169), issue-bound. Reverted.
//   v1          wgmma M = 64, two warpgroups each computing half of S's 576 dims from shared
//               memory (m64n32k16 SS) and half of O, partial S summed through shared memory,
//               2 stages: 2868 us (2147). Dissection: loads alone 1113 (the union's gather
//               floor), + scores 2022, + softmax 2309; lock-step warpgroups, 1.9 IPC of
//               integer-heavy work, Q re-read from shared memory for every 32 entries.
//   v2          warp-specialised as above, 3 stages: 2623 (2171); the output warpgroups announced
//               tile j + 1 only after taking P of tile j, so scores and P V ran in lock-step.
//   v3 cd3f647  tile j + 1 announced before waiting for P of tile j (the scores warpgroup runs a
//               tile ahead): 2078 (2149); T = 8192 prefill 3092 (3711); T = 1024 random 795,
//               1.04x the gather floor (split-K 1.09x); T = 256 random 395 (64 CTAs: too few).
//               Not sanitizer-clean: racecheck did not follow the named-barrier arrive -> sync
//               hand-over, synccheck flagged bar.sync (.aligned) reached from two branches, and a
//               refilled stage could still be read by the other output warpgroup's P V.
//   v4 9f8eeac  mbarriers (per-thread arrivals; one per warp after __syncwarp was as fast but
//               racecheck does not follow it), 4 stages, each output warpgroup gathering its own
//               columns: 2332 (split-K 2155), slower. ncu: the gathers' address math was 43 % of
//               the stall samples. Rows broadcast by shuffles, lane-constant addresses hoisted,
//               gathers issued while P V runs, tiles announced two ahead: 2018 (v3 2064, split-K
//               2198, same run); T = 8192 2997 (3807); random T = 512 / 1024 at 1.01 / 1.02x the
//               gather floor. racecheck and synccheck clean. Now the scores warpgroup is the
//               critical path (the output warpgroups wait 40 % of the loop for P).
//   v5          entry words (row, token bits) built once in the setup: the scores warpgroup reads
//               its weights with 4 loads per tile instead of a per-lane count loop over the keys
//               and 8 shuffles; the loop is instantiated for words and for counts, so a CTA runs
//               only one version (one loop with both paths was 2-3 % slower than v4, runs 60-61):
//               1982-1993 (v4 2035-2050, same run 63), T = 8192 2946 (3021), T = 2048 1064 (1086);
//               random and runs T = 1024 unchanged. Output warpgroups now wait 31 % of the loop
//               for P (v4 41 %); the setup costs ~5 us more per CTA.
//   v6 6ae36ee  CTAs take token groups last first (longest-processing-time-first: later prefill
//               tokens have longer contexts and larger unions): T = 4096 1932-1947 (1980-1995
//               in the same run), T = 8192 2801-2805 (2920-2943), T = 2048 1055 (1062).
//               Sort keys narrowed to the CTA's row span (run 75): T = 4096 1928 (1944-1950 in the
//               same run), T = 8192 2785 (2823); scattered rows (random T = 2048) 1552 (1546).
//               Word path without the 0/1 weight multiply, key loads without an integer division
//               (run 79): T = 4096 1891-1901 (1920-1923), T = 8192 2727-2728 (2762-2771), random
//               T = 2048 1521-1529 (1547-1558).
//   v7          the union built by a kernel of its own (512 threads, 2 CTAs per SM) instead of
//               at the head of every main CTA (~21 us of setup there, one CTA per SM, ~8 waves
//               at T = 4096): T = 4096 1818-1819 (1886-1913 in the same run, -4 %), T = 8192
//               2605 (2740-2761, -5 %), T = 2048 989 (1030); the pass takes 111 us of that at
//               T = 4096; the main CTA's setup is now 4.5 us (runs 94-95).
//   v8          groups taken largest union first, from an order pass between the two (was: last
//               tokens first, right for prefill only): runs of 1-2048 rows (decode batches)
//               T = 768 / 1024 / 2048 387-389 / 454-456 / 882-886 us (532-535 / 633 / 1064-1065
//               in the same run, -17 to -28 %); prefill T = 2048 / 4096 / 8192 +0.7-1.5 %, random
//               T = 1024 +0.9 % (the order pass and the order read before Q, run 104). The same
//               order computed at the head of every main CTA cost 2.7 us of setup (run 103).
//   v9          the union pass builds a group's union from a bitmap of 4 token bits per row
//               when its rows span < 32768 (a prefill group's context) instead of sorting:
//               the pass at T = 4096 109 -> 42 us; prefill T = 2048 / 4096 / 8192 997 / 1844 /
//               2599-2641 -> 955 / 1755 / 2493 (runs 110-111); 16384- and 32768-row prefixes
//               at T = 4096 2390 -> 2350 and 2690 -> 2616. Spans < 8192 only (one compaction
//               chunk) measured the same within 0.7 %.
//   v10         a group of at most 512 / 2048 valid keys (short lists) compacts them and sorts
//               only those, 1 / 4 keys per thread instead of 16: the pass at 16 rows per token
//               32 -> 16 us (T = 1024), 108 -> 53 (T = 4096); forced on 16 / 300 rows per token
//               at T = 1024 65.5 / 179.5 -> 49.6 / 166.0 us; full lists and prefill unchanged
//               within noise (runs 117-119).
//   v11         CTAs of 4 head blocks (token-major) instead of 4 tokens x one head group: at
//               H >= 64 a CTA is one token's 64 heads, whose union pass copies the list; at 32,
//               2 tokens x 32 heads. H = 16 unchanged. Same call (run 125), forced, old vs new:
//               H = 64 random T = 1024 2827 -> 906 us (split-K 2183), prefill T = 4096 6865 ->
//               3217 (split-K 8274); H = 128 random T = 1024 5595 -> 1606 (4251); H = 32 random
//               T = 1024 1437 -> 808 (1127), prefill T = 4096 3451 -> 2546 (4198).
//   v12         splits for fewer groups than SMs at 64 and 128 heads (partials + the split-K
//               combine), and no union or order pass for one wave of one-token groups (each CTA
//               compacts its list). Random, topk 2048, planner vs split-K (runs 134-135): H = 64
//               T = 16 / 32 35.2 / 52.5 us (47.0 / 83.7), T = 64 79.6 (unsplit shared rows 109.1,
//               run 133); H = 128 T = 4 / 8 / 16 / 32 26.4 / 30.1 / 43.1 / 67.8 (29.5 / 46.6 /
//               82.9 / 145.4). The first two tiles gathered while Q lands: -0.4 to -0.9 us per
//               call (run 135, A/B). Split-K keeps T <= 4 at 64 heads and <= 2 at 128.
//   v13         S's 12 shared-memory k-steps issued before its 24 register ones: T = 4096 1757 ->
//               1737 us (means of four calls, runs 241-242). What bounds this design now (ncu source
//               counters, run 239; docs/perf.md "Prefill: where the shared-rows kernel's time goes"):
//               the scores warpgroup spends 72 % of its time issuing S's 36 m64n32k16 wgmmas per
//               tile; without any P V on the tensor cores (a what-if) the kernel still takes 1476 us.
//               The union's rows themselves cross L2 in 649 us (dsa-bench --union-floor 4).
//   v14         P V of tile j held until S of tile j + 1 is issued (an mbarrier the scores warpgroup
//               arrives on after its commit), the gathers issued at the top of the output
//               warpgroups' iteration: T = 4096 1757 -> 1592 us, T = 2048 955 -> 872, random
//               T = 2048 at 16 heads 1466 -> 1339, 64 heads random T = 1024 844 -> 810 (run 246,
//               A/B twice). P V held alone, the gathers still after it, gained a third of that:
//               the scores warpgroup then waited for tiles announced later (ncu, run 245).
//   v15         at 32 heads the union pass loads each of a group's 2 lists once (a key stands for
//               the token's two head blocks) and sorts up to 4096 valid keys 8 per thread: the
//               pass 68 -> 45 us at random T = 1024; 32 heads random T = 1024 746-757 -> 724-730 us,
//               T = 256 207 -> 204-206, runs T = 1024 506 -> 486; prefill and 16 heads unchanged
//               (run 295, A/B twice).
//   v16 e9ac0c2 fp8_ds_mla caches (4. above; the bf16 instances unchanged). fp8 / bf16 / fp8 on split-K,
//               one call (run 318, us): prefill T = 4096 1993 / 1575 / 2497; random 64 heads T = 64
//               80.4 / 83.9 / 163.1, T = 1024 939 / 810 / 2523; 128 heads T = 8 33.7 / 29.9 / 47.5;
//               32 heads T = 1024 896 / 730 / 1273; 16 heads T = 2048 1672 / 1341 / 1272 (the
//               planner keeps 16 heads on split-K unless tokens share rows). First tried (runs 311-315;
//               branch fp8-units-experiment): a power-of-two unit per key so that any scale fits
//               f16 (kpe and P rescaled per key): registers spilled, prefill 3118 us; e4m3 chunks
//               landing in the free slot of their f16 pair: ncu counted a shared-memory wavefront
//               per lane for each cp.async (32 for an ideal 4; 10.5 with 8 lanes to a 128-byte
//               row); the conversion before the P wait instead of during P V: 2113 us.
//   v17         fp8: the output warpgroups were the critical path (the timeline's new points, run 326:
//               per CTA at prefill, 109 us of a 270 us loop issuing gathers, 69 converting; the
//               scores warpgroup waited 109 us for tiles, bf16's 10). The conversion software-
//               pipelined (one exposed load latency per tile instead of four), P V reading P from
//               shared memory (the output warpgroups' spills gone), each tile's rows looked up an
//               iteration ahead (their two dependent shared loads had stalled the gathers' issue),
//               the scales and kpe copies one predicated cp.async. fp8 / bf16, v16's fp8 in
//               brackets (runs 332-333, us): prefill T = 4096 1766-1777 / 1577-1587 (1980-2010),
//               32 heads T = 1024 791-796 / 730 (891-894), 64 heads T = 64 74.2 / 83.6 (79.7-80.4),
//               T = 1024 843-848 / 809 (939-946), 128 heads T = 8 31.6-31.9 / 29.8 (33.2-33.5).
//               bf16 within -1.3 .. +0.3 % of before.
//   v18         fp8: a landed tile converted and announced before the wait for P, as a bf16 tile is
//               announced (was: while P V of the tile two back ran, since run 316, when converting
//               first was slower); two steps' loads at a time (no spill). The scores warpgroup had
//               waited 40 us per CTA for tiles (bf16's 11, run 370). fp8, A/B twice (run 377, us):
//               prefill T = 4096 1756 / 1770 -> 1705 / 1697, T = 2048 963 / 952 -> 926 / 933, random
//               T = 1024 at 32 / 64 / 128 heads 787 / 836 / 1615 -> 770 / 824 / 1580 (second
//               round alike), 64 heads T = 64 73.8 -> 73.4 / 72.9; bf16 prefill unchanged (1569 / 1567).
//   v19         splits write bf16 partials (partials.cuh; was fp32): half the partials' bytes both
//               ways. A/B twice (run 409, us): 64 heads T = 16 35.4-35.6 -> 33.0-33.1, 128 heads
//               T = 4 27.2 -> 23.6-23.8.
//   v20         Q by TMA: thread 0 issues 9 x 64 / box_rows bulk tensor copies (two tensor maps made
//               per call, 128-byte swizzle) where 4608 cp.async and their address math were; the
//               index list loads first. A/B twice (run 433, us): 64 heads T = 6 / 8 / 16 22.7 /
//               24.4-24.5 / 33.1-33.2 -> 21.1 / 22.9-23.1 / 31.1-31.3; 128 heads T = 2 / 3 / 6 / 8 / 16
//               18.3 / 20.4 / 25.1 / 27.1 / 37.5-37.6 -> 16.6 / 18.5 / 23.6 / 25.3 / 35.7-35.8; fp8
//               128 heads T = 6 28.0 -> 25.5; 64 heads T = 1024 813-815 -> 804-805; prefill T = 4096
//               1581 -> 1574. With no Q at all (a what-if, run 432) those calls were 2.0-2.5 us
//               faster; the list first alone gained 0.1-0.5.
//   v21 a982af8 32 heads below the union's line as one token per CTA, laid out as 64 heads' (rows
//               32-63 idle; shared_rows_group_heads), no union pass. Planner's plan against split-K
//               (run 441, us): random T = 16 / 32 / 64 / 128 35.3 / 53.2 / 87.8 / 151.0 -> 31.3 /
//               47.3 / 72.4 / 117.9, runs T = 128 138.2 -> 95.6, fp8 T = 64 71.8 -> 61.3.
//   v22 ba654bb one-token groups past one wave (up to 1.7 waves; the planner's): no union pass and
//               2-3 splits for a short last wave (at 32 heads also one split). Planner's plan
//               against e2ec15a (runs 449-451, us): 32 heads T = 133 / 176 193.2 / 197.9 -> 169.1
//               / 185.4, 64 heads T = 133 209.3 -> 182.2, 128 heads T = 67 / 89 193.7 / 197.0 ->
//               155.5 / 170.9, fp8 64 heads T = 133 216.9 -> 172.7, runs at 32 heads T = 150 185.6
//               -> 101.7. Unsplit at 64 / 128 heads without the order pass lost on mixed lengths
//               (128 heads runs T = 100 107.0 -> 128.2): those keep the union pass.
//   v23 b0c141a just past one wave (up to 1.5 waves): one wave of groups unsplit, the tokens past
//               it split into as many CTAs as fit the SMs (at most a tile each, 64), partials for
//               those only. Against v22's plans (run 461, us): 32 heads T = 133 / 150 / 198 169.2 /
//               176.4 / 201.0 -> 128.9 / 146.0 / 184.0, 64 heads T = 133 182.3 -> 131.7, 128 heads
//               T = 67 / 90 153.9 / 195.9 -> 108.8 / 148.6, fp8 64 heads T = 190 219.9 -> 166.8,
//               64 heads topk 256 T = 133 60.6 -> 38.5.
//   v24 4319b4d lead tokens (p.lead_tokens, lead_splits): at 128 heads just past half a wave
//               half a wave of tokens in 2 splits, the later ones in as many as fit after them
//               (>= 8); partials and a combine per set. Run 466 (us): T = 34 / 41 89.2 / 90.0
//               -> 75.4 / 84.0, runs T = 40 87.3 -> 63.6. At 32 / 64 heads slower (64 heads
//               T = 75 93.2 -> 103.9, run 465): not taken there.
//   v25 331efc7 (plans only) past one wave by 1.5-1.67 waves of groups, the tokens past it in 3
//               splits over two rounds (the planner's two_rounds_rule). Run 470 (us): 128 heads
//               T = 100 / 110 197.3 / 198.2 -> 173.6 / 177.1, fp8 T = 100 213.6 -> 187.9; fp8 64
//               heads T = 210 223.3 -> 196.7; 64 heads T = 200 212.0 -> 208.6; runs of 1-2048 rows
//               at 128 heads T = 110 107.6 -> 119.5 (no order pass).
//   v26 5560d7e (plans only) the same past 2-4 whole waves of one-token groups (was: the union
//               pass): run 474 (us), 64 heads T = 265 / 400 305.4 / 402.9 -> 242.7 / 356.3, fp8
//               T = 300 326.2 -> 250.2; 128 heads T = 133 / 199 285.9 / 376.0 -> 198.4 / 285.3.
//   v27 2952003, 670d703, 117c216 (plans only) 32 heads past 2 or more whole waves too:
//               one-token groups with lead tokens (was: 2-token groups, or split-K for fp8) where
//               their waves cost less (the planner's one_token_lead_pays). Run 478 (us): T = 265
//               / 300 / 400 / 529 289.5 / 366.8 / 369.3 / 464.8 -> 235.9 / 267.5 / 345.9 /
//               446.6; run 479: fp8 T = 700 632.7 -> 513.6.
//   v28 10a9988 (plans only) lead tokens past any number of whole waves at 128 heads and with
//               fp8, up to 6 at 64 heads bf16 (was 4). Run 481 (us): 128 heads T = 500 / 2048
//               743.2 / 2859.5 -> 699.0 / 2678.0, fp8 64 heads T = 2048 1615.4 -> 1538.2, prefill
//               T = 4096 at 128 heads 5500.3 -> 5348.0.
//   v29 980c1e2, f75f85e, 980f5c0 (plans only) 32 heads past 2 whole waves: bf16 tails up to
//               2/3 of a wave in 3 splits over two rounds, and a tail with no lead plan as one
//               more unsplit wave of one-token groups where the count of waves pays (fp8 from
//               1.7 waves). Runs 485-490 (us): T = 345 / 360 / 396 372.5 / 373.6 / 376.2 ->
//               312.1 / 312.7 / 337.7, fp8 T = 250 / 660 / 1170 240.7 / 591.5 / 1049.1 -> 195.7
//               / 474.9 / 834.8 (split-K before).
//   v30 9642225, 195ad1d (plans only) 32 heads with lists of >= 1024 ignore the hint (`none`
//               plans as `unknown`: its split-K read each row twice) and fp8 takes one-token
//               groups at every T. Run 496 (us): none T = 784 / 1024 / 4096 861.3 / 1129.8 /
//               4426.4 -> 553.3 / 724.6 / 2892.7; fp8 T = 1024 / 3600 773.8 / 2654.0 -> 747.8 /
//               2565.7.
//   v31 7f9d5ce (plans only) 32 heads bf16 weigh 2-token against one-token waves by the device's
//               memory bandwidth: one-token groups at every T on the H200. Run 501 (H200, us):
//               T = 450 / 661 / 1024 367.2 / 544.4 / 720.2 -> 314.6 / 444.0 / 689.7. bab77e4:
//               on it 64 heads bf16 take lead tokens past any number of waves (run 504: T =
//               925 / 1057 755.9 / 850.3 -> 656.4 / 749.7).
//   v32 a7bb9ad, fe94193 (plans only) on fast memory (the H200) bf16 tails of 11/20-2/3 of a
//               wave in 3 splits over two rounds, and the half-wave lead at 32 / 64 heads with
//               lists of 2048 for fp8 (both cards) or on the H200. Runs 508-511 (us): H200 64
//               heads T = 210 / 67 203.5 / 88.8 -> 178.7 / 75.7, 32 heads T = 67 86.8 -> 70.0;
//               H100 fp8 32 heads T = 67 96.2 -> 75.4, 64 heads T = 67 98.5 -> 82.0.
//   v33 bfab15b (plans only) bf16 at 64 / 128 heads below 32 head blocks from 2^14 pairs (was
//               2^13): those calls go back to split-K. Run 599, H100 (us): 64 heads topk 512 T = 4
//               / 6 13.6 / 14.6 -> 10.9 / 13.0, 2 valid rows T = 4 8.6 -> 4.9, 128 heads T = 2
//               13.2 -> 11.0, 64 heads topk 1024 T = 3 14.2 -> 13.7.
//   v34 629977d (plans only) fp8 lists of 512-1023 at 64 / 128 heads from head blocks past half
//               the split-K slots (64 heads T >= 34, 128 heads T >= 17). Run 605, H100 (us): 64
//               heads topk 512 T = 40 / 56 35.1 / 34.1 -> 25.2 / 30.8, 128 heads T = 20 34.9 ->
//               24.5, topk 768 T = 20 43.4 -> 28.4; every moved case faster.
//   v35 7fd4ed7 (plans only) no fused rows where min_valid_entries exceeds the chunk (split-K's
//               rule since c347c3a). Runs 765-766, H200, hinted full lists (us): 64 heads T = 3
//               16.35 -> 15.9, 128 heads T = 2 16.5 -> 16.05, T = 16 34.2 -> 33.7; fp8 0 to -2.6 %.
// Tried and not kept: S as two alternating accumulator chains (if the 36 dependent wgmmas were
// latency-bound): +2-3 % (run 257). The group on a two-CTA cluster, each CTA half of every row's
// dims with S at N = 64 and the partial S exchanged through DSMEM: 1.8x slower, and no faster than
// this kernel even without the exchange (runs 253-255; branch pair-experiment). P V held until S
// of the next tile completes instead of is issued: +0.1-1.2 % (run 261). With every wait timed
// (run 262) the scores warpgroup is busy ~95 % of the loop, the output warpgroups wait ~38 %.
// S's 12 shared-memory k-steps dropped from the scores warpgroup (a what-if): only -12 %; issued
// by the output warpgroups instead: +34 % (run 265). FlashMLA's two-compute-warpgroup schedule (Q
// in shared memory, alternate 64-entry blocks, two buffers): correct, at best -5 % at T = 4096 and
// +11-20 % at 64 and 128 heads; with half-buffer refills or FlashMLA's lockstep pairs slower
// still, +16 % without spills (runs 266-271, 275-277; branch pingpong-experiment); those last
// three had every wgmma serialised by ptxas (C7520), and without it (v8c) are +7 % at T = 4096,
// +10-18 % at 32-128 heads (runs 292-293).
// Also not kept: counting the tile's key weights while S runs (run 55: 2161 vs 2033 us);
// a second S accumulator so S of tile j + 1 runs during the softmax of tile j spills at any
// register split and ptxas serialises the wgmmas (C7514), not measured. Measured since (run 368,
// branch interleave-softmax; 168 registers per warpgroup, descriptors made where used): the
// softmax's parts between S of tile j + 1's wgmmas, +2-5 % everywhere (P V then runs beside S,
// not beside the softmax). fp8: a tile's conversion loads all first, one __syncwarp (run 370):
// within noise, +2-4 % where it spilled. bf16: x = logit - max handed over (f16) and the output
// warpgroups computing P = 2^x and the row sums (run 403, branch softmax-in-output): +3 to +9 %
// everywhere, prefill T = 4096 1576 -> 1684 us (32 ex2 per thread slot per tile on each
// sub-partition instead of 16, and P V later). A 5- or 6-bit radix
// sort (4 or 5 passes instead of 6): 2166 and 2204 vs 2081 us (run 60), slower.
// The planner picks this kernel for 16 heads when its CTAs fill whole waves, from T = 2048, or
// from T = 512 when the caller says consecutive tokens share rows, never when it says they
// share none (IndexSharing, planner.cpp; an fp8 cache only when they share rows; without
// the hint only for topk >= 512); for 32 heads from T = 256 (bf16 with topk >= 1024: where
// split-K needs a second wave) unless they share none; for 64 and 128, whatever the hint, from
// 2^17 (head block, position) pairs, from 2^13 and 12 head blocks for bf16 lists >= 256 (T >= 3 /
// 2 at topk 2048), from 3 x 2^14 for fp8 lists >= 1024, or from more head blocks than split-K's
// two CTAs per SM (planner.cpp). At 16 heads, tokens that share no
// rows (decode batches) pay the union pass and 4x masked MMA work: it wins on full random lists
// and on runs of 1-2048 rows,
// but loses on full contiguous runs (+5 % at T = 1024) and on short lists, whose per-group
// fixed costs split-K does not pay (16 rows per token at T = 4096: 157 us vs 110, run 117).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include <cuda.h>  // CUtensorMap
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>
#include <cub/block/block_radix_sort.cuh>
#include <cuda/ptx>

#include "common/cuda_check.h"
#include "common/ptx.cuh"
#include "common/block_compact.cuh"
#include "common/wgmma.cuh"
#include "sparse_mla/params.h"
#include "sparse_mla/partials.cuh"
#include "sparse_mla/fp8_rows.cuh"
#include "sparse_mla/share_choice.cuh"

namespace dsa::detail {
namespace {

constexpr int kTokens = kSharedRowsBlocks;                   // head blocks per CTA ("tokens" of the union: 4 at H = 16)
constexpr int kRows = kTokens * kHeadGroup;                  // 64 = wgmma M
constexpr int kOutGroups = 2;                                // output warpgroups
constexpr int kThreads = (1 + kOutGroups) * 128;             // warpgroup 0 computes the scores
constexpr int kQkDim = kCkvDim + kKpeDim;                    // 576
constexpr int kChunksPerRow = kQkDim * 2 / 16;               // 72 x 16 B
constexpr int kCkvChunks = kCkvDim * 2 / 16;                 // 64
constexpr int kBlocks = kQkDim / 64;                         // 9 swizzled column blocks of 64 dims
constexpr int kTileEntries = kSharedRowsTileEntries;         // union entries per tile = S's N
// Entry words (and, on the counting path, the sorted keys after the setup): the row above
// kRowShift low bits, which hold one bit per token that lists the row (a word) or the token (a
// key). The radix sort itself runs on narrower keys, (row - the CTA's lowest row) << kKeyShift |
// token, so that a CTA whose rows lie close together sorts fewer digits.
constexpr int kRowShift = 4;
constexpr uint32_t kLowBits = (1u << kRowShift) - 1;
constexpr int kKeyShift = 2;
constexpr uint32_t kKeyToken = (1u << kKeyShift) - 1;
static_assert(kTokens <= kRowShift, "an entry word holds one bit per token");
static_assert(kTokens <= (1 << kKeyShift), "a sort key holds the token");
static_assert((kSharedRowsMaxRows << kRowShift) <= (int64_t{1} << 32), "keys and words fit 32 bits");
// Tiles in flight: P V of tile j, scores of j + 1 and j + 2 announced, j + 3 loading. Fewer
// break the two-ahead announcement; a fifth stage does not fit in shared memory.
constexpr int kStages = 4;
constexpr int kRegKSteps = 24;                               // Q dims 0-383 in registers
constexpr int kSmemKSteps = kQkDim / 16 - kRegKSteps;        // Q dims 384-575 from shared memory
constexpr int kRegChunks = kRegKSteps * 2;                   // 48 16-byte chunks of a Q row
constexpr int kDimsPerGroup = kCkvDim / kOutGroups;          // 256 output dims each
constexpr int kGroupCkvChunks = kCkvChunks / kOutGroups;     // 32: the ckv chunks an output warpgroup loads
constexpr int kGroupKpeChunks = (kChunksPerRow - kCkvChunks) / kOutGroups;  // 4: and kpe chunks
constexpr int kMaxKeys = kTokens * SparseMlaPlan::kMaxChunk;  // 8192
constexpr int kSAcc = kTileEntries / 2;                      // 16 accumulators of S per thread
constexpr int kOAcc = kDimsPerGroup / 2;                     // 128 accumulators of O per thread
constexpr int kStagedStride = kCkvDim + 8;                   // bf16 elements per staged output row
// Registers after setmaxnreg: the scores warpgroup holds 2/3 of Q (96) + S; each output
// warpgroup O (128) + P fragments + its loads. 128 x (152 + 2 x 176) = 64512, the launch's
// allocation (all of Q in registers spills on one side or the other and serialises the wgmmas).
constexpr int kScoresRegs = 152, kOutputRegs = 176;
// setmaxnreg.inc waits until registers are free: asking for more than the launch allocated (168
// per thread at 384 threads, one CTA per SM) hangs the kernel (run 256, an experiment's 160 + 2 x 176).
static_assert(kScoresRegs + kOutGroups * kOutputRegs <= (1 + kOutGroups) * (65536 / kThreads / 8 * 8), "setmaxnreg within the launch's registers");
constexpr int kBarEpilogue = 1;  // named barrier, all warpgroups, twice: 1/l written, output staged

// Dynamic shared memory (1024-byte aligned for the swizzle atoms), in order:
constexpr int kTileBytes = kBlocks * kTileEntries * 128;     // one stage: 9 blocks of 32 rows x 128 B
constexpr int kQSmemBytes = kSmemKSteps / 4 * kRows * 128;    // Q dims 384-575: 3 blocks of 64 rows
constexpr int kKeysBytes = kMaxKeys * 4;                     // sorted keys
constexpr int kEntriesBytes = ((kMaxKeys + 1) * 2 + 15) / 16 * 16;  // uint16 key position per entry, + end
constexpr int kPBytes = kRows * kTileEntries * 2;            // one P buffer, 64-byte rows, 16-byte chunks swizzled
constexpr int kQStagingBytes = kRows * kRegKSteps * 16 * 2;  // Q dims 0-383, staged over the tiles
constexpr int kTilesOffset = 0;
constexpr int kQSmemOffset = kStages * kTileBytes;
constexpr int kKeysOffset = kQSmemOffset + kQSmemBytes;
constexpr int kEntriesOffset = kKeysOffset + kKeysBytes;
constexpr int kHandoffOffset = (kEntriesOffset + kEntriesBytes + 511) / 512 * 512;  // P x 2 (64-byte swizzle), alpha x 2, 1/l
// fp8 (after 1/l): Q's largest |element|.
constexpr int kSmemBytes = kHandoffOffset + 2 * kPBytes + 2 * kRows * 4 + kRows * 4 + 16 + 1024;
static_assert(kQStagingBytes <= kStages * kTileBytes, "Q staging fits the tiles");
// Q's staging sits at the end of the tile stages (1024-byte aligned for the swizzle), so the
// first kQStagingFreeStages stages can be loaded before Q is read into registers.
constexpr int kQStagingOffset = (kStages * kTileBytes - kQStagingBytes) / 1024 * 1024;
constexpr int kQStagingFreeStages = kQStagingOffset / kTileBytes;
static_assert(kQStagingFreeStages == 2 && kQStagingFreeStages < kStages - 1, "the early tiles are the first copy groups");
static_assert(kRows * kStagedStride * 2 <= kStages * kTileBytes, "output staging fits the tiles");
static_assert(kTileEntries == 32, "P's swizzle assumes 4 chunks of 16 bytes per row");

// Byte offset of P[r][c] (c a multiple of 2): chunk c / 8 of row r XOR (r / 2) % 4, so the 8
// rows an ldmatrix reads, and the 8 rows a warp's fragment stores touch, fall in distinct banks.
// That is wgmma's 64-byte swizzle of a K-major tile (the buffers are 512-byte aligned), so the
// fp8 instances' P V reads P as its A operand in place.
__device__ __forceinline__ uint32_t p_offset(int r, int c) {
  return r * (kTileEntries * 2) + (((c / 8) ^ ((r / 2) % 4)) * 16) + (c % 8) * 2;
}

// The entry word of a row every head block of the group lists (one token per group, H >= 64):
// the union pass's one-token path and the main kernel's own compaction write the same.
__device__ __forceinline__ uint32_t every_block_word(uint32_t row) { return (row << kRowShift) | kLowBits; }

// Head block -> token: a right shift by log2(H / 16), head blocks being numbered token-major.
__device__ __forceinline__ int head_block_shift(int num_heads) { return 31 - __clz(num_heads / kHeadGroup); }

// Diagnostics (dsa-bench --timeline): the kTimelinePoints record of a CTA; points not recorded
// keep the caller's -1.
enum SharedRowsTimeline {
  kTlEntry = 0,        // %globaltimer at entry (ns), thread 0
  kTlSetup = 1,        // cycles since entry: the union pass's record copied, Q landed
  // Cycles summed over the loop by the scores warpgroup's thread 0 (2, 8) and output warp 4's lane 0
  // (3-5, 9-11). Not recorded: the scores waiting for a P buffer (2.7 %, run 59).
  kTlScoresS = 2,        // waiting for S to complete (wgmma.wait_group)
  kTlOutputSIssued = 3,  // waiting for the next tile's S to be issued (s_issued)
  kTlOutputPV = 4,       // waiting for P V to complete (wgmma.wait_group)
  kTlOutputP = 5,        // waiting for P (p_full)
  kTlLoopDone = 6,     // cycles since entry: the scores warpgroup's last P handed over
  kTlExit = 7,         // %globaltimer at exit (ns)
  kTlScoresTile = 8,     // summed: the scores warpgroup waiting for a tile (tile_full)
  kTlOutputConvert = 9,  // summed: fp8, the output warpgroup converting its e4m3 chunks
  kTlOutputGather = 10,  // summed: the output warpgroup issuing a tile's gathers
  kTlOutputLanded = 11,  // summed: the output warpgroup waiting for its copies to land
};

// Pass 1, the union of each group's 4 index lists (its head blocks' tokens' lists), written to the
// workspace for the group's CTA of the main kernel to copy (p.shared_rows_union, layout in params.h).
//   The 4 x topk indices become keys ((row - the group's lowest row) << 2 | token), sorted by
//   cub::BlockRadixSort over the bits the group's row span needs (the bench's prefill: 16 bits =
//   4 radix passes instead of the 24 bits = 6 of its whole 541k-row cache; run 75). Each distinct
//   row is one union entry, in row order, so the result is deterministic. Without repeated
//   (row, token) keys, the usual case, entry e becomes the word row << 4 | the bits of the tokens
//   that list it. A token that lists a row k times has k keys and weight k in its softmax: then
//   the record holds the keys as row << 4 | token and each entry's first key, and the main
//   kernel's scores warpgroup counts keys per tile. A group whose rows span < 32768 (a prefill
//   group: its rows lie in its tokens' context) and that repeats no row skips the sort: a bitmap
//   of 4 token bits per row gives the entry words directly (T = 4096 prefill: 109 -> 42 us for
//   the pass, runs 110-111). A group with few valid keys compacts them and sorts only those.
//   At 32 heads the group's 4 head blocks are 2 tokens' (2 each): each list is loaded once, its
//   keys carry the token's first block g, and the words (and, with repeats, the keys written
//   for the main kernel) cover blocks g and g + 1.
// This ran at the head of every main CTA until run 94 (~21 us of its ~250, one CTA per SM, so
// ~8 waves of it at T = 4096). A kernel of its own runs two groups per SM, so their
// latency-bound sorts overlap.
// Measured at T = 4096 (runs 94-95): 111 us for 512 threads x 16 keys or 384 x 22 (both two per
// SM, 64 / 80 registers with ~150 bytes spilled), 148 us for 1024 x 8 (one per SM), 154 us for
// 384 x 22 at one per SM, 168 us at three per SM (56 registers, 700 bytes spilled).
constexpr int kUnionThreads = 512;
constexpr int kUnionWarps = kUnionThreads / 32;
constexpr int kUnionKeysPerThread = (kMaxKeys + kUnionThreads - 1) / kUnionThreads;
constexpr int kUnionCtasPerSm = 2;
// The sort's sizes: a group with few valid keys (short lists, small topk) sorts only those.
template <int kItems>
using KeySort = cub::BlockRadixSort<uint32_t, kUnionThreads, kItems>;
constexpr int kShortSortItems = 1, kMediumSortItems = 4, kLargeSortItems = 8;  // <= 512, 2048, 4096 valid keys

// The union from sorted keys: sorts keys (kItems per thread, every valid key below invalid_key,
// the others equal to it; the valid ones as (row - row_lo) << 2 | token), then writes the
// entries. Sorting the valid keys alone gives the same first num_keys positions as sorting all
// 4 x topk, so every size writes the same record. Returns the number of entries; then
// *s_repeats tells whether the record holds keys and each entry's first key (a repeated key)
// or entry words.
// pair = 1 (32 heads): each key stands for head blocks g and g + 1, one token's two blocks, whose
// lists are one list loaded once: the words get both bits, and the counting path both keys.
template <int kItems>
__device__ __forceinline__ int union_by_sort(uint32_t (&keys)[kItems], typename KeySort<kItems>::TempStorage& scratch,
                                             uint32_t* s_keys, int* s_counts, int* s_repeats, uint32_t invalid_key,
                                             int row_lo, uint32_t* g_words, uint16_t* g_entry, int pair) {
  constexpr int kN = kItems * kUnionThreads;
  const int tid = threadIdx.x;
  const int end_bit = max(1, 32 - __clz(invalid_key));
  KeySort<kItems>(scratch).SortBlockedToStriped(keys, 0, end_bit);
  __syncthreads();  // the sort's scratch is free: the keys go over it
#pragma unroll
  for (int j = 0; j < kItems; ++j) s_keys[j * kUnionThreads + tid] = keys[j];
  __syncthreads();  // sorted keys visible

  // Union entries: the first key of each row, compacted in key order.
  bool head[kItems];
  uint32_t tokens_of[(kItems + 7) / 8] = {};  // 4 bits per key
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kUnionThreads + tid;
    const bool valid = keys[j] < invalid_key;
    const uint32_t row = keys[j] >> kKeyShift;  // minus row_lo
    head[j] = valid && (i == 0 || (s_keys[i - 1] >> kKeyShift) != row);
    if (valid && i > 0 && s_keys[i - 1] == keys[j]) *s_repeats = 1;
    // Without repeats a row has at most kTokens keys. Unconditional loads (a position past the
    // end reads the last key, which is of this row or above it): branches here serialised them.
    uint32_t tokens = 1u << (keys[j] & kKeyToken);
#pragma unroll
    for (int d = 1; d < kTokens; ++d) {
      const uint32_t next = s_keys[min(i + d, kN - 1)];
      tokens |= (next >> kKeyShift) == row ? 1u << (next & kKeyToken) : 0u;
    }
    tokens |= pair ? tokens << 1 : 0u;
    tokens_of[j / 8] |= tokens << (4 * (j % 8));
  }
  // A sorted key back to its cache row, shifted into the layout both paths read (row << 4 | low).
  const auto row_word = [&](uint32_t key, uint32_t low) { return (((key >> kKeyShift) + row_lo) << kRowShift) | low; };
  const int num_entries = block_compact<kItems, kUnionThreads>(head, s_counts, [&](int rank, int j) {
    if (*s_repeats)
      g_entry[rank] = static_cast<uint16_t>((j * kUnionThreads + tid) << pair);
    else
      g_words[rank] = row_word(keys[j], (tokens_of[j / 8] >> (4 * (j % 8))) & kLowBits);
  });
  if (*s_repeats) {  // the counting path reads keys as row << 4 | token
#pragma unroll
    for (int j = 0; j < kItems; ++j)
      if (keys[j] < invalid_key) {
        const int i = j * kUnionThreads + tid;
        if (pair) {
          g_words[2 * i] = row_word(keys[j], keys[j] & kKeyToken);
          g_words[2 * i + 1] = row_word(keys[j], (keys[j] & kKeyToken) + 1);
        } else {
          g_words[i] = row_word(keys[j], keys[j] & kKeyToken);
        }
      }
  }
  return num_entries;
}

// Few valid keys, already compacted into s_keys[0, num_keys): loaded kItems per thread and
// sorted alone. Not inlined: inlined, they raised the kernel's spills from 128 to 148 bytes
// and prefill's pass (the bitmap path) from 41.4 to 43.9 us (run 119; 38.5 before them).
template <int kItems>
__device__ __noinline__ int union_of_few_keys(int num_keys, typename KeySort<kItems>::TempStorage& scratch, uint32_t* s_keys,
                                              int* s_counts, int* s_repeats, uint32_t invalid_key, int row_lo,
                                              uint32_t* g_words, uint16_t* g_entry, int pair) {
  uint32_t few[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = j * kUnionThreads + threadIdx.x;
    few[j] = i < num_keys ? s_keys[i] : invalid_key;
  }
  __syncthreads();  // the sort's scratch overlays s_keys
  return union_by_sort<kItems>(few, scratch, s_keys, s_counts, s_repeats, invalid_key, row_lo, g_words, g_entry, pair);
}

// One token's valid rows (H >= 64), compacted into s_rows[0, num_rows), written as entry words
// sorted by bits [shift, shift + bits) of the row (SparseMlaPlan::row_order; topk <= 2048 fits
// kMediumSortItems per thread). Not inlined, as union_of_few_keys.
__device__ __noinline__ void one_token_list_in_row_order(int num_rows, typename KeySort<kMediumSortItems>::TempStorage& scratch,
                                                         uint32_t* s_rows, int shift, int bits, uint32_t* g_words) {
  static_assert(kMediumSortItems * kUnionThreads >= SparseMlaPlan::kMaxChunk, "a token's list fits the sort");
  __syncthreads();  // the compacted rows visible
  uint32_t rows[kMediumSortItems];
#pragma unroll
  for (int k = 0; k < kMediumSortItems; ++k) {
    const int i = threadIdx.x * kMediumSortItems + k;
    rows[k] = i < num_rows ? s_rows[i] : row_order_padding_key(shift, bits);
  }
  __syncthreads();  // the sort's scratch overlays s_rows
  KeySort<kMediumSortItems>(scratch).Sort(rows, shift, shift + bits);
#pragma unroll
  for (int k = 0; k < kMediumSortItems; ++k) {
    const int i = threadIdx.x * kMediumSortItems + k;
    if (i < num_rows) g_words[i] = every_block_word(rows[k]);
  }
}

__global__ void __launch_bounds__(kUnionThreads, kUnionCtasPerSm) sparse_mla_shared_rows_union_kernel(const SparseMlaParams p) {
  __shared__ union {
    typename KeySort<kUnionKeysPerThread>::TempStorage sort;
    typename KeySort<kMediumSortItems>::TempStorage medium_sort;
    typename KeySort<kLargeSortItems>::TempStorage large_sort;
    typename KeySort<kShortSortItems>::TempStorage short_sort;
    uint32_t keys[kMaxKeys];  // sorted, once the sort's scratch is free
  } s;
  __shared__ int s_counts[kUnionKeysPerThread * kUnionWarps + 1];  // the compaction's heads per (item, warp)
  __shared__ int s_repeats;                // some token lists some row twice
  __shared__ int s_row_lo[kUnionWarps], s_row_hi[kUnionWarps];  // per warp: lowest and highest valid row
  __shared__ int s_warp_keys[kUnionWarps];  // per warp: valid keys
  ptx::launch_dependents();  // the order pass may start; it waits for this pass to end
  if (share_probe_skips(p, true)) return;  // a share-probe plan whose probe chose split-K (launched plainly: no wait)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // The group's head blocks b0 .. b0 + blocks_here - 1; block b0 + g is token token0 + (g >> block_shift)
  // (b0 is a multiple of 4 and g < 4, so the shift distributes over the sum at every H).
  const int64_t num_blocks = shared_rows_head_blocks(p.num_tokens, p.num_heads);
  const int block_shift = head_block_shift(p.num_heads);
  const int64_t b0 = int64_t{blockIdx.x} * kTokens;
  const int token0 = static_cast<int>(b0 >> block_shift);
  const int blocks_here = static_cast<int>(min(int64_t{kTokens}, num_blocks - b0));
  uint8_t* record = p.shared_rows_union + blockIdx.x * shared_rows_union_stride(p.topk);
  uint32_t* g_words = reinterpret_cast<uint32_t*>(record + kSharedRowsUnionHeaderBytes);  // entry words, or keys
  uint16_t* g_entry = reinterpret_cast<uint16_t*>(record + shared_rows_union_entries_offset(p.topk));

  // Keys, loaded position-major so each warp's loads are contiguous, as row << 2 | token first;
  // then the group's row span and number of valid keys; then (row - lowest row) << 2 | token.
  // At H >= 64 the 4 head blocks are one token's: its list alone (the keys of block 0). At 32
  // heads (pair = 1) each of the 2 tokens' lists is loaded once, its keys standing for its
  // blocks g and g + 1 (g even): half the keys to sort (68 of 753 us in the pass at T = 1024).
  const bool one_token = shared_rows_tokens_per_group(p.num_heads) == 1;
  const int pair = !one_token && block_shift == 1 ? 1 : 0;
  uint32_t keys[kUnionKeysPerThread];
  const int num_positions = one_token ? p.topk : (kTokens >> pair) * p.topk;
  // The group's tokens' list lengths (topk_lengths; <= topk <= 2048, 16 bits each; 0xffff
  // without), loaded once before the index loads: the loop tests a key's position without a
  // load or a branch, so its index loads stay in flight together (with a length loaded per key,
  // prefill without lengths was 1 % slower in run 381's A/B, twice).
  static_assert(kTokens == 4 && SparseMlaPlan::kMaxChunk < 0xffff, "two 16-bit lengths per word, two words");
  uint32_t group_lengths[2] = {0xffffffffu, 0xffffffffu};
  if (p.topk_lengths != nullptr) {
    group_lengths[0] = group_lengths[1] = 0;
    const int group_tokens = ((blocks_here - 1) >> block_shift) + 1;  // 4 at 16 heads, 2 at 32, else 1
#pragma unroll
    for (int i = 0; i < kTokens; ++i) {
      const uint32_t len = i < group_tokens ? static_cast<uint32_t>(list_length(p, token0 + i)) : 0u;
      group_lengths[i / 2] |= len << (i % 2 * 16);
    }
  }
  int row_lo = INT_MAX, row_hi = -1, my_keys = 0;
  const float inv_topk = 1.f / static_cast<float>(p.topk);
#pragma unroll
  for (int j = 0; j < kUnionKeysPerThread; ++j) {
    const int q = j * kUnionThreads + tid;
    // q / topk without an integer division per key: for q < 2^14 the float quotient is off by
    // at most one, which the two fixes correct (checked exhaustively on the host for every
    // topk <= 2048 and q < 2^14).
    int list = static_cast<int>(static_cast<float>(q) * inv_topk), pos = q - list * p.topk;
    if (pos < 0) --list, pos += p.topk;
    if (pos >= p.topk) ++list, pos -= p.topk;
    const int g = list << pair;  // the list's (first) head block
    int row = -1;
    if (q < num_positions && g < blocks_here)
      row = __ldg(p.indices + (int64_t)(token0 + (g >> block_shift)) * p.indices_token_stride + pos);
    const int token_in_group = (g >> block_shift) & 3;  // (a key past the group's lists has row -1 already)
    const uint32_t two_lengths = token_in_group >= 2 ? group_lengths[1] : group_lengths[0];
    if (pos >= static_cast<int>((two_lengths >> (token_in_group % 2 * 16)) & 0xffffu)) row = -1;  // past its length
    const bool valid = names_a_row(row, p.num_rows);
    keys[j] = valid ? (static_cast<uint32_t>(row) << kKeyShift) | g : ~0u;
    row_lo = valid ? min(row_lo, row) : row_lo;
    row_hi = valid ? max(row_hi, row) : row_hi;
    my_keys += valid;
  }
  row_lo = __reduce_min_sync(0xffffffffu, row_lo);
  row_hi = __reduce_max_sync(0xffffffffu, row_hi);
  my_keys = __reduce_add_sync(0xffffffffu, my_keys);
  if (lane == 0) s_row_lo[warp] = row_lo, s_row_hi[warp] = row_hi, s_warp_keys[warp] = my_keys;
  if (tid == 0) s_repeats = 0;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kUnionWarps; ++w) row_lo = min(row_lo, s_row_lo[w]), row_hi = max(row_hi, s_row_hi[w]);
  // The valid keys, summed where needed: a register live across the bitmap path spills.
  const auto count_keys = [&] {
    int n = 0;
#pragma unroll
    for (int w = 0; w < kUnionWarps; ++w) n += s_warp_keys[w];
    return n;
  };
  const bool any_row = row_hi >= 0;
  const uint32_t key_base = any_row ? static_cast<uint32_t>(row_lo) << kKeyShift : 0u;
  const uint32_t invalid_key = any_row ? static_cast<uint32_t>(row_hi - row_lo + 1) << kKeyShift : 0u;  // above every valid key
#pragma unroll
  for (int j = 0; j < kUnionKeysPerThread; ++j) keys[j] = keys[j] == ~0u ? invalid_key : keys[j] - key_base;
  // The record's last writes, the same for every way of building the union below.
  const auto finish_record = [&](int num_entries, bool words) {
    if (words && num_entries + tid < (num_entries + kTileEntries - 1) / kTileEntries * kTileEntries)
      g_words[num_entries + tid] = 0;  // the last tile's missing entries: no token
    if (tid == 0) {
      const int num_keys = count_keys() << pair;  // as the counting path reads them
      g_entry[num_entries] = static_cast<uint16_t>(num_keys);
      *reinterpret_cast<int4*>(record) = make_int4(num_entries, num_keys, words ? 1 : 0, 0);
      reinterpret_cast<int*>(p.shared_rows_union + shared_rows_union_sizes_offset(num_blocks, p.topk))[blockIdx.x] = num_entries;
    }
  };

  // H >= 64: the group's head blocks are one token's, so every entry is listed by all four: its
  // valid indices in position order are the union (a row listed twice is two entries, each of
  // weight 1), with no sort, or sorted by the rows' top bits with the plan's row order. (The
  // record's key count is the list's.)
  if (one_token) {
    bool head[kUnionKeysPerThread];
#pragma unroll
    for (int j = 0; j < kUnionKeysPerThread; ++j) head[j] = keys[j] < invalid_key;
    const bool in_row_order = p.row_order_bits > 0;  // uniform
    const int num_entries = block_compact<kUnionKeysPerThread, kUnionThreads>(head, s_counts, [&](int rank, int j) {
      const int row = row_lo + static_cast<int>(keys[j] >> kKeyShift);
      if (in_row_order)
        s.keys[rank] = static_cast<uint32_t>(row);
      else
        g_words[rank] = every_block_word(row);
    });
    if (in_row_order) one_token_list_in_row_order(num_entries, s.medium_sort, s.keys, p.row_order_shift, p.row_order_bits, g_words);
    finish_record(num_entries, true);
    return;
  }

  // Rows within kBitmapRows of each other (a prefill group's context): 4 token bits per row in a
  // bitmap replace the sort. The rows are compacted in chunks of kMaxKeys: in chunk c, row
  // c * kMaxKeys + j * kUnionThreads + tid (above the lowest) is thread tid's item j, so the
  // entries come out in row order. A token that lists a row twice sets a bit already set: such a
  // group takes the sort below (which overwrites the bitmap).
  constexpr int kBitmapRows = 4 * kMaxKeys;  // 16 KB of bitmap in the keys' 32 KB
  if (row_hi - row_lo < kBitmapRows) {       // uniform over the CTA; no valid row: row_hi - row_lo < 0
    constexpr int kBitsPerRow = kRowShift;   // one per token, the low bits of an entry word
    uint32_t* s_bits = s.keys;               // kBitmapRows / 8 words of 8 rows x 4 token bits
    for (int w = tid; w < kBitmapRows / 8; w += kUnionThreads) s_bits[w] = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kUnionKeysPerThread; ++j) {
      if (keys[j] >= invalid_key) continue;
      const uint32_t r = keys[j] >> kKeyShift, bit = (pair ? 3u : 1u) << ((r % 8) * kBitsPerRow + (keys[j] & kKeyToken));
      if (atomicOr(&s_bits[r / 8], bit) & bit) s_repeats = 1;
    }
    __syncthreads();  // the bitmap and s_repeats complete
    if (!s_repeats) {
      const int chunks = any_row ? (row_hi - row_lo) / kMaxKeys + 1 : 0;
      int num_entries = 0;
      for (int c = 0; c < chunks; ++c) {
        const int r0 = c * kMaxKeys;
        bool head[kUnionKeysPerThread];
        uint32_t tokens_of[(kUnionKeysPerThread + 7) / 8] = {};
#pragma unroll
        for (int j = 0; j < kUnionKeysPerThread; ++j) {
          const int r = r0 + j * kUnionThreads + tid;
          const uint32_t tokens = (s_bits[r / 8] >> ((r % 8) * kBitsPerRow)) & kLowBits;
          head[j] = tokens != 0;
          tokens_of[j / 8] |= tokens << (4 * (j % 8));
        }
        num_entries += block_compact<kUnionKeysPerThread, kUnionThreads>(head, s_counts, [&](int rank, int j) {
          const uint32_t row = static_cast<uint32_t>(row_lo + r0 + j * kUnionThreads + tid);
          g_words[num_entries + rank] = (row << kRowShift) | ((tokens_of[j / 8] >> (4 * (j % 8))) & kLowBits);
        });
        __syncthreads();  // the next chunk's compaction rewrites s_counts
      }
      finish_record(num_entries, true);
      return;
    }
    // A repeated row: the sort below. No thread reads the bitmap after the barrier above.
  }

  // Rows anywhere in the cache (decode): a radix sort over the bits the span needs. Few valid
  // keys (short lists, or 32 heads' two lists) are compacted first and sorted alone: all 4 x
  // topk cost ~30 us a wave however few were valid (run 105).
  int num_entries;
  const int num_keys = count_keys();
  if (num_keys <= kLargeSortItems * kUnionThreads) {
    bool valid[kUnionKeysPerThread];
#pragma unroll
    for (int j = 0; j < kUnionKeysPerThread; ++j) valid[j] = keys[j] < invalid_key;
    block_compact<kUnionKeysPerThread, kUnionThreads>(valid, s_counts, [&](int rank, int j) { s.keys[rank] = keys[j]; });
    __syncthreads();  // the valid keys, in s.keys[0, num_keys)
    num_entries = num_keys <= kShortSortItems * kUnionThreads
                      ? union_of_few_keys<kShortSortItems>(num_keys, s.short_sort, s.keys, s_counts, &s_repeats, invalid_key, row_lo, g_words, g_entry, pair)
                  : num_keys <= kMediumSortItems * kUnionThreads
                      ? union_of_few_keys<kMediumSortItems>(num_keys, s.medium_sort, s.keys, s_counts, &s_repeats, invalid_key, row_lo, g_words, g_entry, pair)
                      : union_of_few_keys<kLargeSortItems>(num_keys, s.large_sort, s.keys, s_counts, &s_repeats, invalid_key, row_lo, g_words, g_entry, pair);
  } else {
    num_entries = union_by_sort<kUnionKeysPerThread>(keys, s.sort, s.keys, s_counts, &s_repeats, invalid_key, row_lo, g_words, g_entry, pair);
  }
  const bool words = !s_repeats;  // uniform over the CTA
  finish_record(num_entries, words);
}

// Pass 2, the order the main kernel's CTAs take the groups in (one CTA): by union size, largest
// first, so that a long group never starts last (longest-processing-time-first list scheduling;
// CTAs start in blockIdx order). Decode batches have unions of very different sizes (4 tokens x
// 1-2048 rows each): T = 1024 of contiguous runs went from 633 to 454-456 us (run 104).
// Sizes are quantised to kSizeBuckets classes, class 0 the largest; within a class later groups
// come first, which in prefill see longer contexts. A counting sort, deterministic: a histogram
// of the classes, its scan, then the groups placed in chunks of one per thread, ranked within
// the chunk by warp (match_any) and across warps by a scan per class.
// Computed at the head of every main CTA instead (runs 101-103), the same order cost 2.7 us of setup
// per CTA, +1.5-2.8 % at prefill.
constexpr int kOrderThreads = 1024;
constexpr int kOrderWarps = kOrderThreads / 32;
constexpr int kSizeBuckets = 64;
__global__ void __launch_bounds__(kOrderThreads) sparse_mla_shared_rows_order_kernel(const SparseMlaParams p) {
  __shared__ int s_next[kSizeBuckets + 1];                // per class: its count, then its next position
  __shared__ int s_count[kOrderWarps][kSizeBuckets];      // per (warp, class) in a chunk
  ptx::launch_dependents();  // the main kernel's CTAs may take the SMs the union pass leaves
  ptx::wait_prerequisites();  // the union pass's sizes
  if (share_probe_skips(p, true)) return;  // a share-probe plan whose probe chose split-K
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t num_blocks = shared_rows_head_blocks(p.num_tokens, p.num_heads);
  const int num_groups = static_cast<int>(shared_rows_groups(num_blocks));
  const int* sizes = reinterpret_cast<const int*>(p.shared_rows_union + shared_rows_union_sizes_offset(num_blocks, p.topk));
  int* order = reinterpret_cast<int*>(p.shared_rows_union + shared_rows_order_offset(num_blocks, p.topk));
  // A group's union holds at most one list per distinct token.
  const int max_entries = shared_rows_tokens_per_group(p.num_heads) * p.topk;
  const auto class_of = [&](int g) { return kSizeBuckets - 1 - min(sizes[g], max_entries) * kSizeBuckets / (max_entries + 1); };
  int* s_flat = &s_count[0][0];

  for (int i = tid; i <= kSizeBuckets; i += kOrderThreads) s_next[i] = 0;
  __syncthreads();
  for (int g = tid; g < num_groups; g += kOrderThreads) atomicAdd(&s_next[class_of(g)], 1);
  __syncthreads();
  if (warp == 0) warp_exclusive_scan<kSizeBuckets>(s_next, lane);  // counts -> first positions
  // Position k of a chunk is group num_groups - 1 - k: later groups first within a class.
  for (int k0 = 0; k0 < num_groups; k0 += kOrderThreads) {
    __syncthreads();  // the scan, or the previous chunk's counts, read
    for (int i = tid; i < kOrderWarps * kSizeBuckets; i += kOrderThreads) s_flat[i] = 0;
    __syncthreads();
    const int k = k0 + tid;
    const int size_class = k < num_groups ? class_of(num_groups - 1 - k) : -1;
    const unsigned same = __match_any_sync(0xffffffffu, size_class);
    const int rank_in_warp = __popc(same & ((1u << lane) - 1));
    if (size_class >= 0 && rank_in_warp == 0) s_count[warp][size_class] = __popc(same);
    __syncthreads();
    if (tid < kSizeBuckets) {  // per class: counts over warps -> each warp's first position
      int next = s_next[tid];
      for (int w = 0; w < kOrderWarps; ++w) {
        const int c = s_count[w][tid];
        s_count[w][tid] = next;
        next += c;
      }
      s_next[tid] = next;
    }
    __syncthreads();
    if (size_class >= 0) order[s_count[warp][size_class] + rank_in_warp] = num_groups - 1 - k;
  }
}

// Q's two parts as TMA tensor maps (made per call by the launcher, a __grid_constant__ parameter):
// 3-D, dims innermost, then heads and tokens in the order of their strides (tokens_inner: a
// head-major Q); boxes of 64 dims x box_rows = min(H, 64) heads of one token.
struct SharedRowsQMaps {
  CUtensorMap nope, pe;
  int box_rows;          // heads per box, the maps' and the copy loop's one source
  bool tokens_inner[2];  // nope, pe
};

// kTimed builds the diagnostic variant that fills p.timeline. Its clocks cost registers, so it
// records only the waits that matter; the bf16 one does not spill (since be00f6f: its setup and
// loop then read as the untimed kernel's, run 455), the fp8 one spills 16 bytes. kFp8 reads an
// fp8_ds_mla cache (4. in the header comment).
template <bool kTimed, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) sparse_mla_shared_rows_kernel(const SparseMlaParams p,
                                                                             const __grid_constant__ SharedRowsQMaps q_maps) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = ptx::smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  const uint32_t sTiles = base + kTilesOffset, sQSmem = base + kQSmemOffset;
  uint32_t* s_keys = reinterpret_cast<uint32_t*>(smem + kKeysOffset);
  uint32_t* s_words = s_keys;  // the union pass's entry words (row << 4 | tokens), or its keys
  uint16_t* s_entry = reinterpret_cast<uint16_t*>(smem + kEntriesOffset);
  uint8_t* s_p = smem + kHandoffOffset;                                                  // [2][kRows x 64 B]
  float* s_alpha = reinterpret_cast<float*>(s_p + 2 * kPBytes);                          // [2][kRows]
  float* s_inv_l = s_alpha + 2 * kRows;                                                  // [kRows]
  uint32_t* s_q_amax = reinterpret_cast<uint32_t*>(s_inv_l + kRows);  // fp8: Q's largest |element| (float bits)
  // Hand-overs: every thread that wrote (or read) arrives with release semantics, the waiters
  // acquire. (One arrival per warp after __syncwarp measured the same speed, run 51, but
  // racecheck does not follow the ordering through __syncwarp.)
  __shared__ uint64_t tile_full[kStages];  // the tile's rows landed: 256 output threads arrive
  __shared__ uint64_t p_full[2];           // P and alpha of tile j written (j % 2): 128 scores threads
  __shared__ uint64_t p_empty[2];          // P and alpha of tile j read: 256 output threads
  __shared__ uint64_t q_read;              // Q staging read into registers: 128 scores threads
  __shared__ uint64_t q_landed;            // Q's bulk tensor copies complete (thread 0 expects their bytes)
  __shared__ uint64_t s_issued[2];         // S of tile j >= 1 issued (j % 2): 128 scores threads
  if (share_probe_skips(p, true)) return;  // a share-probe plan whose probe chose split-K (it follows: nothing to wait for)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4;               // 0: scores, 1-2: output
  const int token_of_warp = warp % 4;    // rows 16w..16w+15 of the wgmma tile: the group's head block w
  // Head blocks as the groups lay them out: at 32 heads without a union pass, 64 heads' worth per
  // token (one token per group, rows 32-63 idle; shared_rows_group_heads).
  const int group_heads = shared_rows_group_heads(p.num_heads, p.shared_rows_union_pass);
  const int64_t num_blocks = shared_rows_head_blocks(p.num_tokens, group_heads);
  const int block_shift = head_block_shift(group_heads);
  const int block_mask = group_heads / kHeadGroup - 1;  // head block -> its 16 heads within the token
  long long* timeline = kTimed ? p.timeline + (int64_t)blockIdx.x * kTimelinePoints : nullptr;
  // The entry clock waits in the two slots that will hold cycles since entry, not in a register
  // held across the kernel (the timed build spilled with it).
  if (kTimed && tid == 0) timeline[kTlSetup] = timeline[kTlLoopDone] = clock64(), timeline[kTlEntry] = ptx::globaltimer_ns();
  // Runs `wait`; kTimed adds the cycles it took to `sum` (the timeline's summed waits).
  const auto timed = [&](unsigned& sum, auto&& wait) {
    const unsigned t0 = kTimed ? clock() : 0;
    wait();
    if (kTimed) sum += clock() - t0;
  };

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) cuda::ptx::mbarrier_init(&tile_full[s], kOutGroups * 128);
    for (int b = 0; b < 2; ++b) {
      cuda::ptx::mbarrier_init(&p_full[b], 128);
      cuda::ptx::mbarrier_init(&p_empty[b], kOutGroups * 128);
    }
    cuda::ptx::mbarrier_init(&q_read, 128);
    cuda::ptx::mbarrier_init(&q_landed, 1);
    cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // the copies' complete_tx sees the initialised barrier
    ptx::prefetch_tensormap(&q_maps.nope);
    ptx::prefetch_tensormap(&q_maps.pe);
    if (kFp8) *s_q_amax = 0;
    for (int b = 0; b < 2; ++b) cuda::ptx::mbarrier_init(&s_issued[b], 128);
  }

  // 1. The group: once the union and order passes are done (programmatic dependent launch), the
  //    order pass's list (largest unions first). With splits, or without a union pass (few
  //    groups, no order pass) CTA b computes split b % splits of group b / splits, known before
  //    the union pass ends, so Q's loads go out before the wait; the combine may launch now (it
  //    waits for this grid). With lead tokens (no union pass) the lead tokens' groups come
  //    first, in lead_splits splits each (1: whole), then the later tokens' in `splits`.
  const bool split_plan = p.splits > 1;
  int group, split = 0, splits = 1;  // this CTA's group, its split and its group's splits
  if (split_plan || !p.shared_rows_union_pass) {
    if (split_plan) ptx::launch_dependents();
    const int b = static_cast<int>(blockIdx.x);
    const int lead_groups = p.lead_tokens * shared_rows_groups_per_token(group_heads), lead_ctas = lead_groups * p.lead_splits;
    splits = b < lead_ctas ? p.lead_splits : p.splits;
    group = b < lead_ctas ? b / splits : lead_groups + (b - lead_ctas) / splits;
    split = b < lead_ctas ? b % splits : (b - lead_ctas) % splits;
  } else {
    if (p.share_line_permille > 0) ptx::launch_dependents();  // a share probe's split-K: its CTAs leave on the SMs the last wave frees
    ptx::wait_prerequisites();
    group = reinterpret_cast<const int*>(p.shared_rows_union + shared_rows_order_offset(num_blocks, p.topk))[blockIdx.x];
  }
  const bool split_out = split_plan && splits > 1;  // partials for the combine, not out and lse
  const int64_t b0 = int64_t{group} * kTokens;  // the group's first head block
  // Row r of the tile: head block b0 + r / 16, so token (b0 + r / 16) >> block_shift and head
  // ((b0 + r / 16) & block_mask) * 16 + r % 16.
  const auto token_of_row = [&](int r) { return static_cast<int>((b0 + r / kHeadGroup) >> block_shift); };
  const auto head_of_row = [&](int r) { return static_cast<int>((b0 + r / kHeadGroup) & block_mask) * kHeadGroup + r % kHeadGroup; };
  const auto row_live = [&](int r) {  // rows past the last head block, or past H (32 heads, one token per group): none
    return b0 + r / kHeadGroup < num_blocks && head_of_row(r) < p.num_heads;
  };

  // 2. Without a union pass the CTA compacts its token's list itself (3. below). Its index loads
  //    go out first: they head the critical path (indices -> rows -> S), Q is needed only at S
  //    (64 heads T = 16 33.0 -> 32.4 us, run 432).
  constexpr int kItems = (SparseMlaPlan::kMaxChunk + kThreads - 1) / kThreads;
  int32_t row[kItems];
  if (!p.shared_rows_union_pass) {
    const int32_t* list = p.indices + static_cast<int64_t>(token_of_row(0)) * p.indices_token_stride;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {  // every load in flight before any test
      const int k = j * kThreads + tid;
      row[j] = k < p.topk ? __ldg(list + k) : -1;
    }
  }
  //    Q of the 4 head blocks by bulk tensor copies (TMA), in the 128-byte swizzle wgmma reads:
  //    dims 0-383 into the tile area (read into registers below), dims 384-575 into their own
  //    blocks; rows past the last head block are the copies' out-of-bounds zeros. Thread 0 issues
  //    9 x 64 / box_rows copies of 64 dims x box_rows heads of one token. (As 4608 cp.async with
  //    their address math, Q took ~2.4 us of a small split's ~5 us setup, run 432.)
  if (tid == 0) {
    cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, &q_landed,
                                         static_cast<uint32_t>(kRows * kQkDim * 2));
    const int box_rows = q_maps.box_rows;
    for (int r0 = 0; r0 < kRows; r0 += box_rows) {
      const int t = token_of_row(r0), h = head_of_row(r0);
#pragma unroll
      for (int b = 0; b < kQkDim / 64; ++b) {  // 64-dim blocks: 6 staged, 2 ckv + 1 kpe in their own
        const bool pe = b == kCkvDim / 64;
        const int d = pe ? 0 : b * 64;
        const int block_offset = b < kRegKSteps / 4 ? kTilesOffset + kQStagingOffset + b * kRows * 128  // staged
                                                    : kQSmemOffset + (b - kRegKSteps / 4) * kRows * 128;
        const int32_t coords[3] = {d, q_maps.tokens_inner[pe] ? t : h, q_maps.tokens_inner[pe] ? h : t};
        cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem + block_offset + r0 * 128,
                                        pe ? &q_maps.pe : &q_maps.nope, coords, &q_landed);
      }
    }
  }

  // 3. The group's union from the pass before (sparse_mla_shared_rows_union_kernel): entry words,
  //    or keys and each entry's first key, into the same shared memory the loop reads. A split
  //    takes an equal run of the union's tiles (shared_rows_split_tiles), the last ones fewer or
  //    none, so -1 padding costs no split anything; its entries keep their places (entry0 on).
  //    Without a union pass (one token per group) the CTA compacts its token's list itself, as
  //    that pass would: valid indices in position order, words row << 4 | all four blocks.
  int num_entries;
  int4 header = make_int4(0, 0, 1, 0);  // entries, keys, words
  const uint8_t* record = nullptr;
  if (p.shared_rows_union_pass) {
    if (split_plan) ptx::wait_prerequisites();
    record = p.shared_rows_union + group * shared_rows_union_stride(p.topk);
    header = *reinterpret_cast<const int4*>(record);
    num_entries = header.x;
  } else {
    bool valid[kItems];
    const int listed = list_length(p, token_of_row(0));  // topk, or the token's length
#pragma unroll
    for (int j = 0; j < kItems; ++j) valid[j] = j * kThreads + tid < listed && names_a_row(row[j], p.num_rows);
    int* counts = reinterpret_cast<int*>(s_p);  // free until the loop's first P
    num_entries = block_compact<kItems, kThreads>(valid, counts, [&](int rank, int j) {
      s_words[rank] = every_block_word(static_cast<uint32_t>(row[j]));
    });
    const int padded = (num_entries + kTileEntries - 1) / kTileEntries * kTileEntries;
    if (num_entries + tid < padded) s_words[num_entries + tid] = 0;  // the last tile's missing entries: no row
    header.x = header.y = num_entries;
  }
  const bool words = header.z != 0;  // uniform over the CTA
  const int union_tiles = (num_entries + kTileEntries - 1) / kTileEntries;
  // Fused (p.fused_rows > 0: one token per group): a union of at most fused_rows entries (a short
  // list) is done by split 0 alone, which writes out and lse; the other splits leave, and the
  // combine, counting the token's valid indices as the compaction did, skips the token.
  const bool fused = split_out && p.fused_rows > 0 && num_entries <= p.fused_rows;
  if (fused && split != 0) {
    if (tid == 0) ptx::mbarrier_wait(&q_landed, 0);  // Q's copies land before the CTA's shared memory is released
    return;
  }
  const bool write_partials = split_out && !fused;
  const int tiles_per_split = write_partials ? shared_rows_split_tiles(union_tiles, splits) : union_tiles;
  const int first_tile = min(split * tiles_per_split, union_tiles);
  const int num_tiles = min(tiles_per_split, union_tiles - first_tile);  // this CTA's
  const int entry0 = first_tile * kTileEntries;
  {
    // Words: the split's own (whole tiles: the union pass pads the last one). Keys: all of them
    // (a key run may start before entry0).
    const int u32_begin = words ? entry0 : 0;
    const int u32_end = words ? entry0 + num_tiles * kTileEntries : header.y;
    const uint32_t s_keys_addr = ptx::smem_addr(s_keys), s_entry_addr = ptx::smem_addr(s_entry);
    if (record != nullptr) {
      const uint8_t* g_words = record + kSharedRowsUnionHeaderBytes;
      for (int c = u32_begin / 4 + tid; c < (u32_end + 3) / 4; c += kThreads) ptx::cp_async_16(s_keys_addr + 16 * c, g_words + 16 * c, 16u);
    }
    if (!words) {
      const uint8_t* g_entry = record + shared_rows_union_entries_offset(p.topk);
      for (int c = tid; c < (num_entries + 1 + 7) / 8; c += kThreads) ptx::cp_async_16(s_entry_addr + 16 * c, g_entry + 16 * c, 16u);
    } else {
      const int entry_end = min(num_entries, entry0 + num_tiles * kTileEntries);
      for (int e = entry0 + tid; e < entry_end; e += kThreads) s_entry[e] = static_cast<uint16_t>(e);  // entry e is word e
    }
    ptx::cp_async_commit();
  }
  // The output warpgroups' gathers (defined here: without a union pass they issue the first
  // tiles before Q has landed).
  const int og = wg - 1;           // output dims [256 og, 256 og + 256) (scores threads: unused)
  const int gw = warp % 4;         // warp within the warpgroup
  // Warpgroup og gathers the columns only it and the scores read: ckv chunks [32 og, 32 og + 32)
  // (its V) and kpe chunks [4 og, 4 og + 4), warp gw rows gw, gw + 4, ... Refilling a stage then
  // waits on nothing from the other output warpgroup. The gather is the output warpgroups'
  // busiest code (ncu, run 53: 43 % of stall samples with 64-bit address math per row), so
  // everything that depends on the lane only is computed once: row r = gw + 4 i has
  // r % 8 = gw + 4 (i % 2), so two swizzled destinations per chunk serve every row, and a
  // row's source is one 32 x 32 -> 64-bit multiply-add (strides < 2^32, checked on the host).
  const int ckv_chunk = og * kGroupCkvChunks + lane;
  const int kpe_chunk = kCkvChunks + og * kGroupKpeChunks + lane;  // used by lanes < 4
  const bool kpe_lane = lane < kGroupKpeChunks;
  const uint32_t dst_ckv[2] = {wgmma::sw128_offset(kTileEntries, gw, ckv_chunk), wgmma::sw128_offset(kTileEntries, gw + 4, ckv_chunk)};
  const uint32_t dst_kpe[2] = {wgmma::sw128_offset(kTileEntries, gw, kpe_chunk), wgmma::sw128_offset(kTileEntries, gw + 4, kpe_chunk)};
  const uint64_t src_ckv = reinterpret_cast<uint64_t>(p.ckv + ckv_chunk * 8);
  const uint64_t src_kpe = reinterpret_cast<uint64_t>(p.kpe + (kpe_chunk - kCkvChunks) * 8);
  const uint32_t ckv_row_bytes = static_cast<uint32_t>(p.ckv_row_stride) * 2, kpe_row_bytes = static_cast<uint32_t>(p.kpe_row_stride) * 2;
  // fp8 (656-byte rows): half-warp h of warp gw takes row gw + 4 (2 k + h) of the tile at step k,
  // its lane i the row's e4m3 chunk i of this warpgroup's 16 (dims 256 og + 16 i ..), which lands
  // in f16 chunk 16 + i of the warpgroup's 32 (the upper half of its columns: 8 lanes fill one
  // 128-byte row of a column block, as a bf16 gather does; spread over the chunk pairs their
  // conversion writes, each lane's 16 bytes cost a wavefront of their own, ncu, run 315). Lane 0
  // also copies the row's scales into f16 chunk 0 (free until the conversion), lanes 1-4 kpe
  // chunk i - 1 (bf16, where a bf16 row's kpe goes).
  const int f8_lane = lane % 16, f8_row = gw + 4 * (lane / 16);  // the row at step k: f8_row + 8 k
  const uint32_t dst_f8_raw = wgmma::sw128_offset(kTileEntries, f8_row, og * kGroupCkvChunks + kGroupCkvChunks / 2 + f8_lane);
  const uint32_t dst_f8_lo = wgmma::sw128_offset(kTileEntries, f8_row, og * kGroupCkvChunks + 2 * f8_lane);  // dims 16 i ..
  const uint32_t f8_odd = ((f8_lane / 4) % 2) * 16;  // dst_f8_lo ^ f8_odd: the conversion's first store
  const uint32_t dst_f8_scales = wgmma::sw128_offset(kTileEntries, f8_row, og * kGroupCkvChunks);
  const uint32_t dst_f8_side = f8_lane == 0 ? dst_f8_scales  // lanes 0-4: the scales, kpe chunk i - 1
                                            : wgmma::sw128_offset(kTileEntries, f8_row, kCkvChunks + og * kGroupKpeChunks + f8_lane - 1);
  const uint32_t f8_side_offset = f8_lane == 0 ? static_cast<uint32_t>(kFp8ScalesOffset) : kFp8KpeOffset + (og * kGroupKpeChunks + f8_lane - 1) * 16;
  // Lane l looks up entry l of the tile's row; shuffles share them. s_entry[e] indexes entry e's
  // word (over the keys) or its first key: the row lies above kRowShift either way (one indexing
  // for both keeps the output warpgroups from spilling).
  auto entry_row = [&](int tile) {
    const int e = entry0 + tile * kTileEntries + lane;
    return e >= num_entries ? -1 : static_cast<int>(s_keys[s_entry[e]] >> kRowShift);
  };
  auto load_tile = [&](int tile, int my_row) {
    const uint32_t dst = sTiles + (tile % kStages) * kTileBytes;
    if constexpr (kFp8) {
#pragma unroll
      for (int k = 0; k < kTileEntries / 8; ++k) {
        const int row_or_none = __shfl_sync(0xffffffffu, my_row, f8_row + 8 * k);
        const uint32_t row = row_or_none < 0 ? 0u : static_cast<uint32_t>(row_or_none);
        const uint32_t bytes = row_or_none < 0 ? 0u : 16u;
        const uint64_t src = static_cast<uint64_t>(row) * static_cast<uint32_t>(p.ckv_row_stride) + reinterpret_cast<uint64_t>(p.ckv);
        const uint32_t d = dst + k * 8 * 128;  // rows 8 apart: the same swizzle
        ptx::cp_async_16(d + dst_f8_raw, reinterpret_cast<const void*>(src + og * kDimsPerGroup + f8_lane * 16), bytes);
        // One predicated copy, lane 0 the scales, lanes 1-4 kpe: as two branches (an if and an
        // else if) they cost fp8 prefill 5 % (run 332).
        if (f8_lane <= kGroupKpeChunks)
          ptx::cp_async_16(d + dst_f8_side, reinterpret_cast<const void*>(src + f8_side_offset), bytes);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kTileEntries / 4; ++i) {
        const int row_or_none = __shfl_sync(0xffffffffu, my_row, gw + 4 * i);
        const uint32_t row = row_or_none < 0 ? 0u : static_cast<uint32_t>(row_or_none);
        const uint32_t bytes = row_or_none < 0 ? 0u : 16u;
        const uint32_t row_offset = (i / 2) * 8 * 128;  // rows gw + 4 i and gw + 4 (i % 2) are 8 (i / 2) apart
        ptx::cp_async_16(dst + dst_ckv[i % 2] + row_offset,
                         reinterpret_cast<const void*>(static_cast<uint64_t>(row) * ckv_row_bytes + src_ckv), bytes);
        if (kpe_lane)
          ptx::cp_async_16(dst + dst_kpe[i % 2] + row_offset,
                           reinterpret_cast<const void*>(static_cast<uint64_t>(row) * kpe_row_bytes + src_kpe), bytes);
      }
    }
  };
  // Without a union pass the entries are known now (the compaction above), so the output
  // warpgroups issue the tiles of the stages Q's staging leaves free while Q is still landing:
  // a split of one or two tiles then waits for Q and its rows at once, not one after the other.
  const bool early_tiles = !p.shared_rows_union_pass && wg > 0;
  if (!p.shared_rows_union_pass) {
    __syncthreads();  // the compacted entries visible
    if (early_tiles) {
#pragma unroll
      for (int t = 0; t < kQStagingFreeStages; ++t) {
        if (t < num_tiles) load_tile(t, entry_row(t));
        ptx::cp_async_commit();
      }
    }
  }
  if (!early_tiles) ptx::cp_async_wait<0>();  // the union pass's record (the early tiles need not land yet)
  __syncthreads();  // entries and the mbarriers visible
  ptx::mbarrier_wait(&q_landed, 0);  // Q landed
  if constexpr (kFp8) {
    // Q for the f16 MMAs, in place: times 2^-shift (f16_shift of its largest element over the
    // CTA's rows: a head 2^20 below it still sits in f16's normal range), its ckv dims as f16 and
    // its kpe dims as bf16 (exact); the scores warpgroup multiplies S by 2^shift. (A shift per
    // row spilled the scores warpgroup's registers.) A warp per row: lanes take ckv chunks l and
    // l + 32, lanes 0-7 kpe chunk l.
    const auto q_chunk = [&](int r, int col) {
      const uint32_t a = col < kRegChunks ? sTiles + kQStagingOffset + wgmma::sw128_offset(kRows, r, col)
                                          : sQSmem + wgmma::sw128_offset(kRows, r, col - kRegChunks);
      return reinterpret_cast<uint4*>(smem + (a - base));
    };
    const bool kpe_lane = lane < kKpeDim * 2 / 16;
    const auto each_word = [](uint4& c, auto&& f) { f(c.x), f(c.y), f(c.z), f(c.w); };
    const auto lo = [](uint32_t x) { return __uint_as_float(x << 16); };
    const auto hi = [](uint32_t x) { return __uint_as_float(x & 0xffff0000u); };
    float amax = 0.f;
    for (int r = warp; r < kRows; r += kThreads / 32) {
      uint4 v[3] = {*q_chunk(r, lane), *q_chunk(r, lane + 32), kpe_lane ? *q_chunk(r, kCkvChunks + lane) : make_uint4(0, 0, 0, 0)};
#pragma unroll
      for (int i = 0; i < 3; ++i) each_word(v[i], [&](uint32_t& x) { amax = fmaxf(amax, fmaxf(fabsf(lo(x)), fabsf(hi(x)))); });
    }
    amax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(amax)));
    if (lane == 0) atomicMax(s_q_amax, __float_as_uint(amax));  // non-negative floats order as their bits
    __syncthreads();
    const int shift = f16_shift(__uint_as_float(*s_q_amax));
    const float down = __int_as_float((127 - shift) << 23);  // 2^-shift, exact
    const uint32_t down2 = ptx::pack_bf16x2(down, down);
    for (int r = warp; r < kRows; r += kThreads / 32) {
      uint4* chunk[3] = {q_chunk(r, lane), q_chunk(r, lane + 32), q_chunk(r, kCkvChunks + (kpe_lane ? lane : 0))};
      uint4 v[3] = {*chunk[0], *chunk[1], kpe_lane ? *chunk[2] : make_uint4(0, 0, 0, 0)};  // words of two bf16
#pragma unroll
      for (int i = 0; i < 2; ++i) each_word(v[i], [&](uint32_t& x) { x = ptx::pack_f16x2(lo(x) * down, hi(x) * down); });
      each_word(v[2], [&](uint32_t& x) { x = ptx::mul_bf16x2(x, down2); });
      *chunk[0] = v[0];
      *chunk[1] = v[1];
      if (kpe_lane) *chunk[2] = v[2];
    }
    wgmma::fence_proxy_async_smem();
    __syncthreads();
  }
  if (kTimed && tid == 0) timeline[kTlSetup] = clock64() - timeline[kTlSetup];

  if (wg == 0) {
    // ---- scores warpgroup --------------------------------------------------------------------
    ptx::setmaxnreg_dec<kScoresRegs>();
    uint32_t q[kRegKSteps][4];  // A fragments of Q[:, 0:384], rows 16w..16w+15 of this warp
#pragma unroll
    for (int kk = 0; kk < kRegKSteps; ++kk)
      ptx::ldmatrix_x4(q[kk], sTiles + kQStagingOffset + wgmma::sw128_offset(kRows, token_of_warp * 16 + lane % 16, 2 * kk + lane / 16));
    cuda::ptx::mbarrier_arrive(&q_read);  // the output warpgroups may load tiles over the staging

    float m_run[2] = {-INFINITY, -INFINITY};  // rows lane/4 and lane/4 + 8 of this warp, base-2 logits
    float l_run[2] = {0.f, 0.f};              // this lane's part of the row sums
    // fp8: Q went into f16 as x 2^-shift (above), S comes back times 2^shift.
    const float scale = kFp8 ? p.scale_log2 * __int_as_float((127 + f16_shift(__uint_as_float(*s_q_amax))) << 23) : p.scale_log2;
    const int col0 = 2 * (lane % 4);  // this lane's first column in each n8 tile of S
    const int row0 = token_of_warp * 16 + lane / 4;
    unsigned wait_s = 0, wait_tile = 0;  // kTimed: cycles waiting for S, for tiles
    // The tile loop, built once for entry words and once for counts (one loop holding both
    // paths measured 2-3 % slower, runs 60-61): a CTA runs one of them.
    auto scores_loop = [&](auto words_tag) {
      constexpr bool kWords = decltype(words_tag)::value;
      for (int j = 0; j < num_tiles; ++j) {
        timed(wait_tile, [&] { ptx::mbarrier_wait(&tile_full[j % kStages], (j / kStages) & 1); });
        const uint32_t tile = sTiles + (j % kStages) * kTileBytes;

        // This warp's token's weight for each of the lane's 8 columns of S (per n8 tile x 2): 0 or 1
        // from the entry words, else lane l counts entry l's keys and the shuffles below share them.
        // (Packed into one register, bit 2 n + c, while S runs: registers are short.)
        uint32_t listed = 0;
        int count = 0;
        if constexpr (kWords) {
#pragma unroll
          for (int n = 0; n < kSAcc / 4; ++n) {
            const uint2 w = *reinterpret_cast<const uint2*>(s_words + entry0 + j * kTileEntries + 8 * n + col0);
            listed |= ((w.x >> token_of_warp) & 1u) << (2 * n) | ((w.y >> token_of_warp) & 1u) << (2 * n + 1);
          }
        } else {
          const int e = entry0 + j * kTileEntries + lane;
          if (e < num_entries) {
            const int end = s_entry[e + 1];
            for (int k = s_entry[e]; k < end; ++k) count += (s_keys[k] & kLowBits) == static_cast<unsigned>(token_of_warp);
          }
        }

        // S = Q K^T: 12 k-steps with Q from shared memory, then 24 with Q from registers. This
        // warpgroup's time goes into issuing these 36 small wgmmas (ncu, run 239: 72 % of its
        // samples, ~33 cycles each when the output warpgroups' P V leaves the tensor cores free,
        // up to ~90 beside it); the shared-memory ones first took prefill T = 4096 from 1757 to
        // 1737 us (runs 241-242, means of four calls).
        // fp8: the ckv k-steps are f16 (Q and the converted tile), the kpe ones bf16.
        float s[kSAcc];
        wgmma::fence();
#pragma unroll
        for (int kk = kRegKSteps; kk < kRegKSteps + kSmemKSteps; ++kk) {
          const uint64_t qa = wgmma::desc_sw128(sQSmem + ((kk - kRegKSteps) / 4) * kRows * 128 + (kk % 4) * 32, 16, 1024);
          const uint64_t kb = wgmma::desc_sw128(tile + (kk / 4) * kTileEntries * 128 + (kk % 4) * 32, 16, 1024);
          if (kFp8 && kk < kCkvDim / 16)
            wgmma::mma_ss_f16_n32(s, qa, kb, kk > kRegKSteps);
          else
            wgmma::mma_ss_bf16_n32(s, qa, kb, kk > kRegKSteps);
        }
#pragma unroll
        for (int kk = 0; kk < kRegKSteps; ++kk) {
          const uint64_t kb = wgmma::desc_sw128(tile + (kk / 4) * kTileEntries * 128 + (kk % 4) * 32, 16, 1024);
          if constexpr (kFp8)
            wgmma::mma_rs_f16_n32(s, q[kk], kb, 1);
          else
            wgmma::mma_rs_bf16_n32(s, q[kk], kb, 1);
        }
        wgmma::commit();
        // The output warpgroups' P V of tile j - 1 may start (tile 0 has no P V before it: every
        // phase completed is waited on, as synccheck wants).
        if (j > 0) cuda::ptx::mbarrier_arrive(&s_issued[j % 2]);
        timed(wait_s, [] { wgmma::wait<0>(); });
        wgmma::pin(s);

        // Online softmax over the tile's 32 entries; an entry this token did not list is -inf, one
        // it listed k times has weight k.
        float weight[kSAcc / 2];
#pragma unroll
        for (int n = 0; n < kSAcc / 4; ++n)
#pragma unroll
          for (int c = 0; c < 2; ++c)
            weight[2 * n + c] = kWords ? static_cast<float>((listed >> (2 * n + c)) & 1u)
                                      : static_cast<float>(__shfl_sync(0xffffffffu, count, 8 * n + col0 + c));
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int n = 0; n < kSAcc / 4; ++n)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float& v = s[4 * n + 2 * r + c];
              v = weight[2 * n + c] > 0.f ? v * scale : -INFINITY;
              mx = fmaxf(mx, v);
            }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m_run[r], mx);
          const float m_ref = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet stays at 0
          alpha[r] = ptx::exp2_approx(m_run[r] - m_ref);
          m_run[r] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int n = 0; n < kSAcc / 4; ++n)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float& v = s[4 * n + 2 * r + c];
              // An unlisted entry is -inf here and exp2 gives 0: 0/1 weights need no multiply.
              v = kWords ? ptx::exp2_approx(v - m_ref) : weight[2 * n + c] * ptx::exp2_approx(v - m_ref);
              sum += v;
            }
          l_run[r] = l_run[r] * alpha[r] + sum;
        }

        // Hand P (bf16; fp8: f16) and alpha over; the buffer of tile j - 2 must have been read.
        if (j >= 2) {
          ptx::mbarrier_wait(&p_empty[j % 2], ((j - 2) / 2) & 1);
        }
        uint8_t* pb = s_p + (j % 2) * kPBytes;
#pragma unroll
        for (int n = 0; n < kSAcc / 4; ++n)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            uint32_t& dst = *reinterpret_cast<uint32_t*>(pb + p_offset(row0 + 8 * r, 8 * n + col0));
            if constexpr (kFp8)
              dst = ptx::pack_f16x2(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]);
            else
              dst = ptx::pack_bf16x2(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]);
          }
        if (lane % 4 == 0) {
          s_alpha[(j % 2) * kRows + row0] = alpha[0];
          s_alpha[(j % 2) * kRows + row0 + 8] = alpha[1];
        }
        if constexpr (kFp8) wgmma::fence_proxy_async_smem();  // fp8: P is read by the output warpgroups' wgmmas
        cuda::ptx::mbarrier_arrive(&p_full[j % 2]);
      }
    };
    if (words)
      scores_loop(std::true_type{});
    else
      scores_loop(std::false_type{});
    if (kTimed && tid == 0)
      timeline[kTlLoopDone] = clock64() - timeline[kTlLoopDone], timeline[kTlScoresS] = wait_s, timeline[kTlScoresTile] = wait_tile;

    // Row sums, 1/l for the output warpgroups, lse.
    const bool live = row_live(row0);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const bool any = l > 0.f;
      if (lane % 4 == 0) {
        s_inv_l[row0 + 8 * r] = any ? 1.f / l : 0.f;
        const int t = token_of_row(row0 + 8 * r), h = head_of_row(row0 + 8 * r);
        const float lse = any ? m_run[r] + log2f(l) : -INFINITY;  // -inf: the combine drops this split
        if (live && write_partials)
          p.partial_lse[partial_slot(p, t, h, split)] = lse;
        else if (live)
          p.lse[t * p.lse_token_stride + h] = lse;
      }
    }
    ptx::named_barrier_sync_unaligned(kBarEpilogue, kThreads);  // (a) 1/l written
    ptx::named_barrier_sync_unaligned(kBarEpilogue, kThreads);  // (b) the output tile staged
  } else {
    // ---- output warpgroups: gather the tiles, O += P V ------------------------------------------
    ptx::setmaxnreg_inc<kOutputRegs>();
    unsigned wait_p = 0, wait_issued = 0, wait_pv = 0, convert_time = 0, gather_time = 0, wait_landed = 0;  // kTimed
    // fp8: this warpgroup's e4m3 chunks of a landed tile become f16 (e4m3 x its block's scale) over
    // its columns. Each lane converts the chunk it copied; the 16 lanes of a row read the chunks
    // and their scale (lane 0's copy) before (__syncwarp) any of them writes over them. Two steps
    // (rows 8 apart) at a time: both steps' loads, one __syncwarp, both conversions. (One step at a
    // time, the next one's loads ahead, spilled 16 bytes here once the conversion moved before
    // the wait for P, run 376; all four steps at once 12.)
    const uint32_t f8_scale = dst_f8_scales + og * 8 + (f8_lane < kFp8ScaleDims / 16 ? 0 : 4);  // this lane's block
    auto convert_fp8_tile = [&](int tile) {
      uint8_t* stage = smem + kTilesOffset + (tile % kStages) * kTileBytes;
      constexpr int kSteps = kTileEntries / 8, kBatch = 2;  // rows 8 apart: the same swizzle
      __syncwarp();  // every lane's copies have landed (cp.async.wait_group before this)
#pragma unroll
      for (int k0 = 0; k0 < kSteps; k0 += kBatch) {
        uint4 raw[kBatch];
        float block_scale[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          raw[k] = *reinterpret_cast<const uint4*>(stage + (k0 + k) * 8 * 128 + dst_f8_raw);
          block_scale[k] = *reinterpret_cast<const float*>(stage + (k0 + k) * 8 * 128 + f8_scale);
        }
        __syncwarp();  // the chunks and scales read before any lane writes over them
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          uint8_t* rows = stage + (k0 + k) * 8 * 128;
          const uint32_t f = ptx::pack_f16x2(block_scale[k], block_scale[k]);
          const auto convert8 = [&](uint32_t a, uint32_t b) {  // 8 e4m3 -> 8 f16 x f
            const uint2 x = ptx::e4m3x4_to_f16x4(a), y = ptx::e4m3x4_to_f16x4(b);
            return make_uint4(ptx::mul_f16x2(x.x, f), ptx::mul_f16x2(x.y, f), ptx::mul_f16x2(y.x, f), ptx::mul_f16x2(y.y, f));
          };
          // Lanes with i / 4 odd store the upper half first: 8 lanes' stores then touch 8
          // distinct bank groups.
          const bool odd = f8_odd != 0;
          *reinterpret_cast<uint4*>(rows + (dst_f8_lo ^ f8_odd)) = convert8(odd ? raw[k].z : raw[k].x, odd ? raw[k].w : raw[k].y);
          *reinterpret_cast<uint4*>(rows + (dst_f8_lo ^ f8_odd ^ 16)) = convert8(odd ? raw[k].x : raw[k].z, odd ? raw[k].y : raw[k].w);
        }
      }
    };
    // Tile j is announced once the warp's copies landed: wait_group, then (fp8: the conversion)
    // the proxy fence (cp.async writes -> the wgmma proxy), then the warp's arrival.
    auto announce = [&](int tile) {
      if constexpr (kFp8) timed(convert_time, [&] { convert_fp8_tile(tile); });
      wgmma::fence_proxy_async_smem();
      cuda::ptx::mbarrier_arrive(&tile_full[tile % kStages]);
    };
    ptx::mbarrier_wait(&q_read, 0);
    // Copy groups: one per tile, tile t in stage t % kStages. Tiles 0 .. kStages - 2 go out
    // first (the first kQStagingFreeStages above, without a union pass); all but the newest are
    // announced as soon as they land.
#pragma unroll
    for (int t = 0; t < kStages - 1; ++t) {
      if (early_tiles && t < kQStagingFreeStages) continue;
      if (t < num_tiles) load_tile(t, entry_row(t));
      ptx::cp_async_commit();
    }
    ptx::cp_async_wait<1>();
#pragma unroll
    for (int t = 0; t < kStages - 2; ++t)
      if (t < num_tiles) announce(t);

    float o[kOAcc];
#pragma unroll
    for (int i = 0; i < kOAcc; ++i) o[i] = 0.f;
    const int row0 = token_of_warp * 16 + lane / 4;
    int next_row = kStages - 1 < num_tiles ? entry_row(kStages - 1) : -1;  // tile j + kStages - 1's
    for (int j = 0; j < num_tiles; ++j) {
      // Tile j + kStages - 1 goes into the stage of tile j - 1 (this warpgroup's P V of it has
      // completed, the scores of it were done before P of tile j - 1 came), and tile j + kStages
      // - 2 is announced once it has landed: the scores warpgroup sees tiles two ahead of the P
      // it hands over. Issued before the waits below, which the gathers' address math overlaps.
      // fp8: tile j + kStages - 2 is converted before the wait for P, not while P V of tile j runs
      // (run 376: prefill -3 %, 32-128 heads -1 to -2 %; the scores warpgroup had waited for it).
      if (j + kStages - 1 < num_tiles) timed(gather_time, [&] { load_tile(j + kStages - 1, next_row); });
      // The next tile's rows: two dependent shared loads, which land while this iteration runs
      // instead of stalling the gathers' issue (fp8 prefill -1 %, run 332).
      next_row = j + kStages < num_tiles ? entry_row(j + kStages) : -1;
      ptx::cp_async_commit();
      timed(wait_landed, [] { ptx::cp_async_wait<1>(); });
      if (j + kStages - 2 < num_tiles) announce(j + kStages - 2);
      timed(wait_p, [&] { ptx::mbarrier_wait(&p_full[j % 2], (j / 2) & 1); });
      const float a0 = s_alpha[(j % 2) * kRows + row0], a1 = s_alpha[(j % 2) * kRows + row0 + 8];
      const uint32_t pb = ptx::smem_addr(s_p + (j % 2) * kPBytes);
      uint32_t pa[kTileEntries / 16][4];  // bf16: P's A fragments (fp8 reads P from shared memory)
      if constexpr (!kFp8) {
#pragma unroll
        for (int kk = 0; kk < kTileEntries / 16; ++kk)
          ptx::ldmatrix_x4(pa[kk], pb + p_offset(token_of_warp * 16 + lane % 16, kk * 16 + (lane / 16) * 8));
      }
      // P V of tile j waits until the scores warpgroup has issued S of tile j + 1, so that S's
      // wgmmas, the scores warpgroup's critical path, are not queued behind it on the tensor
      // cores; P V then runs beside that warpgroup's softmax. Before p_empty's arrival: the scores
      // warpgroup cannot reach tile j + 3, this buffer's next s_issued phase, before this wait.
      // Tile i >= 1 completes phase (i - 1) / 2 of buffer i % 2.
      if (j + 1 < num_tiles) timed(wait_issued, [&] { ptx::mbarrier_wait(&s_issued[(j + 1) % 2], (j / 2) & 1); });
      if constexpr (!kFp8) cuda::ptx::mbarrier_arrive(&p_empty[j % 2]);
      if (!__all_sync(0xffffffffu, a0 == 1.f && a1 == 1.f)) {  // no row max moved: skip the rescale
#pragma unroll
        for (int n = 0; n < kOAcc / 4; ++n) {
          o[4 * n + 0] *= a0;
          o[4 * n + 1] *= a0;
          o[4 * n + 2] *= a1;
          o[4 * n + 3] *= a1;
        }
      }
      // O[:, this warpgroup's 256 dims] += P V: V rows are the tile's entries (the k dimension),
      // dims contiguous (N-major); a k-step covers 16 entries = two 8-row groups 1024 B apart,
      // column blocks of 64 dims sit kTileEntries * 128 B apart. fp8: P is wgmma's A operand straight from
      // shared memory (p_offset is its 64-byte swizzle): these warpgroups, which also convert,
      // lack the 8 registers P's fragments take (their spills went: fp8 prefill 2025 -> 1873 us,
      // run 331). bf16 keeps P in registers: from shared memory it was 1-2 % slower (run 331).
      wgmma::fence();
      const uint32_t v_base = sTiles + (j % kStages) * kTileBytes + (og * kDimsPerGroup / 64) * kTileEntries * 128;
#pragma unroll
      for (int kk = 0; kk < kTileEntries / 16; ++kk)
        if constexpr (kFp8)
          wgmma::mma_ss_f16_n256_bT(o, wgmma::desc_sw64(pb + kk * 32, 16, 512), wgmma::desc_sw128(v_base + kk * 16 * 128, kTileEntries * 128, 1024), 1);
        else
          wgmma::mma_rs_bf16_n256_bT(o, pa[kk], wgmma::desc_sw128(v_base + kk * 16 * 128, kTileEntries * 128, 1024), 1);
      wgmma::commit();
      timed(wait_pv, [] { wgmma::wait<0>(); });
      wgmma::pin(o);
      if constexpr (kFp8) cuda::ptx::mbarrier_arrive(&p_empty[j % 2]);  // P read by the wgmmas
    }
    ptx::cp_async_wait<0>();
    if (kTimed && tid == 128) timeline[kTlOutputP] = wait_p, timeline[kTlOutputSIssued] = wait_issued, timeline[kTlOutputPV] = wait_pv, timeline[kTlOutputConvert] = convert_time,
                                  timeline[kTlOutputGather] = gather_time, timeline[kTlOutputLanded] = wait_landed;

    // Epilogue: normalise and stage the 64 x 512 bf16 tile over the tiles; a split writes its
    // partial rows straight from registers (partials.cuh: 4 lanes fill a 32-byte sector of a row).
    ptx::named_barrier_sync_unaligned(kBarEpilogue, kThreads);  // (a) 1/l written; every warpgroup is done with the tiles
    const float inv0 = s_inv_l[row0], inv1 = s_inv_l[row0 + 8];
    uint16_t* staged = reinterpret_cast<uint16_t*>(smem + kTilesOffset);
    const int col0 = 2 * (lane % 4);
    if (write_partials) {
      if (num_tiles > 0) {  // an empty split's lse is -inf: the combine never reads its rows
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = row0 + 8 * r;
          const bool live = row_live(row);  // every lane takes part in the stores' shuffles
          const float inv = r == 0 ? inv0 : inv1;
          const int64_t dst = live ? partial_slot(p, token_of_row(row), head_of_row(row), split) * kCkvDim + og * kDimsPerGroup : 0;
#pragma unroll
          for (int n = 0; n < kOAcc / 4; n += 2)
            store_partial_tiles(p.partial_out, dst + 8 * n, o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv,
                                o[4 * n + 4 + 2 * r] * inv, o[4 * n + 4 + 2 * r + 1] * inv, live);
        }
      }
    } else {
#pragma unroll
      for (int n = 0; n < kOAcc / 4; ++n) {
        *reinterpret_cast<uint32_t*>(staged + row0 * kStagedStride + og * kDimsPerGroup + 8 * n + col0) =
            ptx::pack_bf16x2(o[4 * n] * inv0, o[4 * n + 1] * inv0);
        *reinterpret_cast<uint32_t*>(staged + (row0 + 8) * kStagedStride + og * kDimsPerGroup + 8 * n + col0) =
            ptx::pack_bf16x2(o[4 * n + 2] * inv1, o[4 * n + 3] * inv1);
      }
    }
    ptx::named_barrier_sync_unaligned(kBarEpilogue, kThreads);  // (b)
  }

  // Every thread writes whole rows (partials were written above).
  const uint16_t* staged = reinterpret_cast<const uint16_t*>(smem + kTilesOffset);
  for (int i = tid; i < kRows * (kCkvDim / 8) && !write_partials; i += kThreads) {
    const int r = i / (kCkvDim / 8), c = i % (kCkvDim / 8);
    if (!row_live(r)) break;  // rows past the last head block come last
    *reinterpret_cast<uint4*>(p.out + token_of_row(r) * p.out_token_stride + head_of_row(r) * p.out_head_stride + c * 8) =
        *reinterpret_cast<const uint4*>(staged + r * kStagedStride + c * 8);
  }
  if (kTimed && tid == 0) timeline[kTlExit] = ptx::globaltimer_ns();
}

}  // namespace

int shared_rows_smem_bytes() { return kSmemBytes; }

// The driver's cuTensorMapEncodeTiled, found once through the runtime (nothing links libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    DSA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr) throw Error("the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// One part of Q (`dims` wide; element (t, h, d) at t * token_stride + h * head_stride + d) as a
// tensor map whose boxes are 64 dims x box_rows heads of one token, 128-byte swizzled. The
// heads and tokens go in the order of their strides; a token stride no copy reads (T = 1) is
// replaced by one past the heads.
CUtensorMap q_part_map(const char* name, const uint16_t* q, int dims, int64_t head_stride, int64_t token_stride,
                       int num_heads, int num_tokens, int box_rows, bool& tokens_inner) {
  if (num_tokens == 1) token_stride = head_stride * num_heads;
  // The driver's limit (strides < 2^40 bytes), checked here: a failed encode would be a failed
  // driver call that compute-sanitizer reports.
  constexpr int64_t kMaxStride = (int64_t{1} << 40) / 2;  // elements
  if (head_stride >= kMaxStride || token_stride >= kMaxStride)
    throw Error(std::string(name) + ": strides must be < 2^39 elements for the shared-rows kernel's TMA copies (head " +
                std::to_string(head_stride) + ", token " + std::to_string(token_stride) + ")");
  tokens_inner = token_stride < head_stride;
  const cuuint64_t heads = static_cast<cuuint64_t>(num_heads), tokens = static_cast<cuuint64_t>(num_tokens);
  const cuuint64_t head_bytes = static_cast<cuuint64_t>(head_stride) * 2, token_bytes = static_cast<cuuint64_t>(token_stride) * 2;
  const cuuint64_t dim[3] = {static_cast<cuuint64_t>(dims), tokens_inner ? tokens : heads, tokens_inner ? heads : tokens};
  const cuuint64_t stride[2] = {tokens_inner ? token_bytes : head_bytes, tokens_inner ? head_bytes : token_bytes};
  const cuuint32_t rows = static_cast<cuuint32_t>(box_rows);
  const cuuint32_t box[3] = {64, tokens_inner ? 1u : rows, tokens_inner ? rows : 1u};
  const cuuint32_t element_stride[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<uint16_t*>(q), dim, stride, box,
                                          element_stride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(std::string(name) + ": the strides (head " + std::to_string(head_stride) + ", token " + std::to_string(token_stride) +
                " elements) make no TMA tensor map (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

void launch_sparse_mla_shared_rows(const SparseMlaParams& p, cudaStream_t stream, const SparseMlaParams* split_k) {
  if (p.num_tokens == 0) return;
  SharedRowsQMaps q_maps;
  q_maps.box_rows = std::min(p.num_heads, kRows);  // a token's heads, or the CTA's 64 of them
  q_maps.nope = q_part_map("q_nope", p.q_nope, kCkvDim, p.q_nope_head_stride, p.q_nope_token_stride, p.num_heads, p.num_tokens,
                           q_maps.box_rows, q_maps.tokens_inner[0]);
  q_maps.pe = q_part_map("q_pe", p.q_pe, kKpeDim, p.q_pe_head_stride, p.q_pe_token_stride, p.num_heads, p.num_tokens,
                         q_maps.box_rows, q_maps.tokens_inner[1]);
  raise_smem_limit_once<sparse_mla_shared_rows_kernel<false, false>>(kSmemBytes);
  raise_smem_limit_once<sparse_mla_shared_rows_kernel<true, false>>(kSmemBytes);
  raise_smem_limit_once<sparse_mla_shared_rows_kernel<false, true>>(kSmemBytes);
  raise_smem_limit_once<sparse_mla_shared_rows_kernel<true, true>>(kSmemBytes);
  const int group_heads = shared_rows_group_heads(p.num_heads, p.shared_rows_union_pass);
  const int64_t groups = shared_rows_groups(shared_rows_head_blocks(p.num_tokens, group_heads));
  const bool split_out = p.splits > 1;
  auto* kernel = p.kv_fp8 ? (p.timeline != nullptr ? sparse_mla_shared_rows_kernel<true, true> : sparse_mla_shared_rows_kernel<false, true>)
                          : (p.timeline != nullptr ? sparse_mla_shared_rows_kernel<true, false> : sparse_mla_shared_rows_kernel<false, false>);
  const int64_t lead_groups = int64_t{p.lead_tokens} * shared_rows_groups_per_token(group_heads);
  const dim3 grid(static_cast<unsigned>(lead_split_ctas(groups, p.splits, lead_groups, p.lead_splits)));
  // Each kernel after the first waits for the one before with griddepcontrol.wait. With splits
  // (groups taken in block order: nothing to order) the main kernel follows the union pass, and
  // the combine follows the main kernel. Without a union pass the main kernel reads only inputs.
  if (p.shared_rows_union_pass) {
    sparse_mla_shared_rows_union_kernel<<<static_cast<unsigned>(groups), kUnionThreads, 0, stream>>>(p);
    DSA_CUDA_CHECK(cudaGetLastError());
    if (!split_out) launch_dependent(sparse_mla_shared_rows_order_kernel, dim3(1), dim3(kOrderThreads), 0, stream, p);
    launch_dependent(kernel, grid, dim3(kThreads), kSmemBytes, stream, p, q_maps);
    if (split_k != nullptr) launch_sparse_mla_splitk(*split_k, stream);  // a share probe's other kernel (dependent)
  } else {
    kernel<<<grid, kThreads, kSmemBytes, stream>>>(p, q_maps);
    DSA_CUDA_CHECK(cudaGetLastError());
  }
  if (split_out) launch_sparse_mla_combine(p, stream);
}

}  // namespace dsa::detail
