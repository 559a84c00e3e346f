#pragma once
// The tool side of the per-distance bias kit: from what a family supplies (its parameter flags,
// reference, GPU ops, tolerance and example parameters), `relpos run <family>-bias`, the `check`
// cases of the bias and its in-place add over the shapes every such bias must get right, a `fuzz`
// family and `bench` cases. docs/ARCHITECTURE.md, "Adding a per-distance bias".
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "number_flags.hpp"
#include "fuzz.hpp"
#include "registry.hpp"

namespace relpos::tool {

template <class Params>
struct DistanceBiasFamily {
  std::string name;     // "kerple": `run kerple-bias`, check ops kerple-bias(-add), `fuzz --op kerple`
  std::string summary;  // help of the run command
  bool has_causal = true;  // the family has a causal mask (its params a `causal` field)
  // Adds the family's own flags to its run command; the returned function turns their parsed values
  // into `p` (reading any files) before the command runs.
  std::function<std::function<void(Params&)>(CLI::App&)> add_flags;
  // The family's parameters for p.heads: a fixed set per check case `index`, and random ones.
  std::function<void(Params&, std::size_t index)> example;
  std::function<void(Params&, FuzzRng&)> draw;
  std::function<std::string(const Params&)> describe;  // the family's part of a case's shape
  std::function<std::vector<float>(const Params&)> reference;  // float32 [heads, Q, K]
  std::function<void(const Params&, std::span<float>)> reference_add;  // logits [batch, heads, Q, K] += bias
  std::function<void(Recorder&, const Params&, const Buffer&, DType)> bias;
  std::function<void(Recorder&, const Params&, const Buffer&, DType)> bias_add;
  // Normalised error a float32 result may have (0: exact).
  std::function<double(const Params&)> f32_tolerance;
  bool bench_in_short = false;  // its bias bench in `relpos bench --short`
  // Host bytes a head of the family's parameters takes (ALiBi's slope rule), beside the output.
  std::uint64_t host_bytes_per_head = 0;
};

namespace distance_kit {

template <class Params>
std::string shape_of(const DistanceBiasFamily<Params>& f, const Params& p, bool add, DType dtype) {
  std::string s = "H=" + std::to_string(p.heads) + ",Q=" + std::to_string(p.queries) + ",K=" + std::to_string(p.keys);
  if constexpr (requires { p.causal; }) s += p.causal ? ",causal" : ",sym";
  if (p.query_offset) s += ",off=" + std::to_string(p.query_offset);
  const std::string family = f.describe(p);
  if (!family.empty()) s += "," + family;
  if (add) s += ",B=" + std::to_string(p.batch);
  return s + " " + std::string(dtype_name(dtype));
}

// An f16 result holds the float32 value rounded once; beyond the largest half (65504) it saturates
// to +-inf, and a value within the float32 tolerance of that edge may land on either side, so
// both count as the edge. Masked entries (-inf in float32) must stay -inf.
inline double f16_error(std::vector<float> got, std::vector<float> want_f32) {
  constexpr float kMaxHalf = 65504.0f;
  std::vector<float> want = from_half(to_half(want_f32));
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (std::isfinite(want_f32[i])) {
      got[i] = std::clamp(got[i], -kMaxHalf, kMaxHalf);
      want[i] = std::clamp(want[i], -kMaxHalf, kMaxHalf);
    }
  return normalised_error(got, want);
}

// The GPU bias or in-place add against the family's reference.
template <class Params>
CheckResult check(const DistanceBiasFamily<Params>& f, Context& ctx, const Params& p, DType dtype, bool add) {
  const std::size_t per_batch = std::size_t{p.heads} * p.queries * p.keys;
  const std::size_t n = (add ? p.batch : 1) * per_batch;
  std::vector<float> logits(n, 0.0f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  if (add)
    for (auto& x : logits) x = u(rng);
  if (dtype == DType::F16) logits = from_half(to_half(logits));  // what the f16 buffer holds
  std::vector<float> want = logits;
  if (add) f.reference_add(p, want);
  else want = f.reference(p);
  Buffer out = make_float_buffer(ctx, logits, dtype);
  Recorder r(ctx);
  (add ? f.bias_add : f.bias)(r, p, out, dtype);
  r.submit_and_wait();
  const std::vector<float> got = download_floats(out, n, dtype);
  // An inexact bias may round the sum of an add to the neighbouring float32: one ulp more.
  const double f32_tol = f.f32_tolerance(p) + (add && f.f32_tolerance(p) > 0 ? 0x1p-23 : 0.0);
  if (dtype == DType::F16) return {f16_error(got, want), 1.0 / 1024 + f32_tol, "max_err"};
  return {normalised_error(got, want), f32_tol, "max_err"};
}

// The shapes every per-distance bias is checked on: decoder and encoder, a batch, primes, one
// decoding step against a long cache, a last-aligned window and a far offset.
struct Shape {
  std::uint32_t heads, queries, keys, batch;
  bool causal;
  std::int64_t offset;
};
inline const std::vector<Shape>& check_shapes() {
  static const std::vector<Shape> shapes = {
      {8, 128, 128, 1, true, 0},     {12, 100, 100, 2, true, 0},  {6, 61, 59, 1, false, 0},
      {16, 1, 4096, 1, true, 4095},  {5, 37, 301, 2, true, 264},  {3, 33, 35, 3, false, -2'000'000},
  };
  return shapes;
}

template <class Params>
Params params_of(const Shape& s) {
  Params p;
  p.heads = s.heads;
  p.queries = s.queries;
  p.keys = s.keys;
  p.batch = s.batch;
  p.query_offset = s.offset;
  if constexpr (requires { p.causal; }) p.causal = s.causal;
  return p;
}

template <class Params>
void register_checks(const std::shared_ptr<const DistanceBiasFamily<Params>>& f, Registry& reg) {
  const auto& shapes = check_shapes();
  for (std::size_t c = 0; c < shapes.size(); ++c) {
    Params p = params_of<Params>(shapes[c]);
    f->example(p, c);
    for (DType dtype : {DType::F32, DType::F16})
      for (bool add : {false, true}) {
        const bool quick = c == 0;  // the family's row; the expansions are shared
        reg.checks.push_back({f->name + (add ? "-bias-add" : "-bias"), shape_of(*f, p, add, dtype),
                              [f, p, dtype, add](Context& ctx) { return check(*f, ctx, p, dtype, add); }, quick});
      }
  }
}

// One random bias or add: any head count, shapes up to long K, offsets up to the edge of the
// 32-bit relative positions, the family's parameters drawn by the family.
template <class Params>
CheckCase draw_case(const std::shared_ptr<const DistanceBiasFamily<Params>>& f, FuzzRng& g) {
  Params p;
  p.heads = g.size(1, 64);
  if constexpr (requires { p.causal; }) p.causal = g.chance(0.5);
  const std::uint64_t budget = g.max_elements();
  p.keys = g.size(1, std::min<std::uint64_t>(kFuzzMaxKeys, budget));
  p.queries = g.size(1, std::min<std::uint64_t>(4096, budget / p.keys));
  p.heads = std::min<std::uint32_t>(p.heads, static_cast<std::uint32_t>(std::max<std::uint64_t>(1, budget / (std::uint64_t{p.queries} * p.keys))));
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  p.query_offset = g.offset(std::int64_t{p.keys} - kMax, kMax - p.queries);
  const bool add = g.chance(0.5);
  const DType dtype = g.float_dtype();
  if (add) p.batch = g.size(1, std::min<std::uint64_t>(4, budget / (std::uint64_t{p.heads} * p.queries * p.keys)));
  f->draw(p, g);
  return {f->name + (add ? "-bias-add" : "-bias"), shape_of(*f, p, add, dtype),
          [f, p, dtype, add](Context& ctx) { return check(*f, ctx, p, dtype, add); }};
}

template <class Params>
void register_benches(const std::shared_ptr<const DistanceBiasFamily<Params>>& f, Registry& reg) {
  for (auto [h, q, k, dtype, in_short] : {std::tuple{16u, 2048u, 2048u, DType::F32, f->bench_in_short},
                                          {16u, 2048u, 2048u, DType::F16, false}, {8u, 512u, 512u, DType::F32, false}}) {
    Params p = params_of<Params>({h, q, k, 1, false, 0});
    f->example(p, 0);
    const std::uint64_t bytes = std::uint64_t{h} * q * k * dtype_size(dtype);
    reg.benches.push_back({f->name + "-bias", "[" + std::to_string(h) + "," + std::to_string(q) + "," + std::to_string(k) + "] " +
                                                  std::string(dtype_name(dtype)),
                           bytes, Ceiling::Write, in_short, [f, p, bytes, dtype](Context& ctx) {
                             auto out = std::make_shared<Buffer>(ctx, bytes);
                             BenchRun run;
                             run.record = [f, p, out, dtype](Recorder& r) { f->bias(r, p, *out, dtype); };
                             run.cpu = [f, p] { (void)f->reference(p); };
                             run.keep = out;
                             return run;
                           }});
  }
  Params p = params_of<Params>({8, 1024, 1024, 2, false, 0});
  f->example(p, 0);
  const std::uint64_t n = 2ull * 8 * 1024 * 1024;
  reg.benches.push_back({f->name + "-bias-add", "[2,8,1024,1024] f32", n * 4 * 2, Ceiling::Copy, false, [f, p, n](Context& ctx) {
                           struct State { std::vector<float> logits; Buffer l; };
                           auto s = std::make_shared<State>();
                           s->logits.assign(n, 0.5f);
                           s->l = make_buffer(ctx, s->logits);
                           BenchRun run;
                           run.record = [f, p, s](Recorder& r) { f->bias_add(r, p, s->l, DType::F32); };
                           run.cpu = [f, p, s] { f->reference_add(p, s->logits); };
                           run.keep = s;
                           return run;
                         }});
}

// `relpos run <family>-bias --heads H --queries Q --keys K [--causal] [--query-offset O]
// [--dtype f32|f16] <family flags> --out F.npy`: [H, Q, K], masked entries -inf.
template <class Params>
void register_run(const std::shared_ptr<const DistanceBiasFamily<Params>>& f, CLI::App& run, Registry& reg) {
  auto p = std::make_shared<Params>();
  auto o = std::make_shared<RunOptions>();
  auto dtype = std::make_shared<std::string>("f32");
  auto* cmd = run.add_subcommand(f->name + "-bias", f->summary);
  add_number(*cmd, "--heads", p->heads, "number of heads H", 1u)->required();
  add_number(*cmd, "--queries", p->queries, "number of queries Q", 1u)->required();
  add_number(*cmd, "--keys", p->keys, "number of keys K", 1u)->required();
  if constexpr (requires { p->causal; }) {
    p->causal = false;
    cmd->add_flag("--causal", p->causal, "decoder bias: -inf above the diagonal (rp > 0); default symmetric in |rp|");
  }
  add_number(*cmd, "--query-offset", p->query_offset, "absolute position of query 0 (rp = j - i - offset)");
  auto finish = f->add_flags(*cmd);
  cmd->add_option("--dtype", *dtype, "output dtype")->check(CLI::IsMember({"f32", "f16"}));
  add_run_options(*cmd, *o);
  reg.runs.push_back({cmd, [f, p, o, dtype, finish] {
                        const DType out_dtype = *dtype == "f16" ? DType::F16 : DType::F32;
                        // The float32 values, and the f16 copy write_floats makes of them.
                        check_host_memory({{{{"--heads", p->heads}, {"--queries", p->queries}, {"--keys", p->keys}}, 4 + (out_dtype == DType::F16 ? 2u : 0u)},
                                           {{{"--heads", p->heads}}, f->host_bytes_per_head}});
                        finish(*p);
                        const std::size_t n = std::size_t{p->heads} * p->queries * p->keys;
                        std::vector<float> out;
                        if (o->reference) {
                          out = f->reference(*p);
                        } else {
                          Context& ctx = tool_context();
                          p->validate();
                          Buffer b(ctx, n * dtype_size(out_dtype));
                          Recorder r(ctx);
                          f->bias(r, *p, b, out_dtype);
                          r.submit_and_wait();
                          out = download_floats(b, n, out_dtype);
                        }
                        write_floats(o->out, out, {p->heads, p->queries, p->keys}, out_dtype);
                      }});
}

}  // namespace distance_kit

// Registers everything the tool has for a per-distance bias family.
template <class Params>
void register_distance_bias(DistanceBiasFamily<Params> family, CLI::App& run, Registry& reg) {
  auto f = std::make_shared<const DistanceBiasFamily<Params>>(std::move(family));
  distance_kit::register_run(f, run, reg);
  distance_kit::register_checks(f, reg);
  distance_kit::register_benches(f, reg);
  reg.fuzz.push_back({f->name, [f](FuzzRng& g) { return distance_kit::draw_case(f, g); }});
}

}  // namespace relpos::tool
