// Shaw relative keys and values on the GPU, in the cheap form: P = scale·q·rel_keysᵀ is
// [B·H·Q, 2k+1] and the logits gather from it; the weights are bucketed into S [B·H·Q, 2k+1] and
// out += S·rel_values. Nothing of size Q·K·D exists, except in tensor2tensor's materialised form
// kept as the benchmark baseline. Fused attention gathers the tables in its kernels (the family's
// registry entry, at the end).
#include <algorithm>
#include <string>

#include "bias/bias_family.hpp"
#include "relpos_push/attention.h"

#include "ops/unfused_attention.hpp"
#include "ops/matmul.hpp"
#include "ops/planner.hpp"
#include "relpos/context.hpp"
#include "relpos/shaw.hpp"
#include "relpos_contract/shaw.h"
#include "relpos_push/loop_bound.h"
#include "relpos_push/shaw.h"
#include "relpos_push/shaw_materialise.h"
#include "vk/access.hpp"

namespace relpos {
namespace {

using namespace detail;

constexpr std::uint32_t kGroup = 64;
constexpr std::uint32_t kGatherUnroll = 4;  // neighbouring quads of logits per invocation (broadcast pass)
constexpr std::uint32_t kGatherRows = 16;   // rows per workgroup (broadcast pass)

std::uint64_t rows_of(const ShawParams& p) { return std::uint64_t{p.batch} * p.heads * p.queries; }

void check_table(const ShawParams& p, const Buffer& table, const char* name) {
  const std::uint64_t need = std::uint64_t{p.table_rows()} * p.head_dim * 4;
  require(table.size() == need, std::string(name) + " buffer", std::to_string(table.size()) + " bytes",
          "must be float32 [2k + 1, head_dim] = [" + std::to_string(p.table_rows()) + ", " + std::to_string(p.head_dim) + "] = " +
              std::to_string(need) + " bytes");
}

void require_storage(DType t, const char* name) {
  detail::require_f32_or_f16(t, name);
}

// Rows of [rows, keys] and [rows, 2k+1] tensors per dispatch of the row kernels.
std::uint64_t rows_per_chunk(const DeviceLimits& lim, const ShawParams& p, std::uint64_t max_rows_by_groups) {
  const std::uint64_t cap = window_capacity(lim, 4);
  const std::uint64_t per = std::min({cap / p.keys, cap / p.table_rows(), max_rows_by_groups});
  require(per > 0, "keys and 2k + 1", std::to_string(p.keys) + " and " + std::to_string(p.table_rows()),
          "a row of logits and of the relative terms must fit one storage buffer binding of the device (" +
              std::to_string(cap) + " floats)");
  return per;
}

// P = scale · q·rel_keysᵀ: [B·H·Q, D] · [2k+1, D]ᵀ.
MatmulParams p_matmul(const ShawParams& p, DType q_dtype) {
  MatmulParams m = dense_matmul(1, static_cast<std::uint32_t>(rows_of(p)), p.table_rows(), p.head_dim, true);
  m.b_batch_stride = 0;
  m.alpha = p.scale;
  m.a_dtype = q_dtype;
  return m;
}

// out (+)= S·rel_values: [B·H·Q, 2k+1] · [2k+1, D].
MatmulParams values_matmul(const ShawParams& p, DType out_dtype) {
  MatmulParams m = dense_matmul(1, static_cast<std::uint32_t>(rows_of(p)), p.head_dim, p.table_rows(), false);
  m.b_batch_stride = 0;
  m.accumulate = true;
  m.c_dtype = out_dtype;
  return m;
}

// Splits the rows (b, h, i) into dispatches whose windows of x ([rows, keys]: logits or weights)
// and t ([rows, 2k+1]: P or S) each fit one binding: f(push, x window, t window, rows).
template <class F>
void for_each_row_chunk(Recorder& r, const ShawParams& p, std::uint64_t max_rows_by_groups, const Buffer& x, const Buffer& t, F&& f) {
  const DeviceLimits& lim = r.context().limits();
  const std::uint64_t rows = rows_of(p), per = rows_per_chunk(lim, p, max_rows_by_groups);
  push::ShawRowsPush pc{};
  pc.queries = p.queries;
  pc.keys = p.keys;
  pc.query_offset = static_cast<std::int32_t>(p.query_offset);
  pc.max_rel = static_cast<std::int32_t>(p.max_relative_position);
  for (std::uint64_t r0 = 0; r0 < rows; r0 += per) {
    const std::uint64_t n = std::min(per, rows - r0);
    const Window wx = window(lim, x, r0 * p.keys, (r0 + n) * p.keys, 4);
    const Window wt = window(lim, t, r0 * p.table_rows(), (r0 + n) * p.table_rows(), 4);
    pc.rows = static_cast<std::uint32_t>(n);
    pc.row0 = static_cast<std::uint32_t>(r0);
    pc.x_base = wx.base;
    pc.t_base = wt.base;
    f(pc, wx, wt, n);
  }
}

// Keys or buckets per part of a row in shaw_buckets (and band quads in shaw_gather_add): a part
// costs an invocation at most 2 * kRowPart loop iterations, and the finishing pass of the buckets
// adds one per part of the keys, of which a row that fits a binding has at most kMaxKeyParts.
constexpr std::uint32_t kRowPart = 8192, kMaxKeyParts = 4096;
static_assert(2 * kRowPart + kMaxKeyParts <= RELPOS_MAX_LOOP_ITERATIONS, "row parts must fit the loop bound");

// logits (+)= P[.., idx(i, j)]: the broadcast pass and the band pass touch disjoint quads.
void record_gather(Recorder& r, const ShawParams& p, const Buffer& logits, const Buffer& pbuf, bool add) {
  const DeviceLimits& lim = r.context().limits();
  const std::uint64_t quads_per_group = std::uint64_t{kGroup} * kGatherUnroll;
  const std::uint64_t quad_groups = div_up(div_up(p.keys, 4), quads_per_group);
  const std::uint32_t band_steps = (2 * p.max_relative_position - 2) / 4 + 2, band_parts = div_up(band_steps, kRowPart);
  const std::uint64_t max_rows = std::min<std::uint64_t>(std::uint64_t{lim.max_workgroup_count[1]} * kGatherRows,
                                                         std::uint64_t{lim.max_workgroup_count[0]} * kGroup / band_parts);
  for_each_row_chunk(r, p, max_rows, logits, pbuf, [&](push::ShawRowsPush& pc, const Window& wl, const Window& wp, std::uint64_t n) {
    const bool vec4 = p.keys % 4 == 0 && wl.base % 4 == 0;
    contract::ShawGatherAddSpec spec{.WG_X = kGroup, .VEC4 = vec4, .UNROLL = kGatherUnroll, .ADD = add, .BAND = false, .ROWS = kGatherRows};
    const contract::ShawGatherAddBindings bindings{.LOGITS = wl.span, .P = wp.span};
    for_each_group_range(lim, quad_groups, [&](std::uint64_t first, std::uint32_t groups) {
      pc.first_quad = static_cast<std::uint32_t>(first * quads_per_group);
      dispatch(r, detail::ShaderId::shaw_gather_add, spec, bindings, pc, groups, div_up(n, kGatherRows));
    });
    pc.first_quad = 0;
    pc.parts = band_parts;
    pc.part_len = kRowPart;
    spec.BAND = true;
    dispatch(r, detail::ShaderId::shaw_gather_add, spec, bindings, pc, div_up(n * band_parts, kGroup));
  });
}


void record_buckets(Recorder& r, const ShawParams& p, const Buffer& weights, const Buffer& s) {
  const std::uint64_t max_invocations = std::uint64_t{r.context().limits().max_workgroup_count[0]} * kGroup;
  const std::uint32_t key_parts = div_up(p.keys, kRowPart), bucket_parts = div_up(p.table_rows(), kRowPart);
  require(key_parts <= kMaxKeyParts, "keys", std::to_string(p.keys),
          "must be <= " + std::to_string(std::uint64_t{kRowPart} * kMaxKeyParts) + " for Shaw's relative values");
  const bool whole = key_parts == 1 && bucket_parts == 1;
  const std::uint64_t max_rows = max_invocations / std::max(key_parts, bucket_parts);
  for_each_row_chunk(r, p, max_rows, weights, s, [&](push::ShawRowsPush& pc, const Window& ww, const Window& ws, std::uint64_t n) {
    const bool vec4 = p.keys % 4 == 0 && ww.base % 4 == 0;
    auto pass = [&](std::uint32_t pass, const Buffer& partial, std::uint64_t invocations) {
      dispatch(r, detail::ShaderId::shaw_buckets, contract::ShawBucketsSpec{.WG_X = kGroup, .VEC4 = vec4, .PASS = pass},
               contract::ShawBucketsBindings{.WEIGHTS = ww.span, .S = ws.span, .PARTIAL = {&partial}}, pc, div_up(invocations, kGroup));
    };
    pc.part_len = kRowPart;
    pc.key_parts = key_parts;
    if (whole) {
      pc.parts = 1;
      pass(0, scratch(r, 16, MemoryUse::Device), n);
      return;
    }
    Buffer& partial = scratch(r, n * key_parts * 8, MemoryUse::Device);
    pc.parts = key_parts;
    pass(1, partial, n * key_parts);
    barrier(r);
    pc.parts = bucket_parts;
    pass(2, partial, n * bucket_parts);
  });
}

Buffer& term_scratch(Recorder& r, const ShawParams& p) { return scratch(r, rows_of(p) * p.table_rows() * 4, MemoryUse::Device); }

void check_logits_add(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& logits,
                      DType q_dtype) {
  p.validate();
  require_storage(q_dtype, "q_dtype");
  require_buffer(q, rows_of(p) * p.head_dim, dtype_size(q_dtype), "q", "[batch, heads, queries, head_dim]");
  check_table(p, rel_keys, "rel_keys");
  require_buffer(logits, rows_of(p) * p.keys, 4, "logits", "f32 [batch, heads, queries, keys]");
  check_matmul_plan(r, p_matmul(p, q_dtype));
  (void)rows_per_chunk(r.context().limits(), p, 1);
  require_own_buffers(r, {{&q, "q buffer"}, {&rel_keys, "rel_keys buffer"}, {&logits, "logits buffer", true}});
}

void check_values_add(Recorder& r, const ShawParams& p, const Buffer& weights, const Buffer& rel_values, const Buffer& out,
                      DType out_dtype) {
  p.validate();
  require_storage(out_dtype, "out_dtype");
  require_buffer(weights, rows_of(p) * p.keys, 4, "weights", "f32 [batch, heads, queries, keys]");
  check_table(p, rel_values, "rel_values");
  require_buffer(out, rows_of(p) * p.head_dim, dtype_size(out_dtype), "out", "[batch, heads, queries, head_dim]");
  check_matmul_plan(r, values_matmul(p, out_dtype));
  (void)rows_per_chunk(r.context().limits(), p, 1);
  require_own_buffers(r, {{&weights, "weights buffer"}, {&rel_values, "rel_values buffer"}, {&out, "out buffer", true}});
}

void logits_term(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& logits, DType q_dtype,
                 bool add) {
  check_logits_add(r, p, q, rel_keys, logits, q_dtype);
  const auto op = begin_op(r);
  Buffer& pbuf = term_scratch(r, p);
  record_matmul(r, p_matmul(p, q_dtype), q, rel_keys, pbuf);
  barrier(r);
  record_gather(r, p, logits, pbuf, add);
}

void materialised_term(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& logits, bool add) {
  check_logits_add(r, p, q, rel_keys, logits, DType::F32);
  const DeviceLimits& lim = r.context().limits();
  // tensor2tensor's batched matmul over query position: batch i, rows (b, h), columns j.
  MatmulParams m;
  m.batch = p.queries;
  m.m = p.batch * p.heads;
  m.n = p.keys;
  m.k = p.head_dim;
  m.b_transposed = true;
  m.accumulate = add;
  m.alpha = p.scale;
  m.a_batch_stride = p.head_dim;
  m.a_row_stride = std::uint64_t{p.queries} * p.head_dim;
  m.b_batch_stride = std::uint64_t{p.keys} * p.head_dim;
  m.b_row_stride = p.head_dim;
  m.c_batch_stride = p.keys;
  m.c_row_stride = std::uint64_t{p.queries} * p.keys;
  check_matmul_plan(r, m);
  const std::uint64_t pairs = std::uint64_t{p.queries} * p.keys;
  const std::uint64_t e_bytes = checked_elements({pairs, p.head_dim, 4}, "materialised embeddings");
  require(e_bytes <= lim.max_memory_allocation_size || lim.max_memory_allocation_size == 0, "queries * keys * head_dim",
          std::to_string(pairs * p.head_dim), "the materialised embeddings exceed the device's largest allocation");
  const std::uint64_t per = std::min<std::uint64_t>(window_capacity(lim, 4) / p.head_dim, std::uint64_t{lim.max_workgroup_count[0]} * kGroup);
  require(per > 0 && std::uint64_t{p.table_rows()} * p.head_dim <= window_capacity(lim, 4), "head_dim", std::to_string(p.head_dim),
          "the table and a row of embeddings must fit one storage buffer binding of the device");
  const auto op = begin_op(r);
  Buffer& e = scratch(r, e_bytes, MemoryUse::Device);
  push::ShawMaterialisePush pc{};
  pc.keys = p.keys;
  pc.depth = p.head_dim;
  pc.query_offset = static_cast<std::int32_t>(p.query_offset);
  pc.max_rel = static_cast<std::int32_t>(p.max_relative_position);
  for (std::uint64_t first = 0; first < pairs; first += per) {
    const std::uint64_t n = std::min(per, pairs - first);
    const Window we = window(lim, e, first * p.head_dim, (first + n) * p.head_dim, 4);
    pc.pairs = static_cast<std::uint32_t>(n);
    pc.pair0 = static_cast<std::uint32_t>(first);
    pc.e_base = we.base;
    const bool vec4 = p.head_dim % 4 == 0 && we.base % 4 == 0;
    dispatch(r, detail::ShaderId::shaw_materialise, contract::ShawMaterialiseSpec{.WG_X = kGroup, .VEC4 = vec4},
             contract::ShawMaterialiseBindings{.TABLE = {&rel_keys}, .E = we.span}, pc, div_up(n, kGroup));
  }
  barrier(r);
  record_matmul(r, m, q, e, logits);
}

}  // namespace

void shaw_logits(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& out, DType q_dtype) {
  logits_term(r, p, q, rel_keys, out, q_dtype, false);
}

void shaw_logits_add(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& logits, DType q_dtype) {
  logits_term(r, p, q, rel_keys, logits, q_dtype, true);
}

void shaw_logits_materialised(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& out) {
  materialised_term(r, p, q, rel_keys, out, false);
}

void shaw_logits_materialised_add(Recorder& r, const ShawParams& p, const Buffer& q, const Buffer& rel_keys, const Buffer& logits) {
  materialised_term(r, p, q, rel_keys, logits, true);
}

void shaw_values_add(Recorder& r, const ShawParams& p, const Buffer& weights, const Buffer& rel_values, const Buffer& out,
                     DType out_dtype) {
  check_values_add(r, p, weights, rel_values, out, out_dtype);
  const auto op = begin_op(r);
  Buffer& s = term_scratch(r, p);
  record_buckets(r, p, weights, s);
  barrier(r);
  record_matmul(r, values_matmul(p, out_dtype), s, rel_values, out);
}

void shaw_attention(Recorder& r, const ShawAttentionParams& sp, const Buffer& q, const Buffer& k, const Buffer& v,
                    const Buffer& rel_keys, const Buffer& rel_values, const Buffer& out) {
  sp.validate();
  const UnfusedAttentionParams& a = sp.attention;
  const ShawParams p = sp.shaw();
  check_attention_buffers(a, &q, &k, &v, &out);
  check_table(p, rel_keys, "rel_keys");
  check_table(p, rel_values, "rel_values");
  const MatmulParams lm = logits_matmul(a), om = output_matmul(a, DType::F32), pm = p_matmul(p, a.dtype);
  const MatmulParams vm = values_matmul(p, DType::F32);
  for (const MatmulParams* m : {&lm, &om, &pm, &vm}) check_matmul_plan(r, *m);
  (void)rows_per_chunk(r.context().limits(), p, 1);
  require_own_buffers(r, {{&q, "q buffer"},
                          {&k, "k buffer"},
                          {&v, "v buffer"},
                          {&rel_keys, "rel_keys buffer"},
                          {&rel_values, "rel_values buffer"},
                          {&out, "out buffer", true}});
  Buffer& logits = scratch(r, lm.c_elements() * 4, MemoryUse::Device);
  check_softmax(r, a, logits);

  const auto op = begin_op(r);
  Buffer& terms = term_scratch(r, p);  // P, then S
  record_matmul(r, lm, q, k, logits);
  record_matmul(r, pm, q, rel_keys, terms);
  barrier(r);
  record_gather(r, p, logits, terms, true);
  barrier(r);
  record_softmax(r, a, logits);
  barrier(r);
  // f32 accumulates in out itself; f16 in an f32 buffer rounded once at the end.
  const Buffer& acc = a.dtype == DType::F32 ? out : scratch(r, om.c_elements() * 4, MemoryUse::Device);
  record_matmul(r, om, logits, v, acc);
  record_buckets(r, p, logits, terms);
  barrier(r);
  record_matmul(r, vm, terms, rel_values, acc);
  if (a.dtype == DType::F16) {
    barrier(r);
    record_cast_f16(r, acc, out, om.c_elements(), false);
  }
}

namespace detail {

extern const BiasFamily kShawBias{
    .info = {.bias = AttentionBias::Shaw, .name = "shaw", .rel_tables = true},
    .kernel_mode = RELPOS_ATTN_SHAW,
    .validate =
        [](const AttentionParams& p) {
          require(p.max_relative_position >= 1 && p.max_relative_position <= 1'000'000, "max_relative_position",
                  std::to_string(p.max_relative_position), "must be in [1, 10^6] for the Shaw bias");
        },
    // The kernels read the tables through one binding each.
    .check_device =
        [](const DeviceLimits& lim, const AttentionParams& p) {
          const std::uint64_t rel_bytes = (2ull * p.max_relative_position + 1) * p.head_dim * 4;
          require(rel_bytes <= lim.max_storage_buffer_range, "rel_keys", std::to_string(rel_bytes) + " bytes",
                  "must fit in maxStorageBufferRange = " + std::to_string(lim.max_storage_buffer_range));
        },
    .rel_row =
        [](const AttentionParams& p, std::int64_t rp) {
          const std::int64_t k = p.max_relative_position;
          return static_cast<std::uint32_t>(std::clamp(rp, -k, k) + k);
        },
};


}  // namespace detail

}  // namespace relpos
