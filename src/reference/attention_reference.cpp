// CPU reference of attention with a relative position bias (docs/fused_attention.md): the bias materialised as
// [H, Q, K], the logits and softmax in float64. Plus the log-sum-exp merge of partial results.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "bias/bias_family.hpp"
#include "params/checks.hpp"
#include "relpos/attention.hpp"
#include "relpos/error.hpp"

namespace relpos {
namespace {

using detail::require;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::string str(std::uint64_t v) { return std::to_string(v); }

// `shape` says what the size is made of: the reference takes each input at exactly its size.
void require_size(std::span<const float> s, std::uint64_t want, const std::string& name, const std::string& shape) {
  require(s.size() == want, name, str(s.size()) + " values", "must be exactly " + shape + " = " + str(want));
}

// Relative position of key j for query i, or nullopt for a memory key (no position bias).
std::optional<std::int64_t> relative_position(const AttentionParams& p, std::uint32_t i, std::uint32_t j) {
  if (j < p.memory_prefix) return std::nullopt;
  return static_cast<std::int64_t>(j - p.memory_prefix) - (static_cast<std::int64_t>(i) + p.query_offset);
}

bool key_visible(const AttentionParams& p, const AttentionHostInputs& in, std::uint32_t b, std::uint32_t i, std::uint32_t j) {
  if (!in.key_lengths.empty() && j >= in.key_lengths[b]) return false;
  const auto rp = relative_position(p, i, j);
  return !(p.causal && rp && *rp > 0);
}

// A call over caches of a cache_format as the same call over their float32 values: each row
// decoded with its kv head's scale (relpos/cache_format.hpp's decode_cache_row, which the shaders
// match bit for bit).
struct DecodedCaches {
  AttentionParams p;
  std::vector<float> k, v;
  AttentionHostInputs in;
};

DecodedCaches decoded_caches(const AttentionParams& p, const AttentionHostInputs& in) {
  p.validate();
  const CacheFormat f = p.cache();
  require(in.k.empty() && in.v.empty(), "k", str(in.k.size()) + " values",
          "must be empty with a cache_format (k_bytes and v_bytes hold the caches)");
  require(in.k_bytes.size() == p.kv_bytes(), "k_bytes", str(in.k_bytes.size()) + " bytes", "must hold the k cache: " + str(p.kv_bytes()) + " bytes");
  require(in.v_bytes.size() == p.kv_bytes(), "v_bytes", str(in.v_bytes.size()) + " bytes", "must hold the v cache: " + str(p.kv_bytes()) + " bytes");
  DecodedCaches d{p, {}, {}, in};
  d.p.cache_format.reset();
  d.p.dtype = DType::F32;
  d.p.out_dtype.reset();
  d.p.k_scales.clear();
  d.p.v_scales.clear();
  const std::size_t D = p.head_dim, row_bytes = cache_row_bytes(f, p.head_dim), rows = p.kv_bytes() / row_bytes;
  d.k.resize(rows * D);
  d.v.resize(rows * D);
  for (std::size_t row = 0; row < rows; ++row) {
    const std::uint32_t hk = p.cache_row_kv_head(row);
    const float ks = cache_format_scaled(f) ? p.k_scales[hk] : 1.0f, vs = cache_format_scaled(f) ? p.v_scales[hk] : 1.0f;
    decode_cache_row(f, in.k_bytes.subspan(row * row_bytes, row_bytes), std::span<float>(d.k).subspan(row * D, D), ks);
    decode_cache_row(f, in.v_bytes.subspan(row * row_bytes, row_bytes), std::span<float>(d.v).subspan(row * D, D), vs);
  }
  d.in.k = d.k;
  d.in.v = d.v;
  d.in.k_bytes = {};
  d.in.v_bytes = {};
  return d;
}

void check_inputs(const AttentionParams& p, const AttentionHostInputs& in) {
  p.validate();
  const std::uint64_t D = p.head_dim;
  require_size(in.q, p.rows() * D, "q", p.packed() ? "total_queries * heads * head_dim" : "batch * heads * queries * head_dim");
  const std::uint64_t kv = p.paged.enabled() ? p.paged.cache_elements(p.kv_heads, p.head_dim) : std::uint64_t{p.batch} * p.kv_heads * p.keys * D;
  const std::string kv_shape = p.paged.enabled() ? "num_blocks * block_size * kv_heads * head_dim" : "batch * kv_heads * keys * head_dim";
  require_size(in.k, kv, "k", kv_shape);
  require_size(in.v, kv, "v", kv_shape);
  require_size(in.bias, p.bias_elements(), "bias", "the bias mode's input (AttentionParams::bias_elements())");
  const detail::BiasFamily& family = detail::bias_family(p.bias);
  if (family.check_input) family.check_input(p, in.bias);
  const std::uint64_t rel = family.info.rel_tables ? (2ull * p.max_relative_position + 1) * D : 0;
  require_size(in.rel_keys, rel, "rel_keys", "(2 * max_relative_position + 1) * head_dim");
  require_size(in.rel_values, rel, "rel_values", "(2 * max_relative_position + 1) * head_dim");
  require(in.key_lengths.empty() || in.key_lengths.size() == p.batch, "key_lengths", str(in.key_lengths.size()) + " values",
          "must be empty or hold batch = " + str(p.batch));
  if (p.paged.enabled()) {
    require(in.key_lengths.empty(), "key_lengths", str(in.key_lengths.size()) + " values", "must be empty with a paged cache (cache_lengths replace them)");
    check_block_table(p, in.block_table, in.cache_lengths);
    if (p.packed()) check_query_lengths(p, in.query_lengths, in.cache_lengths);
  } else {
    require(in.block_table.empty() && in.cache_lengths.empty(), "block_table", str(in.block_table.size()) + " values",
            "needs a paged cache (paged.block_size)");
  }
  require(p.packed() || in.query_lengths.empty(), "query_lengths", str(in.query_lengths.size()) + " values",
          "must be empty unless the queries are packed (total_queries)");
  require(in.k_bytes.empty() && in.v_bytes.empty(), "k_bytes", str(in.k_bytes.size()) + " bytes", "must be empty without a cache_format");
}

// Sequence b of a paged cache as a contiguous call: its keys gathered into [Hkv, L, D], queries at
// L - Q + i, the bias input cut to its L keys where it depends on the window. Packed, its n queries
// (tokens first ... first + n - 1) are the rows Q - n ... Q - 1 of the call; the others are zeros.
struct SequenceCall {
  AttentionParams p;
  std::vector<float> q, k, v, bias;
};

SequenceCall paged_sequence(const AttentionParams& p, const AttentionHostInputs& in, std::uint32_t b, std::size_t first) {
  const std::uint32_t L = static_cast<std::uint32_t>(in.cache_lengths[b]), Q = p.queries, D = p.head_dim;
  const std::uint32_t bs = p.paged.block_size, Hkv = p.kv_heads;
  SequenceCall c;
  c.p = p;
  c.p.paged = {};
  c.p.batch = 1;
  c.p.keys = L;
  c.p.query_offset = std::int64_t{L} - Q + p.query_offset;
  c.p.key_splits = 0;
  c.p.total_queries = 0;
  const std::size_t rows = std::size_t{p.heads} * Q * D;
  if (p.packed()) {
    const std::uint32_t n = static_cast<std::uint32_t>(in.query_lengths[b]);
    c.q.assign(rows, 0.0f);
    for (std::uint32_t h = 0; h < p.heads; ++h)
      for (std::uint32_t t = 0; t < n; ++t)
        std::copy_n(in.q.begin() + ((first + t) * p.heads + h) * D, D, c.q.begin() + (std::size_t{h} * Q + Q - n + t) * D);
  } else {
    c.q.assign(in.q.begin() + b * rows, in.q.begin() + (b + 1) * rows);
  }
  c.k.resize(std::size_t{Hkv} * L * D);
  c.v.resize(c.k.size());
  for (std::uint32_t hk = 0; hk < Hkv; ++hk)
    for (std::uint32_t j = 0; j < L; ++j) {
      const std::size_t block = static_cast<std::size_t>(in.block_table[std::size_t{b} * p.paged.max_blocks + j / bs]);
      const std::size_t from = ((block * bs + j % bs) * Hkv + hk) * D, to = (std::size_t{hk} * L + j) * D;
      std::copy_n(in.k.begin() + from, D, c.k.begin() + to);
      std::copy_n(in.v.begin() + from, D, c.v.begin() + to);
    }
  const auto sub_input = detail::bias_family(p.bias).sub_input;
  if (sub_input) c.bias = sub_input(p, in.bias, c.p, 0, 0);
  else c.bias.assign(in.bias.begin(), in.bias.end());
  return c;
}

// The paged reference: each sequence as its own contiguous call; an empty one gives zeros and -inf.
// Packed, the rows of each sequence's queries are taken back out of its call.
AttentionResult paged_reference(const AttentionParams& p, const AttentionHostInputs& in) {
  const std::size_t rows = std::size_t{p.heads} * p.queries, D = p.head_dim, Q = p.queries;
  AttentionResult res{std::vector<float>(p.rows() * D, 0.0f), std::vector<float>(p.rows(), -std::numeric_limits<float>::infinity())};
  std::size_t first = 0;  // packed: the sequence's first token
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    const std::size_t n = p.packed() ? static_cast<std::size_t>(in.query_lengths[b]) : Q;
    if (in.cache_lengths[b] != 0 && n != 0) {
      const SequenceCall c = paged_sequence(p, in, b, first);
      const AttentionResult r = attention_reference(c.p, {c.q, c.k, c.v, c.bias, in.rel_keys, in.rel_values, {}});
      if (!p.packed()) {
        std::copy(r.out.begin(), r.out.end(), res.out.begin() + b * rows * D);
        std::copy(r.lse.begin(), r.lse.end(), res.lse.begin() + b * rows);
      } else {
        for (std::uint32_t h = 0; h < p.heads; ++h)
          for (std::size_t t = 0; t < n; ++t) {
            const std::size_t from = h * Q + Q - n + t, to = (first + t) * p.heads + h;
            std::copy_n(r.out.begin() + from * D, D, res.out.begin() + to * D);
            res.lse[to] = r.lse[from];
          }
      }
    }
    first += n;
  }
  return res;
}

double dot(const float* a, const float* b, std::uint32_t d) {
  double s = 0.0;
  for (std::uint32_t e = 0; e < d; ++e) s += static_cast<double>(a[e]) * b[e];
  return s;
}

}  // namespace

std::vector<float> attention_bias_reference(const AttentionParams& p, const AttentionHostInputs& in) {
  p.validate();
  // A paged call's bias differs per sequence: attention_reference takes it sequence by sequence.
  require(!p.paged.enabled(), "paged.block_size", str(p.paged.block_size), "must be 0 here (one [H, Q, K] bias for every sequence)");
  require_size(in.bias, p.bias_elements(), "bias", "the bias mode's input (AttentionParams::bias_elements())");
  const std::uint64_t Q = p.queries, K = p.keys;
  std::vector<float> out(p.heads * Q * K, 0.0f);
  const detail::BiasFamily& family = detail::bias_family(p.bias);
  const auto bias_at = family.bias_at;
  if (!bias_at) return out;
  if (!family.info.relative) {
    for (std::uint32_t h = 0; h < p.heads; ++h)
      for (std::uint32_t i = 0; i < Q; ++i)
        for (std::uint32_t j = 0; j < K; ++j)
          if (const auto rp = relative_position(p, i, j)) out[(h * Q + i) * K + j] = bias_at(p, in.bias, h, i, j, *rp);
    return out;
  }
  // A function of (h, rp) only: each relative position's value once per head, then looked up.
  const std::int64_t rp_first = -(static_cast<std::int64_t>(Q) - 1) - p.query_offset;
  std::vector<float> row(Q + K - 1);
  for (std::uint32_t h = 0; h < p.heads; ++h) {
    for (std::size_t x = 0; x + p.memory_prefix < row.size(); ++x) row[x] = bias_at(p, in.bias, h, 0, 0, rp_first + static_cast<std::int64_t>(x));
    for (std::uint32_t i = 0; i < Q; ++i)
      for (std::uint32_t j = p.memory_prefix; j < K; ++j) out[(h * Q + i) * K + j] = row[static_cast<std::size_t>(*relative_position(p, i, j) - rp_first)];
  }
  return out;
}

std::vector<double> attention_logits_reference(const AttentionParams& p, const AttentionHostInputs& in) {
  if (p.cache_format) {
    const DecodedCaches d = decoded_caches(p, in);
    return attention_logits_reference(d.p, d.in);
  }
  check_inputs(p, in);
  const std::vector<float> bias = attention_bias_reference(p, in);
  const auto rel_row = detail::bias_family(p.bias).rel_row;
  const std::uint32_t D = p.head_dim, Q = p.queries, K = p.keys, group = p.heads / p.kv_heads;
  const double s = p.effective_scale();
  std::vector<double> logits(p.rows() * K);
  for (std::uint32_t b = 0; b < p.batch; ++b)
    for (std::uint32_t h = 0; h < p.heads; ++h) {
      const std::size_t kv = (std::size_t{b} * p.kv_heads + h / group) * K;
      for (std::uint32_t i = 0; i < Q; ++i) {
        const float* q = &in.q[((std::size_t{b} * p.heads + h) * Q + i) * D];
        double* row = &logits[((std::size_t{b} * p.heads + h) * Q + i) * K];
        for (std::uint32_t j = 0; j < K; ++j) {
          if (!key_visible(p, in, b, i, j)) {
            row[j] = kNegInf;
            continue;
          }
          double qk = dot(q, &in.k[(kv + j) * D], D);
          const auto rp = relative_position(p, i, j);
          if (rel_row && rp) qk += dot(q, &in.rel_keys[std::size_t{rel_row(p, *rp)} * D], D);
          row[j] = s * qk + bias[(std::size_t{h} * Q + i) * K + j];
        }
      }
    }
  return logits;
}

AttentionResult attention_reference(const AttentionParams& p, const AttentionHostInputs& in) {
  if (p.cache_format) {
    const DecodedCaches d = decoded_caches(p, in);
    return attention_reference(d.p, d.in);
  }
  if (p.paged.enabled()) {
    check_inputs(p, in);
    return paged_reference(p, in);
  }
  const std::vector<double> logits = attention_logits_reference(p, in);
  const auto rel_row = detail::bias_family(p.bias).rel_row;
  const std::uint32_t D = p.head_dim, Q = p.queries, K = p.keys, group = p.heads / p.kv_heads;
  AttentionResult res{std::vector<float>(p.rows() * D, 0.0f), std::vector<float>(p.rows())};
  std::vector<double> acc(D);
  for (std::uint32_t b = 0; b < p.batch; ++b)
    for (std::uint32_t h = 0; h < p.heads; ++h)
      for (std::uint32_t i = 0; i < Q; ++i) {
        const std::size_t row = (std::size_t{b} * p.heads + h) * Q + i;
        const double* l = &logits[row * K];
        // A NaN logit (a NaN among the inputs of a visible key) makes the row NaN, out and lse,
        // wherever it lies (max_element would keep or drop it by its place).
        if (std::any_of(l, l + K, [](double x) { return std::isnan(x); })) {
          std::fill_n(res.out.begin() + static_cast<std::ptrdiff_t>(row * D), D, std::numeric_limits<float>::quiet_NaN());
          res.lse[row] = std::numeric_limits<float>::quiet_NaN();
          continue;
        }
        const double m = *std::max_element(l, l + K);
        if (m == kNegInf) {  // every key masked: zeros, never NaN
          res.lse[row] = -std::numeric_limits<float>::infinity();
          continue;
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::uint32_t j = 0; j < K; ++j) {
          if (l[j] == kNegInf) continue;
          const double w = std::exp(l[j] - m);
          sum += w;
          const float* v = &in.v[((std::size_t{b} * p.kv_heads + h / group) * K + j) * D];
          const auto rp = relative_position(p, i, j);
          const float* rv = rel_row && rp ? &in.rel_values[std::size_t{rel_row(p, *rp)} * D] : nullptr;
          for (std::uint32_t d = 0; d < D; ++d) acc[d] += w * (static_cast<double>(v[d]) + (rv ? rv[d] : 0.0));
        }
        for (std::uint32_t d = 0; d < D; ++d) res.out[row * D + d] = static_cast<float>(acc[d] / sum);
        res.lse[row] = static_cast<float>(m + std::log(sum));
      }
  return res;
}

AttentionResult attention_merge_reference(const AttentionMergeParams& p, std::span<const float> out, std::span<const float> lse) {
  p.validate();
  const std::uint64_t D = p.head_dim;
  require_size(out, p.parts * p.rows * D, "partial out", "parts * rows * head_dim");
  require_size(lse, p.parts * p.rows, "partial lse", "parts * rows");
  AttentionResult res{std::vector<float>(p.rows * D, 0.0f), std::vector<float>(p.rows)};
  for (std::uint64_t r = 0; r < p.rows; ++r) {
    double m = kNegInf;
    bool nan = false;  // a part's lse is NaN (a NaN among its inputs): the row is NaN, as over the whole range
    for (std::uint32_t n = 0; n < p.parts; ++n) {
      const double l = lse[n * p.rows + r];
      nan = nan || std::isnan(l);
      m = std::max(m, l);
    }
    if (nan) {
      std::fill_n(res.out.begin() + static_cast<std::ptrdiff_t>(r * D), D, std::numeric_limits<float>::quiet_NaN());
      res.lse[r] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    if (m == kNegInf) {
      res.lse[r] = -std::numeric_limits<float>::infinity();
      continue;
    }
    double sum = 0.0;
    std::vector<double> acc(D, 0.0);
    for (std::uint32_t n = 0; n < p.parts; ++n) {
      const double l = lse[n * p.rows + r];
      if (l == kNegInf) continue;
      const double w = std::exp(l - m);
      sum += w;
      for (std::uint64_t d = 0; d < D; ++d) acc[d] += w * out[(n * p.rows + r) * D + d];
    }
    for (std::uint64_t d = 0; d < D; ++d) res.out[r * D + d] = static_cast<float>(acc[d] / sum);
    res.lse[r] = static_cast<float>(m + std::log(sum));
  }
  return res;
}

}  // namespace relpos
