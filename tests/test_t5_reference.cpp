// The CPU reference of T5 bucketing against published HuggingFace bucket tables and docs/t5.md's lists.
#include <gtest/gtest.h>

#include <relpos/relpos.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "support/test_data.hpp"

using namespace relpos;
using relpos::test::data_lines;

namespace {

T5Params config(const std::string& nb, const std::string& md, const std::string& dir) {
  T5Params p;
  p.num_buckets = static_cast<std::uint32_t>(std::stoul(nb));
  p.max_distance = static_cast<std::uint32_t>(std::stoul(md));
  p.bidirectional = dir == "bi" || dir == "1";
  return p;
}

}  // namespace

TEST(T5Reference, SeedTables) {
  auto lines = data_lines("t5_seed_tables.txt");
  int tables = 0;
  for (std::size_t l = 0; l < lines.size();) {
    const auto& h = lines[l];
    ASSERT_EQ(h[0], "table");
    T5Params p = config(h[4], h[5], h[6]);
    p.queries = static_cast<std::uint32_t>(std::stoul(h[2]));
    p.keys = static_cast<std::uint32_t>(std::stoul(h[3]));
    auto got = t5_buckets_reference(p);
    for (std::uint32_t i = 0; i < p.queries; ++i)
      for (std::uint32_t j = 0; j < p.keys; ++j)
        EXPECT_EQ(got[i * p.keys + j], std::stoi(lines[l + 1 + i][j])) << h[1] << " at i=" << i << " j=" << j;
    l += 1 + p.queries;
    ++tables;
  }
  EXPECT_EQ(tables, 3);
}

TEST(T5Reference, SaturationRangesAndKnifeEdges) {
  int checked = 0;
  for (const auto& w : data_lines("t5_buckets.txt")) {
    if (w[0] == "range") {
      T5Params p = config(w[1], w[2], w[3]);
      const std::int64_t first = w[4] == "*" ? -10'000'000 : std::stoll(w[4]);
      const std::int64_t last = w[5] == "*" ? 10'000'000 : std::stoll(w[5]);
      auto expect_at = [&](std::int64_t rp) {
        const std::int64_t n = rp < 0 ? -rp : rp;
        const std::int64_t want = w[6] == "*exact" ? n : w[6] == "*exact16" ? 16 + n : std::stoll(w[6]);
        ASSERT_EQ(t5_bucket(rp, p), want) << "rp=" << rp << " line: range " << w[1] << " " << w[2] << " " << w[3];
        ++checked;
      };
      for (std::int64_t rp = first; rp <= last; rp += (last - first > 100000 ? 997 : 1)) expect_at(rp);
      expect_at(last);
    } else {
      ASSERT_EQ(w[0], "point");
      T5Params p = config(w[1], w[2], w[3]);
      p.log = w[4] == "flax" ? T5Log::FlaxEps : T5Log::HuggingFace;
      EXPECT_EQ(t5_bucket(std::stoll(w[5]), p), std::stoll(w[6])) << "point " << w[1] << " " << w[2] << " " << w[3] << " "
                                                                   << w[4] << " rp=" << w[5];
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

// The thresholds the GPU decides buckets with reproduce the reference bucket for every distance.
TEST(T5Reference, ThresholdsReproduceEveryBucket) {
  struct Cfg { std::uint32_t nb, md; bool bi; T5Log log; };
  std::vector<Cfg> cfgs = {{32, 128, true, T5Log::HuggingFace}, {32, 128, false, T5Log::HuggingFace},
                           {64, 50, false, T5Log::HuggingFace}, {128, 100, false, T5Log::HuggingFace},
                           {20, 1000, false, T5Log::HuggingFace}, {48, 81, false, T5Log::HuggingFace},
                           {48, 81, false, T5Log::FlaxEps}, {6, 20, false, T5Log::HuggingFace},
                           {7, 9, true, T5Log::HuggingFace}, {4, 3, true, T5Log::FlaxEps},
                           {2, 2, false, T5Log::HuggingFace}, {33, 4096, true, T5Log::FlaxEps},
                           {320, 100000, false, T5Log::HuggingFace}};
  for (const auto& c : cfgs) {
    T5Params p;
    p.num_buckets = c.nb;
    p.max_distance = c.md;
    p.bidirectional = c.bi;
    p.log = c.log;
    const auto thr = t5_bucket_thresholds(p);
    ASSERT_TRUE(std::is_sorted(thr.begin(), thr.end()));
    const std::int64_t me = p.max_exact(), half = c.bi ? c.nb / 2 : 0;
    auto from_thresholds = [&](std::int64_t rp) {
      std::int64_t ret = (c.bi && rp > 0) ? half : 0;
      std::int64_t n = c.bi ? std::llabs(rp) : std::max<std::int64_t>(-rp, 0);
      if (n < me) return ret + n;
      return ret + me + (std::upper_bound(thr.begin(), thr.end(), static_cast<std::uint64_t>(n)) - thr.begin());
    };
    for (std::int64_t rp = -3 * std::int64_t{c.md} - 100; rp <= 3 * std::int64_t{c.md} + 100; ++rp)
      ASSERT_EQ(from_thresholds(rp), t5_bucket(rp, p)) << "nb=" << c.nb << " md=" << c.md << " rp=" << rp;
    std::mt19937 rng(c.nb);
    std::uniform_int_distribution<std::int64_t> far(-2'000'000'000, 2'000'000'000);
    for (int k = 0; k < 2000; ++k) {
      std::int64_t rp = far(rng);
      ASSERT_EQ(from_thresholds(rp), t5_bucket(rp, p)) << "nb=" << c.nb << " md=" << c.md << " rp=" << rp;
    }
  }
}

TEST(T5Reference, QueryOffsetShiftsRelativePositions) {
  T5Params p;
  p.queries = 3;
  p.keys = 10;
  p.bidirectional = false;
  p.query_offset = 7;  // last query aligned with the last key
  auto b = t5_buckets_reference(p);
  for (std::uint32_t i = 0; i < 3; ++i)
    for (std::uint32_t j = 0; j < 10; ++j) EXPECT_EQ(b[i * 10 + j], t5_bucket(std::int64_t(j) - (i + 7), p));
  EXPECT_EQ(b[2 * 10 + 9], 0);  // rp = 0
  EXPECT_EQ(b[0 * 10 + 0], 7);  // rp = -7, exact bucket
}

TEST(T5Reference, BiasGathersTableWithScale) {
  T5Params p;
  p.num_buckets = 6;
  p.max_distance = 20;
  p.bidirectional = false;
  p.queries = 14;
  p.keys = 14;
  p.heads = 4;
  p.scale = 0.5f;
  std::vector<float> table(6 * 4);
  for (std::size_t k = 0; k < table.size(); ++k) table[k] = static_cast<float>(k) * 1.25f - 3.0f;
  auto bias = t5_bias_reference(p, table);
  auto buckets = t5_buckets_reference(p);
  for (std::uint32_t h = 0; h < 4; ++h)
    for (std::size_t e = 0; e < 14 * 14; ++e) EXPECT_EQ(bias[h * 196 + e], 0.5f * table[buckets[e] * 4 + h]);
  std::vector<float> logits(2 * 4 * 196, 1.0f);
  T5Params batched = p;
  batched.batch = 2;
  t5_bias_add_reference(batched, table, logits);
  for (std::size_t e = 0; e < bias.size(); ++e) {
    EXPECT_EQ(logits[e], 1.0f + bias[e]);
    EXPECT_EQ(logits[bias.size() + e], 1.0f + bias[e]);
  }
}

TEST(T5Reference, InvalidParametersAreRejected) {
  auto expect_invalid = [](T5Params p, const std::string& word) {
    try {
      p.validate();
      ADD_FAILURE() << "expected InvalidArgument mentioning " << word;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  T5Params ok;
  ok.queries = ok.keys = 4;
  EXPECT_NO_THROW(ok.validate());
  T5Params p = ok;
  p.num_buckets = 3;
  expect_invalid(p, "num_buckets");
  p = ok;
  p.bidirectional = false;
  p.num_buckets = 1;
  expect_invalid(p, "num_buckets");
  p = ok;
  p.max_distance = 8;  // max_exact = 8
  expect_invalid(p, "max_distance");
  p = ok;
  p.queries = 0;
  expect_invalid(p, "queries");
  p = ok;
  p.keys = 0;
  expect_invalid(p, "keys");
  p = ok;
  p.query_offset = 3'000'000'000ll;
  expect_invalid(p, "query_offset");
  p = ok;
  p.batch = 1u << 31;
  expect_invalid(p, "batch * heads * queries");
  p = ok;
  p.scale = NAN;
  expect_invalid(p, "scale");
  p = ok;
  p.num_buckets = 4'000'000'000u;  // bucket 2^31 and above would not fit the int32 buckets
  p.max_distance = 4'000'000'001u;
  expect_invalid(p, "num_buckets = 4000000000: must be <= 2^31");
  std::vector<float> table(5);
  EXPECT_THROW(t5_bias_reference(ok, table), InvalidArgument);
}

// The thresholds a window needs are those its distances cross: however many buckets there are and
// however far the window sits, the list (and the bisection work) grows with the window, not with
// num_buckets, max_distance or the offset.
TEST(T5Reference, WindowThresholdsFollowTheWindow) {
  T5Params p;
  p.num_buckets = 100'000'000;
  p.max_distance = 200'000'000;
  p.queries = 4;
  p.keys = 6;
  p.query_offset = 1;
  EXPECT_EQ(p.distances().first, 0u);  // rp in [-4, 4]
  EXPECT_EQ(p.distances().last, 4u);
  EXPECT_TRUE(t5_window_thresholds(p).thresholds.empty());
  p.bidirectional = false;
  p.query_offset = -10;  // every key ahead of every query: causal distances are all 0
  EXPECT_EQ(p.distances().first, 0u);
  EXPECT_EQ(p.distances().last, 0u);
  p.bidirectional = true;
  EXPECT_EQ(p.distances().first, 7u);  // rp in [7, 15]
  EXPECT_EQ(p.distances().last, 15u);

  // Millions of buckets, far past max_exact or across it: a window's thresholds reproduce every
  // bucket it holds. The last case's flax eps puts max_exact itself millions of levels up.
  struct Cfg { std::uint32_t nb, md; bool bi; T5Log log; std::int64_t off; };
  for (const Cfg& c : {Cfg{2'000'000'000, 4'000'000'000u, true, T5Log::HuggingFace, 2'000'000'000},
                       Cfg{2'000'000'000, 4'000'000'000u, false, T5Log::FlaxEps, 2'000'000'000},
                       Cfg{20'000'000, 10'000'001, false, T5Log::FlaxEps, 10'001'000}}) {
    T5Params q;
    q.num_buckets = c.nb;
    q.max_distance = c.md;
    q.bidirectional = c.bi;
    q.log = c.log;
    q.queries = 7;
    q.keys = 3000;
    q.query_offset = c.off;
    SCOPED_TRACE("nb=" + std::to_string(c.nb) + " off=" + std::to_string(c.off));
    const auto w = t5_window_thresholds(q);
    EXPECT_LE(w.thresholds.size(), q.distances().last - q.distances().first);
    const std::int64_t me = q.max_exact();
    for (std::int64_t n = static_cast<std::int64_t>(q.distances().first); n <= static_cast<std::int64_t>(q.distances().last); ++n) {
      if (n < me) continue;  // exact: no thresholds involved
      const auto counted = std::upper_bound(w.thresholds.begin(), w.thresholds.end(), static_cast<std::uint64_t>(n)) - w.thresholds.begin();
      ASSERT_EQ(me + w.base + counted, t5_bucket(-n, q)) << "n=" << n;
    }
  }
  T5Params flax;
  flax.num_buckets = 20'000'000;
  flax.max_distance = 10'000'001;
  flax.bidirectional = false;
  flax.log = T5Log::FlaxEps;
  EXPECT_GT(t5_bucket(-10'000'000, flax), 10'000'000);  // the case above does test a base beyond max_exact
}

// A plan decides each step's window from the envelope's level thresholds (a search) instead of
// bisecting the bucket formula: both must give the same base and list for every window, the flax
// eps (max_exact several levels up) and windows wholly below, across and far above max_exact.
TEST(T5Reference, WindowThresholdsFromTheLevelsAreTheSame) {
  std::mt19937 rng(12);
  auto pick = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
  for (int n = 0; n < 200; ++n) {
    T5Params p;
    p.bidirectional = n % 2 == 0;
    p.log = n % 3 == 0 ? T5Log::FlaxEps : T5Log::HuggingFace;
    p.num_buckets = static_cast<std::uint32_t>(pick(p.bidirectional ? 4 : 2, 4096));
    p.max_distance = static_cast<std::uint32_t>(p.max_exact() + pick(1, n % 5 == 0 ? 2'000'000'000 : 3000));
    const std::vector<std::uint32_t> levels = t5_bucket_thresholds(p);
    for (int w = 0; w < 6; ++w) {
      p.queries = static_cast<std::uint32_t>(pick(1, 64));
      p.keys = static_cast<std::uint32_t>(pick(1, 3000));
      p.query_offset = pick(0, 3) == 0 ? pick(-6000, 6000) : pick(-2'000'000'000, 2'000'000'000);
      p.validate();
      const T5WindowThresholds a = t5_window_thresholds(p), b = t5_window_thresholds(p, levels);
      ASSERT_EQ(a.base, b.base) << "case " << n << " window " << w;
      ASSERT_EQ(a.thresholds, b.thresholds) << "case " << n << " window " << w;
    }
  }
}
