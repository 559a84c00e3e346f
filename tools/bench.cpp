// relpos bench: GPU timestamps (warm-up, then the median of repeated runs) of each op, beside the
// same run's device ceiling over the same bytes and the CPU reference's time.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "registry.hpp"

namespace relpos::tool {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median GPU milliseconds of `record` over `repeat` timed runs after two warm-up runs.
double time_gpu(Context& ctx, const std::function<void(Recorder&)>& record, int repeat) {
  Recorder r(ctx);
  for (int w = 0; w < 2; ++w) record(r);
  r.submit_and_wait();
  std::vector<std::pair<std::uint32_t, std::uint32_t>> marks;
  for (int k = 0; k < repeat; ++k) {
    const auto a = r.write_timestamp();
    record(r);
    marks.emplace_back(a, r.write_timestamp());
  }
  r.submit_and_wait();
  std::vector<double> ms;
  for (auto [a, b] : marks) ms.push_back(r.elapsed_ms(a, b));
  return median(ms);
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

double ceiling_ms(Context& ctx, Ceiling kind, std::uint64_t bytes, int repeat) {
  const std::uint64_t rounded = (bytes + 15) / 16 * 16;
  if (kind == Ceiling::Write) {
    Buffer out(ctx, rounded);
    return time_gpu(ctx, [&](Recorder& r) { fill_u32(r, out, rounded, 0x3f800000u); }, repeat);
  }
  // Copy ceiling: read and write the same total number of bytes (half each).
  const std::uint64_t half = (rounded / 2 + 15) / 16 * 16;
  Buffer a(ctx, half), b(ctx, half);
  return time_gpu(ctx, [&](Recorder& r) { copy_u32(r, a, b, half); }, repeat);
}

}  // namespace

int bench_command(Registry& reg, const std::string& filter, bool json, bool short_run, int repeat) {
  Context& ctx = tool_context();
  if (!json)
    std::printf("relpos bench on %s (%s), median of %d runs\n%-18s %-28s %10s %10s %9s %13s %10s %9s\n",
                ctx.device_info().name.c_str(), std::string(device_type_name(ctx.device_info().type)).c_str(), repeat, "op",
                "shape", "gpu ms", "MB", "GB/s", "ceiling GB/s", "cpu ms", "vs cpu");
  nlohmann::json records = nlohmann::json::array();
  for (const auto& c : reg.benches) {
    if (short_run && !c.in_short) continue;
    if (!filter.empty() && c.op.find(filter) == std::string::npos) continue;
    BenchRun run = c.prepare(ctx);
    const double gpu_ms = time_gpu(ctx, run.record, repeat);
    const double ceil_ms = ceiling_ms(ctx, c.ceiling, c.bytes, repeat);
    const double cpu_ms = run.cpu ? time_cpu(run.cpu) : 0.0;
    const double gbps = c.bytes / (gpu_ms * 1e6), ceiling_gbps = c.bytes / (ceil_ms * 1e6);
    nlohmann::json rec = {{"op", c.op},
                          {"shape", c.shape},
                          {"device", ctx.device_info().name},
                          {"bytes", c.bytes},
                          {"median_ms", gpu_ms},
                          {"gbps", gbps},
                          {"ceiling", c.ceiling == Ceiling::Write ? "write" : "copy"},
                          {"ceiling_gbps", ceiling_gbps},
                          {"ceiling_ratio", gbps / ceiling_gbps},
                          {"cpu_ms", cpu_ms},
                          {"speedup_vs_cpu", cpu_ms > 0 ? cpu_ms / gpu_ms : 0.0}};
    records.push_back(rec);
    if (!json) {
      std::printf("%-18s %-28s %10.3f %10.1f %9.2f %6.2f (%3.0f%%) %10.1f %8.1fx\n", c.op.c_str(), c.shape.c_str(), gpu_ms,
                  c.bytes / 1e6, gbps, ceiling_gbps, 100.0 * gbps / ceiling_gbps, cpu_ms, cpu_ms / gpu_ms);
      std::fflush(stdout);
    }
  }
  if (json) std::printf("%s\n", records.dump(2).c_str());
  return 0;
}

}  // namespace relpos::tool
