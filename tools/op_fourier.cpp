// The sinusoidal encoding and the Fourier bias in the tool: `run sinusoidal`, `run fourier-bias`,
// their check cases and benchmarks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "number_flags.hpp"
#include "fuzz.hpp"
#include "registry.hpp"

namespace relpos::tool {
namespace {

std::string shape_of(const FourierParams& p) {
  return "H=" + std::to_string(p.heads) + ",Q=" + std::to_string(p.queries) + ",K=" + std::to_string(p.keys) +
         ",d=" + std::to_string(p.vector_size) + ",M=" + std::to_string(p.max_keys) + ",off=" + std::to_string(p.offset());
}

std::string shape_of(const SinusoidalParams& p) {
  return "N=" + std::to_string(p.positions) + ",d=" + std::to_string(p.vector_size) + ",off=" + std::to_string(p.offset) +
         ",W=" + std::to_string(p.wavelength());
}

std::vector<float> random_rotation(const FourierParams& p, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> rot(std::size_t{p.heads} * p.vector_size);
  for (auto& x : rot) x = u(rng);
  return rot;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::abs(x)));
  return m;
}

// The bound of fourier_error_bound in normalised_error's units, plus the f16 rounding if any.
double tolerance(double bound, const std::vector<float>& want, DType dtype) {
  return bound / std::max(1.0, max_abs(want)) + (dtype == DType::F16 ? std::ldexp(1.0, -11) : 0.0);
}

std::vector<float> gpu_bias(Context& ctx, const FourierParams& p, const std::vector<float>& rot, FourierPath path, DType dtype) {
  const std::size_t n = std::size_t{p.heads} * p.queries * p.keys;
  Buffer rb = make_buffer(ctx, rot);
  Buffer out(ctx, n * dtype_size(dtype));
  Recorder r(ctx);
  fourier_bias(r, p, rb, out, path, dtype);
  r.submit_and_wait();
  return download_floats(out, n, dtype);
}

CheckResult check_sinusoidal(Context& ctx, const SinusoidalParams& p) {
  Buffer out(ctx, std::uint64_t{p.positions} * p.vector_size * 4);
  Recorder r(ctx);
  sinusoidal(r, p, out);
  r.submit_and_wait();
  return {normalised_error(out.download<float>(std::size_t{p.positions} * p.vector_size), sinusoidal_reference(p)), sinusoidal_error_bound(),
          "max_err"};
}

CheckResult check_bias(Context& ctx, const FourierParams& p, FourierPath path, DType dtype, bool default_rotation) {
  const auto rot = default_rotation ? fourier_default_rotation(p) : random_rotation(p, 9);
  const auto want = fourier_bias_reference(p, rot);
  return {normalised_error(gpu_bias(ctx, p, rot, path, dtype), want), tolerance(fourier_error_bound(p, rot, path), want, dtype),
          "max_err"};
}

CheckResult check_add(Context& ctx, const FourierParams& p, DType dtype) {
  const auto rot = random_rotation(p, 5);
  const std::size_t n = std::size_t{p.batch} * p.heads * p.queries * p.keys;
  std::vector<float> logits(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (auto& x : logits) x = u(rng);
  if (dtype == DType::F16) logits = from_half(to_half(logits));  // what the f16 buffer holds
  std::vector<float> want = logits;
  fourier_bias_add_reference(p, rot, want);
  Buffer rb = make_buffer(ctx, rot);
  Buffer l = make_float_buffer(ctx, logits, dtype);
  Recorder r(ctx);
  fourier_bias_add(r, p, rb, l, dtype);
  r.submit_and_wait();
  const auto got = download_floats(l, n, dtype);
  // The add rounds once more: 2^-24 of the sum in f32 (2^-11 in f16, inside tolerance()).
  return {normalised_error(got, want), tolerance(fourier_error_bound(p, rot, FourierPath::Distance), want, dtype) + 0x1p-24,
          "max_err"};
}

FourierParams params(std::uint32_t h, std::uint32_t q, std::uint32_t k, std::uint32_t d, std::uint32_t m, std::optional<std::int64_t> off,
                     std::uint32_t b = 1) {
  FourierParams p;
  p.heads = h;
  p.queries = q;
  p.keys = k;
  p.vector_size = d;
  p.max_keys = m;
  p.query_offset = off;
  p.batch = b;
  return p;
}

void register_checks(Registry& reg) {
  for (SinusoidalParams s : {SinusoidalParams{2048, 128, 0, 0.0}, SinusoidalParams{100, 6, -50, 10.0},
                             SinusoidalParams{64, 128, 2'000'000'000, 2048.0}, SinusoidalParams{333, 34, 7, 12345.5}})
    reg.checks.push_back({"sinusoidal", shape_of(s), [s](Context& ctx) { return check_sinusoidal(ctx, s); }, s.vector_size == 128 || s.vector_size == 6});

  const std::vector<FourierParams> cfgs = {
      params(8, 256, 256, 128, 1024, std::nullopt),        // meliad's defaults
      params(3, 37, 301, 64, 512, std::nullopt),           // last-aligned, Q != K
      params(4, 1, 2048, 128, 1024, std::nullopt),         // one decoding step
      params(5, 50, 20, 32, 64, 0),                        // K < Q with an explicit offset
      params(2, 64, 64, 128, 1024, 1'500'000'000),         // far positions
      params(11, 29, 31, 10, 7, -13),                      // odd sizes, heads across two row passes
  };
  for (const FourierParams& p : cfgs) {
    const bool quick = &p == &cfgs.back();  // the same pipelines as the others, on the smallest shape
    reg.checks.push_back({"fourier-bias", shape_of(p) + " init distance",
                          [p](Context& ctx) { return check_bias(ctx, p, FourierPath::Distance, DType::F32, true); }, quick});
    reg.checks.push_back({"fourier-bias", shape_of(p) + " distance f32",
                          [p](Context& ctx) { return check_bias(ctx, p, FourierPath::Distance, DType::F32, false); }, quick});
    reg.checks.push_back({"fourier-bias", shape_of(p) + " distance f16",
                          [p](Context& ctx) { return check_bias(ctx, p, FourierPath::Distance, DType::F16, false); }, quick});
    reg.checks.push_back({"fourier-bias", shape_of(p) + " direct f32",
                          [p](Context& ctx) { return check_bias(ctx, p, FourierPath::Direct, DType::F32, false); }, quick});
    FourierParams b = p;
    b.batch = 2;
    reg.checks.push_back({"fourier-bias-add", shape_of(b) + ",B=2 f32", [b](Context& ctx) { return check_add(ctx, b, DType::F32); }, quick});
    reg.checks.push_back({"fourier-bias-add", shape_of(b) + ",B=2 f16", [b](Context& ctx) { return check_add(ctx, b, DType::F16); }, quick});
  }
}

// One random sinusoidal encoding, Fourier bias (either path, f32 or f16, random or default
// rotation) or add: odd sizes, short and long wavelengths, positions near +-(2^31 - 1).
CheckCase draw_case(FuzzRng& g) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::uint64_t budget = g.max_elements();
  if (g.chance(0.2)) {
    SinusoidalParams s;
    s.vector_size = 2 * g.size(1, 256);
    s.positions = g.size(1, std::max<std::uint64_t>(1, budget / s.vector_size));
    s.offset = g.offset(1 - kMax, kMax - s.positions);
    s.max_wavelength = g.chance(0.5) ? 0.0 : g.pick({1.5, 10.0, 12345.5, 1e6});
    return {"sinusoidal", shape_of(s), [s](Context& ctx) { return check_sinusoidal(ctx, s); }};
  }
  FourierParams p;
  p.heads = g.size(1, 32);
  p.vector_size = 2 * g.size(1, 256);
  p.max_keys = g.size(1, 1u << 20);
  p.keys = g.size(1, std::min<std::uint64_t>(kFuzzMaxKeys, budget));
  p.queries = g.size(1, std::min<std::uint64_t>(4096, budget / p.keys));
  p.heads = std::min<std::uint32_t>(p.heads, static_cast<std::uint32_t>(std::max<std::uint64_t>(1, budget / (std::uint64_t{p.queries} * p.keys))));
  if (p.keys < p.queries || g.chance(0.5)) p.query_offset = g.offset(std::int64_t{p.keys} - kMax, kMax - p.queries);
  const std::uint64_t kind = g.below(5);  // distance f32, distance f16, direct, add f32, add f16
  if (kind == 2) {  // the direct path does vector_size / 2 multiply-adds per element
    p.vector_size = std::min<std::uint32_t>(p.vector_size, 64);
    p.queries = std::min<std::uint32_t>(p.queries, 512);
  }
  const bool default_rotation = kind < 2 && g.chance(0.3);
  const DType dtype = kind == 1 || kind == 4 ? DType::F16 : DType::F32;
  if (kind >= 3) {
    p.batch = g.size(1, std::min<std::uint64_t>(4, budget / (std::uint64_t{p.heads} * p.queries * p.keys)));
    return {"fourier-bias-add", shape_of(p) + ",B=" + std::to_string(p.batch) + " " + std::string(dtype_name(dtype)),
            [p, dtype](Context& ctx) { return check_add(ctx, p, dtype); }};
  }
  const FourierPath path = kind == 2 ? FourierPath::Direct : FourierPath::Distance;
  return {"fourier-bias", shape_of(p) + (default_rotation ? " init" : "") + (kind == 2 ? " direct " : " distance ") + std::string(dtype_name(dtype)),
          [=](Context& ctx) { return check_bias(ctx, p, path, dtype, default_rotation); }};
}

void add_bias_bench(Registry& reg, FourierPath path, bool in_short) {
  const FourierParams p = params(8, 2048, 2048, 128, 1024, std::nullopt);
  const std::uint64_t bytes = std::uint64_t{p.heads} * p.queries * p.keys * 4;
  reg.benches.push_back({"fourier-bias", std::string("[8,2048,2048] d=128 ") + (path == FourierPath::Direct ? "direct" : "distance"),
                         bytes, Ceiling::Write, in_short, [p, bytes, path](Context& ctx) {
                           struct State { std::vector<float> rot; Buffer r, out; };
                           auto s = std::make_shared<State>();
                           s->rot = random_rotation(p, 1);
                           s->r = make_buffer(ctx, s->rot);
                           s->out = Buffer(ctx, bytes);
                           BenchRun run;
                           run.record = [p, s, path](Recorder& r) { fourier_bias(r, p, s->r, s->out, path); };
                           run.cpu = [p, s] { (void)fourier_bias_reference(p, s->rot); };
                           run.keep = s;
                           return run;
                         }});
}

void register_benches(Registry& reg) {
  add_bias_bench(reg, FourierPath::Distance, true);
  add_bias_bench(reg, FourierPath::Direct, false);
  {
    FourierParams p = params(8, 1024, 1024, 128, 1024, std::nullopt, 2);
    const std::uint64_t bytes = 2ull * 8 * 1024 * 1024 * 4 * 2;  // read and write the logits
    reg.benches.push_back({"fourier-bias-add", "[2,8,1024,1024] d=128 f32", bytes, Ceiling::Copy, false, [p](Context& ctx) {
                             struct State { std::vector<float> rot, logits; Buffer r, l; };
                             auto s = std::make_shared<State>();
                             s->rot = random_rotation(p, 1);
                             s->logits.assign(std::size_t{p.batch} * p.heads * p.queries * p.keys, 0.5f);
                             s->r = make_buffer(ctx, s->rot);
                             s->l = make_buffer(ctx, s->logits);
                             BenchRun run;
                             run.record = [p, s](Recorder& r) { fourier_bias_add(r, p, s->r, s->l); };
                             run.cpu = [p, s] { fourier_bias_add_reference(p, s->rot, s->logits); };
                             run.keep = s;
                             return run;
                           }});
  }
  const SinusoidalParams s{65536, 128, 0, 0.0};
  const std::uint64_t bytes = std::uint64_t{s.positions} * s.vector_size * 4;
  reg.benches.push_back({"sinusoidal", "[65536,128]", bytes, Ceiling::Write, false, [s, bytes](Context& ctx) {
                           auto out = std::make_shared<Buffer>(ctx, bytes);
                           BenchRun run;
                           run.record = [s, out](Recorder& r) { sinusoidal(r, s, *out); };
                           run.cpu = [s] { (void)sinusoidal_reference(s); };
                           run.keep = out;
                           return run;
                         }});
}

// The rotation .npy must be [heads, vector_size].
std::vector<float> read_rotation(const std::string& path, const FourierParams& p) {
  const NpyArray a = read_npy(path);
  if (a.shape.size() != 2 || a.shape[0] != p.heads || a.shape[1] != p.vector_size)
    throw InvalidArgument("--rotation " + path + ": shape " + shape_text(a.shape) + " must be [heads, vector_size] = [" + std::to_string(p.heads) +
                          ", " + std::to_string(p.vector_size) + "]");
  return a.to_f32("--rotation " + path);
}

}  // namespace

RELPOS_TOOL_FAMILY(fourier) {
  {
    auto p = std::make_shared<SinusoidalParams>();
    auto o = std::make_shared<RunOptions>();
    auto* cmd = run.add_subcommand("sinusoidal", "meliad's sinusoidal position encoding, float32 [N, D] (cos half, then sin half)");
    add_number(*cmd, "--positions", p->positions, "number of positions N", 1u)->required();
    add_number(*cmd, "--vector-size,--dim", p->vector_size, "encoding size D (even; --dim: meliad's name)")->required();
    add_number(*cmd, "--offset", p->offset, "position of row 0 (default 0)");
    add_number(*cmd, "--max-wavelength", p->max_wavelength, "longest half-wavelength W (default 2N)");
    add_run_options(*cmd, *o);
    reg.runs.push_back({cmd, [=] {
                          check_host_memory({{{{"--positions", p->positions}, {"--vector-size", p->vector_size}}, 4}});
                          std::vector<float> out;
                          p->validate();
                          if (o->reference) {
                            out = sinusoidal_reference(*p);
                          } else {
                            Context& ctx = tool_context();
                            const std::size_t n = std::size_t{p->positions} * p->vector_size;
                            Buffer b(ctx, n * 4);
                            Recorder r(ctx);
                            sinusoidal(r, *p, b);
                            r.submit_and_wait();
                            out = b.download<float>(n);
                          }
                          write_floats(o->out, out, {p->positions, p->vector_size}, DType::F32);
                        }});
  }
  {
    auto p = std::make_shared<FourierParams>();
    auto o = std::make_shared<RunOptions>();
    auto rotation_path = std::make_shared<std::string>();
    auto offset = std::make_shared<std::int64_t>(0);
    auto path = std::make_shared<std::string>("distance");
    auto dtype = std::make_shared<std::string>("f32");
    auto* cmd = run.add_subcommand("fourier-bias", "meliad's Fourier relative position bias, [heads, Q, K]");
    add_number(*cmd, "--heads", p->heads, "number of heads H", 1u)->required();
    add_number(*cmd, "--queries", p->queries, "number of queries Q", 1u)->required();
    add_number(*cmd, "--keys", p->keys, "number of keys K", 1u)->required();
    add_number(*cmd, "--vector-size", p->vector_size, "position_vector_size D (even, default 128)");
    add_number(*cmd, "--max-keys", p->max_keys, "max_number_of_keys M: wavelengths up to 2M (default 1024)");
    cmd->add_option("--rotation", *rotation_path, "float [H, D] .npy = [a | b] (default meliad's init: a = 2/D, b = 0)");
    auto* off = add_number(*cmd, "--query-offset", *offset, "absolute position of query 0 (default K - Q)");
    cmd->add_option("--path", *path, "GPU path: distance (per-distance row, expanded) or direct (einsum)")
        ->check(CLI::IsMember({"direct", "distance"}));
    cmd->add_option("--dtype", *dtype, "output dtype (direct: f32 only)")->check(CLI::IsMember({"f32", "f16"}));
    add_run_options(*cmd, *o);
    reg.runs.push_back({cmd, [=] {
                          if (off->count()) p->query_offset = *offset;
                          p->validate();
                          const DType out_dtype = *dtype == "f16" ? DType::F16 : DType::F32;
                          // The float32 values (and their f16 copy), and the rotation, built or read.
                          check_host_memory({{{{"--heads", p->heads}, {"--queries", p->queries}, {"--keys", p->keys}}, 4 + (out_dtype == DType::F16 ? 2u : 0u)},
                                             {{{"--heads", p->heads}, {"--vector-size", p->vector_size}}, 4}});
                          const auto rot = rotation_path->empty() ? fourier_default_rotation(*p) : read_rotation(*rotation_path, *p);
                          const FourierPath gpu_path = *path == "direct" ? FourierPath::Direct : FourierPath::Distance;
                          std::vector<float> out;
                          if (o->reference) {
                            out = fourier_bias_reference(*p, rot);
                          } else {
                            out = gpu_bias(tool_context(), *p, rot, gpu_path, out_dtype);
                          }
                          write_floats(o->out, out, {p->heads, p->queries, p->keys}, out_dtype);
                        }});
  }
  register_checks(reg);
  register_benches(reg);
  reg.fuzz.push_back({"fourier", draw_case});
}

}  // namespace relpos::tool
