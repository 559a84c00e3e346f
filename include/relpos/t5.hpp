#pragma once
// T5 relative position bias (docs/t5.md): log-bucketed key-minus-query distances, gathered
// from a [num_buckets, heads] table. CPU reference and GPU operations share T5Params.
#include <cstdint>
#include <span>
#include <vector>

#include "relpos/dtype.hpp"

namespace relpos {

class Buffer;
class Recorder;

// How the float32 log of the bucket formula is taken.
enum class T5Log {
  HuggingFace,  // log(n / max_exact), HuggingFace's float32 CPU arithmetic (canonical)
  FlaxEps,      // log(n / max_exact + 2^-23), flaxformer / t5x / meliad
};

struct T5Params {
  std::uint32_t num_buckets = 32;
  std::uint32_t max_distance = 128;
  bool bidirectional = true;  // encoder: true; decoder: false (causal)
  T5Log log = T5Log::HuggingFace;
  std::uint32_t queries = 0;
  std::uint32_t keys = 0;
  // Query i sits at absolute position i + query_offset; rp = j - (i + query_offset).
  // 0: first query with first key (HuggingFace); keys - queries: last with last; n: a decoding
  // step after n cached keys.
  std::int64_t query_offset = 0;
  std::uint32_t heads = 1;  // columns of the table (bias operations)
  std::uint32_t batch = 1;  // leading dimension of the logits (in-place add)
  float scale = 1.0f;

  // max_exact: distances below it get a bucket each.
  std::uint32_t max_exact() const { return (bidirectional ? num_buckets / 2 : num_buckets) / 2; }
  // The distances n the bucket formula sees in the [queries, keys] window, |rp| (bidirectional)
  // or max(-rp, 0) (causal): every n in [first, last].
  struct Distances { std::uint64_t first, last; };
  Distances distances() const;
  // Throws InvalidArgument for num_buckets too small, max_distance <= max_exact, empty shapes,
  // relative positions or element counts beyond what the operations index.
  void validate() const;
};

// ---- CPU reference ------------------------------------------------------------------------

// The bucket of relative position rp (key minus query), exactly as HuggingFace computes it on the
// CPU in float32 (or with the flax eps).
std::int32_t t5_bucket(std::int64_t rp, const T5Params& p);

// For n >= max_exact: bucket(n) - max_exact (before the bidirectional offset) equals the number of
// thresholds t with t <= n (levels first reached at n >= 2^31 get the threshold 2^31). One per
// level: as many as there are buckets.
std::vector<std::uint32_t> t5_bucket_thresholds(const T5Params& p);

// What the GPU decides the buckets of one window with: for n in p.distances() and n >= max_exact,
// bucket(n) - max_exact = base + #{t in thresholds : t <= n}. Only the levels the window's
// distances cross are listed (at most distances().last - distances().first of them), so the work
// grows with the window, never with num_buckets, max_distance or the offset.
struct T5WindowThresholds {
  std::uint32_t base = 0;
  std::vector<std::uint32_t> thresholds;
};
T5WindowThresholds t5_window_thresholds(const T5Params& p);
// The same from `levels` = t5_bucket_thresholds(p) (computed once for a configuration whose
// windows vary, as a decode loop's do): a binary search instead of bisecting the float arithmetic.
T5WindowThresholds t5_window_thresholds(const T5Params& p, std::span<const std::uint32_t> levels);

// int32 [queries, keys].
std::vector<std::int32_t> t5_buckets_reference(const T5Params& p);
// float32 [heads, queries, keys] = scale * table[bucket(i, j), h]; table is [num_buckets, heads].
std::vector<float> t5_bias_reference(const T5Params& p, std::span<const float> table);
// logits [batch, heads, queries, keys] += bias, in place.
void t5_bias_add_reference(const T5Params& p, std::span<const float> table, std::span<float> logits);

// ---- GPU operations -----------------------------------------------------------------------
// Record into `r`; nothing runs until it is submitted. Parameters and buffer sizes are checked
// first (InvalidArgument). Output sizes: buckets 4*Q*K bytes; bias H*Q*K elements of out_dtype
// (F32 or F16); logits B*H*Q*K elements of logits_dtype (F32 or F16).

void t5_buckets(Recorder& r, const T5Params& p, const Buffer& out);
void t5_bias(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& out, DType out_dtype = DType::F32);
void t5_bias_add(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& logits, DType logits_dtype = DType::F32);

}  // namespace relpos
