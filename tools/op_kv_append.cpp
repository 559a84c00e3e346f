// kv_append in the tool: its check cases (the GPU against the reference: caches, and the queries
// rotated in place), which also bring its pipelines into `relpos stats`.
#include <algorithm>
#include <numeric>
#include <random>

#include "registry.hpp"

namespace relpos::tool {
namespace {

CheckResult check_kv_append(Context& ctx, const KvAppendParams& given, const std::vector<std::int32_t>& lengths) {
  KvAppendParams p = given;
  p.paged.num_blocks = p.batch * p.paged.max_blocks + 1;
  std::mt19937 rng(11);
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

}  // namespace

void register_kv_append(CLI::App&, Registry& reg) {
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
