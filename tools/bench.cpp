// relpos bench: GPU timestamps (warm-up, then the median of repeated runs) of each op, beside the
// same run's device ceiling over the same bytes and the CPU reference's time.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "ceiling.hpp"
#include "registry.hpp"

namespace relpos::tool {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median GPU milliseconds of each stream (the op first; then the ceilings; a baseline last, if
// any) over `repeat` rounds, after two warm-up rounds. Every round runs each stream once, in one
// submission, so all see the same machine load.
struct Timing {
  std::vector<double> ms;  // per stream
  double speedup = 0;      // with a baseline: median over the rounds of baseline_ms / op_ms
};

Timing time_gpu(Context& ctx, const std::vector<std::function<void(Recorder&)>>& streams, bool has_baseline, int repeat, int hold_ms) {
  Recorder r(ctx);
  // Warm-up (pipeline compilation, first touch of memory), timed once to size the run: slow ops
  // (the direct Fourier path takes seconds on a CPU device) repeat fewer times, never fewer than 3.
  const auto w0 = r.write_timestamp();
  for (const auto& s : streams) s(r);
  const auto w1 = r.write_timestamp();
  for (const auto& s : streams) s(r);
  r.submit_and_wait();
  const double warm_ms = r.elapsed_ms(w0, w1);
  constexpr double kBudgetMs = 20000.0;
  if (warm_ms * repeat > kBudgetMs) repeat = std::max(3, static_cast<int>(kBudgetMs / warm_ms));
  // A GPU idle between submissions runs them at a low clock (an H100 sat at 345 MHz through short
  // ones): keep it busy with the streams until its clock is the one it holds under load; the timed
  // submission follows at once (an op slower than that held it through its warm-up).
  if (warm_ms < hold_ms)
    for (const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(hold_ms); std::chrono::steady_clock::now() < until;) {
      for (const auto& s : streams) s(r);
      r.submit_and_wait();
    }
  const std::size_t n = streams.size();
  std::vector<std::uint32_t> marks;
  marks.push_back(r.write_timestamp());
  for (int k = 0; k < repeat; ++k)
    for (const auto& s : streams) {
      s(r);
      marks.push_back(r.write_timestamp());
    }
  r.submit_and_wait();
  std::vector<std::vector<double>> ms(n);
  std::vector<double> speedup;
  for (int k = 0; k < repeat; ++k) {
    for (std::size_t i = 0; i < n; ++i) ms[i].push_back(r.elapsed_ms(marks[k * n + i], marks[k * n + i + 1]));
    if (has_baseline) speedup.push_back(ms[n - 1].back() / ms[0].back());
  }
  Timing t;
  for (auto& v : ms) t.ms.push_back(median(v));
  if (has_baseline) t.speedup = median(speedup);
  return t;
}

// Each shader's median milliseconds a round over `repeat` rounds of the op alone, every dispatch
// between two timestamps (Recorder::time_dispatches), in the order the shaders first ran.
std::vector<std::pair<std::string, double>> time_dispatches(Context& ctx, const std::function<void(Recorder&)>& op, int repeat) {
  Recorder r(ctx);
  r.time_dispatches(true);
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> rounds;
  for (int k = 0; k < repeat; ++k) {
    op(r);
    r.submit_and_wait();
    std::map<std::string, double> sum;
    for (const DispatchTime& t : r.dispatch_times()) {
      if (!rounds.count(t.shader) && !sum.count(t.shader)) order.push_back(t.shader);
      sum[t.shader] += t.ms;
    }
    for (const auto& [shader, ms] : sum) rounds[shader].push_back(ms);
  }
  std::vector<std::pair<std::string, double>> out;
  for (const std::string& shader : order) {
    auto& v = rounds[shader];
    v.resize(repeat, 0.0);  // a round that did not run it
    out.emplace_back(shader, median(v));
  }
  return out;
}

double time_cpu(const std::function<void()>& cpu) {
  std::vector<double> ms;
  for (int k = 0; k < 3; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    cpu();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (ms.back() > 300.0) break;  // slow references run once
  }
  return median(ms);
}

// The ceiling over the same number of bytes: a vec4 fill (write), or a vec4 copy that reads and
// writes half of them each (copy); by a shader, and by transfer commands.
struct CeilingRun {
  Buffer a, b;
  std::uint64_t bytes = 0;
  Ceiling kind;
  CeilingRun(Context& ctx, Ceiling k, std::uint64_t total) : kind(k) {
    const std::uint64_t rounded = (total + 15) / 16 * 16;
    bytes = k == Ceiling::Write ? rounded : (rounded / 2 + 15) / 16 * 16;
    a = Buffer(ctx, bytes);
    if (k == Ceiling::Copy) b = Buffer(ctx, bytes);
  }
  void shader(Recorder& r) const {
    if (kind == Ceiling::Write) fill_u32(r, a, bytes, 0x3f800000u);
    else copy_u32(r, a, b, bytes);
  }
  // The same bytes by transfer commands (memset and memcpy on CPU devices).
  void transfer(Recorder& r) const {
    if (kind == Ceiling::Write) fill_u32_transfer(r, a, bytes, 0x3f800000u);
    else copy_transfer(r, a, b, bytes);
  }
};

}  // namespace

int bench_command(Registry& reg, const BenchOptions& options) {
  std::vector<std::string> ops;
  for (const auto& c : reg.benches)
    if (!options.short_run || c.in_short) ops.push_back(c.op);
  require_filter_matches(options.filter, ops, options.short_run ? "--short bench case" : "bench case");
  Context& ctx = tool_context();
  const bool json = options.json;
  const int repeat = options.repeat;
  const int hold_ms = options.hold_ms >= 0 ? options.hold_ms : ctx.device_info().type == DeviceType::Cpu ? 0 : 500;
  if (!json)
    std::printf("relpos bench on %s (%s), median of %d runs\n%-18s %-28s %10s %10s %9s %13s %10s %9s\n",
                ctx.device_info().name.c_str(), std::string(device_type_name(ctx.device_info().type)).c_str(), repeat, "op",
                "shape", "gpu ms", "MB", "GB/s", "ceiling GB/s", "cpu ms", "vs cpu");
  nlohmann::json records = nlohmann::json::array();
  for (const auto& c : reg.benches) {
    if (options.short_run && !c.in_short) continue;
    if (!options.filter.empty() && c.op.find(options.filter) == std::string::npos) continue;
    BenchRun run = c.prepare(ctx);
    const CeilingRun ceiling(ctx, c.ceiling, c.bytes);
    std::vector<std::function<void(Recorder&)>> streams = {run.record, [&](Recorder& r) { ceiling.shader(r); },
                                                           [&](Recorder& r) { ceiling.transfer(r); }};
    if (run.record_baseline) streams.push_back(run.record_baseline);
    const Timing t = time_gpu(ctx, streams, static_cast<bool>(run.record_baseline), repeat, hold_ms);
    const double gpu_ms = t.ms[0];
    const double cpu_ms = run.cpu && !options.skip_cpu ? time_cpu(run.cpu) : 0.0;
    const double gbps = c.bytes / (gpu_ms * 1e6), ceiling_gbps = c.bytes / (t.ms[1] * 1e6);
    const double transfer_gbps = c.bytes / (t.ms[2] * 1e6);
    nlohmann::json rec = {{"op", c.op},
                          {"shape", c.shape},
                          {"device", ctx.device_info().name},
                          {"bytes", c.bytes},
                          {"median_ms", gpu_ms},
                          {"gbps", gbps},
                          {"ceiling", c.ceiling == Ceiling::Write ? "write" : "copy"},
                          {"ceiling_gbps", ceiling_gbps},
                          {"ceiling_ratio", gbps / ceiling_gbps},
                          {"transfer_ceiling_gbps", transfer_gbps},
                          {"transfer_ceiling_ratio", gbps / transfer_gbps},
                          {"cpu_ms", cpu_ms},
                          {"speedup_vs_cpu", cpu_ms > 0 ? cpu_ms / gpu_ms : 0.0}};
    if (run.record_baseline) {
      rec["baseline"] = run.baseline;
      rec["baseline_ms"] = t.ms.back();
      rec["speedup_vs_baseline"] = t.speedup;
    }
    std::vector<std::pair<std::string, double>> dispatches;
    if (options.dispatches) {
      dispatches = time_dispatches(ctx, run.record, repeat);
      nlohmann::json list = nlohmann::json::array();
      for (const auto& [shader, ms] : dispatches) list.push_back({{"shader", shader}, {"median_ms", ms}});
      rec["dispatch_ms"] = list;
    }
    std::vector<std::pair<std::string, double>> loop_figures;
    if (run.loop) loop_figures = run.loop();
    for (const auto& [name, value] : loop_figures) rec[name] = value;
    records.push_back(rec);
    if (!json) {
      std::printf("%-18s %-28s %10.3f %10.1f %9.2f %6.2f (%3.0f%%) %10.1f %8.1fx", c.op.c_str(), c.shape.c_str(), gpu_ms,
                  c.bytes / 1e6, gbps, ceiling_gbps, 100.0 * gbps / ceiling_gbps, cpu_ms, cpu_ms / gpu_ms);
      if (run.record_baseline) std::printf("  %.1fx vs %s (%.1f ms)", t.speedup, run.baseline.c_str(), t.ms.back());
      std::printf("  transfer %.2f (%.0f%%)", transfer_gbps, 100.0 * gbps / transfer_gbps);
      for (const auto& [name, value] : loop_figures) std::printf("  %s %.4g", name.c_str(), value);
      std::printf("\n");
      if (!dispatches.empty()) {
        std::printf("%-18s dispatches:", "");
        for (const auto& [shader, ms] : dispatches) std::printf(" %s %.3f ms", shader.c_str(), ms);
        std::printf("\n");
      }
      std::fflush(stdout);
    }
  }
  if (json) std::printf("%s\n", records.dump(2).c_str());
  return 0;
}

}  // namespace relpos::tool
