// Ring attention in the tool: `run ring-attention` over in-process ranks (--ranks R) or MPI ranks
// (under mpirun, without --ranks), with Q < K taking sequence-parallel (sharded) attention; and the
// `relpos bench --filter ring` records.
#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include <relpos/ring.hpp>

#include "attention_bias.hpp"
#include "cache_npy.hpp"
#include "number_flags.hpp"
#include "registry.hpp"
#include "ring_tool.hpp"

#if RELPOS_TOOL_MPI
#include <relpos/ring_mpi.hpp>
#endif

namespace relpos::tool {
namespace {

struct RingArgs {
  std::string q, k, v, lse, dtype = "f32", layout = "contiguous", devices, timings, kv_dtype, k_scale, v_scale;
  std::uint32_t ranks = 0;  // 0: not given (MPI ranks)
  std::optional<float> scale;
  bool causal = false;
  double timeout_s = 60;
  std::unique_ptr<AttentionBiasFlags> bias;
  AttentionParams p;
  RunOptions o;
};

// The settings the flags give every rank without reading a file (the shapes and the bias family's
// own settings come from the files, on the root).
AttentionParams flag_params(const RingArgs& a) {
  AttentionParams p = a.p;
  p.bias = a.bias->chosen();
  p.causal = a.causal;
  p.scale = a.scale;
  p.dtype = a.dtype == "f16" ? DType::F16 : DType::F32;
  if (!a.kv_dtype.empty()) p.cache_format = cache_format_flag(a.kv_dtype);
  return p;
}

// The whole call, read as `run attention` reads it.
RingCall read_call(const RingArgs& a, std::uint32_t ranks) {
  RingCall c;
  c.p = flag_params(a);
  AttentionParams& p = c.p;
  std::vector<std::uint64_t> qs, ks;
  c.in.q = read_floats("--q", a.q, 4, qs);
  // A head size the format cannot store, by its rule rather than by the caches' row sizes.
  if (p.cache_format) check_cache_head_dim(*p.cache_format, dimension32("--q head_dim", qs[3]), "--q head_dim");
  KvFiles kv = read_kv_npy(p.cache_format, "--k", a.k, "--v", a.v, ks);  // [B, Hkv, K, D]
  c.in.k = std::move(kv.k);
  c.in.v = std::move(kv.v);
  c.in.k_bytes = std::move(kv.k_bytes);
  c.in.v_bytes = std::move(kv.v_bytes);
  if (qs[0] != ks[0] || qs[3] != ks[3])
    throw InvalidArgument("--k: batch and head_dim must equal --q's (" + std::to_string(qs[0]) + ", " + std::to_string(qs[3]) + ")");
  std::vector<std::uint64_t> scale_shape;
  if (!a.k_scale.empty()) p.k_scales = read_floats("--k-scale", a.k_scale, 1, scale_shape);
  if (!a.v_scale.empty()) p.v_scales = read_floats("--v-scale", a.v_scale, 1, scale_shape);
  p.batch = dimension32("--q batch", qs[0]);
  p.heads = dimension32("--q heads", qs[1]);
  p.queries = dimension32("--q queries", qs[2]);
  p.head_dim = dimension32("--q head_dim", qs[3]);
  p.kv_heads = dimension32("--k heads", ks[1]);
  p.keys = dimension32("--k keys", ks[2]);
  BiasInputs bias = a.bias->read(p);
  c.in.bias = std::move(bias.bias);
  c.in.rel_keys = std::move(bias.rel_keys);
  c.in.rel_values = std::move(bias.rel_values);
  p.validate();
  if (c.in.bias.size() != p.bias_elements())
    throw InvalidArgument("bias input holds " + std::to_string(c.in.bias.size()) + " values: --bias " +
                          std::string(attention_bias_info(p.bias).name) + " needs " + std::to_string(p.bias_elements()) + " for this shape");
  if (p.dtype == DType::F16)  // what the f16 buffers hold
    for (auto* x : {&c.in.q, &c.in.k, &c.in.v}) *x = from_half(to_half(*x));
  c.plan = ring_plan(p, ranks, *ring_layout_from_name(a.layout));
  if (p.cache_format && !c.plan.sharded)
    throw InvalidArgument("--kv-dtype " + a.kv_dtype + ": ring attention (as many queries as keys: " + std::to_string(p.queries) +
                          ") passes its chunks as --dtype values; a cache format is for sharded attention (fewer queries than keys)");
  if (c.plan.sharded && a.layout != "contiguous")
    throw InvalidArgument("--layout " + a.layout + ": with fewer queries (" + std::to_string(p.queries) + ") than keys (" + std::to_string(p.keys) +
                          ") the keys are split contiguously and the queries replicated (sharded attention)");
  c.plan.validate();
  return c;
}

void write_timings(const std::string& path, const std::vector<RankResult>& results, const RingPlan& plan, const std::string& transport) {
  if (path.empty()) return;
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t r = 0; r < results.size(); ++r) ranks.push_back(ring_timing_json(results[r], static_cast<std::uint32_t>(r)));
  const nlohmann::json doc = {{"mode", plan.sharded ? "sharded" : "ring"},
                              {"layout", std::string(ring_layout_name(plan.ring.layout))},
                              {"transport", transport},
                              {"ranks", ranks}};
  std::ofstream(path) << doc.dump(2) << "\n";
  if (!std::ofstream(path, std::ios::app)) throw Error("--timings " + path + ": cannot write");
}

void write_result(const RingArgs& a, const RingCall& c, const AttentionResult& res) {
  const AttentionParams& p = c.p;
  write_floats(a.o.out, res.out, {p.batch, p.heads, p.queries, p.head_dim}, p.output_dtype());
  if (!a.lse.empty()) write_floats(a.lse, res.lse, {p.batch, p.heads, p.queries}, DType::F32);
}

// With --timings, a first run compiles the pipelines, the second is timed, and then an exchange of
// the largest chunk with nothing else running times the link (the cost model's transfer time).
RankResult run_rank(RingRank& rank, const RingCall& c, const RingInputs& in, bool timed) {
  if (timed) run_ring_rank(rank, c.plan, c.p, in);
  RankResult res = run_ring_rank(rank, c.plan, c.p, in);
  if (timed && res.timing.exchange_bytes) res.exchange_ms = ring_exchange_ms(rank, res.timing.exchange_bytes);
  return res;
}

std::vector<std::string> split_devices(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream s(list);
  for (std::string item; std::getline(s, item, ',');) {
    if (item.empty()) throw InvalidArgument("--devices " + list + ": an empty selector (expected I,J,... indices or name substrings)");
    out.push_back(item);
  }
  return out;
}

void run_in_process(const RingArgs& a) {
  const RingCall c = read_call(a, a.ranks);
  const std::uint32_t R = a.ranks;
  InProcessRingOptions options;
  options.context = tool_context_options();
  if (!a.devices.empty()) options.devices = split_devices(a.devices);
  options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000));
  // The tool's own context is not needed: each rank makes its own.
  AttentionResult whole = empty_ring_result(c.p);
  std::vector<RankResult> timings(R);
  const InProcessRingOutcome outcome = run_in_process_ring(R, options, [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    RankResult res = run_rank(rank, c, rank_inputs(c, r), !a.timings.empty());
    put_rank_result(c.plan, c.p, r, res, whole);
    timings[r] = {{}, {}, res.timing, res.exchange_ms};
  });
  if (!outcome.ok()) {
    for (std::size_t r = 0; r < outcome.errors.size(); ++r)
      if (!outcome.errors[r].empty()) std::fprintf(stderr, "relpos: rank %zu: error: %s\n", r, outcome.errors[r].c_str());
    throw Error("ring-attention failed on " + std::to_string(std::count_if(outcome.errors.begin(), outcome.errors.end(),
                                                                          [](const std::string& e) { return !e.empty(); })) +
                " of " + std::to_string(R) + " ranks");
  }
  write_result(a, c, whole);
  write_timings(a.timings, timings, c.plan, "in-process");
}

#if RELPOS_TOOL_MPI
void run_mpi(const RingArgs& a) {
  int argc = 0;
  char** argv = nullptr;
  MpiRing mpi(argc, argv, std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000)));
  const std::uint32_t R = mpi.ranks(), me = mpi.rank();
  try {
    ContextOptions options = tool_context_options();
    if (!a.devices.empty()) {  // rank r on devices[r % n], as in-process
      const auto list = split_devices(a.devices);
      options.device = list[me % list.size()];
    }
    Context ctx(options);
    RingCall c;
    if (me == 0) {
      c = read_call(a, R);
      for (std::uint32_t r = 1; r < R; ++r) mpi.send_to(r, pack_rank_call(c, r), "the inputs for rank " + std::to_string(r));
      c.in = rank_inputs(c, 0);
    } else {
      c = unpack_rank_call(mpi.receive_from(0, "the inputs from rank 0"), flag_params(a), R, *ring_layout_from_name(a.layout));
    }
    RingRank rank(ctx, mpi.transport());
    RankResult res = run_rank(rank, c, c.in, !a.timings.empty());
    if (me != 0) {
      mpi.send_to(0, pack_rank_result(res), "rank " + std::to_string(me) + "'s result");
    } else {
      AttentionResult whole = empty_ring_result(c.p);
      std::vector<RankResult> timings(R);
      put_rank_result(c.plan, c.p, 0, res, whole);
      timings[0] = {{}, {}, res.timing, res.exchange_ms};
      for (std::uint32_t r = 1; r < R; ++r) {
        RankResult other = unpack_rank_result(mpi.receive_from(r, "rank " + std::to_string(r) + "'s result"));
        put_rank_result(c.plan, c.p, r, other, whole);
        timings[r] = {{}, {}, other.timing, other.exchange_ms};
      }
      write_result(a, c, whole);
      write_timings(a.timings, timings, c.plan, "mpi");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "relpos: rank %u: error: %s\n", me, e.what());
    std::fflush(stderr);
    mpi.transport().fail(e.what());
    mpi.abort(1, mpi.transport().timeout());
  }
}
#endif

// The processes of the MPI job this process belongs to: 1 when no launcher started it. Open MPI
// and the PMI launchers (MPICH, Intel MPI) say so in the environment; under PMIx alone only MPI
// itself can tell.
std::uint32_t mpi_launch_size([[maybe_unused]] double timeout_s) {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      const unsigned long n = std::strtoul(v, &end, 10);
      if (end != v && *end == '\0' && n >= 1 && n <= 0xffffffffu) return static_cast<std::uint32_t>(n);
    }
#if RELPOS_TOOL_MPI
  if (MpiRing::launched_by_mpirun()) {
    int argc = 0;
    char** argv = nullptr;
    return MpiRing(argc, argv, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000))).ranks();
  }
#endif
  return 1;
}

// --ranks runs the whole ring in this process: under an MPI launch of several processes each would
// run its own copy of the ring and write the same --out.
void refuse_ranks_under_mpi(const RingArgs& a) {
  if (const std::uint32_t n = mpi_launch_size(a.timeout_s); n > 1)
    throw InvalidArgument("--ranks " + std::to_string(a.ranks) + ": not allowed under an MPI launch of " + std::to_string(n) +
                          " processes (each would run its own in-process ring of " + std::to_string(a.ranks) +
                          " ranks and write the same --out); without --ranks each MPI process is one rank (" + std::to_string(n) + " ranks)");
}

// --reference: the CPU reference of the whole call (the result the ring computes), in this process;
// the call is read and its split checked as the ring would (--ranks, default 1).
void run_reference(const RingArgs& a) {
  // No rank runs: a flag about ranks would be silently ignored.
  if (!a.timings.empty()) throw InvalidArgument("--timings: not with --reference (no ranks run; the reference is one process's)");
  if (!a.devices.empty()) throw InvalidArgument("--devices: not with --reference (no ranks run; the reference is one process's)");
  if (a.ranks != 0) refuse_ranks_under_mpi(a);
  else if (const std::uint32_t n = mpi_launch_size(a.timeout_s); n > 1)
    throw InvalidArgument("--reference: not under an MPI launch of " + std::to_string(n) +
                          " processes (each would compute the whole call and write the same --out)");
  const RingCall c = read_call(a, a.ranks != 0 ? a.ranks : 1);
  write_result(a, c, attention_reference(c.p, {c.in.q, c.in.k, c.in.v, c.in.bias, c.in.rel_keys, c.in.rel_values, {}, {}, {}, {}, c.in.k_bytes,
                                               c.in.v_bytes}));
}

// ---- relpos check: in-process ranks on the check's context against the reference -------------

CheckResult check_ring(Context& ctx, const AttentionParams& p, std::uint32_t R, RingLayout layout) {
  RingCall c;
  c.p = p;
  c.in = random_ring_inputs(p, 7);
  c.plan = ring_plan(p, R, layout);
  c.plan.validate();
  AttentionResult got = empty_ring_result(p);
  const InProcessRingOutcome outcome = run_in_process_ring(std::vector<Context*>(R, &ctx), std::chrono::minutes(5),
                                                           [&](std::uint32_t r, Context& rank_ctx, RingTransport& t) {
                                                             RingRank rank(rank_ctx, t);
                                                             put_rank_result(c.plan, p, r, run_ring_rank(rank, c.plan, p, rank_inputs(c, r)), got);
                                                           });
  if (!outcome.ok()) throw Error(outcome.describe());
  const AttentionResult want = attention_reference(p, {c.in.q, c.in.k, c.in.v, c.in.bias, c.in.rel_keys, c.in.rel_values, {}, {}, {}});
  // As the fused kernel against the reference: float32 sums (f16: one rounding of the output).
  return {std::max(normalised_error(got.out, want.out), normalised_error(got.lse, want.lse)), p.dtype == DType::F16 ? 1e-3 : 1e-4,
          "max_err"};
}

void add_ring_checks(Registry& reg) {
  struct Case {
    AttentionParams p;
    std::uint32_t ranks;
    RingLayout layout;
    const char* note = "";
  };
  AttentionParams t5{.heads = 4, .kv_heads = 2, .queries = 37, .keys = 37, .head_dim = 16, .scale = 1.0f, .causal = true, .bias = AttentionBias::T5};
  t5.t5 = {.num_buckets = 16, .max_distance = 24, .bidirectional = false};
  const AttentionParams row{.batch = 2, .heads = 2, .kv_heads = 2, .queries = 29, .keys = 29, .head_dim = 16, .dtype = DType::F16,
                            .bias = AttentionBias::Distance};
  const AttentionParams dense{.heads = 2, .kv_heads = 1, .queries = 40, .keys = 40, .head_dim = 16, .query_offset = -2, .causal = true,
                              .bias = AttentionBias::Dense};
  const AttentionParams alibi{.heads = 4, .kv_heads = 4, .queries = 1, .keys = 300, .head_dim = 16, .query_offset = 299, .causal = true,
                              .bias = AttentionBias::Alibi};
  AttentionParams kerple{.heads = 2, .kv_heads = 1, .queries = 3, .keys = 100, .head_dim = 16, .query_offset = 97, .bias = AttentionBias::Kerple};
  kerple.kerple_variant = KerpleVariant::Power;
  AttentionParams sandwich{.heads = 2, .kv_heads = 2, .queries = 33, .keys = 33, .head_dim = 16, .causal = true, .bias = AttentionBias::Sandwich};
  sandwich.sandwich_dim = 64;
  sandwich.sandwich_first_frequency = 1;
  // Queries far past every key (ALiBi's logits near -slope·1e6 and -slope·2^31): blocks merged by
  // their lse relative to references of their own (docs/ring_attention.md). The sharded ranks hold
  // 20 keys each, so that at slopes of 0.05-0.5 every rank's part weighs in the merge.
  const AttentionParams alibi_far{.heads = 4, .kv_heads = 2, .queries = 40, .keys = 40, .head_dim = 16, .query_offset = 1000000,
                                  .bias = AttentionBias::Alibi};
  const AttentionParams alibi_far_sharded{.heads = 4, .kv_heads = 2, .queries = 1, .keys = 60, .head_dim = 16,
                                          .query_offset = (std::int64_t{1} << 31) - 100, .bias = AttentionBias::Alibi};
  for (const Case& c : {Case{t5, 3, RingLayout::Contiguous}, Case{row, 2, RingLayout::Zigzag}, Case{dense, 4, RingLayout::Zigzag},
                        Case{alibi, 4, RingLayout::Contiguous}, Case{kerple, 2, RingLayout::Contiguous}, Case{sandwich, 3, RingLayout::Zigzag},
                        Case{alibi_far, 3, RingLayout::Zigzag, " far"}, Case{alibi_far_sharded, 3, RingLayout::Contiguous, " far"}}) {
    const AttentionParams& p = c.p;
    const std::string shape = "[" + std::to_string(p.batch) + "," + std::to_string(p.heads) + "/" + std::to_string(p.kv_heads) + "," +
                              std::to_string(p.queries) + "," + std::to_string(p.keys) + "," + std::to_string(p.head_dim) + "] " +
                              std::string(attention_bias_info(p.bias).name) + " " + std::string(dtype_name(p.dtype)) + (p.causal ? " causal" : "") +
                              " R=" + std::to_string(c.ranks) + " " +
                              (p.queries < p.keys ? "sharded" : std::string(ring_layout_name(c.layout))) + c.note;
    reg.checks.push_back({"ring-attention", shape, [c](Context& ctx) { return check_ring(ctx, c.p, c.ranks, c.layout); }, false});
  }
}

void add_ring_run(CLI::App& run, Registry& reg) {
  auto a = std::make_shared<RingArgs>();
  auto* cmd = run.add_subcommand("ring-attention",
                                 "fused attention of one sequence across ranks (ring attention; sharded when Q < K), out [B, H, Q, D]; "
                                 "--ranks R runs R ranks in this process, mpirun -np R one per MPI rank");
  add_number(*cmd, "--ranks", a->ranks, "ranks in this process, a thread and a context each (without it: the MPI ranks of mpirun)", 1u,
             RingParams::kMaxRanks);
  cmd->add_option("--devices", a->devices, "device of each rank, I,J,... (indices or name substrings; rank r takes the r-th, cycling)");
  cmd->add_option("--q", a->q, "queries [B, H, Q, D] .npy")->required();
  cmd->add_option("--k", a->k, "keys [B, Hkv, K, D] .npy (H a multiple of Hkv)")->required();
  cmd->add_option("--v", a->v, "values [B, Hkv, K, D] .npy")->required();
  a->bias = std::make_unique<AttentionBiasFlags>(*cmd, reg);
  cmd->add_flag("--causal", a->causal, "mask keys after the query");
  add_number(*cmd, "--query-offset", a->p.query_offset, "absolute position of query 0 among the keys");
  add_number(*cmd, "--scale", a->scale, "multiplies q.k (default 1/sqrt(D); T5 models pass 1)");
  cmd->add_option("--dtype", a->dtype, "storage of q and out (and of k and v without --kv-dtype)")->check(CLI::IsMember({"f32", "f16"}));
  cmd->add_option("--kv-dtype", a->kv_dtype,
                  "sharded attention (Q < K): k and v in a cache format, as run attention reads them: f32, f16, bf16 (uint16 bit "
                  "patterns), q8_0 (uint8 [B, Hkv, K, D/32*34], ggml's blocks), fp8_e4m3 (uint8 [B, Hkv, K, D], with --k-scale and --v-scale)");
  cmd->add_option("--k-scale", a->k_scale, "fp8_e4m3: float32 [Hkv] .npy, the keys' scale per kv head");
  cmd->add_option("--v-scale", a->v_scale, "fp8_e4m3: float32 [Hkv] .npy, the values' scale per kv head");
  cmd->add_option("--layout", a->layout, "contiguous (rank r holds chunk r of R) or zigzag (chunks r and 2R-1-r of 2R: causal balance)")
      ->check(CLI::IsMember({"contiguous", "zigzag"}));
  add_number(*cmd, "--timeout", a->timeout_s, "seconds a rank waits for its neighbour before it stops with an error (default 60)", 1e-3, 1e6);
  add_run_options(*cmd, a->o);
  add_output(*cmd, a->o, "--lse", a->lse, "also write the float32 log-sum-exp [B, H, Q] .npy");
  add_output(*cmd, a->o, "--timings", a->timings,
             "also write each rank's compute and communication times (JSON) of a second run (the first compiles the pipelines)");
  reg.runs.push_back({cmd, [a] {
                        if (a->o.reference) return run_reference(*a);
                        if (a->ranks != 0) {
                          refuse_ranks_under_mpi(*a);
                          return run_in_process(*a);
                        }
#if RELPOS_TOOL_MPI
                        if (MpiRing::launched_by_mpirun()) return run_mpi(*a);
                        throw InvalidArgument("--ranks is required (the ranks in this process), or run under mpirun -np R (one rank each)");
#else
                        throw InvalidArgument("--ranks is required (this relpos was built without MPI: mpirun cannot run its ranks)");
#endif
                      }});
}

}  // namespace

void register_ring_attention(CLI::App& run, Registry& reg) {
  add_ring_run(run, reg);
  add_ring_checks(reg);
  add_sharded_paged_checks(reg);
  add_ring_benches(reg);
}

}  // namespace relpos::tool
