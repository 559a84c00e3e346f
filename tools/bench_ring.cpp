// relpos bench --filter ring: ring attention over 2 and 4 ranks, in-process and under mpirun, beside
// the same attention on one device (the record's GPU time): each rank's compute and communication
// time and the share of the communication its compute hid; and sharded decoding's time per step.
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "registry.hpp"
#include "ring_tool.hpp"

namespace relpos::tool {
namespace {

using Figures = std::vector<std::pair<std::string, double>>;

struct RingBenchShape {
  std::uint32_t batch, heads, queries, keys, head_dim;
  bool causal;
  RingLayout layout;
};

AttentionParams bench_params(const RingBenchShape& s) {
  AttentionParams p;
  p.batch = s.batch;
  p.heads = p.kv_heads = s.heads;
  p.queries = s.queries;
  p.keys = s.keys;
  p.head_dim = s.head_dim;
  p.causal = s.causal;
  p.query_offset = std::int64_t{s.keys} - s.queries;
  p.bias = AttentionBias::Alibi;
  return p;
}

RingCall bench_call(const AttentionParams& p, std::uint32_t ranks, RingLayout layout, bool sharded) {
  RingCall c;
  c.p = p;
  c.in = random_ring_inputs(p, 1);
  c.plan = ring_plan(p, ranks, layout);
  c.plan.sharded = sharded;  // the ring, whatever the shape, unless asked (the tool takes Q < K sharded)
  c.plan.validate();
  return c;
}

// A context per rank, as for GPUs of one machine (here all on the tool's device).
struct RankContexts {
  std::vector<std::unique_ptr<Context>> owned;
  std::vector<Context*> ranks;
  explicit RankContexts(std::uint32_t R) {
    for (std::uint32_t r = 0; r < R; ++r) {
      owned.push_back(std::make_unique<Context>(tool_context_options()));
      ranks.push_back(owned.back().get());
    }
  }
};

// The record's GPU time: the same attention on one device; `loop` runs the ranks.
BenchRun one_device_and(Context& ctx, std::shared_ptr<RingCall> c, std::function<Figures(const RingCall&)> loop) {
  auto d = std::make_shared<std::vector<Buffer>>();
  d->push_back(make_buffer(ctx, c->in.q));
  d->push_back(make_buffer(ctx, c->in.k));
  d->push_back(make_buffer(ctx, c->in.v));
  d->push_back(Buffer(ctx, c->p.rows() * c->p.head_dim * 4));
  d->push_back(make_buffer(ctx, c->in.bias));
  BenchRun run;
  run.record = [p = c->p, d](Recorder& r) {
    AttentionBuffers b{&(*d)[0], &(*d)[1], &(*d)[2], &(*d)[3]};
    b.bias = &(*d)[4];
    attention(r, p, b);
  };
  run.loop = [c, loop] { return loop(*c); };
  run.keep = std::make_shared<std::pair<decltype(c), decltype(d)>>(c, d);
  return run;
}

// Per-rank figures of one timed run, and the whole ring's; beside them the cost model's: a step
// exposes what of the link's time for a chunk (`exchange_ms`, ring_exchange_ms with nothing else
// running) exceeds the step's compute (docs/ring_attention.md).
Figures ring_figures(const std::vector<RingTiming>& t, double exchange_ms) {
  Figures f;
  double compute = 0, comm = 0, exposed = 0, wall = 0, model_exposed = 0, model_comm = 0;
  for (std::size_t r = 0; r < t.size(); ++r) {
    const std::string k = "rank" + std::to_string(r) + "_";
    f.emplace_back(k + "compute_ms", t[r].compute_ms());
    f.emplace_back(k + "comm_ms", t[r].comm_ms());
    f.emplace_back(k + "hidden_fraction", t[r].hidden_fraction());
    compute += t[r].compute_ms();
    comm += t[r].comm_ms();
    exposed += t[r].exposed_comm_ms();
    wall = std::max(wall, t[r].total_ms);
    for (std::size_t s = 0; s + 1 < t[r].steps.size(); ++s) {
      model_comm += exchange_ms;
      model_exposed += std::max(0.0, exchange_ms - t[r].steps[s].compute_ms);
    }
  }
  const double n = static_cast<double>(t.size());
  const double bytes = t.empty() ? 0.0 : static_cast<double>(t[0].exchange_bytes);
  f.insert(f.begin(), {{"ranks", n},
                       {"ring_wall_ms", wall},
                       {"compute_ms_mean", compute / n},
                       {"comm_ms_mean", comm / n},
                       {"exposed_comm_ms_mean", exposed / n},
                       {"hidden_fraction", comm > 0 ? 1.0 - exposed / comm : 1.0},
                       {"chunk_mb", bytes / 1e6},
                       {"link_ms", exchange_ms},
                       {"link_gbps", exchange_ms > 0 ? bytes / (exchange_ms * 1e6) : 0.0},
                       {"model_exposed_ms_mean", model_exposed / n},
                       {"model_hidden_fraction", model_comm > 0 ? 1.0 - model_exposed / model_comm : 1.0}});
  return f;
}

// The run whose slowest rank took the median time, of `repeat` after one that compiles.
std::vector<RingTiming> median_run(std::vector<std::vector<RingTiming>> runs) {
  auto wall = [](const std::vector<RingTiming>& t) {
    double w = 0;
    for (const RingTiming& x : t) w = std::max(w, x.total_ms);
    return w;
  };
  std::sort(runs.begin(), runs.end(), [&](const auto& a, const auto& b) { return wall(a) < wall(b); });
  return runs[runs.size() / 2];
}

constexpr int kRepeat = 3;

Figures in_process_ring(const RingCall& c) {
  const std::uint32_t R = c.plan.ranks();
  RankContexts contexts(R);
  std::vector<std::vector<RingTiming>> runs(kRepeat, std::vector<RingTiming>(R));
  double exchange_ms = 0;
  const InProcessRingOutcome outcome = run_in_process_ring(contexts.ranks, std::chrono::minutes(5), [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    const RingInputs in = rank_inputs(c, r);
    run_ring_rank(rank, c.plan, c.p, in);  // compiles
    for (int k = 0; k < kRepeat; ++k) runs[k][r] = run_ring_rank(rank, c.plan, c.p, in).timing;
    const double x = ring_exchange_ms(rank, runs[0][r].exchange_bytes);
    if (r == 0) exchange_ms = x;
  });
  if (!outcome.ok()) throw Error("bench ring-attention: " + outcome.describe());
  return ring_figures(median_run(runs), exchange_ms);
}

// Where mpirun is, or "".
std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(at, end - at)) / "mpirun";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    at = end + 1;
  }
  return "";
}

// The same ring under `mpirun -np R relpos run ring-attention`, timed by its --timings (the second of
// two runs in each process), repeated; nothing when this relpos has no MPI or mpirun is missing.
Figures mpi_ring(const RingCall& c, const RingBenchShape& s) {
#if !RELPOS_TOOL_MPI
  (void)c;
  (void)s;
  std::fprintf(stderr, "relpos bench: ring-attention under MPI skipped: this relpos was built without MPI\n");
  return {{"mpi_unavailable", 1}};
#else
  const std::string mpirun = find_mpirun();
  if (mpirun.empty()) {
    std::fprintf(stderr, "relpos bench: ring-attention under MPI skipped: no mpirun in PATH\n");
    return {{"mpi_unavailable", 1}};
  }
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("relpos-bench-ring-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const AttentionParams& p = c.p;
  write_floats((dir / "q.npy").string(), c.in.q, {p.batch, p.heads, p.queries, p.head_dim}, DType::F32);
  write_floats((dir / "k.npy").string(), c.in.k, {p.batch, p.kv_heads, p.keys, p.head_dim}, DType::F32);
  write_floats((dir / "v.npy").string(), c.in.v, {p.batch, p.kv_heads, p.keys, p.head_dim}, DType::F32);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const ContextOptions o = tool_context_options();
  std::vector<std::string> args = {mpirun, "-np", std::to_string(c.plan.ranks()), self};
  if (!o.device.empty()) args.insert(args.end(), {"--device", o.device});
  args.insert(args.end(), {"run", "ring-attention", "--q", (dir / "q.npy").string(), "--k", (dir / "k.npy").string(), "--v", (dir / "v.npy").string(),
                           "--bias", "alibi", "--query-offset", std::to_string(p.query_offset), "--layout", std::string(ring_layout_name(s.layout)),
                           "--out", (dir / "out.npy").string(), "--timings", (dir / "timings.json").string()});
  if (s.causal) args.push_back("--causal");
  std::vector<std::vector<RingTiming>> runs;
  std::vector<double> exchange;
  for (int k = 0; k < kRepeat; ++k) {
    const pid_t child = ::fork();
    if (child == 0) {
      // More ranks than cores on small machines; as root, Open MPI asks for its two variables.
      ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
      if (::geteuid() == 0) {
        ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fs::remove_all(dir);
      throw Error("bench ring-attention: mpirun -np " + std::to_string(c.plan.ranks()) + " failed (status " + std::to_string(status) + ")");
    }
    const nlohmann::json doc = nlohmann::json::parse(std::ifstream(dir / "timings.json"));
    std::vector<RingTiming> run;
    for (const auto& rank : doc["ranks"]) {
      RingTiming t;
      t.total_ms = rank["total_ms"];
      t.exchange_bytes = rank["exchange_bytes"];
      if (rank["rank"] == 0) exchange.push_back(rank["exchange_ms"]);
      for (const auto& st : rank["steps"]) t.steps.push_back({st["compute_ms"], st["comm_ms"], st["wall_ms"], st["comm_end_ms"]});
      run.push_back(t);
    }
    runs.push_back(run);
  }
  fs::remove_all(dir);
  std::sort(exchange.begin(), exchange.end());
  return ring_figures(median_run(runs), exchange[exchange.size() / 2]);
#endif
}

// Decoding steps of one query against keys sharded over the ranks: the time of a step, the
// device's share, the gather's, and what is left for the host (recording, submitting, waiting).
Figures sharded_decode(const RingCall& c) {
  constexpr int kSteps = 24;
  const AttentionParams& p = c.p;
  const std::uint32_t R = c.plan.ranks();
  RankContexts contexts(R);
  std::vector<std::vector<RingTiming>> steps(R);
  std::vector<double> new_buffers(R);
  const InProcessRingOutcome outcome = run_in_process_ring(contexts.ranks, std::chrono::minutes(5), [&](std::uint32_t r, Context& ctx, RingTransport& t) {
    RingRank rank(ctx, t);
    const RingInputs in = rank_inputs(c, r);
    Buffer q = make_buffer(ctx, in.q), k = make_buffer(ctx, in.k), v = make_buffer(ctx, in.v), bias = make_buffer(ctx, in.bias);
    Buffer out(ctx, p.rows() * p.head_dim * 4), lse(ctx, p.rows() * 4);
    AttentionBuffers b{&q, &k, &v, r == 0 ? &out : nullptr, r == 0 ? &lse : nullptr};
    b.bias = &bias;
    sharded_attention(rank, c.plan.shard, b);  // compiles and allocates
    const std::uint64_t before = resource_counts(ctx).buffers;
    for (int s = 0; s < kSteps; ++s) steps[r].push_back(sharded_attention(rank, c.plan.shard, b));
    new_buffers[r] = static_cast<double>(resource_counts(ctx).buffers - before);
  });
  if (!outcome.ok()) throw Error("bench ring-sharded-decode: " + outcome.describe());
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<double> wall, gpu, gather, host, agree;
  for (const RingTiming& t : steps[0]) {  // the root's view: it merges
    wall.push_back(t.total_ms);
    gpu.push_back(t.compute_ms());
    gather.push_back(t.comm_ms());
    agree.push_back(t.setup_ms);
    host.push_back(t.record_ms);
  }
  return {{"ranks", R},
          {"step_ms", median_of(wall)},
          {"gpu_ms", median_of(gpu)},
          {"gather_ms", median_of(gather)},
          {"agree_ms", median_of(agree)},
          {"host_ms_per_step", median_of(host)},
          {"buffers_after_first", *std::max_element(new_buffers.begin(), new_buffers.end())}};
}

}  // namespace

void add_ring_benches(Registry& reg) {
  const RingBenchShape shape{1, 8, 2048, 2048, 64, true, RingLayout::Zigzag};
  const AttentionParams p = bench_params(shape);
  const std::uint64_t bytes = (2 * p.rows() + 2ull * p.batch * p.kv_heads * p.keys) * p.head_dim * 4;
  auto shape_text = [&](std::uint32_t R, const char* transport) {
    return "[1,8,2048,2048,64] alibi causal zigzag R=" + std::to_string(R) + " " + transport;
  };
  for (std::uint32_t R : {2u, 4u})
    for (const bool mpi : {false, true})
      reg.benches.push_back({"ring-attention", shape_text(R, mpi ? "mpi" : "in-process"), bytes, Ceiling::Copy, false,
                             [p, R, mpi, shape](Context& ctx) {
                               return one_device_and(ctx, std::make_shared<RingCall>(bench_call(p, R, shape.layout, false)),
                                                     [mpi, shape](const RingCall& c) { return mpi ? mpi_ring(c, shape) : in_process_ring(c); });
                             }});
  // Link-bound: one query per rank against 16384 keys per chunk (67 MB a step), where the model
  // says the transfer outlasts the compute.
  const RingBenchShape link{1, 8, 4, 65536, 64, false, RingLayout::Contiguous};
  const AttentionParams lp = bench_params(link);
  reg.benches.push_back({"ring-attention", "[1,8,4,65536,64] alibi R=4 in-process (1 query a rank: link-bound)",
                         (2 * lp.rows() + 2ull * lp.batch * lp.kv_heads * lp.keys) * lp.head_dim * 4, Ceiling::Copy, false, [lp, link](Context& ctx) {
                           return one_device_and(ctx, std::make_shared<RingCall>(bench_call(lp, 4, link.layout, false)), in_process_ring);
                         }});
  AttentionParams decode;
  decode.heads = decode.kv_heads = 8;
  decode.queries = 1;
  decode.keys = 32768;
  decode.head_dim = 64;
  decode.causal = true;
  decode.query_offset = decode.keys - 1;
  decode.bias = AttentionBias::T5;
  decode.t5.bidirectional = false;
  decode.scale = 1.0f;
  for (std::uint32_t R : {2u, 4u})
    reg.benches.push_back({"ring-sharded-decode", "[1,8,1,32768,64] t5 causal R=" + std::to_string(R) + " in-process",
                           (2ull * decode.kv_heads * decode.keys + 2ull * decode.heads) * decode.head_dim * 4, Ceiling::Copy, false,
                           [decode, R](Context& ctx) {
                             return one_device_and(ctx, std::make_shared<RingCall>(bench_call(decode, R, RingLayout::Contiguous, true)), sharded_decode);
                           }});
}

}  // namespace relpos::tool
