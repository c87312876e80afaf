#include "suites.h"

#include <regex>

#include "dsa/error.h"

namespace dsa::bench {
namespace {

using workload::IndexPattern;

BenchCase make(const std::string& name, int T, IndexPattern pattern, std::vector<int> valid = {}, int heads = 16,
               int topk = 2048, int page_size = 64, int num_pages = 8462) {
  BenchCase c;
  c.name = name;
  c.num_heads = heads;
  c.indices.num_tokens = T;
  c.indices.topk = topk;
  c.indices.page_size = page_size;
  c.indices.num_pages = num_pages;
  c.indices.pattern = pattern;
  c.indices.valid_counts = std::move(valid);
  return c;
}

// A case's name from its shape, H<heads>-T<tokens>-k<topk>-<pattern>: the grammar named_case parses.
std::string shape_name(int heads, int T, int topk, const std::string& pattern) {
  return "H" + std::to_string(heads) + "-T" + std::to_string(T) + "-k" + std::to_string(topk) + "-" + pattern;
}

}  // namespace

std::vector<std::string> builtin_suite_names() {
  return {"targets", "smoke", "decode-small", "decode-large", "prefill", "edge", "wide-heads", "waves", "past-waves", "shapes", "sweep", "short-lists", "serving"};
}

std::vector<BenchCase> builtin_suite(const std::string& name) {
  std::vector<BenchCase> v;
  if (name == "targets") {
    v.push_back(make("T1-2valid", 1, IndexPattern::runs, {2}));
    v.back().target = "<= 4 us";
    v.push_back(make("T1-random", 1, IndexPattern::random));
    v.back().target = "<= 6 us";
    v.push_back(make("T8-runs-mixed", 8, IndexPattern::runs, {1, 2048, 33, 700, 5, 1500, 64, 337}));
    v.back().target = "<= 7 us";
    v.push_back(make("T64-random", 64, IndexPattern::random));
    v.back().target = "<= 1.05 x gather";
    v.push_back(make("T256-random", 256, IndexPattern::random));
    v.back().target = "<= gather";
    v.push_back(make("T1024-random", 1024, IndexPattern::random));
    v.back().target = "<= gather";
    v.push_back(make("T4096-prefill", 4096, IndexPattern::shared_prefix));
    v.back().indices.prefix_len = 8192;
    v.back().target = "<= 750 us";
  } else if (name == "smoke") {
    v.push_back(make("smoke-T1-random", 1, IndexPattern::random, {}, 16, 2048, 64, 256));
    v.push_back(make("smoke-T4-runs", 4, IndexPattern::runs, {}, 16, 2048, 64, 256));
    v.push_back(make("smoke-T3-H64-middle", 3, IndexPattern::padding_middle, {}, 64, 2048, 64, 256));
  } else if (name == "decode-small") {
    for (int T : {1, 2, 4, 8}) v.push_back(make("runs-T" + std::to_string(T), T, IndexPattern::runs));
    v.push_back(make("runs-T1-2048", 1, IndexPattern::runs, {2048}));
    v.push_back(make("runs-T4-33", 4, IndexPattern::runs, {33}));
  } else if (name == "decode-large") {
    for (int T : {16, 32, 64, 128, 256, 512, 1024}) v.push_back(make("random-T" + std::to_string(T), T, IndexPattern::random));
  } else if (name == "prefill") {
    for (int T : {512, 2048, 4096, 8192}) {
      v.push_back(make("prefill-T" + std::to_string(T), T, IndexPattern::shared_prefix));
      v.back().indices.prefix_len = std::max(T, 8192);
    }
  } else if (name == "edge") {
    v.push_back(make("all-padding-T4", 4, IndexPattern::all_padding));
    v.push_back(make("single-valid-T4", 4, IndexPattern::single_valid));
    v.push_back(make("padding-middle-T8", 8, IndexPattern::padding_middle));
    v.push_back(make("duplicates-T8", 8, IndexPattern::duplicates));
    v.push_back(make("out-of-range-T8", 8, IndexPattern::out_of_range));
    v.push_back(make("odd-topk-T16", 16, IndexPattern::random, {}, 16, 2049));
    v.push_back(make("topk1-T64", 64, IndexPattern::random, {}, 16, 1));
    for (int H : {32, 64, 128}) v.push_back(make("H" + std::to_string(H) + "-T8-random", 8, IndexPattern::random, {}, H));
  } else if (name == "wide-heads") {
    // Decode at 32 / 64 / 128 heads (TP 4 / 2 / 1 of DeepSeek-V3.2's 128), full random lists:
    // where the planner's split-K / shared-rows lines lie (T = 2-8 at 64 and 128 heads; at 32
    // heads it lies at T = 133, past these).
    for (int H : {32, 64, 128})
      for (int T : {1, 2, 3, 4, 6, 8, 16, 64})
        v.push_back(make("H" + std::to_string(H) + "-T" + std::to_string(T) + "-random", T, IndexPattern::random, {}, H));
  } else if (name == "waves") {
    // Around one wave of one-token shared-rows groups at 32 / 64 / 128 heads (T = 132 tokens at
    // 32 and 64 heads, 66 at 128 on an H100): where the planner's splits past one wave and the
    // union pass's line at 1.7 waves lie (docs/perf.md runs 447-454). Full random lists and
    // decode batches of mixed lengths (runs of 1-2048 rows), whose long lists a second wave holds.
    for (int H : {32, 64})
      for (int T : {132, 133, 140, 150, 160, 176, 190, 198, 200, 224, 264})
        v.push_back(make("H" + std::to_string(H) + "-T" + std::to_string(T) + "-random", T, IndexPattern::random, {}, H));
    for (int T : {66, 67, 70, 80, 90, 99, 100, 112, 132}) v.push_back(make("H128-T" + std::to_string(T) + "-random", T, IndexPattern::random, {}, 128));
    for (auto [H, T] : {std::pair{32, 150}, std::pair{32, 200}, std::pair{64, 150}, std::pair{64, 200}, std::pair{128, 80}, std::pair{128, 100}})
      v.push_back(make("H" + std::to_string(H) + "-T" + std::to_string(T) + "-runs", T, IndexPattern::runs, {}, H));
  } else if (name == "past-waves") {
    // Past two or more whole waves of one-token groups (264 tokens at 32 and 64 heads, 132 at 128
    // on an H100): where lead tokens, 2-token groups and the union pass take over from each other
    // (docs/perf.md runs 473-481). Each T just past whole waves, by a short and a long tail, and
    // where the 2-token groups' waves are full; full random lists and mixed lengths.
    for (int T : {264, 265, 300, 350, 400, 450, 529, 600, 661, 800, 1057})
      v.push_back(make("H32-T" + std::to_string(T) + "-random", T, IndexPattern::random, {}, 32));
    for (int T : {265, 350, 661, 800, 925}) v.push_back(make("H64-T" + std::to_string(T) + "-random", T, IndexPattern::random, {}, 64));
    for (int T : {133, 200, 331, 500}) v.push_back(make("H128-T" + std::to_string(T) + "-random", T, IndexPattern::random, {}, 128));
    for (auto [H, T] : {std::pair{32, 300}, std::pair{32, 450}, std::pair{64, 300}, std::pair{128, 350}})
      v.push_back(make("H" + std::to_string(H) + "-T" + std::to_string(T) + "-runs", T, IndexPattern::runs, {}, H));
  } else if (name == "shapes") {
    // 40 decode shapes no one picked: heads, tokens (log-uniform, T x H <= 2^14), topk and the
    // pattern drawn from a fixed seed, so that the ratio to the floor is seen away from the
    // shapes the planner was tuned on. `sequences` gives each token an 8192-row span of its own.
    workload::Rng rng(20261127);
    for (int i = 0; i < 40; ++i) {
      const int H = workload::pick(rng, {16, 16, 32, 64, 128});
      const int T = workload::log_uniform(rng, 1, (1 << 14) / H);
      const int topk = workload::pick(rng, {512, 1024, 1500, 2048, 2048, 2048});
      const IndexPattern pattern = workload::pick(rng, {IndexPattern::random, IndexPattern::sequences, IndexPattern::runs});
      v.push_back(make(shape_name(H, T, topk, workload::to_string(pattern)), T, pattern, {}, H, topk));
    }
  } else if (name == "sweep") {
    // Decode T from 1 to 2^13 / H at each head count, random lists of 512 and 2048: time should
    // not fall as T grows, and dsa-bench lists the cases where it does ("cliffs"). Fast with
    // --kernel-only. The T grid holds the points just past half and whole waves of an H100's and
    // an H200's 132 SMs at every head count.
    for (int H : {16, 32, 64, 128})
      for (int topk : {512, 2048})
        for (int T : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 33, 36, 40, 48, 56, 64, 66, 67, 72, 80, 96, 112, 128, 132, 133, 150,
                      176, 200, 256, 264, 265, 300, 400, 512})
          if (T * H <= 8192)
            v.push_back(make("sweep-H" + std::to_string(H) + "-T" + std::to_string(T) + "-k" + std::to_string(topk), T,
                             IndexPattern::random, {}, H, topk));
  } else if (name == "short-lists") {
    // Decode calls of short lists and small T at every head count: where split-K's short-split
    // rules and the 64 / 128-head line between split-K and shared rows lie (docs/perf.md runs
    // 592-605): one-tile splits past one CTA per SM, lists of 64 whole, bf16 shared rows from
    // 2^14 pairs below 32 head blocks; and the half-wave lead with lists of 512, whose limit was
    // a trade between random lists and mixed lengths.
    const auto add = [&](int H, int T, int topk, IndexPattern pattern, std::vector<int> valid = {}) {
      v.push_back(make(shape_name(H, T, topk, valid.empty() ? workload::to_string(pattern) : "valid" + std::to_string(valid[0])),
                       T, pattern, valid, H, topk));
    };
    for (auto [H, T] : {std::pair{16, 1}, std::pair{16, 66}, std::pair{16, 67}, std::pair{16, 132}, std::pair{128, 8}, std::pair{128, 16}})
      add(H, T, 64, IndexPattern::random);
    for (int T : {1, 33, 80}) add(16, T, 128, IndexPattern::random);
    for (auto [H, T] : {std::pair{16, 5}, std::pair{16, 8}, std::pair{32, 3}, std::pair{32, 4}, std::pair{64, 2}, std::pair{128, 1}})
      add(H, T, 1024, IndexPattern::random);
    for (auto [H, T] : {std::pair{16, 3}, std::pair{16, 4}, std::pair{32, 2}}) add(H, T, 2048, IndexPattern::runs);
    for (auto [H, T] : {std::pair{16, 12}, std::pair{16, 16}, std::pair{16, 150}, std::pair{32, 80}, std::pair{64, 3}, std::pair{64, 4},
                        std::pair{64, 6}, std::pair{64, 7}, std::pair{64, 8}, std::pair{128, 2}, std::pair{128, 3}})
      add(H, T, 512, IndexPattern::random);
    for (auto [H, T] : {std::pair{16, 150}, std::pair{32, 70}, std::pair{64, 4}, std::pair{64, 6}, std::pair{128, 2}})
      add(H, T, 512, IndexPattern::runs);
    add(64, 4, 512, IndexPattern::runs, {2});
    add(64, 3, 1024, IndexPattern::random);
    add(64, 3, 1024, IndexPattern::runs);
    for (auto [H, T] : {std::pair{64, 7}, std::pair{64, 10}, std::pair{128, 4}, std::pair{128, 6}}) add(H, T, 300, IndexPattern::random);
    // Runs 600-603: short lists past one CTA per SM (lists of <= 4 tiles whole or in one-tile
    // splits; lists of <= 512 in splits of >= 4 tiles or as many as fit one CTA per SM).
    for (auto [H, T] : {std::pair{16, 34}, std::pair{16, 50}, std::pair{16, 66}, std::pair{16, 100}, std::pair{16, 132}, std::pair{32, 17},
                        std::pair{32, 33}, std::pair{32, 50}, std::pair{32, 66}, std::pair{64, 9}, std::pair{64, 16}, std::pair{64, 33},
                        std::pair{128, 5}, std::pair{128, 8}, std::pair{128, 16}})
      add(H, T, 128, IndexPattern::random);
    for (int T : {50, 100}) add(16, T, 128, IndexPattern::runs);
    add(16, 66, 128, IndexPattern::random, {20});
    for (int T : {45, 66, 90, 132}) add(16, T, 96, IndexPattern::random);
    for (int T : {45, 66, 89, 110}) add(16, T, 192, IndexPattern::random);
    for (auto [H, T] : {std::pair{16, 34}, std::pair{16, 40}, std::pair{16, 45}, std::pair{16, 50}, std::pair{16, 67}, std::pair{16, 89},
                        std::pair{32, 20}, std::pair{32, 33}})
      add(H, T, 256, IndexPattern::random);
    for (auto [H, T] : {std::pair{16, 27}, std::pair{16, 34}, std::pair{16, 40}, std::pair{16, 45}, std::pair{16, 55}, std::pair{16, 66},
                        std::pair{32, 14}, std::pair{32, 20}, std::pair{32, 25}, std::pair{32, 33}, std::pair{64, 12}, std::pair{128, 8}})
      add(H, T, 300, IndexPattern::random);
    for (int T : {30, 50}) add(16, T, 384, IndexPattern::random);
    for (auto [H, T] : {std::pair{16, 17}, std::pair{16, 20}, std::pair{16, 24}, std::pair{16, 33}, std::pair{16, 40}, std::pair{16, 44},
                        std::pair{32, 9}, std::pair{32, 12}, std::pair{32, 16}, std::pair{32, 22}, std::pair{64, 5}, std::pair{64, 10},
                        std::pair{128, 5}})
      add(H, T, 512, IndexPattern::random);
    for (auto [H, T] : {std::pair{16, 24}, std::pair{16, 40}, std::pair{32, 12}}) add(H, T, 512, IndexPattern::runs);
    add(16, 8, 2048, IndexPattern::runs);
    // Runs 604-605: lists of 512-1023 at 64 / 128 heads around the line where split-K can no
    // longer split every token in two (fp8 takes shared rows past it).
    for (int T : {33, 34, 36, 40, 44, 48, 56, 63, 64}) add(64, T, 512, IndexPattern::random);
    for (int T : {40, 56}) add(64, T, 512, IndexPattern::runs);
    add(64, 40, 512, IndexPattern::runs, {2});
    for (int T : {40, 56}) add(64, T, 768, IndexPattern::random);
    for (int T : {16, 17, 20, 24, 28, 31}) add(128, T, 512, IndexPattern::random);
    add(128, 24, 512, IndexPattern::runs);
    add(128, 20, 768, IndexPattern::random);
    // Lists of 1024 / 2048 past one CTA per SM (two-tile splits against splits that fit one CTA
    // per SM: runs 594, 611-612); the sweep holds random lists of 2048 at these T.
    for (auto [H, T] : {std::pair{16, 9}, std::pair{16, 12}, std::pair{16, 16}, std::pair{16, 20}, std::pair{16, 24}, std::pair{32, 5},
                        std::pair{32, 8}, std::pair{32, 12}, std::pair{64, 6}, std::pair{128, 2}, std::pair{128, 3}})
      add(H, T, 1024, IndexPattern::random);
    for (int T : {12, 20}) add(16, T, 1024, IndexPattern::runs);
    for (auto [H, T] : {std::pair{16, 5}, std::pair{16, 6}, std::pair{16, 12}, std::pair{32, 3}, std::pair{32, 6}, std::pair{64, 2},
                        std::pair{128, 1}})
      add(H, T, 2048, IndexPattern::runs);
    for (auto [H, T] : {std::pair{16, 6}, std::pair{32, 4}, std::pair{128, 1}}) add(H, T, 2048, IndexPattern::sequences);
  } else if (name == "serving") {
    // What a TP-8 server's decode step asks of one GPU (16 heads, lists of 2048): a batch of
    // separate requests, each over its own 8192-row span, from 1 to 1024 tokens; then with MTP,
    // a request's token and its draft (2 tokens per request, sharing ~1/4 of their rows). The
    // floors beside each case say how far every batch size is from its memory traffic.
    for (int T : {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024})
      v.push_back(make(shape_name(16, T, 2048, "sequences"), T, IndexPattern::sequences));
    for (int T : {2, 8, 32, 64, 128, 256}) {
      v.push_back(make("mtp2-T" + std::to_string(T), T, IndexPattern::sequences));
      v.back().indices.tokens_per_sequence = 2;
    }
  } else {
    throw Error("suite: unknown '" + name + "'");
  }
  return v;
}

BenchCase named_case(const std::string& name) {
  static const std::regex kShape(R"(H([0-9]{1,3})-T([0-9]{1,7})-k([0-9]{1,7})-([a-z_]+))");
  std::smatch m;
  if (!std::regex_match(name, m, kShape))
    throw Error("shape: '" + name + "' is not H<heads>-T<tokens>-k<topk>-<pattern> (e.g. H16-T8-k2048-runs)");
  const int heads = std::stoi(m[1]), T = std::stoi(m[2]), topk = std::stoi(m[3]);
  if (heads != 16 && heads != 32 && heads != 64 && heads != 128)
    throw Error("shape '" + name + "': heads must be 16, 32, 64 or 128, got " + std::to_string(heads));
  if (T < 1 || T > (1 << 20)) throw Error("shape '" + name + "': tokens must be in [1, 2^20], got " + std::to_string(T));
  if (topk < 1 || topk > (1 << 20)) throw Error("shape '" + name + "': topk must be in [1, 2^20], got " + std::to_string(topk));
  return make(name, T, workload::parse_pattern(m[4]), {}, heads, topk);
}

}  // namespace dsa::bench
