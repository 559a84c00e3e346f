// `relpos run kv-append`: a step's keys and values (per-sequence counts with --new-tokens) into a
// paged cache of any format (docs/paged_attention.md, "Tool"), RoPE on the keys and, with --q, on
// the queries. The caches are read from .npy and written back in the same format: float32/float16
// for f32/f16, uint16 bit patterns for bf16, uint8 rows (ggml's q8_0 blocks, or fp8 e4m3 bytes)
// for q8_0 and fp8_e4m3 with --k-scale/--v-scale.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>

#include "cache_npy.hpp"
#include "registry.hpp"
#include "rope_scaling_flags.hpp"
#include "relpos/relpos.hpp"

namespace relpos::tool {
namespace {

struct KvAppendCli {
  RunOptions o;
  std::string k_cache, v_cache, k, v, q, table, lengths, new_tokens, kv_dtype, k_scale, v_scale, rope = "none";
  std::string v_out, q_out, lengths_out;
  double base = 10000.0;
  std::uint32_t rotary_dim = 0;
  CLI::Option* base_flag = nullptr;  // given or not: RoPE's own flags need --rope
  CLI::Option* rotary_dim_flag = nullptr;
  RopeScalingFlags scaling;
  RopeScalingParams scaling_values;
  bool advance = false;
};

std::vector<float> read_scales(const std::string& flag, const std::string& path) {
  if (path.empty()) return {};
  const NpyArray a = read_npy(path);
  if (a.descr != "<f4") throw InvalidArgument(flag + " " + path + ": dtype " + a.descr + " must be float32 [kv_heads]");
  if (a.shape.size() != 1) throw InvalidArgument(flag + " " + path + ": must be 1-D float32 [kv_heads]");
  return a.to_f32(flag + " " + path);
}

void run_kv_append(KvAppendCli& c) {
  const NpyArray k = read_npy(c.k), v = read_npy(c.v);
  const NpyArray table = read_npy(c.table);
  KvAppendParams p;
  p.ragged = !c.new_tokens.empty();
  if (k.descr != "<f4" && k.descr != "<f2") throw InvalidArgument("--k " + c.k + ": dtype " + k.descr + " must be float32 or float16");
  p.dtype = k.descr == "<f2" ? DType::F16 : DType::F32;
  if (v.descr != k.descr || v.shape != k.shape) throw InvalidArgument("--v " + c.v + ": must have --k's dtype and shape");
  const std::size_t dims = p.ragged ? 3 : 4;
  if (k.shape.size() != dims)
    throw InvalidArgument("--k " + c.k + ": must be " + (p.ragged ? "[total_tokens, kv_heads, head_dim] with --new-tokens" : "[batch, kv_heads, new_tokens, head_dim]"));
  if (table.shape.size() != 2) throw InvalidArgument("--block-table " + c.table + ": must be int32 [batch, max_blocks]");
  p.batch = dimension32("--block-table batch", table.shape[0]);
  p.paged.max_blocks = dimension32("--block-table max_blocks", table.shape[1]);
  p.kv_heads = dimension32("--k kv_heads", k.shape[p.ragged ? 1 : 1]);
  p.head_dim = dimension32("--k head_dim", k.shape.back());
  p.heads = p.kv_heads;
  const std::vector<std::int32_t> table_v = table.to_i32("--block-table " + c.table), lengths_v = read_sequence_counts("--cache-lengths", c.lengths);
  std::vector<std::int32_t> counts;
  if (p.ragged) {
    counts = read_sequence_counts("--new-tokens", c.new_tokens);
    p.packed_tokens = dimension32("--k total_tokens", k.shape[0]);
    std::int32_t most = 1;
    std::int64_t sum = 0;
    for (std::int32_t n : counts) most = std::max(most, n), sum += n;
    // Every row of --k is a sequence's: rows past the counts' sum would be dropped unread.
    const bool counted = std::all_of(counts.begin(), counts.end(), [](std::int32_t n) { return n >= 0; });  // else the op names the entry
    if (counted && static_cast<std::uint64_t>(sum) < k.shape[0])
      throw InvalidArgument("--new-tokens " + c.new_tokens + ": sum to " + std::to_string(sum) + ", --k " + c.k + " holds " +
                            std::to_string(k.shape[0]) + " tokens (they must match)");
    p.new_tokens = static_cast<std::uint32_t>(most);
  } else {
    if (k.shape[0] != p.batch) throw InvalidArgument("--k " + c.k + ": batch " + std::to_string(k.shape[0]) + " must be --block-table's " + std::to_string(p.batch));
    p.new_tokens = dimension32("--k new_tokens", k.shape[2]);
  }
  // The cache's format: --kv-dtype, or the file's float dtype.
  p.cache_format = !c.kv_dtype.empty() ? cache_format_flag(c.kv_dtype) : read_npy(c.k_cache).descr == "<f2" ? CacheFormat::F16 : CacheFormat::F32;
  check_cache_head_dim(*p.cache_format, p.head_dim, "--k head_dim");  // before the rows' shape follows from it
  std::vector<std::uint64_t> k_shape, v_shape;
  std::vector<std::uint8_t> k_bytes = read_cache_npy("--k-cache", c.k_cache, *p.cache_format, k_shape);
  std::vector<std::uint8_t> v_bytes = read_cache_npy("--v-cache", c.v_cache, *p.cache_format, v_shape);
  if (k_shape.size() != 4 || k_shape[2] != p.kv_heads || k_shape[3] != p.head_dim || v_shape != k_shape)
    throw InvalidArgument("--k-cache " + c.k_cache + ": the caches must be [num_blocks, block_size, kv_heads = " + std::to_string(p.kv_heads) +
                          ", row of head_dim = " + std::to_string(p.head_dim) + "] (both alike)");
  p.paged.num_blocks = dimension32("--k-cache num_blocks", k_shape[0]);
  p.paged.block_size = dimension32("--k-cache block_size", k_shape[1]);
  p.k_scales = read_scales("--k-scale", c.k_scale);
  p.v_scales = read_scales("--v-scale", c.v_scale);
  p.advance_lengths = c.advance;
  NpyArray q;
  std::vector<float> q_values;
  if (!c.q.empty()) {
    q = read_npy(c.q);
    if (q.descr != k.descr || q.shape.size() != dims) throw InvalidArgument("--q " + c.q + ": must have --k's dtype and layout");
    p.heads = dimension32("--q heads", q.shape[p.ragged ? 1 : 1]);
    q_values = q.to_f32("--q " + c.q);
  }
  p.apply_rope = c.rope != "none";
  p.rope.style = c.rope == "gptj" ? RopeStyle::GptJ : RopeStyle::NeoX;
  p.rope.base = c.base;
  p.rope.rotary_dim = c.rotary_dim;
  if (!c.q.empty() && !p.apply_rope) throw InvalidArgument("--q " + c.q + ": the queries are only rotated with --rope neox|gptj");
  for (const CLI::Option* flag : {c.base_flag, c.rotary_dim_flag})
    if (flag->count() > 0 && !p.apply_rope) throw InvalidArgument(flag->get_name() + ": applies only with --rope neox|gptj");
  if (const std::string given = c.scaling.given(); !given.empty() && !p.apply_rope)
    throw InvalidArgument(given + ": RoPE's frequency scaling applies only with --rope neox|gptj");
  p.rope.scaling = c.scaling_values;
  apply_rope_scaling_flags(c.scaling, p.rope.scaling);
  if (p.apply_rope) {  // new key t of sequence b sits at position cache_lengths[b] + t
    std::int64_t last = 0;
    for (std::size_t b = 0; b < std::min<std::size_t>(lengths_v.size(), p.batch); ++b)
      if (const std::int64_t n = p.ragged ? (b < counts.size() ? counts[b] : 0) : p.new_tokens; n > 0) last = std::max(last, lengths_v[b] + n - 1);
    default_seq_len(c.scaling, p.rope.scaling, last);
  }
  p.validate();
  check_append_table(p, table_v, lengths_v, p.ragged ? std::span<const std::int32_t>(counts) : std::span<const std::int32_t>());

  std::vector<std::int32_t> lengths_after(p.advance_lengths ? p.batch : 0);
  const std::vector<float> kf = k.to_f32("--k " + c.k), vf = v.to_f32("--v " + c.v);
  if (c.o.reference) {
    std::vector<float> none;
    KvAppendHostData d{none, none, kf, vf, table_v, lengths_v, q_values};
    d.k_cache_bytes = k_bytes;
    d.v_cache_bytes = v_bytes;
    d.new_tokens = counts;
    d.advanced_lengths = lengths_after;
    kv_append_reference(p, d);
  } else {
    Context& ctx = tool_context();
    Buffer bkc = make_buffer(ctx, k_bytes), bvc = make_buffer(ctx, v_bytes), bk = make_float_buffer(ctx, kf, p.dtype),
           bv = make_float_buffer(ctx, vf, p.dtype), bt = make_buffer(ctx, table_v), bl = make_buffer(ctx, lengths_v),
           bq = make_float_buffer(ctx, q_values.empty() ? std::vector<float>{0.0f} : q_values, p.dtype),
           bn = make_buffer(ctx, counts.empty() ? std::vector<std::int32_t>{0} : counts);
    Recorder r(ctx);
    kv_append(r, p, {&bkc, &bvc, &bk, &bv, &bt, &bl, q_values.empty() ? nullptr : &bq, p.ragged ? &bn : nullptr});
    r.submit_and_wait();
    bkc.download(k_bytes.data(), k_bytes.size());
    bvc.download(v_bytes.data(), v_bytes.size());
    if (!q_values.empty()) q_values = download_floats(bq, q_values.size(), p.dtype);
    if (p.advance_lengths) lengths_after = bl.download<std::int32_t>(p.batch);
  }
  write_cache_npy(c.o.out, *p.cache_format, k_shape, k_bytes);
  write_cache_npy(c.v_out, *p.cache_format, v_shape, v_bytes);
  if (!c.q_out.empty()) write_floats(c.q_out, q_values, q.shape, p.dtype);
  if (!c.lengths_out.empty()) {
    const std::vector<std::uint64_t> shape = {p.batch};
    write_npy(c.lengths_out, DType::I32, shape, (p.advance_lengths ? lengths_after : lengths_v).data());
  }
}

}  // namespace

void register_kv_append_run(CLI::App& run, Registry& reg) {
  auto c = std::make_shared<KvAppendCli>();
  auto* cmd = run.add_subcommand("kv-append", "append a step's keys and values to a paged KV cache of any format (RoPE on the keys)");
  cmd->add_option("--k-cache", c->k_cache, "the K cache .npy [num_blocks, block_size, kv_heads, row] in --kv-dtype's file type")->required();
  cmd->add_option("--v-cache", c->v_cache, "the V cache .npy, as --k-cache")->required();
  cmd->add_option("--k", c->k, "new keys: float32/16 [batch, kv_heads, T, head_dim], or [total_tokens, kv_heads, head_dim] with --new-tokens")->required();
  cmd->add_option("--v", c->v, "new values, as --k")->required();
  cmd->add_option("--q", c->q, "queries rotated in place with the keys: [batch, heads, T, head_dim] or [total_tokens, heads, head_dim]");
  cmd->add_option("--block-table", c->table, "int32 [batch, max_blocks] .npy")->required();
  cmd->add_option("--cache-lengths", c->lengths, "int32 [batch] .npy: each sequence's keys before the append")->required();
  cmd->add_option("--new-tokens", c->new_tokens, "int32 [batch] .npy: each sequence's new tokens (ragged; --k packed token-major)");
  cmd->add_option("--kv-dtype", c->kv_dtype,
                  "cache format: f32, f16 (float .npy), bf16 (uint16 bit patterns), q8_0 (uint8 [.., D/32*34], ggml's blocks), "
                  "fp8_e4m3 (uint8 [.., D], with --k-scale/--v-scale); default: the cache file's float dtype")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "fp8_e4m3"}));
  cmd->add_option("--k-scale", c->k_scale, "fp8_e4m3: float32 [kv_heads] .npy of the K cache's scales");
  cmd->add_option("--v-scale", c->v_scale, "fp8_e4m3: float32 [kv_heads] .npy of the V cache's scales");
  cmd->add_option("--rope", c->rope, "none (default), neox or gptj: RoPE on the keys (and --q) at their positions")
      ->check(CLI::IsMember({"none", "neox", "gptj"}));
  c->base_flag = add_number(*cmd, "--base", c->base, "rope_theta (default 10000)");
  c->rotary_dim_flag = add_number(*cmd, "--rotary-dim", c->rotary_dim, "features that rotate (even, <= head_dim; default all)");
  add_rope_scaling_flags(*cmd, c->scaling, c->scaling_values);
  cmd->add_flag("--advance-lengths", c->advance, "advance the lengths on the device (written by --lengths-out)");
  add_run_options(*cmd, c->o);  // --out: the K cache after the append
  add_output(*cmd, c->o, "--v-out", c->v_out, "the V cache after the append (.npy, --v-cache's type)")->required();
  add_output(*cmd, c->o, "--q-out", c->q_out, "the rotated queries (.npy, --q's type)");
  add_output(*cmd, c->o, "--lengths-out", c->lengths_out, "int32 [batch] .npy: the lengths after the call (advanced with --advance-lengths)");
  reg.runs.push_back({cmd, [c] { run_kv_append(*c); }});
}

}  // namespace relpos::tool
