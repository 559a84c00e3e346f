// Fused attention's `relpos check` cases (every bias mode over contiguous, paged and packed
// layouts and every cache format) and its `relpos fuzz` draws, each against the CPU reference.
#include <cmath>
#include <cstdlib>
#include <limits>

#include "attention_data.hpp"
#include "fuzz.hpp"

namespace relpos::tool {
namespace {

std::string shape_of(const Registry& reg, const AttentionParams& p) {
  std::string s = "B=" + std::to_string(p.batch) + ",H=" + std::to_string(p.heads);
  if (p.kv_heads != p.heads) s.append("/").append(std::to_string(p.kv_heads));  // (g++ 12 warns of "/" + string: its bug 105329)
  s += ",Q=" + std::to_string(p.queries) + ",K=" + std::to_string(p.keys) + ",D=" + std::to_string(p.head_dim) + "," + bias_text(reg, p);
  if (p.causal) s += ",causal";
  if (p.query_offset) s += ",off=" + std::to_string(p.query_offset);
  if (p.memory_prefix) s += ",M=" + std::to_string(p.memory_prefix);
  if (p.paged.enabled()) s += ",paged=" + std::to_string(p.paged.block_size) + "x" + std::to_string(p.paged.max_blocks);
  return s + " " + std::string(dtype_name(p.dtype));
}

// ",name=a:b:c" for a shape's per-sequence counts; nothing for none.
template <class T>
std::string listed(const char* name, const std::vector<T>& xs) {
  std::string s;
  for (const T& x : xs) {
    s += s.empty() ? std::string(",") + name + "=" : std::string(":");
    s += std::to_string(x);
  }
  return s;
}

// The distances of a case: rp = j - M - (i + offset) over j in [M, K), i in [0, Q).
Distances distances(const AttentionParams& p) {
  const std::int64_t lo = -(static_cast<std::int64_t>(p.queries) - 1) - p.query_offset;
  const std::int64_t hi = static_cast<std::int64_t>(p.keys) - 1 - p.memory_prefix - p.query_offset;
  return {lo > 0 ? lo : hi < 0 ? -hi : 0, std::max(std::abs(lo), std::abs(hi))};
}

// The largest |logit| a case can produce: |s|·D·max|q|·max|k| plus the largest bias.
double max_logit(const AttentionBiasTool& family, const AttentionData& d, double max_k) {
  const AttentionParams& p = d.p;
  const double qk = std::abs(static_cast<double>(p.effective_scale())) * p.head_dim * max_abs(d.q);
  return qk * max_k + family.max_bias(p, d.in, qk, distances(p));
}

// lengths: the key lengths of each batch (empty: no padding); with a paged cache, its cache lengths.
// Packed queries (p.total_queries): query_lengths, summing to it.
CheckResult check_attention(Context& ctx, const AttentionBiasTool& family, const AttentionParams& p, const std::vector<std::uint32_t>& lengths,
                            unsigned seed = 5, const std::vector<std::int32_t>& query_lengths = {}) {
  AttentionData d = random_data(family, p, seed);
  if (p.paged.enabled()) make_paged(d, lengths, seed);
  else d.lengths = lengths;
  d.query_lengths = query_lengths;
  const double max_k = max_abs(d.k), max_v = max_abs(d.v);  // (before a cache format's encoding clears them)
  if (p.cache_format) encode_caches(d);
  const AttentionResult want = attention_reference(d.p, d.host());
  d.upload(ctx);
  Recorder r(ctx);
  attention(r, d.p, d.buffers());
  r.submit_and_wait();
  const AttentionResult got = d.download();
  // float32 accumulation: ~1e-5 relative; f16 storage rounds the output once (2^-11). Large logits
  // cost more: the GPU rounds each logit s·q·k + bias to float32 (the reference keeps it in
  // double), an error δ <= 2^-24·max|logit| that moves the softmax weights by Σ|δw| <= 2δ, so the
  // output by 2δ·max|v| and the log-sum-exp by δ (tests/support/tolerance.hpp's reasoning). A bias
  // the GPU computes with float32 transcendentals (KERPLE, Sandwich) adds its own error to δ.
  const double delta = 0x1p-24 * max_logit(family, d, max_k) + family.bias_error(p, d.in, distances(p));
  const double max_value = max_v + max_abs(d.in.rel_values);
  // bf16 storage: 8 significant bits, 2^-9 relative once (the inputs were rounded before the reference).
  const double storage_tol = p.output_dtype() == DType::BF16 ? 8e-3 : p.output_dtype() == DType::F16 ? 1e-3 : 1e-4;
  const double tol_out = storage_tol + 2 * delta * max_value / std::max(1.0, max_abs(want.out));
  const double tol_lse = 1e-4 + 2 * delta / std::max(1.0, max_abs(want.lse));
  // Reported against the bound it is nearer to breaking.
  const double e_out = normalised_error(got.out, want.out), e_lse = normalised_error(got.lse, want.lse);
  if (e_lse / tol_lse > e_out / tol_out) return {e_lse, tol_lse, "max_err"};
  return {e_out, tol_out, "max_err"};
}

// The family of the f16 case that `check --quick` runs (one is enough: the storage is the same in
// every mode): the first that takes a bias input.
AttentionBias quick_f16_family() {
  for (const AttentionBiasInfo& info : attention_biases())
    if (!info.input.empty()) return info.bias;
  return AttentionBias::None;
}

void register_checks(Registry& reg) {
  struct Cfg { std::uint32_t b, h, hkv, q, k, d; bool causal; std::int64_t off; std::uint32_t m; bool padded; };
  const std::vector<Cfg> cfgs = {
      {1, 4, 4, 77, 77, 64, false, 0, 0, false},    // encoder, Q = K, not a multiple of any tile
      {2, 8, 2, 37, 101, 32, true, 64, 0, true},    // grouped-query, last-aligned causal, padding
      {1, 4, 1, 1, 1000, 64, true, 999, 0, false},  // decoding step: split keys, lse merge
      {1, 2, 2, 20, 52, 20, true, 0, 16, false},    // memory prefix of 16 retrieved keys, head_dim / 4 odd
      {2, 2, 1, 1, 300, 12, true, 299, 0, true},    // decoding at a small head_dim, padded
  };
  const AttentionBias f16_family = quick_f16_family();
  for (const auto& c : cfgs)
    for (const AttentionBiasInfo& info : attention_biases())
      for (DType dtype : {DType::F32, DType::F16}) {
        const AttentionBiasTool& family = bias_tool(reg, info.bias);
        AttentionParams p{.batch = c.b, .heads = c.h, .kv_heads = c.hkv, .queries = c.q, .keys = c.k, .head_dim = c.d, .dtype = dtype,
                          .query_offset = c.off, .causal = c.causal, .memory_prefix = c.m, .bias = info.bias};
        family.example(p, static_cast<std::size_t>(&c - cfgs.data()));
        std::vector<std::uint32_t> lengths;
        if (c.padded)
          for (std::uint32_t b = 0; b < p.batch; ++b) lengths.push_back(p.keys - (b * 7) % p.keys);
        // Quick: every bias mode in the kernels that share loads and in those whose lanes take key
        // splits (with the merge), and f16 storage once, at head_dims 20 and 12. Their head_dim / 4
        // is not a multiple of 4, so the kernels keep the bounds of their last, partial group of
        // four words (which 16, 32 and 64 compile away) and lanes own uneven shares of a row.
        // Under GPU-assisted validation lavapipe compiles a head_dim-64 kernel for up to a minute
        // (no bias) or over 5 minutes (Shaw).
        const bool quick = c.d < 32 && (dtype == DType::F32 || info.bias == f16_family);
        reg.checks.push_back({"attention", shape_of(reg, p),
                              [family, p, lengths](Context& ctx) { return check_attention(ctx, family, p, lengths); }, quick});
      }
  // Queries far past their keys (ALiBi's bias near 2^31, where float32 keeps q·k only relative to
  // the nearest key's bias): a few queries, whose keys are split as decoding splits them (quick),
  // and one query over 5,000 keys; f32, every family.
  struct Far { std::uint32_t q, k; };
  for (const Far c : {Far{3, 300}, Far{1, 5000}})
    for (const AttentionBiasInfo& info : attention_biases()) {
      const AttentionBiasTool& family = bias_tool(reg, info.bias);
      AttentionParams p{.heads = 3, .kv_heads = 1, .queries = c.q, .keys = c.k, .head_dim = 20,
                        .query_offset = (std::int64_t{1} << 31) - c.k - c.q, .causal = true, .bias = info.bias};
      family.example(p, 0);
      reg.checks.push_back({"attention", shape_of(reg, p), [family, p](Context& ctx) { return check_attention(ctx, family, p, {}); }, c.k < 1000});
    }
  // A paged cache: sequences of different lengths (one in its first block), a few queries, and
  // decoding over split keys with 48-key blocks (divisions, not shifts).
  struct Paged { std::uint32_t b, h, hkv, q, block_size, max_blocks, d; std::vector<std::uint32_t> lengths; };
  const std::vector<Paged> paged = {{3, 4, 2, 5, 16, 4, 20, {64, 1, 37}}, {2, 2, 1, 1, 48, 27, 64, {1296, 700}}};
  for (const auto& c : paged)
    for (const AttentionBiasInfo& info : attention_biases())
      for (DType dtype : {DType::F32, DType::F16}) {
        const AttentionBiasTool& family = bias_tool(reg, info.bias);
        AttentionParams p{.batch = c.b, .heads = c.h, .kv_heads = c.hkv, .queries = c.q, .keys = c.block_size * c.max_blocks, .head_dim = c.d,
                          .dtype = dtype, .causal = true, .bias = info.bias};
        p.paged = {.block_size = c.block_size, .num_blocks = 0, .max_blocks = c.max_blocks};
        family.example(p, 0);
        // Quick: the paged addressing is the same in every bias mode (the modes' code is the
        // contiguous kernels', which the quick cases above cover): one f32 and one f16 case.
        const bool quick = c.d < 32 && ((dtype == DType::F32 && info.bias == AttentionBias::None) || (dtype == DType::F16 && info.bias == f16_family));
        reg.checks.push_back({"attention", shape_of(reg, p) + listed("lengths", c.lengths),
                              [family, p, lengths = c.lengths](Context& ctx) { return check_attention(ctx, family, p, lengths); }, quick});
      }
  // Packed queries over a paged cache: a prefill chunk, a decoding sequence, an empty one and a
  // short chunk in one call (the envelope's 9 queries).
  const std::vector<std::uint32_t> cache = {40, 9, 1, 64};
  const std::vector<std::int32_t> queries = {9, 1, 0, 5};
  for (const AttentionBiasInfo& info : attention_biases())
    for (DType dtype : {DType::F32, DType::F16}) {
      const AttentionBiasTool& family = bias_tool(reg, info.bias);
      AttentionParams p{.batch = 4, .heads = 4, .kv_heads = 2, .queries = 9, .keys = 64, .head_dim = 20, .dtype = dtype, .causal = true,
                        .bias = info.bias};
      p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 4};
      p.total_queries = 15;
      family.example(p, 0);
      const bool quick = (dtype == DType::F32 && info.bias == AttentionBias::None) || (dtype == DType::F16 && info.bias == f16_family);
      reg.checks.push_back({"attention", shape_of(reg, p) + ",lengths=40:9:1:64,query_lengths=9:1:0:5",
                            [family, p, cache, queries](Context& ctx) { return check_attention(ctx, family, p, cache, 5, queries); }, quick});
    }
  // Caches in each format (q and out f32, f16 or, beside a bf16 cache, bf16): paged decoding over
  // split keys with grouped-query heads, and a contiguous prefill.
  for (CacheFormat f : {CacheFormat::F16, CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3})
    for (bool paged : {true, false}) {
      const AttentionBias bias = paged ? AttentionBias::T5 : AttentionBias::Alibi;
      const AttentionBiasTool& family = bias_tool(reg, bias);
      AttentionParams p{.batch = 2, .heads = 8, .kv_heads = 2, .queries = paged ? 1u : 33u, .keys = paged ? 1024u : 75u, .head_dim = 64,
                        .dtype = f == CacheFormat::F16 ? DType::F32 : f == CacheFormat::BF16 ? DType::BF16 : DType::F16, .causal = true,
                        .bias = bias};
      p.cache_format = f;
      if (cache_format_scaled(f)) {  // values up to 2 into e4m3's range (448)
        p.k_scales = {0.01f, 0.02f};
        p.v_scales = {0.005f, 0.01f};
      }
      if (paged) p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 64};
      family.example(p, 0);
      const std::vector<std::uint32_t> lengths = paged ? std::vector<std::uint32_t>{1000, 77} : std::vector<std::uint32_t>{};
      reg.checks.push_back({"attention", shape_of(reg, p) + ",kv=" + std::string(cache_format_name(f)) + (paged ? ",lengths=1000:77" : ""),
                            [family, p, lengths](Context& ctx) { return check_attention(ctx, family, p, lengths); }, f == CacheFormat::Q8_0});
    }
}

// One random fused attention: every bias mode, f32 or f16, any head_dim up to the maximum,
// grouped-query heads, long K, memory prefixes, causal masks with offsets near the limit, key
// padding down to empty rows, and key splits chosen or forced.
CheckCase draw_case(const Registry& reg, FuzzRng& g) {
  const auto families = attention_biases();
  AttentionParams p;
  p.bias = families[g.below(families.size())].bias;
  const AttentionBiasTool& family = bias_tool(reg, p.bias);
  p.dtype = g.float_dtype();
  p.head_dim = 4 * g.size(1, AttentionParams::kMaxHeadDim / 4);
  // Multiply-adds of one case (the reference's and the GPU's): rows * keys * head_dim.
  const std::uint64_t work = g.max_elements() * 16;
  p.keys = g.size(1, std::min<std::uint64_t>(kFuzzMaxKeys, work / p.head_dim));
  const std::uint64_t per_row = std::uint64_t{p.keys} * p.head_dim;
  p.kv_heads = g.size(1, std::min<std::uint64_t>(8, work / per_row));
  p.heads = p.kv_heads * g.size(1, std::min<std::uint64_t>(4, work / (per_row * p.kv_heads)));
  p.queries = g.size(1, std::min<std::uint64_t>(2048, work / (per_row * p.heads)));
  // Inputs that grow with the shape (distance rows, a dense bias) within the case's budget too.
  while (p.queries > 1 && p.bias_elements() > g.max_elements()) p.queries /= 2;
  p.batch = g.size(1, std::min<std::uint64_t>(4, work / (per_row * p.heads * p.queries)));
  p.causal = g.chance(0.5);
  if (g.chance(0.25)) {  // a paged cache: its capacity rounds the keys up to whole blocks
    p.paged.block_size = 16 * g.size(1, 16);
    p.paged.max_blocks = (p.keys + p.paged.block_size - 1) / p.paged.block_size;
    p.keys = p.paged.max_blocks * p.paged.block_size;
  } else {
    if (g.chance(0.3)) p.memory_prefix = g.size(1, p.keys);
    constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
    p.query_offset = g.offset(std::int64_t{p.keys} - kMax, kMax - p.queries);
  }
  if (g.chance(0.3)) p.scale = g.pick({1.0f, 0.01f});
  if (g.chance(0.3)) {  // forced splits, within what validate() allows: at most 8192 keys per split
    const std::uint32_t fewest = (p.keys + AttentionParams::kMaxKeysPerSplit - 1) / AttentionParams::kMaxKeysPerSplit;
    p.key_splits = g.size(fewest, std::min(p.keys, AttentionMergeParams::kMaxParts));
  }
  family.draw(p, g);
  std::vector<std::uint32_t> lengths;
  if (p.paged.enabled() || g.chance(0.3))
    for (std::uint32_t b = 0; b < p.batch; ++b) lengths.push_back(static_cast<std::uint32_t>(g.offset(0, p.keys)));
  // Packed queries over the paged cache: each sequence up to its cache length (0 allowed).
  std::vector<std::int32_t> query_lengths;
  if (p.paged.enabled() && g.chance(0.5)) {
    for (std::uint32_t b = 0; b < p.batch; ++b)
      query_lengths.push_back(static_cast<std::int32_t>(g.offset(0, std::min<std::int64_t>(p.queries, lengths[b]))));
    for (std::int32_t n : query_lengths) p.total_queries += static_cast<std::uint32_t>(n);
    if (p.total_queries == 0) {  // a token at least: the buffers hold one
      lengths[0] = std::max(lengths[0], 1u);
      query_lengths[0] = p.total_queries = 1;
    }
  }
  std::string shape = shape_of(reg, p) + (p.key_splits ? ",splits=" + std::to_string(p.key_splits) : "");
  shape += listed("lengths", lengths) + listed("query_lengths", query_lengths);
  const unsigned seed = g.data_seed();
  return {"attention", shape,
          [family, p, lengths, seed, query_lengths](Context& ctx) { return check_attention(ctx, family, p, lengths, seed, query_lengths); }};
}

}  // namespace

void register_attention_checks(Registry& reg) {
  register_checks(reg);
  reg.fuzz.push_back({"attention", [&reg](FuzzRng& g) { return draw_case(reg, g); }});
}

}  // namespace relpos::tool
