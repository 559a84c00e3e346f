// `relpos check`, `relpos bench` and `relpos fuzz` cases of the Shaw family and the attention building blocks.
#include <cmath>
#include <limits>
#include <random>

#include "fuzz.hpp"
#include "registry.hpp"
#include "shaw_cases.hpp"

namespace relpos::tool {
namespace {

std::vector<float> random_values(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Bounds from the sums of absolute values: a float sum of n terms is off by at most
// n·2^-24·Σ|terms| (Higham), normalised like normalised_error by max(1, max|want|).
double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}
std::vector<float> abs_of(std::vector<float> x) {
  for (float& v : x) v = std::abs(v);
  return x;
}
double sum_error(std::uint64_t n, double abs_sum) { return static_cast<double>(n) * 0x1p-24 * abs_sum; }
double normalised(double abs_error, const std::vector<float>& want) { return abs_error / std::max(1.0, max_abs(want)); }
constexpr double kHalfRounding = 0x1p-10;  // one rounding of the result to half, either way


std::size_t rows(const ShawParams& p) { return std::size_t{p.batch} * p.heads * p.queries; }

std::string shape_of(const ShawParams& p) {
  return "[" + std::to_string(p.batch) + "," + std::to_string(p.heads) + "," + std::to_string(p.queries) + "," +
         std::to_string(p.keys) + "] d=" + std::to_string(p.head_dim) + " k=" + std::to_string(p.max_relative_position) +
         (p.query_offset ? " off=" + std::to_string(p.query_offset) : "");
}

// The relative-key term written, or added into random logits, by the cheap form (q in q_dtype)
// or tensor2tensor's.
CheckResult check_logits(Context& ctx, const ShawParams& p, DType q_dtype, bool materialised, bool add) {
  const auto q = rounded_to_storage(random_values(rows(p) * p.head_dim, 1), q_dtype);
  const auto table = random_values(std::size_t{p.table_rows()} * p.head_dim, 2);
  const auto logits = random_values(rows(p) * p.keys, 3, -4.0f, 4.0f);
  auto want = shaw_logits_t2t_reference(p, q, table);
  if (add)
    for (std::size_t e = 0; e < want.size(); ++e) want[e] += logits[e];
  Buffer bq = make_float_buffer(ctx, q, q_dtype), bt = make_buffer(ctx, table), bl = make_buffer(ctx, logits);
  Recorder r(ctx);
  if (materialised && add) shaw_logits_materialised_add(r, p, bq, bt, bl);
  else if (materialised) shaw_logits_materialised(r, p, bq, bt, bl);
  else if (add) shaw_logits_add(r, p, bq, bt, bl, q_dtype);
  else shaw_logits(r, p, bq, bt, bl, q_dtype);
  r.submit_and_wait();
  ShawParams abs_p = p;
  abs_p.scale = std::abs(p.scale);
  const auto abs_term = shaw_logits_direct_reference(abs_p, abs_of(q), abs_of(table));
  return {normalised_error(bl.download<float>(want.size()), want),
          normalised(sum_error(p.head_dim + 1, max_abs(abs_term) + (add ? max_abs(logits) : 0.0)), want), "max_err"};
}

CheckResult check_values(Context& ctx, const ShawParams& p, DType out_dtype) {
  const auto w = random_values(rows(p) * p.keys, 4, 0.0f, 1.0f);
  const auto table = random_values(std::size_t{p.table_rows()} * p.head_dim, 5);
  const auto out = rounded_to_storage(random_values(rows(p) * p.head_dim, 6), out_dtype);
  const auto term = shaw_values_t2t_reference(p, w, table);
  auto want = out;
  for (std::size_t e = 0; e < want.size(); ++e) want[e] += term[e];
  Buffer bw = make_buffer(ctx, w), bt = make_buffer(ctx, table), bo = make_float_buffer(ctx, out, out_dtype);
  Recorder r(ctx);
  shaw_values_add(r, p, bw, bt, bo, out_dtype);
  r.submit_and_wait();
  // The bucket sums (up to `keys` weights), then 2k+1 products, then the addition into out.
  const auto abs_term = shaw_values_direct_reference(p, w, abs_of(table));
  const double tol = normalised(sum_error(p.keys + p.table_rows() + 1, max_abs(abs_term) + max_abs(out)), want) +
                     (out_dtype == DType::F16 ? kHalfRounding : 0.0);
  return {normalised_error(download_floats(bo, want.size(), out_dtype), want), tol, "max_err"};
}

// The whole pipeline; without max_relative_position, plain unfused attention.
CheckResult check_attention(Context& ctx, const ShawAttentionParams& sp, bool shaw) {
  const UnfusedAttentionParams& a = sp.attention;
  const std::size_t bh = std::size_t{a.batch} * a.heads, t = (2 * sp.max_relative_position + 1) * a.head_dim;
  const auto q = rounded_to_storage(random_values(bh * a.queries * a.head_dim, 7), a.dtype);
  const auto k = rounded_to_storage(random_values(bh * a.keys * a.head_dim, 8), a.dtype);
  const auto v = rounded_to_storage(random_values(bh * a.keys * a.head_dim, 9), a.dtype);
  const auto ek = random_values(t, 10), ev = random_values(t, 11);
  const auto want = shaw ? shaw_attention_reference(sp, q, k, v, ek, ev) : unfused_attention_reference(a, q, k, v);
  Buffer bq = make_float_buffer(ctx, q, a.dtype), bk = make_float_buffer(ctx, k, a.dtype), bv = make_float_buffer(ctx, v, a.dtype);
  Buffer bek = make_buffer(ctx, ek), bev = make_buffer(ctx, ev), out(ctx, want.size() * dtype_size(a.dtype));
  Recorder r(ctx);
  if (shaw) shaw_attention(r, sp, bq, bk, bv, bek, bev, out);
  else unfused_attention(r, a, bq, bk, bv, out);
  r.submit_and_wait();
  // A logit error δ (2·head_dim products of q·(k + e)) moves the weights by Σ|δw| <= 2δ; exp and the
  // division add <= 64 ulp per weight (GLSL's exp: 3 + 2|x| ulp); the output sums over keys and
  // buckets of weights times |v + e|.
  const double logit_error = sum_error(2 * a.head_dim, a.head_dim * max_abs(q) * (max_abs(k) + (shaw ? max_abs(ek) : 0.0))) * a.scale;
  const double max_value = max_abs(v) + (shaw ? max_abs(ev) : 0.0);
  const double tol = normalised(max_value * (2 * logit_error + (a.keys + t / a.head_dim + 64) * 0x1p-24), want) +
                     (a.dtype == DType::F16 ? kHalfRounding : 0.0);
  return {normalised_error(download_floats(out, want.size(), a.dtype), want), tol, "max_err"};
}

struct Cfg {
  std::uint32_t b, h, q, k, d, rel;
  std::int64_t off;
};

ShawParams make(const Cfg& c) {
  ShawParams p;
  p.batch = c.b;
  p.heads = c.h;
  p.queries = c.q;
  p.keys = c.k;
  p.head_dim = c.d;
  p.max_relative_position = c.rel;
  p.query_offset = c.off;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  return p;
}

ShawAttentionParams attention_of(const ShawParams& p, bool causal, DType dtype) {
  ShawAttentionParams a;
  a.max_relative_position = p.max_relative_position;
  a.attention.batch = p.batch;
  a.attention.heads = p.heads;
  a.attention.queries = p.queries;
  a.attention.keys = p.keys;
  a.attention.head_dim = p.head_dim;
  a.attention.query_offset = p.query_offset;
  a.attention.scale = p.scale;
  a.attention.causal = causal;
  a.attention.dtype = dtype;
  return a;
}

// Random Shaw parameters: any head_dim, k from 1 to beyond the sequence, offsets up to the limit of
// the 32-bit relative positions; logits, P and the materialised embeddings within the budget.
ShawParams draw_shaw(FuzzRng& g, std::uint32_t max_depth) {
  ShawParams p;
  const std::uint64_t budget = g.max_elements();
  p.head_dim = g.size(1, max_depth);
  p.keys = g.size(1, std::min<std::uint64_t>(kFuzzMaxKeys, budget));
  p.queries = g.size(1, std::min<std::uint64_t>(2048, budget / p.keys));
  p.heads = g.size(1, std::min<std::uint64_t>(16, budget / (std::uint64_t{p.queries} * p.keys)));
  p.batch = g.size(1, std::min<std::uint64_t>(4, budget / (std::uint64_t{p.heads} * p.queries * p.keys)));
  p.max_relative_position = g.size(1, std::min<std::uint64_t>(4096, budget / (std::uint64_t{p.batch} * p.heads * p.queries) / 2));
  p.scale = g.pick({1.0f, 0.125f, 1.0f / std::sqrt(static_cast<float>(p.head_dim))});
  return p;
}

CheckCase draw_shaw_case(FuzzRng& g) {
  const std::uint64_t kind = g.below(6);  // logits f32, logits f16, logits add, t2t, values f32, values f16
  ShawParams p = draw_shaw(g, 256);
  if (kind == 3) {  // tensor2tensor materialises [Q, K, head_dim]
    p.head_dim = std::min<std::uint32_t>(p.head_dim, static_cast<std::uint32_t>(std::max<std::uint64_t>(1, g.max_elements() / (std::uint64_t{p.queries} * p.keys))));
  }
  const std::int64_t reach = std::int64_t{p.queries} + p.keys + 2ll * p.max_relative_position;
  // Offsets within +-(2^30 - 2) (the attention checks every Shaw op shares), and reach + |offset| < 2^31.
  const std::int64_t far = std::min<std::int64_t>(std::numeric_limits<std::int32_t>::max() / 2 - 1, (std::int64_t{1} << 31) - 1 - reach);
  p.query_offset = g.offset(-far, far);
  const std::string s = shape_of(p);
  switch (kind) {
    case 0: return {"shaw-logits", s + " f32", [p](Context& ctx) { return check_logits(ctx, p, DType::F32, false, false); }};
    case 1: return {"shaw-logits", s + " f16", [p](Context& ctx) { return check_logits(ctx, p, DType::F16, false, false); }};
    case 2: return {"shaw-logits-add", s + " f32", [p](Context& ctx) { return check_logits(ctx, p, DType::F32, false, true); }};
    case 3: return {"shaw-logits-t2t", s, [p](Context& ctx) { return check_logits(ctx, p, DType::F32, true, false); }};
    case 4: return {"shaw-values", s + " f32", [p](Context& ctx) { return check_values(ctx, p, DType::F32); }};
    default: return {"shaw-values", s + " f16", [p](Context& ctx) { return check_values(ctx, p, DType::F16); }};
  }
}

// The pipelines (logits, masked softmax, weights·v, with Shaw's two terms or without): causal or
// not, key padding down to empty rows.
CheckCase draw_attention_case(FuzzRng& g, bool shaw) {
  ShawParams p = draw_shaw(g, 128);
  constexpr std::int64_t kHalf = std::numeric_limits<std::int32_t>::max() / 2;
  const std::int64_t reach = std::int64_t{p.queries} + p.keys + 2ll * p.max_relative_position;
  p.query_offset = g.offset(reach - kHalf + 1, kHalf - 1 - reach);
  ShawAttentionParams a = attention_of(p, g.chance(0.5), g.float_dtype());
  if (g.chance(0.3))
    for (std::uint32_t b = 0; b < p.batch; ++b) a.attention.key_lengths.push_back(static_cast<std::uint32_t>(g.offset(0, p.keys)));
  std::string tag = shape_of(p) + (a.attention.causal ? " causal" : "");
  if (!a.attention.key_lengths.empty()) {
    tag += " lengths=";
    for (std::size_t b = 0; b < a.attention.key_lengths.size(); ++b) {
      if (b) tag += ",";  // (appended: g++ 12 warns of "," + string, its bug 105329)
      tag += std::to_string(a.attention.key_lengths[b]);
    }
  }
  tag += " " + std::string(dtype_name(a.attention.dtype));
  return {shaw ? "shaw-attention" : "unfused-attention", tag, [a, shaw](Context& ctx) { return check_attention(ctx, a, shaw); }};
}

}  // namespace

void register_shaw_fuzz(Registry& reg) {
  reg.fuzz.push_back({"shaw", [](FuzzRng& g) { return g.chance(0.7) ? draw_shaw_case(g) : draw_attention_case(g, true); }});
  reg.fuzz.push_back({"unfused-attention", [](FuzzRng& g) { return draw_attention_case(g, false); }});
}

void register_shaw_checks(Registry& reg) {
  const std::vector<Cfg> cfgs = {
      {2, 3, 4, 4, 5, 2, 0},             // tensor2tensor's worked example
      {1, 8, 128, 128, 64, 16, 0},       // encoder self-attention
      {2, 4, 37, 301, 32, 64, 264},      // tensor2tensor alignment, Q != K
      {1, 8, 1, 512, 64, 16, 511},       // tensor2tensor's cache mode: one decoding step
      {1, 2, 50, 70, 13, 200, -7},       // k beyond the sequence, odd head_dim, negative offset
  };
  for (const Cfg& c : cfgs) {
    const bool quick = c.rel != 200;  // all but the last make pipelines the others do not
    const ShawParams p = make(c);
    const std::string s = shape_of(p);
    reg.checks.push_back({"shaw-logits", s + " f32", [p](Context& ctx) { return check_logits(ctx, p, DType::F32, false, false); }, quick});
    reg.checks.push_back({"shaw-logits", s + " f16", [p](Context& ctx) { return check_logits(ctx, p, DType::F16, false, false); }, quick});
    reg.checks.push_back({"shaw-logits-add", s + " f32", [p](Context& ctx) { return check_logits(ctx, p, DType::F32, false, true); }, quick});
    reg.checks.push_back({"shaw-logits-t2t", s, [p](Context& ctx) { return check_logits(ctx, p, DType::F32, true, false); }, quick});
    reg.checks.push_back({"shaw-values", s + " f32", [p](Context& ctx) { return check_values(ctx, p, DType::F32); }, quick});
    reg.checks.push_back({"shaw-values", s + " f16", [p](Context& ctx) { return check_values(ctx, p, DType::F16); }, quick});
    for (DType t : {DType::F32, DType::F16}) {
      const bool causal = c.q > 1;
      const auto a = attention_of(p, causal, t);
      const std::string tag = s + (causal ? " causal " : " ") + std::string(dtype_name(t));
      reg.checks.push_back({"shaw-attention", tag, [a](Context& ctx) { return check_attention(ctx, a, true); }, quick});
      reg.checks.push_back({"unfused-attention", tag, [a](Context& ctx) { return check_attention(ctx, a, false); }, quick});
    }
  }
  // Key padding and a fully masked batch.
  ShawAttentionParams a = attention_of(make({2, 2, 33, 40, 16, 8, 7}), true, DType::F32);
  a.attention.key_lengths = {0, 25};
  reg.checks.push_back({"shaw-attention", shape_of(a.shaw()) + " causal lengths=0,25", [a](Context& ctx) { return check_attention(ctx, a, true); }, true});
  reg.checks.push_back({"unfused-attention", shape_of(a.shaw()) + " causal lengths=0,25", [a](Context& ctx) { return check_attention(ctx, a, false); }, true});
}

void register_shaw_benches(Registry& reg) {
  // The shape: B=1, H=8, n=1024, d=64; the cheap form against tensor2tensor's.
  for (std::uint32_t k : {64u, 16u}) {
    ShawParams p = make({1, 8, 1024, 1024, 64, k, 0});
    const std::uint64_t q_bytes = rows(p) * p.head_dim * 4, logits_bytes = rows(p) * p.keys * 4;
    const std::uint64_t term_bytes = rows(p) * p.table_rows() * 4;
    const std::uint64_t e_bytes = std::uint64_t{p.queries} * p.keys * p.head_dim * 4;
    struct State { std::vector<float> q, table, logits; Buffer bq, bt, bl, bl_t2t; };
    enum class Form { Cheap, CheapAdd, T2t };
    auto prepare = [p](Form form) {
      return [p, form](Context& ctx) {
        auto s = std::make_shared<State>();
        s->q = random_values(rows(p) * p.head_dim, 1);
        s->table = random_values(std::size_t{p.table_rows()} * p.head_dim, 2);
        s->logits.assign(rows(p) * p.keys, 0.0f);
        s->bq = make_buffer(ctx, s->q);
        s->bt = make_buffer(ctx, s->table);
        s->bl = make_buffer(ctx, s->logits);
        BenchRun run;
        if (form == Form::T2t) {
          run.record = [p, s](Recorder& r) { shaw_logits_materialised(r, p, s->bq, s->bt, s->bl); };
          run.cpu = [p, s] { (void)shaw_logits_t2t_reference(p, s->q, s->table); };
        } else {
          if (form == Form::Cheap) {
            run.record = [p, s](Recorder& r) { shaw_logits(r, p, s->bq, s->bt, s->bl); };
            // The ratio, measured in one submission: tensor2tensor's form into its own logits.
            s->bl_t2t = make_buffer(ctx, s->logits);
            run.baseline = "t2t";
            run.record_baseline = [p, s](Recorder& r) { shaw_logits_materialised(r, p, s->bq, s->bt, s->bl_t2t); };
          } else {
            run.record = [p, s](Recorder& r) { shaw_logits_add(r, p, s->bq, s->bt, s->bl); };
          }
          run.cpu = [p, s] { (void)shaw_logits_direct_reference(p, s->q, s->table); };
        }
        run.keep = s;
        return run;
      };
    };
    const std::string shape = shape_of(p);
    // The relative-key term [B, H, Q, K] written. Cheap: read q, write and read P, write the
    // term. Materialised: write and read the [Q, K, d] embeddings, write the term.
    reg.benches.push_back({"shaw-logits", shape, q_bytes + 2 * term_bytes + logits_bytes, Ceiling::Copy, k == 64, prepare(Form::Cheap)});
    reg.benches.push_back({"shaw-logits-t2t", shape, q_bytes + 2 * e_bytes + logits_bytes, Ceiling::Copy, false, prepare(Form::T2t)});
    if (k == 64)  // added in place: the logits are read too
      reg.benches.push_back({"shaw-logits-add", shape, q_bytes + 2 * term_bytes + 2 * logits_bytes, Ceiling::Copy, false,
                             prepare(Form::CheapAdd)});
  }
  ShawParams p = make({1, 8, 1024, 1024, 64, 64, 0});
  const std::uint64_t logits_bytes = rows(p) * p.keys * 4, qkv_bytes = rows(p) * p.head_dim * 4;
  const std::uint64_t term_bytes = rows(p) * p.table_rows() * 4;
  reg.benches.push_back({"shaw-values", shape_of(p), logits_bytes + 2 * term_bytes + 2 * qkv_bytes, Ceiling::Copy, false,
                         [p](Context& ctx) {
                           struct State { std::vector<float> w, table, out; Buffer bw, bt, bo; };
                           auto s = std::make_shared<State>();
                           s->w = random_values(rows(p) * p.keys, 3, 0.0f, 1.0f);
                           s->table = random_values(std::size_t{p.table_rows()} * p.head_dim, 4);
                           s->out.assign(rows(p) * p.head_dim, 0.0f);
                           s->bw = make_buffer(ctx, s->w);
                           s->bt = make_buffer(ctx, s->table);
                           s->bo = make_buffer(ctx, s->out);
                           BenchRun run;
                           run.record = [p, s](Recorder& r) { shaw_values_add(r, p, s->bw, s->bt, s->bo); };
                           run.cpu = [p, s] { (void)shaw_values_direct_reference(p, s->w, s->table); };
                           run.keep = s;
                           return run;
                         }});
  // The pipelines: logits written, softmax read and written, read by weights·v; q, k, v read, out written.
  for (bool shaw : {false, true}) {
    const ShawAttentionParams a = attention_of(p, true, DType::F32);
    const std::uint64_t bytes = 4 * logits_bytes + 4 * qkv_bytes + (shaw ? 4 * term_bytes + 2 * logits_bytes : 0);
    reg.benches.push_back({shaw ? "shaw-attention" : "unfused-attention", shape_of(p) + " causal f32", bytes, Ceiling::Copy, false,
                           [a, shaw](Context& ctx) {
                             const UnfusedAttentionParams& at = a.attention;
                             struct State { std::vector<float> q, k, v, ek, ev; Buffer bq, bk, bv, bek, bev, out; };
                             auto s = std::make_shared<State>();
                             const std::size_t n = std::size_t{at.heads} * at.queries * at.head_dim, t = (2 * a.max_relative_position + 1) * at.head_dim;
                             s->q = random_values(n, 5);
                             s->k = random_values(n, 6);
                             s->v = random_values(n, 7);
                             s->ek = random_values(t, 8);
                             s->ev = random_values(t, 9);
                             s->bq = make_buffer(ctx, s->q);
                             s->bk = make_buffer(ctx, s->k);
                             s->bv = make_buffer(ctx, s->v);
                             s->bek = make_buffer(ctx, s->ek);
                             s->bev = make_buffer(ctx, s->ev);
                             s->out = Buffer(ctx, n * 4);
                             BenchRun run;
                             if (shaw) {
                               run.record = [a, s](Recorder& r) { shaw_attention(r, a, s->bq, s->bk, s->bv, s->bek, s->bev, s->out); };
                               run.cpu = [a, s] { (void)shaw_attention_reference(a, s->q, s->k, s->v, s->ek, s->ev); };
                             } else {
                               run.record = [a, s](Recorder& r) { unfused_attention(r, a.attention, s->bq, s->bk, s->bv, s->out); };
                               run.cpu = [a, s] { (void)unfused_attention_reference(a.attention, s->q, s->k, s->v); };
                             }
                             run.keep = s;
                             return run;
                           }});
  }
}

}  // namespace relpos::tool
