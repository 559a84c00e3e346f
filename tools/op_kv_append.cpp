// kv_append in the tool: its check cases (the GPU against the reference: caches, and the queries
// rotated in place), which also bring its pipelines into `relpos stats`, its fuzz family, and the
// registration of its run command (run_kv_append.cpp) and engine benchmark (bench_engine.cpp).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <numeric>
#include <random>

#include "fuzz.hpp"
#include "registry.hpp"

namespace relpos::tool {
namespace {

CheckResult check_kv_append(Context& ctx, const KvAppendParams& given, const std::vector<std::int32_t>& lengths, unsigned seed = 11) {
  KvAppendParams p = given;
  p.paged.num_blocks = p.batch * p.paged.max_blocks + 1;
  std::mt19937 rng(seed);
  auto fill = [&](std::size_t n) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> x(n);
    for (float& e : x) e = u(rng);
    return rounded_to_storage(x, p.dtype);
  };
  std::vector<std::int32_t> table(p.paged.num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  table.resize(std::size_t{p.batch} * p.paged.max_blocks);
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

// One random append: any even head_dim and rotary_dim, both pairings, every scaling, grouped-query
// heads, blocks of 16 to 256 keys, steps of 1 to 64 tokens, lengths from empty to full, f32 or f16.
CheckCase draw_case(FuzzRng& g) {
  KvAppendParams p;
  p.dtype = g.float_dtype();
  p.head_dim = 2 * g.size(1, AttentionParams::kMaxHeadDim / 2);
  p.kv_heads = g.size(1, 8);
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
  auto& s = p.rope.scaling;
  s.type = static_cast<RopeScaling>(g.below(5));
  if (s.type == RopeScaling::DynamicNtk && p.rope_params(p.kv_heads).rot_dim() < 4) s.type = RopeScaling::Linear;
  s.factor = g.real(1.0, 16.0);
  s.original_max_position = g.size(1, 32768);
  if (s.type == RopeScaling::DynamicNtk) s.seq_len = g.size(1, 1u << 24);
  std::vector<std::int32_t> lengths;
  std::string shape = "B=" + std::to_string(p.batch) + ",H=" + std::to_string(p.heads) + "/" + std::to_string(p.kv_heads) +
                      ",T=" + std::to_string(p.new_tokens) + ",D=" + std::to_string(p.head_dim) + ",block=" + std::to_string(p.paged.block_size) +
                      "x" + std::to_string(p.paged.max_blocks) + (p.apply_rope ? ",rope" : "") + ",lengths=";
  for (std::uint32_t b = 0; b < p.batch; ++b) {
    lengths.push_back(static_cast<std::int32_t>(g.offset(0, p.capacity() - p.new_tokens)));
    shape += (b ? ":" : "") + std::to_string(lengths.back());
  }
  const unsigned seed = g.data_seed();
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
}

}  // namespace relpos::tool
