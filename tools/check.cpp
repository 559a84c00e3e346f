// relpos check: every operation against its CPU reference on the chosen device.
#include <chrono>
#include <cstdio>

#include "registry.hpp"

namespace relpos::tool {

int check_command(Registry& reg, const std::string& filter) {
  Context& ctx = tool_context();
  std::printf("relpos check on %s (%s)\n", ctx.device_info().name.c_str(), std::string(device_type_name(ctx.device_info().type)).c_str());
  int passed = 0, failed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& c : reg.checks) {
    if (!filter.empty() && c.op.find(filter) == std::string::npos) continue;
    CheckResult r;
    std::string error;
    try {
      r = c.run(ctx);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const bool ok = error.empty() && r.error <= r.tolerance;
    (ok ? passed : failed)++;
    if (error.empty())
      std::printf("%-4s %-18s %-40s %s=%.3g (tol %.3g)\n", ok ? "PASS" : "FAIL", c.op.c_str(), c.shape.c_str(), r.metric.c_str(),
                  r.error, r.tolerance);
    else
      std::printf("FAIL %-18s %-40s error: %s\n", c.op.c_str(), c.shape.c_str(), error.c_str());
    std::fflush(stdout);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (ctx.validation_message_count()) {
    std::printf("FAIL validation: %llu message(s) from the validation layers\n",
                static_cast<unsigned long long>(ctx.validation_message_count()));
    ++failed;
  }
  std::printf("check: %d passed, %d failed (%.1f s)\n", passed, failed, secs);
  return failed == 0 && passed > 0 ? 0 : 1;
}

}  // namespace relpos::tool
