// How the GPU kernel class cuts a row's keys into splits (src/ops/attention_launch.hpp), checked
// without a GPU for shapes far larger than the GPU tests run: every split starts on a key tile
// (prefill) or a decoding step, so that a paged tile or step lies in one block; the splits cover
// the keys; and a split stays within kMaxKeysPerSplit and the kernel's loop bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string_view>

#include "ops/attention_launch.hpp"
#include "ops/attention_record.hpp"
#include "relpos_contract/attention.h"
#include "relpos_push/loop_bound.h"
#include "relpos/attention.hpp"
#include "relpos/context.hpp"
#include "relpos/error.hpp"
#include "relpos/recorder.hpp"
#include "support/gpu_fixture.hpp"
#include "vk/dispatch.hpp"

using namespace relpos;
using namespace relpos::detail;

namespace {

// The value of specialisation constant `name` in a launch.
std::uint32_t constant(const AttentionLaunch& l, std::string_view name) {
  for (std::size_t k = 0; k < l.spec.declared().size(); ++k)
    if (l.spec.declared()[k].name == name) return l.spec.values()[k];
  ADD_FAILURE() << "no constant " << name;
  return 0;
}

// A GPU of this subgroup size and shared memory, 1024 lanes a workgroup, with or without subgroup
// shuffles.
DeviceLimits gpu_limits(std::uint32_t subgroup, std::uint32_t shared_bytes, bool shuffles = true) {
  DeviceLimits lim;
  lim.max_workgroup_invocations = 1024;
  lim.max_workgroup_size[0] = 1024;
  lim.max_shared_memory_bytes = shared_bytes;
  lim.subgroup_size = subgroup;
  lim.subgroup_shuffle = shuffles;
  return lim;
}

// The GPU class's tiles on such a device (with shuffles).
AttentionTiles gpu_tiles(std::uint32_t subgroup, std::uint32_t shared_bytes, std::uint32_t forced_lanes = 0) {
  return gpu_attention_tiles(gpu_limits(subgroup, shared_bytes), forced_lanes);
}

// The CPU class's tiles on lavapipe: 32 lanes of 4 query rows, subgroups of 8, 8 heads a decoding
// lane.
const AttentionTiles kCpuTiles{false, 32, 4, 8, 64, false, 0, 0, 8, 32, 32, 8};

// Limits to record a call against: 1024 lanes a workgroup, subgroups of 8 that shuffle, 32 KiB of
// shared memory, bindings of `range` bytes.
DeviceLimits recording_limits(std::uint64_t range) {
  DeviceLimits lim = gpu_limits(8, 32768);
  lim.max_workgroup_count[0] = 65535;
  lim.min_storage_buffer_offset_alignment = 16;
  lim.max_storage_buffer_range = range;
  return lim;
}

}  // namespace

TEST(AttentionSplits, SplitsStartOnATileOrStepCoverTheKeysAndStayInBounds) {
  int aligned = 0;
  for (const std::uint32_t subgroup : {8u, 16u, 32u, 64u})
    for (const std::uint32_t shared : {8192u, 32768u})
      for (const std::uint32_t queries : {1u, 5u, 64u})
        for (const std::uint32_t head_dim : {64u, 128u, 96u})
          for (const std::uint32_t keys : {1u, 7u, 100u, 1000u, 8191u, 8193u, 70001u, 200000u})
            for (const std::uint32_t key_splits : {0u, 3u, 7u, 30u})
              for (const std::uint32_t block_size : {0u, 16u, 256u}) {
                AttentionParams p{.batch = 2, .heads = 8, .kv_heads = 2, .queries = queries, .keys = keys, .head_dim = head_dim};
                p.key_splits = key_splits;
                if (block_size) {
                  p.paged.block_size = block_size;
                  p.paged.max_blocks = (keys + block_size - 1) / block_size;
                }
                SCOPED_TRACE(testing::Message() << "subgroup " << subgroup << " shared " << shared << " Q " << queries << " D "
                                                << head_dim << " K " << keys << " key_splits " << key_splits << " block " << block_size);
                const AttentionTiles tiles = gpu_tiles(subgroup, shared);
                std::uint32_t S = 0;
                try {
                  S = attention_splits(p, tiles);
                } catch (const InvalidArgument&) {
                  continue;  // an explicit key_splits that leaves a split too long: refused by name
                }
                const AttentionLaunch l = attention_launch(p, tiles, S);
                // The decoding kernel's step (where it decodes), else attention_tiled's tile (its rows
                // grouped-query heads where the decoding kernel cannot hold them all).
                const AttentionDecodeShape d = queries == 1 ? attention_decode_shape(tiles, p) : AttentionDecodeShape{};
                const std::uint32_t row_heads = attention_tiled_row_heads(tiles, p);
                const std::uint32_t unit = d.lanes && row_heads == 1 ? RELPOS_ATTN_DECODE_STEP_KEYS(d.lanes / d.lanes_per_key, d.keys)
                                                                     : attention_tiled_shape(tiles, p, row_heads).key_tile;
                ASSERT_TRUE(std::has_single_bit(unit));
                ASSERT_EQ(l.split_align, unit);
                const std::uint32_t split_len = split_length(keys, S, l.split_align);
                ASSERT_EQ(split_len % l.split_align, 0u);
                ASSERT_GE(std::uint64_t{split_len} * S, keys);
                ASSERT_LE(split_len, AttentionParams::kMaxKeysPerSplit);
                ASSERT_LE(split_len, attention_tiled_max_split_keys(tiles, p));
                // A slab of heads that a binding chunk would cut goes a head at a time, maybe by
                // another kernel: its splits fit too.
                const AttentionLaunch alone = attention_launch(p, tiles, S, false);
                ASSERT_LE(split_length(keys, S, alone.split_align), attention_tiled_max_split_keys(tiles, p));
                aligned += l.split_align > 1;
              }
  EXPECT_GT(aligned, 0);  // the tiles and steps were aligned to, not only 1
}

// Decoding grouped-query heads, a workgroup takes the query heads of one kv head together (the
// group in the fewest slabs of up to 4, as even as they go) at every subgroup size and head size, so that a kv head's
// keys and values are read once per step for them rather than once per query head:
// attention_decode where its lanes hold them all, attention_tiled with the heads as its rows where
// they do not (subgroups of 8 at head_dim 128, as dg2 runs; head_dim 256).
TEST(AttentionSplits, DecodingReadsAKvHeadOnceForItsQueryHeads) {
  struct Heads {
    std::uint32_t heads, kv_heads, together;
  };
  int by_decode = 0, by_tiled = 0;
  for (const std::uint32_t subgroup : {8u, 16u, 32u, 64u})
    for (const std::uint32_t shared : {8192u, 32768u})
      for (const std::uint32_t head_dim : {64u, 80u, 96u, 128u, 256u})
        for (const std::uint32_t block_size : {0u, 16u, 256u})
          for (const Heads g : {Heads{8, 8, 1}, Heads{8, 4, 2}, Heads{8, 2, 4}, Heads{8, 1, 4}, Heads{6, 2, 3}, Heads{12, 2, 3}, Heads{32, 8, 4},
                                // groups that no slab of 2 to 4 divides: slabs of 4 and 3, of 3 and 2
                                Heads{14, 2, 4}, Heads{10, 2, 3}, Heads{7, 1, 4}}) {
            AttentionParams p{.batch = 2, .heads = g.heads, .kv_heads = g.kv_heads, .queries = 1, .keys = 4096, .head_dim = head_dim};
            if (block_size) {
              p.paged.block_size = block_size;
              p.paged.max_blocks = 4096 / block_size;
            }
            SCOPED_TRACE(testing::Message() << "subgroup " << subgroup << " shared " << shared << " D " << head_dim << " block "
                                            << block_size << " heads " << g.heads << "/" << g.kv_heads);
            const AttentionTiles tiles = gpu_tiles(subgroup, shared);
            const AttentionLaunch l = attention_launch(p, tiles, attention_splits(p, tiles));
            // With 8 KiB of shared memory, 4 rows of head_dim 256 do not fit: fewer heads then.
            if (shared < 32768) {
              EXPECT_LE(l.slab_heads, g.together);
              continue;
            }
            EXPECT_EQ(l.slab_heads, g.together);
            if (l.shader == ShaderId::attention_decode || l.shader == ShaderId::attention_decode_paged) {
              EXPECT_EQ(constant(l, "HEADS"), g.together);
              by_decode += g.together > 1;
            } else {
              EXPECT_EQ(constant(l, "BR"), g.together);
              EXPECT_EQ(constant(l, "ROWS_ARE_HEADS"), g.together > 1 ? 1u : 0u);
              by_tiled += g.together > 1;
            }
          }
  EXPECT_GT(by_decode, 0);
  EXPECT_GT(by_tiled, 0);
}

// The GPU class's merge takes 8 lanes a word (the merge tests run it on both classes).
TEST(AttentionSplits, GpuMergeSharesEachWordsPartsAmongLanes) {
  for (const std::uint32_t subgroup : {8u, 32u, 64u}) EXPECT_EQ(gpu_tiles(subgroup, 32768).merge_part_lanes, 8u);
}

// A decoding step waits on memory, so attention_decode takes as many keys a step as a lane's
// registers hold in flight, loading their values with them where that saves a round trip: a lane
// of each group holds at most 32 registers of a step's loads with one head, 24 with more (48 on
// NVIDIA) (its words of each key and, with VALUES_WITH_KEYS, of each value as loaded; Shaw's
// rel_keys and rel_values rows near the diagonal 4 more each) and 16 scores (32 on NVIDIA; a key's
// per head). Both forms are picked (each a path of the kernel).
TEST(AttentionSplits, DecodingStepsLoadAsManyKeysAsTheirRegistersHold) {
  const auto loaded = [](CacheFormat f, AttentionBias bias) -> std::uint32_t {
    return (f == CacheFormat::F32 ? 4 : f == CacheFormat::Q8_0 ? 3 : f == CacheFormat::FP8_E4M3 ? 1 : 2) + (bias == AttentionBias::Shaw ? 4 : 0);
  };
  int with_values = 0, after_weights = 0;
  // AMD's and Intel's compilers' bounds (the default), and NVIDIA's larger ones.
  for (const std::uint32_t vendor : {0u, kVendorNvidia})
    for (const std::uint32_t subgroup : {8u, 16u, 32u, 64u})
      for (const std::uint32_t head_dim : {64u, 96u, 128u})
        for (const CacheFormat f : {CacheFormat::F32, CacheFormat::F16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3})
          for (const AttentionBias bias : {AttentionBias::T5, AttentionBias::Shaw})
            for (const std::uint32_t kv_heads : {8u, 4u, 2u}) {
              AttentionParams p{.batch = 2, .heads = 8, .kv_heads = kv_heads, .queries = 1, .keys = 4096, .head_dim = head_dim, .bias = bias};
              p.cache_format = f;
              SCOPED_TRACE(testing::Message() << "vendor " << vendor << " subgroup " << subgroup << " D " << head_dim << " "
                                              << cache_format_name(f) << " " << attention_bias_info(bias).name << " 8/" << kv_heads);
              DeviceLimits lim = gpu_limits(subgroup, 32768);
              lim.vendor_id = vendor;
              const AttentionDecodeShape d = attention_decode_shape(gpu_attention_tiles(lim, 0), p);
              if (!d.lanes) continue;
              const bool nvidia = vendor == kVendorNvidia;
              const std::uint32_t words = (head_dim / 4 + d.lanes_per_key - 1) / d.lanes_per_key;
              const std::uint32_t budget = d.heads == 1 ? 32 : nvidia ? 48 : 24, scores = nvidia ? 32 : 16;
              const std::uint32_t word = loaded(f, bias);
              // (One key, values after the weights, whatever it takes: the least a step loads.)
              if (d.keys > 1 || d.values_with_keys) EXPECT_LE(d.keys * words * word * (1 + d.values_with_keys), budget);
              EXPECT_LE(d.keys * d.heads, scores);
              EXPECT_LE(d.keys, 8u);
              // No choice in those bounds takes fewer round trips a key (values with the keys: one a
              // step, else two); of two that tie, the values with the keys.
              for (std::uint32_t k = 1; k <= 8 && k * d.heads <= scores; k *= 2)
                for (std::uint32_t v = 0; v <= 1; ++v)
                  if (k * words * word * (1 + v) <= budget) {
                    EXPECT_GE((2 - v) * d.keys, (2 - d.values_with_keys) * k) << k << " keys, values " << v;
                    if ((2 - v) * d.keys == (2 - d.values_with_keys) * k) EXPECT_GE(d.values_with_keys, v) << k << " keys";
                  }
              (d.values_with_keys ? with_values : after_weights)++;
            }
  EXPECT_GT(with_values, 0);
  EXPECT_GT(after_weights, 0);
  // The paged decode bench's step (subgroups of 32, 8/2 heads, head_dim 128): 4 heads of a word a
  // lane; 4 keys a step with their values over f16 and q8_0 caches, and on NVIDIA 8 (an H100:
  // 0.94x and 0.90x the time of 4). Subgroups of 8 at head_dim 128 (4 words a lane), one head, Shaw
  // over an f32 cache: a key with its value and their rel_keys and rel_values rows would take 64
  // registers, so one key a step, its value after the weights.
  AttentionParams p{.batch = 8, .heads = 8, .kv_heads = 2, .queries = 1, .keys = 16384, .head_dim = 128, .dtype = DType::F16};
  DeviceLimits h100 = gpu_limits(32, 49152);
  h100.vendor_id = kVendorNvidia;
  for (const CacheFormat f : {CacheFormat::F16, CacheFormat::Q8_0}) {
    p.cache_format = f;
    AttentionDecodeShape d = attention_decode_shape(gpu_tiles(32, 49152), p);
    EXPECT_EQ(d.heads, 4u);
    EXPECT_EQ(d.keys, 4u);
    EXPECT_EQ(d.values_with_keys, 1u);
    d = attention_decode_shape(gpu_attention_tiles(h100, 0), p);
    EXPECT_EQ(d.heads, 4u);
    EXPECT_EQ(d.keys, 8u);
    EXPECT_EQ(d.values_with_keys, 1u);
  }
  AttentionDecodeShape d;
  p.cache_format.reset();
  p.heads = p.kv_heads = 8;
  p.dtype = DType::F32;
  p.bias = AttentionBias::Shaw;
  d = attention_decode_shape(gpu_tiles(8, 32768), p);
  EXPECT_EQ(d.heads, 1u);
  EXPECT_EQ(d.keys, 1u);
  EXPECT_EQ(d.values_with_keys, 0u);
}

// Bindings too small for the whole call cut it into chunks of (batch, head) rows. With 7 query heads
// a kv head (slabs of 4 and 3) the chunks start at groups, so the slabs stay: the dispatches count
// them; a cut inside a group would make the heads go one by one.
TEST(AttentionSplits, ChunksOfRowsKeepSlabsThatDoNotDivideTheGroup) {
  const DeviceLimits lim = recording_limits(200 * 1024);  // one kv head's keys and values of 300 keys (150 KiB)
  const AttentionTiles tiles = gpu_attention_tiles(lim, 64);
  AttentionParams p{.batch = 2, .heads = 14, .kv_heads = 2, .queries = 1, .keys = 300, .head_dim = 128, .query_offset = 299, .causal = true};
  const AttentionSchedule s = attention_schedule(lim, p, tiles, p.keys);
  EXPECT_EQ(s.chunks, (std::vector<std::uint64_t>{0, 7, 14, 21, 28}));
  EXPECT_EQ(s.launch.slab_heads, 4u);
  for (std::size_t c = 0; c + 1 < s.chunks.size(); ++c) {
    EXPECT_TRUE(attention_slab_starts(p, s.launch.slab_heads, s.chunks[c]));
    EXPECT_EQ(attention_slabs(p, s.launch.slab_heads, s.chunks[c], s.chunks[c + 1]), 2u);
  }
  EXPECT_FALSE(attention_slab_starts(p, s.launch.slab_heads, 4));  // inside a group: not a slab's start for a dispatch
  EXPECT_EQ(attention_slabs(p, s.launch.slab_heads, 0, 28), 8u);
}

// A decoding workgroup of fewer lanes than a kv head's query heads (lanes forced, as tests do)
// takes only as many heads as it has rows: every head of every slab is computed.
TEST(AttentionSplits, DecodingTakesNoMoreHeadsThanItsWorkgroupHasRows) {
  for (const std::uint32_t lanes : {1u, 2u, 3u, 4u, 8u})
    for (const std::uint32_t head_dim : {64u, 128u, 256u}) {
      SCOPED_TRACE(testing::Message() << "lanes " << lanes << " D " << head_dim);
      AttentionParams p{.batch = 2, .heads = 8, .kv_heads = 2, .queries = 1, .keys = 4096, .head_dim = head_dim};
      const AttentionTiles tiles = gpu_tiles(8, 32768, lanes);
      const AttentionLaunch l = attention_launch(p, tiles, attention_splits(p, tiles));
      if (l.shader == ShaderId::attention_decode || l.shader == ShaderId::attention_decode_paged) {
        EXPECT_EQ(constant(l, "HEADS"), l.slab_heads);
      } else {
        EXPECT_LE(l.slab_heads, lanes);
        if (l.slab_heads > 1) EXPECT_EQ(constant(l, "BR"), l.slab_heads);
      }
    }
}

// The CPU class decoding: its lanes take a dispatch's items (a split of one slab each) as they come
// free, up to push.rounds of them, so that one lane's loops over all its items stay within
// RELPOS_MAX_LOOP_ITERATIONS, counted as lavapipe counts them, down to forced splits of 1 to 3
// keys; a lane takes one at least. Other launches take one item a lane.
TEST(AttentionSplits, DecodingLanesTakeItemsWithinTheLoopBound) {
  const AttentionTiles& cpu = kCpuTiles;
  int several = 0;
  for (const std::uint32_t keys : {1u, 129u, 4096u, 16384u, 65536u, 200000u})
    for (const std::uint32_t batch : {1u, 8u, 300u})
      for (const std::uint32_t forced : {0u, 1u, 3u})  // forced splits of 1 to 3 keys
        for (const bool packed : {false, true}) {
          AttentionParams p{.batch = batch, .heads = 8, .kv_heads = 2, .queries = 1, .keys = keys, .head_dim = 128};
          if (forced) p.key_splits = std::min(keys, std::min<std::uint32_t>(AttentionMergeParams::kMaxParts, (keys + forced - 1) / forced));
          if (forced && std::uint64_t{p.key_splits} * AttentionParams::kMaxKeysPerSplit < keys) continue;
          if (packed) p.total_queries = batch;
          SCOPED_TRACE(testing::Message() << "keys " << keys << " batch " << batch << " forced " << forced << (packed ? " packed" : ""));
          const AttentionLaunch l = attention_launch(p, cpu, attention_splits(p, cpu));
          const push::AttentionPush pc = attention_push(p, l, false, keys);
          EXPECT_GE(pc.rounds, 1u);
          if (!l.lane_splits) {
            EXPECT_EQ(pc.rounds, 1u);
            continue;
          }
          // 2 passes over each key, 3 loop passes a block (its two over the keys, each with lavapipe's
          // extra pass, and its own), the extra passes of the block loop and the round, and a packed
          // call's loop over the earlier sequences (with its extra pass).
          const std::uint64_t blocks = (pc.split_len + 7) / 8;
          const std::uint64_t per_item = 2ull * pc.split_len + 3 * blocks + 2 + (packed ? batch + 1 : 0) + 1;
          EXPECT_EQ(per_item, attention_fused_item_iterations(p, pc.split_len, 8));
          EXPECT_LE(pc.rounds * per_item, RELPOS_MAX_LOOP_ITERATIONS);
          several += pc.rounds > 1;
        }
  EXPECT_GT(several, 0);
  // A plan's launch serves steps of more keys with its splits: their lanes take fewer rounds.
  const AttentionParams small{.heads = 8, .kv_heads = 2, .queries = 1, .keys = 4096, .head_dim = 128};
  AttentionParams large = small;
  large.keys = 200000;
  const AttentionLaunch few_keys = attention_launch(small, cpu, 32);
  const push::AttentionPush pc = attention_push(large, few_keys, false, large.keys);
  EXPECT_LE(pc.rounds * attention_fused_item_iterations(large, pc.split_len, 8), RELPOS_MAX_LOOP_ITERATIONS);
  EXPECT_LT(pc.rounds, attention_push(small, few_keys, false, small.keys).rounds);
  // Prefill takes one.
  const AttentionParams prefill{.heads = 8, .kv_heads = 2, .queries = 64, .keys = 4096, .head_dim = 128};
  const AttentionLaunch l = attention_launch(prefill, cpu, attention_splits(prefill, cpu));
  EXPECT_EQ(attention_push(prefill, l, false, 4096).rounds, 1u);
}

// Shaw on a CPU device: its interior buckets in slots of a power of two (up to kShawSlots), whose
// two loops over the buckets a decoding lane's rounds count; more buckets read rel_keys and
// rel_values per key as before.
TEST(AttentionSplits, ShawSlotsOnACpuDeviceAndTheirLoops) {
  const AttentionTiles& cpu = kCpuTiles;
  AttentionParams p{.batch = 8, .heads = 8, .kv_heads = 2, .queries = 1, .keys = 200000, .head_dim = 128, .bias = AttentionBias::Shaw};
  p.max_relative_position = 16;  // 31 buckets
  const AttentionLaunch l = attention_launch(p, cpu, attention_splits(p, cpu));
  ASSERT_TRUE(l.lane_splits);
  EXPECT_TRUE(l.shaw_slots);
  EXPECT_EQ(constant(l, "SHAW_SLOTS"), 32u);
  const push::AttentionPush pc = attention_push(p, l, false, p.keys);
  EXPECT_EQ(attention_fused_item_iterations(p, pc.split_len, 8, true), attention_fused_item_iterations(p, pc.split_len, 8) + 2 * 32);
  EXPECT_LE(pc.rounds * attention_fused_item_iterations(p, pc.split_len, 8, true), RELPOS_MAX_LOOP_ITERATIONS);
  p.max_relative_position = 32;  // 63 buckets: the most slots
  EXPECT_EQ(constant(attention_launch(p, cpu, attention_splits(p, cpu)), "SHAW_SLOTS"), kShawSlots);
  p.max_relative_position = 33;
  EXPECT_FALSE(attention_launch(p, cpu, attention_splits(p, cpu)).shaw_slots);
  p.bias = AttentionBias::None;
  EXPECT_EQ(constant(attention_launch(p, cpu, attention_splits(p, cpu)), "SHAW_SLOTS"), 0u);
}

// A packed call of more than kDecodedQueries queries on the CPU class: its sequences of up to that
// many decode in a launch of their own (lanes taking the key splits, as many as a decoding call's,
// one item for each of a sequence's last kDecodedQueries queries), the call's splits the larger of
// the two launches'. The GPU class: its sequences of up to kGpuDecodedQueries, through its decoding kernels (none
// where the decoding launch would be attention_tiled with query rows). Without packed queries, one
// launch.
TEST(AttentionSplits, PackedCallsDecodeTheirSequencesOfAFewQueriesInALaunchOfTheirOwn) {
  const DeviceLimits lim = recording_limits(1u << 30);
  const AttentionTiles& cpu = kCpuTiles;
  AttentionParams p{.batch = 8, .heads = 8, .kv_heads = 2, .queries = 256, .keys = 16384, .head_dim = 128, .dtype = DType::F16, .causal = true};
  p.paged = {.block_size = 16, .num_blocks = 8192, .max_blocks = 1024};
  p.total_queries = 263;
  const AttentionSchedule s = attention_schedule(lim, p, cpu, p.keys);
  ASSERT_TRUE(s.decoding.has_value());
  EXPECT_TRUE(s.decoding->lane_splits);
  EXPECT_EQ(constant(*s.decoding, "LANE_SPLITS"), 1u);
  EXPECT_EQ(s.decoding->slab_heads, 4u);  // the 4 query heads of a kv head together
  EXPECT_EQ(s.decoding->decoded_queries, kDecodedQueries);
  EXPECT_EQ(s.decoding->groups_per_bh, s.decoding->split_groups * kDecodedQueries);
  EXPECT_FALSE(s.launch.lane_splits);
  EXPECT_LT(s.launch.splits, s.decoding->splits);
  EXPECT_EQ(s.splits, s.decoding->splits);
  // The same call unpacked, or with one query, or on the GPU class: one launch.
  AttentionParams unpacked = p;
  unpacked.total_queries = 0;
  EXPECT_FALSE(attention_schedule(lim, unpacked, cpu, p.keys).decoding.has_value());
  AttentionParams one = p;
  one.queries = 1;
  one.total_queries = 8;
  EXPECT_FALSE(attention_schedule(lim, one, cpu, p.keys).decoding.has_value());
  for (const std::uint32_t subgroup : {8u, 32u}) {  // attention_tiled with heads as rows; attention_decode
    const AttentionSchedule g = attention_schedule(lim, p, gpu_tiles(subgroup, 32768), p.keys);
    ASSERT_TRUE(g.decoding.has_value());
    EXPECT_TRUE(g.decoding->decodes);
    EXPECT_EQ(g.decoding->decoded_queries, kGpuDecodedQueries);
    EXPECT_EQ(g.decoding->groups_per_bh, g.decoding->split_groups * kGpuDecodedQueries);
    EXPECT_EQ(g.decoding->shader, subgroup == 8 ? ShaderId::attention_tiled_shuffle_paged : ShaderId::attention_decode_paged);
    EXPECT_FALSE(g.launch.decodes);
    EXPECT_EQ(g.splits, g.decoding->splits);
  }
  // No subgroup shuffles (no attention_decode), and no grouped-query heads to take as rows: one query
  // takes attention_tiled's query rows, which cannot take a sequence's last query alone.
  const AttentionTiles plain = gpu_attention_tiles(gpu_limits(32, 32768, false), 0);
  AttentionParams mha = p;
  mha.kv_heads = mha.heads;
  EXPECT_TRUE(attention_schedule(lim, p, plain, p.keys).decoding.has_value());  // heads as rows
  EXPECT_FALSE(attention_schedule(lim, mha, plain, p.keys).decoding.has_value());
  EXPECT_TRUE(attention_schedule(lim, mha, gpu_tiles(32, 32768), p.keys).decoding.has_value());  // attention_decode
}

// A call of 2 to kDecodedQueries queries on the CPU class, packed or not, decodes them all in one
// launch: a lane takes one query of a slab of a kv head's query heads over one key split, as a
// decoding call's lanes do. One more query, unpacked: query rows. Few keys: query rows.
TEST(AttentionSplits, CallsOfAFewQueriesDecodeThemAll) {
  const DeviceLimits lim = recording_limits(1u << 30);
  const AttentionTiles& cpu = kCpuTiles;
  for (const bool packed : {false, true})
    for (const std::uint32_t queries : {2u, 7u, kDecodedQueries, kDecodedQueries + 1}) {
      SCOPED_TRACE(testing::Message() << queries << " queries" << (packed ? ", packed" : ""));
      AttentionParams p{.batch = 8, .heads = 8, .kv_heads = 2, .queries = queries, .keys = 16384, .head_dim = 128, .dtype = DType::F16};
      if (packed) {
        p.paged = {.block_size = 16, .num_blocks = 8192, .max_blocks = 1024};
        p.total_queries = 8 * queries;
      }
      AttentionParams one = p;
      one.queries = 1;
      one.total_queries = packed ? 8 : 0;
      const AttentionSchedule s = attention_schedule(lim, p, cpu, p.keys);
      if (queries > kDecodedQueries) {
        EXPECT_FALSE(s.launch.lane_splits);
        EXPECT_EQ(s.decoding.has_value(), packed);  // for the packed call's sequences of fewer
        continue;
      }
      EXPECT_FALSE(s.decoding.has_value());
      EXPECT_TRUE(s.launch.lane_splits);
      EXPECT_EQ(s.launch.slab_heads, 4u);
      EXPECT_EQ(s.launch.decoded_queries, queries);
      EXPECT_EQ(s.splits, attention_splits(one, cpu));
      EXPECT_EQ(s.launch.groups_per_bh, s.launch.split_groups * queries);
    }
  // The GPU class: calls of up to kGpuDecodedQueries through attention_decode (subgroups of 32) or
  // heads as rows (8); one more, or no kernel that decodes (no shuffles, no grouped-query heads):
  // query rows.
  for (const std::uint32_t subgroup : {8u, 32u})
    for (const std::uint32_t queries : {2u, kGpuDecodedQueries, kGpuDecodedQueries + 1}) {
      SCOPED_TRACE(testing::Message() << queries << " queries, subgroups of " << subgroup);
      const AttentionParams p{.batch = 8, .heads = 8, .kv_heads = 2, .queries = queries, .keys = 16384, .head_dim = 128, .dtype = DType::F16};
      const AttentionSchedule s = attention_schedule(lim, p, gpu_tiles(subgroup, 32768), p.keys);
      EXPECT_FALSE(s.decoding.has_value());
      EXPECT_EQ(s.launch.decodes, queries <= kGpuDecodedQueries);
      EXPECT_EQ(s.launch.decoded_queries, queries <= kGpuDecodedQueries ? queries : 1u);
      if (queries <= kGpuDecodedQueries) {
        EXPECT_EQ(s.launch.shader, subgroup == 8 ? ShaderId::attention_tiled_shuffle : ShaderId::attention_decode);
        EXPECT_EQ(s.launch.groups_per_bh, s.launch.split_groups * queries);
      }
    }
  {
    const AttentionParams mha{.batch = 8, .heads = 8, .kv_heads = 8, .queries = 2, .keys = 16384, .head_dim = 128};
    const AttentionSchedule s = attention_schedule(lim, mha, gpu_attention_tiles(gpu_limits(32, 32768, false), 0), mha.keys);
    EXPECT_FALSE(s.launch.decodes);
    EXPECT_EQ(s.launch.groups_per_bh, s.launch.split_groups);  // one tile of query rows a head
  }
  AttentionParams few_keys{.batch = 8, .heads = 8, .kv_heads = 2, .queries = 4, .keys = 200, .head_dim = 128};
  EXPECT_FALSE(attention_schedule(lim, few_keys, cpu, few_keys.keys).launch.lane_splits);
  few_keys.key_splits = 2;  // forced: the lanes take them
  EXPECT_TRUE(attention_schedule(lim, few_keys, cpu, few_keys.keys).launch.lane_splits);
  // The decoding launch's partial results stay within kDecodingPartialBytes: fewer splits (134 MB a
  // part here), or query rows where not even 2 fit.
  AttentionParams many{.batch = 2048, .heads = 8, .kv_heads = 2, .queries = 16, .keys = 16384, .head_dim = 128};
  const AttentionSchedule capped = attention_schedule(lim, many, cpu, many.keys);
  EXPECT_TRUE(capped.launch.lane_splits);
  EXPECT_EQ(capped.splits, 2u);
  many.batch = 4096;
  EXPECT_FALSE(attention_schedule(lim, many, cpu, many.keys).launch.lane_splits);
  // Never fewer than the keys need: 2 splits of 32,768 keys would run a lane's loops past
  // RELPOS_MAX_LOOP_ITERATIONS.
  many.batch = 2048;
  many.keys = 65536;
  const AttentionSchedule long_keys = attention_schedule(lim, many, cpu, many.keys);
  EXPECT_FALSE(long_keys.launch.lane_splits);
  EXPECT_LE((many.keys + long_keys.splits - 1) / long_keys.splits, AttentionParams::kMaxKeysPerSplit);
}

// The GPU class splits keys until its workgroups (in decoding workgroups' worth) hold every lane the
// device keeps resident twice over, where the device says how many (an H100's 132 SMs of 64 warps:
// 270,336 invocations), else until 1024; a prefill workgroup of 16 query rows and 256 lanes counts
// as four.
TEST(AttentionSplits, GpuSplitsFillTheDevice) {
  DeviceLimits lim = gpu_limits(32, 49152);
  const AttentionTiles plain = gpu_attention_tiles(lim, 0);
  EXPECT_EQ(plain.target_items, 1024u);
  lim.resident_invocations = 132ull * 64 * 32;
  const AttentionTiles h100 = gpu_attention_tiles(lim, 0);
  EXPECT_EQ(h100.target_items, 8448u);
  ASSERT_EQ(h100.lanes, 256u);
  ASSERT_EQ(h100.decode_lanes, 64u);

  // The engine's step: 8 sequences over a 16k envelope, 8/2 heads (2 slabs of 4 a sequence) and
  // 28/4 (8 slabs: 4 + 3 per kv head); at most 16384 / 128 splits.
  AttentionParams p{.batch = 8, .heads = 8, .kv_heads = 2, .queries = 1, .keys = 16384, .head_dim = 128, .dtype = DType::F16};
  EXPECT_EQ(attention_splits(p, plain), 64u);  // 1024 / 16 slabs
  EXPECT_EQ(attention_splits(p, h100), 128u);
  p.heads = 28;
  p.kv_heads = 4;
  EXPECT_EQ(attention_splits(p, plain), 16u);  // 1024 / 64
  EXPECT_EQ(attention_splits(p, h100), 128u);
  // 8 queries a sequence: one workgroup of 16 rows per sequence and head, 4 items each.
  p.heads = 8;
  p.kv_heads = 2;
  p.queries = 8;
  EXPECT_EQ(attention_splits(p, plain), 4u);               // 1024 / (8 * 8 * 4)
  EXPECT_EQ(attention_splits(p, h100), 33u);               // 8448 / 256
  p.queries = 17;                                          // two workgroups of rows
  EXPECT_EQ(attention_splits(p, h100), 17u);               // 8448 / 512
  p.queries = 1024;  // a prefill fills the device by itself
  p.keys = 4096;
  EXPECT_EQ(attention_splits(p, h100), 1u);
}

// The CPU class's query rows: a row per lane before a lane takes more, so that a call of a few
// tens of queries runs no rows that only shadow its last query (row r of lane n is query
// r * lanes + n).
TEST(AttentionSplits, CpuClassLanesTakeARowEachBeforeMore) {
  const DeviceLimits lim = recording_limits(1u << 30);
  const AttentionTiles& cpu = kCpuTiles;
  for (const auto [queries, rows] : {std::pair{17u, 1u}, {32u, 1u}, {33u, 2u}, {64u, 2u}, {65u, 4u}, {1024u, 4u}}) {
    SCOPED_TRACE(testing::Message() << queries << " queries");
    const AttentionParams p{.batch = 8, .heads = 8, .kv_heads = 2, .queries = queries, .keys = 4096, .head_dim = 128, .dtype = DType::F16};
    const AttentionSchedule s = attention_schedule(lim, p, cpu, p.keys);
    ASSERT_FALSE(s.launch.lane_splits);
    EXPECT_EQ(constant(s.launch, "ROWS"), rows);
    EXPECT_EQ(s.launch.rows_per_group, 32u * rows);
    EXPECT_EQ(s.launch.groups_per_bh, s.launch.split_groups * ((queries + 32 * rows - 1) / (32 * rows)));
  }
}

// Fused attention's recording scratch (RecordingStorage) takes the smallest spare that holds a
// request, but one past a binding's range only for a request past it too: ops bind such scratch
// whole, and a T5 row of 16 bytes given a 128 KiB spare broke the binding limit on a device whose
// bindings take 64 KiB (relpos fuzz, a lowered-limits device).
TEST(AttentionSplits, ALargerSpareScratchStaysWithinABinding) {
  Context& ctx = relpos::test::gpu_small_limits();
  const std::uint64_t range = ctx.limits().max_storage_buffer_range;
  Recorder r(ctx);
  detail::scratch_at_least(r, 2 * range, MemoryUse::Device);
  r.submit_and_wait();
  EXPECT_LE(detail::scratch_at_least(r, 16, MemoryUse::Device).size(), range);
  EXPECT_EQ(detail::scratch_at_least(r, range + 1, MemoryUse::Device).size(), 2 * range) << "the large spare, for a large request";
}
