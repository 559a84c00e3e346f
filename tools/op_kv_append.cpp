// kv_append in the tool: its check cases (the GPU against the reference: caches, and the queries
// rotated in place), which also bring its pipelines into `relpos stats`, its fuzz family, and the
// registration of its run command (run_kv_append.cpp) and engine benchmark (bench_engine.cpp).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <numeric>
#include <random>

#include "fuzz.hpp"
#include "registry.hpp"
#include "rope_scaling_flags.hpp"

namespace relpos::tool {
namespace {

// A check's random data: values in [-2, 2] rounded to the inputs' dtype, and a block table in a
// shuffled order (the cache one block larger than the table holds).
struct AppendData {
  std::mt19937 rng;
  DType dtype;
  std::vector<float> values(std::size_t n) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> x(n);
    for (float& e : x) e = u(rng);
    return rounded_to_storage(x, dtype);
  }
  std::vector<std::int32_t> table(KvAppendParams& p) {
    p.paged.num_blocks = p.batch * p.paged.max_blocks + 1;
    std::vector<std::int32_t> t(p.paged.num_blocks);
    std::iota(t.begin(), t.end(), 0);
    std::shuffle(t.begin(), t.end(), rng);
    t.resize(std::size_t{p.batch} * p.paged.max_blocks);
    return t;
  }
};

CheckResult check_kv_append(Context& ctx, const KvAppendParams& given, const std::vector<std::int32_t>& lengths, unsigned seed = 11) {
  KvAppendParams p = given;
  AppendData data{std::mt19937(seed), p.dtype};
  const std::vector<std::int32_t> table = data.table(p);
  auto fill = [&](std::size_t n) { return data.values(n); };
  const std::size_t cache = p.paged.cache_elements(p.kv_heads, p.head_dim), row = std::size_t{p.batch} * p.new_tokens * p.head_dim;
  std::vector<float> kc = fill(cache), vc = fill(cache), k = fill(row * p.kv_heads), v = fill(row * p.kv_heads), q = fill(row * p.heads);
  Buffer bkc = make_float_buffer(ctx, kc, p.dtype), bvc = make_float_buffer(ctx, vc, p.dtype), bk = make_float_buffer(ctx, k, p.dtype),
         bv = make_float_buffer(ctx, v, p.dtype), bq = make_float_buffer(ctx, q, p.dtype), bt = make_buffer(ctx, table),
         bl = make_buffer(ctx, lengths);
  kv_append_reference(p, {kc, vc, k, v, table, lengths, p.apply_rope ? std::span<float>(q) : std::span<float>()});
  Recorder r(ctx);
  kv_append(r, p, {&bkc, &bvc, &bk, &bv, &bt, &bl, p.apply_rope ? &bq : nullptr});
  r.submit_and_wait();
  // The rotation's sincos within ~1e-7 of the reference's double; f16 rounds each stored value.
  const double tol = p.dtype == DType::F16 ? 0x1p-10 + 1e-6 : 1e-6;
  const double e = std::max({normalised_error(download_floats(bkc, kc.size(), p.dtype), kc),
                             normalised_error(download_floats(bvc, vc.size(), p.dtype), vc),
                             normalised_error(download_floats(bq, q.size(), p.dtype), q)});
  return {e, tol, "max_err"};
}

// An append into a cache of a format (bf16, q8_0, fp8_e4m3), ragged or not, lengths advanced on the
// device or not: the caches' bytes against the reference's encoding. Values are encoded exactly as
// the host does, so their bytes must be equal (a q8_0 tie rounded the other way is one byte); keys
// without RoPE too; rotated keys within one step of the format (RoPE's error may cross a rounding
// point), the queries within RoPE's error. A mismatch of an exact byte or length counts as error 1.
CheckResult check_kv_append_format(Context& ctx, const KvAppendParams& given, const std::vector<std::int32_t>& lengths,
                                   const std::vector<std::int32_t>& new_tokens, unsigned seed = 13) {
  KvAppendParams p = given;
  const CacheFormat f = p.cache();
  AppendData data{std::mt19937(seed), p.dtype};
  const std::vector<std::int32_t> table = data.table(p);
  auto fill = [&](std::size_t n) { return data.values(n); };
  const std::uint64_t row_bytes = cache_row_bytes(f, p.head_dim), rows = p.cache_bytes() / row_bytes;
  auto scale_of = [&](const std::vector<float>& scales, std::uint64_t row) { return scales.empty() ? 1.0f : scales[row % p.kv_heads]; };
  std::vector<std::uint8_t> kc(p.cache_bytes()), vc(p.cache_bytes());
  for (std::uint64_t r = 0; r < rows; ++r) {
    encode_cache_row(f, fill(p.head_dim), std::span(kc).subspan(r * row_bytes, row_bytes), scale_of(p.k_scales, r));
    encode_cache_row(f, fill(p.head_dim), std::span(vc).subspan(r * row_bytes, row_bytes), scale_of(p.v_scales, r));
  }
  const std::uint64_t in_rows = p.input_rows() * p.head_dim;
  const std::vector<float> k = fill(in_rows * p.kv_heads), v = fill(in_rows * p.kv_heads);
  std::vector<float> q = fill(in_rows * p.heads);
  Buffer bkc = make_buffer(ctx, kc), bvc = make_buffer(ctx, vc), bk = make_float_buffer(ctx, k, p.dtype), bv = make_float_buffer(ctx, v, p.dtype),
         bq = make_float_buffer(ctx, q, p.dtype), bt = make_buffer(ctx, table), bl = make_buffer(ctx, lengths), bn;
  KvAppendBuffers b{&bkc, &bvc, &bk, &bv, &bt, &bl, p.apply_rope ? &bq : nullptr};
  if (p.ragged) b.new_tokens = &(bn = make_buffer(ctx, new_tokens));
  std::vector<float> none;
  std::vector<std::int32_t> advanced(p.advance_lengths ? p.batch : 0);
  KvAppendHostData d{none, none, k, v, table, lengths, p.apply_rope ? std::span<float>(q) : std::span<float>()};
  d.k_cache_bytes = kc;
  d.v_cache_bytes = vc;
  d.new_tokens = new_tokens;
  d.advanced_lengths = advanced;
  kv_append_reference(p, d);
  Recorder r(ctx);
  kv_append(r, p, b);
  r.submit_and_wait();
  const std::vector<std::uint8_t> got_k = bkc.download<std::uint8_t>(kc.size()), got_v = bvc.download<std::uint8_t>(vc.size());
  const std::vector<std::int32_t> got_lengths = bl.download<std::int32_t>(p.batch);
  if (got_v != vc || got_lengths != (p.advance_lengths ? advanced : lengths) || (!p.apply_rope && got_k != kc)) return {1.0, 0.0, "max_err"};
  if (!p.apply_rope) return {0.0, 0.0, "max_err"};
  const CacheDecodeParams keys{f, static_cast<std::uint32_t>(rows), p.kv_heads, p.head_dim, p.k_scales};
  auto decoded = [&](const std::vector<std::uint8_t>& bytes) {
    std::vector<float> out(rows * p.head_dim);
    decode_cache_reference(keys, bytes, out);
    return out;
  };
  const double step = f == CacheFormat::Q8_0 ? 2.0 / 127.0 : f == CacheFormat::FP8_E4M3 ? 0.0625 : 8e-3;  // bf16: 2^-7
  // One tolerance for both: the keys' error is scaled so that one step of the format reads as the
  // queries' tolerance.
  const double q_tol = p.dtype == DType::F16 ? 0x1p-10 + 1e-6 : 1e-6;
  const double e = std::max(normalised_error(decoded(got_k), decoded(kc)) / step * q_tol,
                            normalised_error(download_floats(bq, q.size(), p.dtype), q));
  return {e, q_tol, "max_err"};
}

// One random append: any even head_dim and rotary_dim, both pairings, every scaling, grouped-query
// heads, blocks of 16 to 256 keys, steps of 1 to 64 tokens, lengths from empty to full, f32 or f16.
CheckCase draw_case(FuzzRng& g) {
  KvAppendParams p;
  p.dtype = g.float_dtype();
  p.head_dim = 2 * g.size(1, AttentionParams::kMaxHeadDim / 2);
  // A third of the time a cache format (q8_0's head_dim a multiple of 32), its bytes checked
  // against the host's encoding, ragged or not, lengths advanced on the device or not.
  if (g.chance(0.35)) {
    p.cache_format = g.pick({CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3});
    if (p.cache() == CacheFormat::Q8_0) p.head_dim = std::max(32u, p.head_dim / 32 * 32);
    p.ragged = g.chance(0.5);
    p.advance_lengths = g.chance(0.5);
  }
  p.kv_heads = g.size(1, 8);
  if (p.cache() == CacheFormat::FP8_E4M3)
    for (std::uint32_t h = 0; h < p.kv_heads; ++h) {
      p.k_scales.push_back(static_cast<float>(g.real(0.002, 0.05)));
      p.v_scales.push_back(static_cast<float>(g.real(0.002, 0.05)));
    }
  p.heads = p.kv_heads * g.size(1, 4);
  p.batch = g.size(1, 4);
  p.paged.block_size = 16 * g.size(1, 16);
  const std::uint64_t cache_rows = std::max<std::uint64_t>(1, g.max_elements() / (std::uint64_t{p.kv_heads} * p.head_dim * p.paged.block_size * p.batch));
  p.paged.max_blocks = g.size(1, std::min<std::uint64_t>(cache_rows, 64));
  p.new_tokens = g.size(1, std::min<std::uint32_t>(64, p.capacity()));
  p.apply_rope = g.chance(0.8);
  p.rope.style = g.chance(0.5) ? RopeStyle::NeoX : RopeStyle::GptJ;
  if (g.chance(0.3)) p.rope.rotary_dim = 2 * g.size(1, p.head_dim / 2);
  p.rope.base = g.pick({10000.0, 500000.0, 1.5});
  draw_rope_scaling(g, p.rope.scaling, p.rope_params(p.kv_heads).rot_dim(), true);
  std::vector<std::int32_t> lengths, counts;
  std::string shape = "B=" + std::to_string(p.batch) + ",H=" + std::to_string(p.heads) + "/" + std::to_string(p.kv_heads) +
                      ",T=" + std::to_string(p.new_tokens) + ",D=" + std::to_string(p.head_dim) + ",block=" + std::to_string(p.paged.block_size) +
                      "x" + std::to_string(p.paged.max_blocks) + (p.apply_rope ? ",rope" : "") +
                      (p.cache_format ? "," + std::string(cache_format_name(p.cache())) + " cache" : "") + (p.advance_lengths ? ",advance" : "") +
                      (p.ragged ? ",counts=" : ",lengths=");
  std::uint32_t total = 0;
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    counts.push_back(p.ragged ? static_cast<std::int32_t>(g.between(0, p.new_tokens)) : static_cast<std::int32_t>(p.new_tokens));
    total += static_cast<std::uint32_t>(counts.back());
    lengths.push_back(static_cast<std::int32_t>(g.offset(0, p.capacity() - counts.back())));
    if (p.ragged) shape += (b ? ":" : "") + std::to_string(counts.back()) + "@" + std::to_string(lengths.back());
    else shape += (b ? ":" : "") + std::to_string(lengths.back());
  }
  if (p.ragged) p.packed_tokens = std::min(p.batch * p.new_tokens, std::max(1u, total + static_cast<std::uint32_t>(g.below(3))));
  else counts.clear();
  const unsigned seed = g.data_seed();
  if (p.cache_format)
    return {"kv-append", shape + " " + std::string(dtype_name(p.dtype)),
            [p, lengths, counts, seed](Context& ctx) { return check_kv_append_format(ctx, p, lengths, counts, seed); }};
  return {"kv-append", shape + " " + std::string(dtype_name(p.dtype)), [p, lengths, seed](Context& ctx) { return check_kv_append(ctx, p, lengths, seed); }};
}

}  // namespace

void register_engine_decode_bench(Registry& reg);            // bench_engine.cpp
void register_kv_append_run(CLI::App& run, Registry& reg);  // run_kv_append.cpp

RELPOS_TOOL_FAMILY(kv_append) {
  register_kv_append_run(run, reg);
  reg.fuzz.push_back({"kv-append", draw_case});
  register_engine_decode_bench(reg);
  struct Rope { const char* name; bool apply; RopeStyle style; std::uint32_t rotary_dim; RopeScaling scaling; };
  const Rope ropes[] = {{"no rope", false, RopeStyle::NeoX, 0, RopeScaling::None},
                        {"neox llama3", true, RopeStyle::NeoX, 0, RopeScaling::Llama3},
                        {"gptj rotary_dim 24", true, RopeStyle::GptJ, 24, RopeScaling::None}};
  for (const Rope& rope : ropes)
    for (DType dtype : {DType::F32, DType::F16})
      for (std::uint32_t tokens : {1u, 5u}) {
        KvAppendParams p{.batch = 3, .heads = 4, .kv_heads = 2, .new_tokens = tokens, .head_dim = 64, .dtype = dtype, .apply_rope = rope.apply};
        p.paged = {.block_size = tokens == 1 ? 16u : 48u, .num_blocks = 0, .max_blocks = 4};
        p.rope.style = rope.style;
        p.rope.rotary_dim = rope.rotary_dim;
        if (rope.scaling == RopeScaling::Llama3) p.rope.scaling = {.type = RopeScaling::Llama3, .factor = 8.0, .original_max_position = 64};
        const std::vector<std::int32_t> lengths = {0, 15, static_cast<std::int32_t>(p.capacity() - tokens)};
        const std::string shape = "B=3,H=4/2,T=" + std::to_string(tokens) + ",D=64,block=" + std::to_string(p.paged.block_size) + "," + rope.name +
                                  " " + std::string(dtype_name(dtype));
        reg.checks.push_back({"kv-append", shape, [p, lengths](Context& ctx) { return check_kv_append(ctx, p, lengths); }, true});
      }
  // The cache formats (which also bring their pipelines into `relpos stats`): one plain append of
  // f32 values, and one ragged step of f16 values with RoPE whose lengths advance on the device.
  for (const CacheFormat f : {CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3})
    for (const bool ragged : {false, true}) {
      KvAppendParams p{.batch = 3, .heads = 4, .kv_heads = 2, .new_tokens = 5, .head_dim = 64, .dtype = ragged ? DType::F16 : DType::F32,
                       .apply_rope = ragged};
      p.cache_format = f;
      p.paged = {.block_size = 16, .num_blocks = 0, .max_blocks = 4};
      if (f == CacheFormat::FP8_E4M3) {
        p.k_scales = {0.004f, 0.03f};  // values past 448 · 0.004 saturate
        p.v_scales = {0.02f, 0.0035f};
      }
      std::vector<std::int32_t> counts;
      if (ragged) {
        p.ragged = true;
        p.advance_lengths = true;
        counts = {5, 0, 3};
        p.packed_tokens = 8;
        p.rope.scaling = {.type = RopeScaling::Llama3, .factor = 8.0, .original_max_position = 64};
      }
      const std::vector<std::int32_t> lengths = {0, 15, static_cast<std::int32_t>(p.capacity() - 5)};
      const std::string shape = "B=3,H=4/2,T=5,D=64,block=16," + std::string(cache_format_name(f)) + " cache" +
                                (ragged ? ",ragged 5:0:3,advance,neox llama3 f16" : ",no rope f32");
      reg.checks.push_back({"kv-append", shape, [p, lengths, counts](Context& ctx) { return check_kv_append_format(ctx, p, lengths, counts); }, true});
    }
}

}  // namespace relpos::tool
