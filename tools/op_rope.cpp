// RoPE in the tool: `run rope`, its check cases and benchmarks.
#include <algorithm>
#include <map>
#include <random>

#include "number_flags.hpp"
#include "fuzz.hpp"
#include "registry.hpp"
#include "rope_scaling_flags.hpp"

namespace relpos::tool {
namespace {

std::string shape_of(const RopeParams& p, DType dtype, bool positions) {
  static const char* scalings[] = {"none", "linear", "ntk", "yarn", "llama3", "longrope"};
  return "[" + std::to_string(p.batch) + "," + std::to_string(p.seq) + "," + std::to_string(p.heads) + "," + std::to_string(p.head_dim) +
         "]" + (p.layout == RopeLayout::BSHD ? "bshd" : "bhsd") + (p.style == RopeStyle::NeoX ? ",neox" : ",gptj") +
         (p.rotary_dim ? ",d=" + std::to_string(p.rotary_dim) : "") + "," + scalings[static_cast<int>(p.scaling.type)] +
         (positions ? ",positions" : ",off=" + std::to_string(p.position_offset)) + (p.inverse ? ",inverse" : "") + " " +
         std::string(dtype_name(dtype));
}

// GPU rotation against the reference. f32: the shader's own sin/cos and three roundings, within
// 1e-6 of the largest value (docs/alibi_rope.md); f16: one more rounding to half, 2^-10.
// Positions, when used, are random in [0, max_position].
CheckResult check_rope(Context& ctx, const RopeParams& p, DType dtype, bool use_positions, bool in_place, unsigned seed = 5,
                       std::int32_t max_position = 100000) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> x(p.elements());
  for (auto& v : x) v = u(rng);
  if (dtype == DType::F16) x = from_half(to_half(x));
  std::vector<std::int32_t> positions;
  if (use_positions) {
    positions.resize(std::size_t{p.batch} * p.seq);
    std::uniform_int_distribution<std::int32_t> pos(0, max_position);
    for (auto& v : positions) v = pos(rng);
  }
  std::vector<float> want = x;
  rope_reference(p, want, positions);
  if (dtype == DType::F16) want = from_half(to_half(want));
  Buffer xb = make_float_buffer(ctx, x, dtype);
  Buffer out(ctx, x.size() * dtype_size(dtype));
  Buffer pb = make_buffer(ctx, positions);
  Recorder r(ctx);
  if (in_place) rope(r, p, xb, dtype, use_positions ? &pb : nullptr);
  else rope_into(r, p, xb, out, dtype, use_positions ? &pb : nullptr);
  r.submit_and_wait();
  const std::vector<float> got = download_floats(in_place ? xb : out, x.size(), dtype);
  return {normalised_error(got, want), dtype == DType::F16 ? 1.0 / 1024 + 1e-6 : 1e-6, "max_err"};
}

RopeParams make_params(std::uint32_t b, std::uint32_t s, std::uint32_t h, std::uint32_t d, RopeLayout layout, RopeStyle style) {
  RopeParams p;
  p.batch = b;
  p.seq = s;
  p.heads = h;
  p.head_dim = d;
  p.layout = layout;
  p.style = style;
  return p;
}

void register_checks(Registry& reg) {
  struct Cfg { RopeParams p; DType dtype; bool positions, in_place; };
  std::vector<Cfg> cfgs;
  RopeParams p = make_params(2, 64, 4, 128, RopeLayout::BSHD, RopeStyle::NeoX);
  cfgs.push_back({p, DType::F32, false, true});  // Llama
  p.position_offset = 5000;
  cfgs.push_back({p, DType::F16, false, true});  // KV-cache continuation
  p = make_params(3, 17, 5, 64, RopeLayout::BHSD, RopeStyle::GptJ);
  cfgs.push_back({p, DType::F32, true, false});  // ragged positions, HF's transposed q
  p = make_params(1, 33, 8, 80, RopeLayout::BSHD, RopeStyle::NeoX);
  p.rotary_dim = 20;  // partial rotary (GPT-NeoX: rotary_pct 0.25)
  cfgs.push_back({p, DType::F32, false, false});
  cfgs.push_back({p, DType::F16, true, false});
  p = make_params(2, 40, 4, 128, RopeLayout::BSHD, RopeStyle::NeoX);
  p.base = 500000.0;
  p.scaling.type = RopeScaling::Llama3;
  p.scaling.factor = 8.0;
  p.scaling.original_max_position = 8192;
  cfgs.push_back({p, DType::F32, true, true});
  p.scaling = {};
  p.scaling.type = RopeScaling::Yarn;
  p.scaling.factor = 4.0;
  p.scaling.original_max_position = 32768;
  p.inverse = true;
  cfgs.push_back({p, DType::F32, false, true});
  p.inverse = false;
  p.scaling.type = RopeScaling::DynamicNtk;
  p.scaling.factor = 2.0;
  p.scaling.original_max_position = 2048;
  p.position_offset = 4000;
  cfgs.push_back({p, DType::F32, false, true});
  p.scaling = {};
  p.scaling.type = RopeScaling::Linear;
  p.scaling.factor = 4.0;
  p.scaling.original_max_position = 1;
  p.layout = RopeLayout::BHSD;
  cfgs.push_back({p, DType::F16, false, false});
  // Phi-3-mini-128k's shape: head_dim 96, 4k trained, 128k extended, long factors from position 4096.
  p = make_params(1, 16, 8, 96, RopeLayout::BSHD, RopeStyle::NeoX);
  p.scaling.type = RopeScaling::LongRope;
  p.scaling.factor = 32.0;
  p.scaling.original_max_position = 4096;
  p.scaling.seq_len = 131072;
  for (std::uint32_t k = 0; k < 48; ++k) {
    p.scaling.long_factor.push_back(1.0f + 0.65f * static_cast<float>(k));
    p.scaling.short_factor.push_back(1.0f + 0.02f * static_cast<float>(k));
  }
  cfgs.push_back({p, DType::F32, true, true});
  for (const auto& c : cfgs)
    reg.checks.push_back({c.in_place ? "rope" : "rope-into", shape_of(c.p, c.dtype, c.positions),
                          [c](Context& ctx) { return check_rope(ctx, c.p, c.dtype, c.positions, c.in_place); }, true});
}

// One random rotation: any even head_dim and rotary_dim, both layouts and pairings, every scaling,
// positions from a buffer or an offset anywhere in int32 (the ends favoured), in place or not, f32 or f16.
CheckCase draw_case(FuzzRng& g) {
  RopeParams p;
  p.head_dim = 2 * g.size(1, 128);
  p.rotary_dim = g.chance(0.5) ? 0 : 2 * g.size(1, p.head_dim / 2);
  p.layout = g.chance(0.5) ? RopeLayout::BSHD : RopeLayout::BHSD;
  p.style = g.chance(0.5) ? RopeStyle::NeoX : RopeStyle::GptJ;
  const std::uint64_t rows = std::max<std::uint64_t>(1, g.max_elements() / p.head_dim);
  p.seq = g.size(1, rows);
  p.heads = g.size(1, std::min<std::uint64_t>(64, rows / p.seq));
  p.batch = g.size(1, std::min<std::uint64_t>(8, rows / (std::uint64_t{p.seq} * p.heads)));
  p.base = g.pick({10000.0, 500000.0, 1.5});
  p.inverse = g.chance(0.2);
  const bool positions = g.chance(0.4);
  constexpr std::int64_t kMaxPosition = 0x7fffffff;
  if (!positions) p.position_offset = g.offset(-kMaxPosition, kMaxPosition + 1 - p.seq);
  const std::int32_t max_position = g.pick({100000, (1 << 24) + 3, static_cast<int>(kMaxPosition)});
  draw_rope_scaling(g, p.scaling, p.rot_dim(), positions);
  const DType dtype = g.float_dtype();
  const bool in_place = g.chance(0.5);
  const unsigned seed = g.data_seed();
  return {in_place ? "rope" : "rope-into", shape_of(p, dtype, positions) + (positions ? ",max=" + std::to_string(max_position) : ""),
          [=](Context& ctx) { return check_rope(ctx, p, dtype, positions, in_place, seed, max_position); }};
}

void register_benches(Registry& reg) {
  struct Cfg { RopeLayout layout; RopeStyle style; DType dtype; bool positions, in_short; };
  for (const Cfg& c : {Cfg{RopeLayout::BSHD, RopeStyle::NeoX, DType::F32, false, true}, Cfg{RopeLayout::BSHD, RopeStyle::GptJ, DType::F32, false, false},
                       Cfg{RopeLayout::BHSD, RopeStyle::NeoX, DType::F32, false, false}, Cfg{RopeLayout::BSHD, RopeStyle::NeoX, DType::F32, true, false},
                       Cfg{RopeLayout::BSHD, RopeStyle::NeoX, DType::F16, false, false}}) {
    const RopeParams p = make_params(1, 2048, 32, 128, c.layout, c.style);
    const std::uint64_t bytes = p.elements() * dtype_size(c.dtype) * 2;  // read and write in place
    reg.benches.push_back({"rope", shape_of(p, c.dtype, c.positions), bytes, Ceiling::Copy, c.in_short, [p, c](Context& ctx) {
                             struct State { std::vector<float> x; std::vector<std::int32_t> positions; Buffer xb, pb; };
                             auto s = std::make_shared<State>();
                             s->x.assign(p.elements(), 0.5f);
                             s->positions.resize(p.seq);
                             for (std::uint32_t k = 0; k < p.seq; ++k) s->positions[k] = static_cast<std::int32_t>(k);
                             s->xb = make_float_buffer(ctx, s->x, c.dtype);
                             s->pb = make_buffer(ctx, s->positions);
                             BenchRun run;
                             run.record = [p, c, s](Recorder& r) { rope(r, p, s->xb, c.dtype, c.positions ? &s->pb : nullptr); };
                             run.cpu = [p, c, s] { rope_reference(p, s->x, c.positions ? std::span<const std::int32_t>(s->positions) : std::span<const std::int32_t>()); };
                             run.keep = s;
                             return run;
                           }});
  }
}

struct RopeCli {
  RopeParams p;
  RunOptions o;
  std::string x_path, positions_path, layout = "bshd", style = "neox";
  RopeScalingFlags scaling;
};

// Reads the positions as int32 [batch, seq]; a [seq] vector serves every batch row.
std::vector<std::int32_t> read_positions(const std::string& path, const RopeParams& p) {
  const NpyArray a = read_npy(path);
  std::vector<std::int32_t> v = a.to_i32("--positions " + path);
  if (v.size() == p.seq && p.batch > 1) {
    std::vector<std::int32_t> all;
    for (std::uint32_t b = 0; b < p.batch; ++b) all.insert(all.end(), v.begin(), v.end());
    v = std::move(all);
  }
  if (v.size() != std::size_t{p.batch} * p.seq)
    throw InvalidArgument("--positions " + path + ": " + std::to_string(v.size()) + " values, must be [seq] or [batch, seq] = " +
                          std::to_string(p.seq) + " or " + std::to_string(std::size_t{p.batch} * p.seq));
  return v;
}

void run_rope(RopeCli& c) {
  RopeParams& p = c.p;
  const NpyArray x = read_npy(c.x_path);
  // The result is written in x's dtype, which the shader rotates in: float32 or float16 only.
  if (x.descr != "<f4" && x.descr != "<f2")
    throw InvalidArgument("--x " + c.x_path + ": dtype " + x.descr + " must be float32 or float16 (the output is written in --x's dtype)");
  if (x.shape.size() != 4)
    throw InvalidArgument("--x " + c.x_path + ": must be 4-D (" + c.layout + "), got " + std::to_string(x.shape.size()) + " dimension(s)");
  p.layout = c.layout == "bshd" ? RopeLayout::BSHD : RopeLayout::BHSD;
  p.style = c.style == "neox" ? RopeStyle::NeoX : RopeStyle::GptJ;
  const bool bshd = p.layout == RopeLayout::BSHD;
  p.batch = dimension32("--x batch", x.shape[0]);
  p.seq = dimension32("--x seq", bshd ? x.shape[1] : x.shape[2]);
  p.heads = dimension32("--x heads", bshd ? x.shape[2] : x.shape[1]);
  p.head_dim = dimension32("--x head_dim", x.shape[3]);
  apply_rope_scaling_flags(c.scaling, p.scaling);
  const DType dtype = x.descr == "<f2" ? DType::F16 : DType::F32;
  std::vector<float> values = x.to_f32("--x " + c.x_path);
  p.validate(dtype);  // the GPU op's checks, --reference or not
  const std::vector<std::int32_t> positions = c.positions_path.empty() ? std::vector<std::int32_t>{} : read_positions(c.positions_path, p);
  if (!positions.empty()) default_seq_len(c.scaling, p.scaling, *std::max_element(positions.begin(), positions.end()));
  if (c.o.reference) {
    rope_reference(p, values, positions);
  } else {
    Context& ctx = tool_context();
    Buffer xb = make_float_buffer(ctx, values, dtype);
    Buffer pb = make_buffer(ctx, positions);
    Recorder r(ctx);
    rope(r, p, xb, dtype, positions.empty() ? nullptr : &pb);
    r.submit_and_wait();
    values = download_floats(xb, values.size(), dtype);
  }
  write_floats(c.o.out, values, x.shape, dtype);
}

}  // namespace

RELPOS_TOOL_FAMILY(rope) {
  auto c = std::make_shared<RopeCli>();
  auto* cmd = run.add_subcommand("rope", "rotary position embedding of q or k (f32 or f16 .npy, written in the same dtype)");
  cmd->add_option("--x", c->x_path, "q or k .npy, 4-D in the --layout")->required();
  cmd->add_option("--layout", c->layout, "bshd: [batch, seq, heads, head_dim]; bhsd: [batch, heads, seq, head_dim]")
      ->check(CLI::IsMember({"bshd", "bhsd"}));
  cmd->add_option("--style", c->style, "neox: pairs (p, p + d/2) (HF Llama); gptj: pairs (2p, 2p + 1) (Meta)")
      ->check(CLI::IsMember({"neox", "gptj"}));
  add_number(*cmd, "--rotary-dim", c->p.rotary_dim, "features that rotate (even, <= head_dim; default all)");
  add_number(*cmd, "--base", c->p.base, "rope_theta (default 10000)");
  auto* offset = add_number(*cmd, "--position-offset", c->p.position_offset, "position of token 0 (default 0)");
  cmd->add_option("--positions", c->positions_path, "int [seq] or [batch, seq] .npy of positions")->excludes(offset);
  add_rope_scaling_flags(*cmd, c->scaling, c->p.scaling);
  cmd->add_flag("--inverse", c->p.inverse, "the inverse rotation (undo a cached rotation)");
  add_run_options(*cmd, c->o);
  reg.runs.push_back({cmd, [c] { run_rope(*c); }});
  register_checks(reg);
  register_benches(reg);
  reg.fuzz.push_back({"rope", draw_case});
}

}  // namespace relpos::tool
