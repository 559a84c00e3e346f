#pragma once
// What `run ring-attention` and the ring benchmarks share: which call a shape takes (ring, or
// sharded when there are fewer queries than keys), each rank's inputs cut from the whole, one
// rank's run, its result put back, and the messages an MPI root exchanges with its ranks.
#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include <relpos/ring.hpp>

namespace relpos::tool {

struct RingPlan {
  bool sharded = false;  // Q < K: every rank holds the queries, the keys are split (sharded_attention)
  RingParams ring;       // the ring, otherwise
  ShardedParams shard;   // sharded: merged on rank 0
  std::uint32_t ranks() const { return sharded ? shard.ranks : ring.ranks; }
  void validate() const;
  std::vector<RingPiece> query_pieces(std::uint32_t rank) const;
  std::vector<RingPiece> key_pieces(std::uint32_t rank) const;
  // Whether rank `rank` gets an output (every ring rank its queries'; sharded: rank 0).
  bool has_output(std::uint32_t rank) const { return !sharded || rank == 0; }
};
RingPlan ring_plan(const AttentionParams& p, std::uint32_t ranks, RingLayout layout);

struct RingInputs {
  std::vector<float> q, k, v, bias, rel_keys, rel_values;
  // With a cache format (sharded attention): k and v as the format's bytes, [B, Hkv, K] rows of
  // cache_row_bytes each (k and v then empty).
  std::vector<std::uint8_t> k_bytes, v_bytes;
};
struct RingCall {
  AttentionParams p;
  RingPlan plan;
  RingInputs in;  // the whole call's (a rank's own after unpack_rank_call)
};
// Random inputs of a whole call (uniform in [-1, 1]; ALiBi's and KERPLE's parameters in
// [0.05, 0.5]; Shaw's tables), rounded as f16 buffers hold them: for checks and benchmarks.
RingInputs random_ring_inputs(const AttentionParams& p, unsigned seed);
// Rank `rank`'s inputs: its query and key pieces, the bias input as it takes it (dense: its rows
// or columns), Shaw's tables whole.
RingInputs rank_inputs(const RingCall& c, std::uint32_t rank);

struct RankResult {
  std::vector<float> out, lse;  // the rank's queries' (ring), or the merged result (sharded, rank 0)
  RingTiming timing;
  double exchange_ms = 0;  // ring_exchange_ms of timing.exchange_bytes, where measured
};
// Uploads the rank's inputs, runs its part, downloads its result.
RankResult run_ring_rank(RingRank& rank, const RingPlan& plan, const AttentionParams& p, const RingInputs& in);
AttentionResult empty_ring_result(const AttentionParams& p);
// Puts rank `rank`'s result into the whole one (ranks write disjoint parts).
void put_rank_result(const RingPlan& plan, const AttentionParams& p, std::uint32_t rank, const RankResult& res, AttentionResult& whole);

nlohmann::json ring_timing_json(const RankResult& r, std::uint32_t rank);

// The MPI root's messages: a rank's shape and inputs, and its result back.
std::vector<std::byte> pack_rank_call(const RingCall& c, std::uint32_t rank);
// `flags`: this rank's settings from its own flags (the ranks check that they agree); the shape
// comes from the root.
RingCall unpack_rank_call(const std::vector<std::byte>& bytes, const AttentionParams& flags, std::uint32_t ranks, RingLayout layout);
std::vector<std::byte> pack_rank_result(const RankResult& r);
RankResult unpack_rank_result(const std::vector<std::byte>& bytes);

struct Registry;
// relpos bench --filter ring (bench_ring.cpp).
void add_ring_benches(Registry& reg);
// relpos check's sharded attention over paged caches with packed queries (check_sharded_paged.cpp).
void add_sharded_paged_checks(Registry& reg);

}  // namespace relpos::tool
