// relpos stats: what the device's compiler makes of every pipeline the library would use there.
// The ops run on a compile-only context (Tuning::compile_only: they plan, check and create
// their pipelines, and record nothing), so any device works, also one that cannot run anything:
// RADV's null hardware is AMD's real compiler without a GPU.
#include <cstdio>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>

#include "registry.hpp"
#include "stats_summary.hpp"

namespace relpos::tool {
namespace {

using Key = std::pair<std::string, std::vector<std::pair<std::string, std::uint32_t>>>;

Key key_of(const PipelineReport& r) { return {r.shader, r.constants}; }

// 64-bit integers (counts, the driver's pipeline hash) exactly, in JSON and in text.
nlohmann::ordered_json json_value(const PipelineStatistic& s) {
  switch (s.integer) {
    case PipelineStatistic::Integer::Signed: return s.signed_value;
    case PipelineStatistic::Integer::Unsigned: return s.unsigned_value;
    case PipelineStatistic::Integer::None: break;
  }
  return s.value;
}
std::string text_value(const PipelineStatistic& s) {
  if (s.integer != PipelineStatistic::Integer::None) return json_value(s).dump();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s.value);
  return buf;
}

// One fused attention call (and, decoding, a decode plan, whose kernels keep their lanes fixed),
// recorded only: the pipelines it creates are what the survey reports.
void survey_one(Context& ctx, const AttentionParams& p, bool decode) {
  const AttentionBiasInfo& family = attention_bias_info(p.bias);
  const std::uint64_t es = dtype_size(p.dtype), head_dim = p.head_dim;
  Buffer q(ctx, p.rows() * head_dim * es), k(ctx, p.kv_bytes()), v(ctx, p.kv_bytes()), out(ctx, p.rows() * head_dim * es);
  Buffer table(ctx, std::max<std::uint64_t>(p.paged.max_blocks, 1) * 4), lengths(ctx, 4);
  const std::uint64_t bias_values = std::max<std::uint64_t>(p.bias_elements(), 1);
  std::vector<float> bias_data(bias_values, 0.5f);
  Buffer b = make_buffer(ctx, bias_data);
  const std::uint64_t rel = (2ull * p.max_relative_position + 1) * head_dim * 4;
  Buffer rk(ctx, rel), rv(ctx, rel);
  AttentionBuffers bufs{.q = &q, .k = &k, .v = &v, .out = &out};
  if (family.rel_tables) bufs.rel_keys = &rk, bufs.rel_values = &rv;
  else if (!family.input.empty()) bufs.bias = &b;
  if (p.paged.enabled()) bufs.block_table = &table, bufs.cache_lengths = &lengths;
  Recorder r(ctx);
  attention(r, p, bufs);
  if (decode) AttentionPlan plan(ctx, p);
}

AttentionParams survey_shape(std::uint32_t head_dim, bool decode, std::uint32_t kv_heads, bool paged, DType dtype, AttentionBias bias) {
  AttentionParams p{.heads = 8, .kv_heads = kv_heads, .queries = decode ? 1u : 512u, .keys = decode ? 4096u : 512u, .head_dim = head_dim,
                    .dtype = dtype, .query_offset = decode && !paged ? 4095 : 0, .causal = true, .bias = bias};
  if (paged) p.paged = {.block_size = 256, .num_blocks = p.keys / 256, .max_blocks = p.keys / 256};
  return p;
}

// Fused attention at one head_dim, every bias mode, f32 and f16, a prefill or a decoding shape,
// with contiguous k and v and with a paged cache of 256-key blocks; decoding with 8 kv heads and
// with 2 (grouped-query heads, whose kernels read a kv head once for its query heads). Then the
// caches' other formats (bf16, q8_0 where head_dim is a multiple of 32, fp8), whose kernels differ
// in their loads only: one bias mode, f16 q, 2 kv heads.
void survey_attention(const Registry& reg, Context& ctx, std::uint32_t head_dim, bool decode, std::uint32_t kv_heads) {
  for (const AttentionBiasInfo& family : attention_biases())
    for (DType dtype : {DType::F32, DType::F16})
      for (bool paged : {false, true}) {
        AttentionParams p = survey_shape(head_dim, decode, kv_heads, paged, dtype, family.bias);
        bias_tool(reg, family.bias).example(p, 0);
        survey_one(ctx, p, decode);
      }
}
void survey_cache_formats(Context& ctx, std::uint32_t head_dim, bool decode) {
  for (CacheFormat f : {CacheFormat::BF16, CacheFormat::Q8_0, CacheFormat::FP8_E4M3})
    for (bool paged : {false, true}) {
      if (f == CacheFormat::Q8_0 && head_dim % 32 != 0) continue;
      AttentionParams p = survey_shape(head_dim, decode, 2, paged, DType::F16, AttentionBias::None);
      p.cache_format = f;
      if (cache_format_scaled(f)) p.k_scales = p.v_scales = {1.0f, 1.0f};
      survey_one(ctx, p, decode);
    }
}

std::vector<std::uint32_t> parse_head_dims(const std::string& list) {
  std::vector<std::uint32_t> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, end - start);
    std::uint64_t v = 0;
    const bool digits = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos && item.size() < 10;
    if (digits) v = std::stoull(item);
    if (!digits || v == 0 || v % 4 != 0 || v > AttentionParams::kMaxHeadDim)
      throw InvalidArgument("--head-dims = " + list + ": each must be a multiple of 4 in [4, " + std::to_string(AttentionParams::kMaxHeadDim) +
                            "], got \"" + item + "\"");
    out.push_back(static_cast<std::uint32_t>(v));
    start = end + 1;
  }
  return out;
}

}  // namespace

int stats_command(Registry& reg, const std::string& filter, bool json, const std::string& head_dims, bool summary) {
  const std::vector<std::uint32_t> dims = parse_head_dims(head_dims);
  std::vector<std::string> ops = {"attention"};  // (surveyed at the asked head sizes)
  for (const auto& c : reg.checks)
    if (c.quick) ops.push_back(c.op);
  require_filter_matches(filter, ops, "op");
  ContextOptions o = tool_context_options();
  o.tuning.compile_only = true;
  o.tuning.pipeline_statistics = true;
  Context ctx(o);
  const DeviceInfo& info = ctx.device_info();
  if (!has_pipeline_statistics(ctx))
    throw VulkanError("device " + std::to_string(info.index) + " (" + info.name +
                      ") does not offer VK_KHR_pipeline_executable_properties: relpos stats needs the driver's pipeline statistics");
  // Fused attention's decoding shapes compile on a context of their own, so that each pipeline's
  // "use" is exactly the shapes that created it (one serving both would be listed under each).
  const bool attention = filter.empty() || std::string("attention").find(filter) != std::string::npos;
  std::optional<Context> decode_ctx;
  if (attention) decode_ctx.emplace(o);
  std::map<std::pair<const Context*, Key>, std::string> op_of;  // the op whose case created each pipeline first
  auto survey = [&](Context& c, const std::string& op, const std::function<void()>& run) {
    try {
      run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "relpos stats: %s: %s\n", op.c_str(), e.what());
    }
    for (const PipelineReport& r : pipeline_reports(c, false)) op_of.emplace(std::pair{&c, key_of(r)}, op);
  };
  // Every op's small check cases create every pipeline variant the full check does; fused
  // attention is surveyed at the asked head sizes instead.
  for (const auto& c : reg.checks) {
    if (!c.quick || c.op == "attention" || (!filter.empty() && c.op.find(filter) == std::string::npos)) continue;
    survey(ctx, c.op, [&] { (void)c.run(ctx); });
  }
  if (attention)
    for (std::uint32_t d : dims) {
      survey(ctx, "attention", [&] { survey_attention(reg, ctx, d, false, 8); });
      for (std::uint32_t kv_heads : {8u, 2u}) survey(*decode_ctx, "attention", [&] { survey_attention(reg, *decode_ctx, d, true, kv_heads); });
      survey(ctx, "attention", [&] { survey_cache_formats(ctx, d, false); });
      survey(*decode_ctx, "attention", [&] { survey_cache_formats(*decode_ctx, d, true); });
    }

  const std::optional<GpuArchitecture> arch = gpu_architecture(info);
  if (!json) std::printf("%s\n", summary ? summary_header(info, arch).c_str() : ("relpos stats on " + info.name + " (" + info.driver + ")").c_str());
  std::size_t lines = 0;
  std::vector<std::pair<const Context*, PipelineReport>> reports;
  for (const Context* c : {&ctx, decode_ctx ? &*decode_ctx : nullptr})
    if (c)
      for (PipelineReport& r : pipeline_reports(*c, true)) reports.emplace_back(c, std::move(r));
  for (const auto& [c, r] : reports) {
    const auto it = op_of.find(std::pair{c, key_of(r)});
    const std::string op = it != op_of.end() ? it->second : "?";
    const std::string use = op != "attention" ? "" : c == &ctx ? "prefill" : "decode";
    nlohmann::ordered_json variant = nlohmann::ordered_json::object();  // the names of the shader's contract
    for (const auto& [name, value] : r.constants) variant[name] = value;
    const bool attention = r.shader.rfind("attention_", 0) == 0 && variant.contains("D4");
    for (const PipelineExecutable& e : r.executables) {
      ++lines;
      if (json) {
        nlohmann::ordered_json line;
        line["op"] = op;
        if (!use.empty()) line["use"] = use;
        line["pipeline"] = r.shader;
        line["variant"] = variant;
        if (attention) line["head_dim"] = 4 * variant["D4"].get<std::uint32_t>();
        line["workgroup"] = r.workgroup;
        if (e.subgroup_size) line["subgroup_size"] = e.subgroup_size;
        line["executable"] = e.name;
        nlohmann::ordered_json stats = nlohmann::ordered_json::object();
        for (const PipelineStatistic& s : e.statistics) stats[s.name] = json_value(s);
        line["stats"] = stats;
        if (summary) line["occupancy"] = occupancy_json(arch, r, e);
        std::printf("%s\n", line.dump().c_str());
      } else if (summary) {
        std::printf("%s\n", summary_line(arch, op, use, r, e, variant).c_str());
      } else {
        std::string stats;
        for (const PipelineStatistic& s : e.statistics) stats += " " + s.name + "=" + text_value(s);
        std::printf("%-18s %-28s %s%s wg=[%u,%u,%u] %s:%s\n", op.c_str(), r.shader.c_str(), use.empty() ? "" : (use + " ").c_str(),
                    variant.dump().c_str(), r.workgroup[0], r.workgroup[1], r.workgroup[2], e.name.c_str(), stats.c_str());
      }
    }
  }
  if (!json) std::printf("stats: %zu executables\n", lines);
  return lines > 0 ? 0 : 1;
}

}  // namespace relpos::tool
