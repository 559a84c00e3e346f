// The unfused attention family (relpos/unfused_attention.hpp) on the GPU: q·kᵀ·scale (matmul),
// masked softmax, weights·v: the blocks that Shaw (shaw.cpp) and fused attention's baseline
// (attention_baseline.cpp) are built from.
#include <algorithm>
#include <cstring>
#include <string>

#include "ops/unfused_attention.hpp"
#include "ops/matmul.hpp"
#include "ops/planner.hpp"
#include "relpos/context.hpp"
#include "relpos_contract/softmax.h"
#include "relpos_push/loop_bound.h"
#include "relpos_push/softmax.h"
#include "vk/access.hpp"

namespace relpos {
namespace detail {
namespace {
constexpr std::uint32_t kRowGroup = 64;
}

MatmulParams logits_matmul(const UnfusedAttentionParams& p) {
  MatmulParams m = dense_matmul(p.batch * p.heads, p.queries, p.keys, p.head_dim, true);
  m.alpha = p.scale;
  m.a_dtype = m.b_dtype = p.dtype;
  return m;
}

MatmulParams output_matmul(const UnfusedAttentionParams& p, DType out_dtype) {
  MatmulParams m = dense_matmul(p.batch * p.heads, p.queries, p.head_dim, p.keys, false);
  m.b_dtype = p.dtype;
  m.c_dtype = out_dtype;
  return m;
}

// Keys per softmax chunk, and chunks per row at most: an invocation's loops stay within the loop
// bound (relpos_push/loop_bound.h). A chunk costs at most 3 * kSoftmaxChunk iterations (max, sum,
// and the write with the zeroing of masked keys, all per key without quads); combining the stats
// of a row adds 2 per chunk.
constexpr std::uint32_t kSoftmaxChunk = 8192, kMaxSoftmaxChunks = 4096;
static_assert(3 * kSoftmaxChunk + 2 * kMaxSoftmaxChunks <= RELPOS_MAX_LOOP_ITERATIONS, "softmax chunks must fit the loop bound");

void check_softmax(const Recorder& r, const UnfusedAttentionParams& p, const Buffer& logits) {
  p.validate();
  require_buffer(logits, std::uint64_t{p.batch} * p.heads * p.queries * p.keys, 4, "logits", "f32 [batch, heads, queries, keys]");
  require(p.keys <= window_capacity(r.context().limits(), 4), "keys", std::to_string(p.keys),
          "a row of logits must fit one storage buffer binding of the device");
  require(p.keys <= std::uint64_t{kSoftmaxChunk} * kMaxSoftmaxChunks, "keys", std::to_string(p.keys),
          "must be <= " + std::to_string(std::uint64_t{kSoftmaxChunk} * kMaxSoftmaxChunks) +
              " for the unfused softmax (fused attention takes any number of keys)");
}

void record_softmax(Recorder& r, const UnfusedAttentionParams& p, const Buffer& logits) {
  const DeviceLimits& lim = r.context().limits();
  Buffer& lengths = scratch(r, std::max<std::size_t>(p.key_lengths.size(), 1) * 4, MemoryUse::Host);
  if (!p.key_lengths.empty()) std::memcpy(lengths.host_pointer(), p.key_lengths.data(), p.key_lengths.size() * 4);
  const std::uint64_t rows = std::uint64_t{p.batch} * p.heads * p.queries;
  const std::uint32_t chunk_len = std::min(p.keys, kSoftmaxChunk), chunks = div_up(p.keys, chunk_len);
  const std::uint64_t per = std::min<std::uint64_t>(window_capacity(lim, 4) / p.keys,
                                                    std::uint64_t{lim.max_workgroup_count[0]} * kRowGroup / chunks);
  push::SoftmaxPush pc{};
  pc.queries = p.queries;
  pc.keys = p.keys;
  pc.heads = p.heads;
  pc.causal = p.causal ? 1 : 0;
  pc.query_offset = static_cast<std::int32_t>(p.query_offset);
  pc.has_lengths = p.key_lengths.empty() ? 0 : 1;
  pc.chunk_len = chunk_len;
  pc.chunks = chunks;
  for (std::uint64_t r0 = 0; r0 < rows; r0 += per) {
    const std::uint64_t n = std::min(per, rows - r0);
    const Window w = window(lim, logits, r0 * p.keys, (r0 + n) * p.keys, 4);
    pc.rows = static_cast<std::uint32_t>(n);
    pc.row0 = static_cast<std::uint32_t>(r0);
    pc.base = w.base;
    const bool vec4 = p.keys % 4 == 0 && w.base % 4 == 0;
    const std::uint32_t groups = div_up(n * chunks, kRowGroup);
    Buffer& stats = scratch(r, chunks == 1 ? 16 : n * chunks * 8, MemoryUse::Device);
    const contract::MaskedSoftmaxBindings bindings{.LOGITS = w.span, .KEY_LENGTHS = {&lengths}, .STATS = {&stats}};
    auto pass = [&](std::uint32_t pass) {
      dispatch(r, ShaderId::masked_softmax, contract::MaskedSoftmaxSpec{.WG_X = kRowGroup, .VEC4 = vec4, .PASS = pass}, bindings, pc, groups);
    };
    if (chunks == 1) {
      pass(0);
      continue;
    }
    pass(1);
    barrier(r);
    pass(2);
  }
}

void check_attention_buffers(const UnfusedAttentionParams& p, const Buffer* q, const Buffer* k, const Buffer* v, const Buffer* out) {
  const std::uint32_t e = dtype_size(p.dtype);
  const std::uint64_t bh = std::uint64_t{p.batch} * p.heads;
  if (q) require_buffer(*q, bh * p.queries * p.head_dim, e, "q", "[batch, heads, queries, head_dim]");
  if (k) require_buffer(*k, bh * p.keys * p.head_dim, e, "k", "[batch, heads, keys, head_dim]");
  if (v) require_buffer(*v, bh * p.keys * p.head_dim, e, "v", "[batch, heads, keys, head_dim]");
  if (out) require_buffer(*out, bh * p.queries * p.head_dim, e, "out", "[batch, heads, queries, head_dim]");
}

}  // namespace detail

void unfused_logits(Recorder& r, const UnfusedAttentionParams& p, const Buffer& q, const Buffer& k, const Buffer& logits) {
  p.validate();
  detail::check_attention_buffers(p, &q, &k, nullptr, nullptr);
  const MatmulParams m = detail::logits_matmul(p);
  detail::check_matmul(r, m, q, k, logits);
  detail::require_own_buffers(r, {{&q, "q buffer"}, {&k, "k buffer"}, {&logits, "logits buffer", true}});
  const auto op = detail::begin_op(r);
  detail::record_matmul(r, m, q, k, logits);
}

void masked_softmax(Recorder& r, const UnfusedAttentionParams& p, const Buffer& logits) {
  detail::check_softmax(r, p, logits);
  const auto op = detail::begin_op(r);
  detail::record_softmax(r, p, logits);
}

void unfused_output(Recorder& r, const UnfusedAttentionParams& p, const Buffer& weights, const Buffer& v, const Buffer& out) {
  p.validate();
  detail::check_attention_buffers(p, nullptr, nullptr, &v, &out);
  const MatmulParams m = detail::output_matmul(p, p.dtype);
  detail::check_matmul(r, m, weights, v, out);
  detail::require_own_buffers(r, {{&weights, "weights buffer"}, {&v, "v buffer"}, {&out, "out buffer", true}});
  const auto op = detail::begin_op(r);
  detail::record_matmul(r, m, weights, v, out);
}

void unfused_attention(Recorder& r, const UnfusedAttentionParams& p, const Buffer& q, const Buffer& k, const Buffer& v,
                       const Buffer& out) {
  p.validate();
  detail::check_attention_buffers(p, &q, &k, &v, &out);
  detail::require_own_buffers(r, {{&q, "q buffer"}, {&k, "k buffer"}, {&v, "v buffer"}, {&out, "out buffer", true}});
  const MatmulParams lm = detail::logits_matmul(p), om = detail::output_matmul(p, p.dtype);
  detail::check_matmul_plan(r, lm);
  detail::check_matmul_plan(r, om);
  Buffer& logits = detail::scratch(r, lm.c_elements() * 4, MemoryUse::Device);
  detail::check_softmax(r, p, logits);
  const auto op = detail::begin_op(r);
  detail::record_matmul(r, lm, q, k, logits);
  detail::barrier(r);
  detail::record_softmax(r, p, logits);
  detail::barrier(r);
  detail::record_matmul(r, om, logits, v, out);
}

}  // namespace relpos
