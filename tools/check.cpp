// relpos check: every operation against its CPU reference on the chosen device.
#include <chrono>
#include <cstdio>

#include "registry.hpp"

namespace relpos::tool {

int check_command(Registry& reg, const std::string& filter, bool quick) {
  std::vector<std::string> ops;
  for (const auto& c : reg.checks)
    if (!quick || c.quick) ops.push_back(c.op);
  require_filter_matches(filter, ops, quick ? "--quick check case" : "check case");
  Context& ctx = tool_context();
  std::printf("relpos check on %s (%s)\n", ctx.device_info().name.c_str(), std::string(device_type_name(ctx.device_info().type)).c_str());
  int passed = 0, failed = 0;
  std::uint64_t messages_in_cases = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& c : reg.checks) {
    if (!filter.empty() && c.op.find(filter) == std::string::npos) continue;
    if (quick && !c.quick) continue;
    const CaseOutcome o = run_check_case(ctx, c.run);
    messages_in_cases += o.validation_messages;
    (o.ok() ? passed : failed)++;
    std::printf("%-4s %-18s %-40s %s\n", o.ok() ? "PASS" : "FAIL", c.op.c_str(), c.shape.c_str(), o.describe().c_str());
    std::fflush(stdout);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Messages outside every case (creating the context) fail the run too.
  if (const std::uint64_t other = ctx.validation_message_count() - messages_in_cases) {
    std::printf("FAIL validation: %llu message(s) from the validation layers outside the cases\n", static_cast<unsigned long long>(other));
    ++failed;
  }
  std::printf("check: %d passed, %d failed (%.1f s)\n", passed, failed, secs);
  return failed == 0 && passed > 0 ? 0 : 1;
}

CaseOutcome run_check_case(Context& ctx, const std::function<CheckResult(Context&)>& run) {
  CaseOutcome o;
  const std::uint64_t before = ctx.validation_message_count();
  try {
    o.result = run(ctx);
  } catch (const std::exception& e) {
    o.error = e.what();
  }
  o.validation_messages = ctx.validation_message_count() - before;
  return o;
}

std::string CaseOutcome::describe() const {
  std::string s;
  if (error.empty()) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s=%.3g (tol %.3g)", result.metric.c_str(), result.error, result.tolerance);
    s = buf;
  } else {
    s = "error: " + error;
  }
  if (validation_messages) s += " validation: " + std::to_string(validation_messages) + " message(s)";
  return s;
}

}  // namespace relpos::tool
