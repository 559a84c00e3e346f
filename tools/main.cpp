// relpos: run any operation on .npy inputs, check every operation against its CPU reference on this
// machine's device, and benchmark the shaders.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <new>
#include <stdexcept>
#include <optional>

#include "number_flags.hpp"
#include "fuzz.hpp"
#include "plot.hpp"
#include "registry.hpp"

namespace relpos::tool {

int devices_command(const std::string& selector);
int check_command(Registry& reg, const std::string& filter, bool quick);
int fuzz_command(Registry& reg, const FuzzOptions& options);
int bench_command(Registry& reg, const BenchOptions& options);
int stats_command(Registry& reg, const std::string& filter, bool json, const std::string& head_dims, bool summary);

namespace {
std::string g_device;
bool g_validation = false;
std::string g_expansion_name = "auto";
std::string g_kernels_name = "auto";
// $XDG_CACHE_HOME/relpos, else ~/.cache/relpos; none where neither is set.
std::string default_pipeline_cache() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return std::string(x) + "/relpos";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/relpos";
  return "";
}
std::string g_pipeline_cache = default_pipeline_cache();
std::optional<Context> g_context;
std::map<const CLI::App*, const RunOptions*> g_run_options;

// Whether two paths name one file: by identity when both exist (a hard link, a symbolic link,
// "./x" and "x"), else by their canonical forms.
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::equivalent(a, b, ec) && !ec) return true;
  const fs::path ca = fs::weakly_canonical(a, ec);
  if (ec) return a == b;
  const fs::path cb = fs::weakly_canonical(b, ec);
  if (ec) return a == b;
  return ca == cb;
}

// Two outputs naming one file would leave one result silently replaced by the other: refused
// before anything is computed or written. (An output may name an input: every input is read
// whole before the first write.)
void check_distinct_outputs(const RunOptions& o) {
  for (std::size_t i = 0; i < o.outputs.size(); ++i)
    for (std::size_t j = i + 1; j < o.outputs.size(); ++j) {
      const auto& [flag_a, path_a] = o.outputs[i];
      const auto& [flag_b, path_b] = o.outputs[j];
      if (!path_a->empty() && !path_b->empty() && same_file(*path_a, *path_b))
        throw InvalidArgument(flag_b + " = " + *path_b + ": names the same file as " + flag_a + " = " + *path_a +
                              "; each output needs its own file");
    }
}

// An output that cannot be created (its directory missing, a directory in its place, no
// permission) would fail only at its write: after the whole computation, and after the outputs
// before it were written. Refused before anything is computed or written.
void check_writable_outputs(const RunOptions& o) {
  namespace fs = std::filesystem;
  for (const auto& [flag, path] : o.outputs) {
    if (path->empty()) continue;
    const fs::path p(*path);
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    std::error_code ec;
    std::string why;
    if (fs::is_directory(p, ec)) {
      why = "it is a directory";
    } else if (!fs::is_directory(dir, ec)) {
      why = "its directory " + dir.string() + (fs::exists(dir, ec) ? " is not a directory" : " does not exist");
    } else if (fs::exists(p, ec)) {
      if (::access(p.c_str(), W_OK) != 0) why = std::strerror(errno);
    } else if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      why = "cannot create a file in " + dir.string() + ": " + std::strerror(errno);
    }
    if (!why.empty()) throw InvalidArgument(flag + " = " + *path + ": cannot open for writing: " + why);
  }
}
}  // namespace

ContextOptions tool_context_options() {
  ContextOptions o;
  o.device = g_device;
  o.validation = g_validation;
  o.tuning.distance_expansion = g_expansion_name == "shader"   ? DistanceExpansion::Shader
                         : g_expansion_name == "copies" ? DistanceExpansion::Copies
                                                        : DistanceExpansion::Auto;
  o.tuning.kernels = relpos::kernels_from_name(g_kernels_name).value();  // --kernels checked it
  o.pipeline_cache_path = g_pipeline_cache;
  return o;
}

Context& tool_context() {
  if (!g_context) g_context.emplace(tool_context_options());
  return *g_context;
}

// The context is destroyed before main returns, not among the static destructors at exit: there,
// vkDestroyDevice under GPU-assisted validation crashed in lavapipe (Mesa 22.3, layers 1.3.239).
void release_tool_contexts() { g_context.reset(); }

void add_run_options(CLI::App& cmd, RunOptions& o) {
  add_output(cmd, o, "--out", o.out, "output .npy file")->required();
  cmd.add_flag("--reference", o.reference, "compute with the CPU reference instead of the GPU");
  g_run_options[&cmd] = &o;
}

CLI::Option* add_output(CLI::App& cmd, RunOptions& o, const std::string& flag, std::string& path, const std::string& help) {
  o.outputs.emplace_back(flag, &path);
  return cmd.add_option(flag, path, help);
}

namespace {
// Filled before main() by the families' RELPOS_TOOL_FAMILY registrations (constructed on first use).
std::map<std::string, FamilyRegistration>& tool_families() {
  static std::map<std::string, FamilyRegistration> families;
  return families;
}
}  // namespace

bool add_tool_family(const char* name, FamilyRegistration registration) { return tool_families().emplace(name, registration).second; }

void register_tool_families(CLI::App& run, Registry& reg) {
  for (const auto& [name, registration] : tool_families()) registration(run, reg);
}

std::uint32_t dimension32(const std::string& what, std::uint64_t d) {
  if (d > 0xffffffffull) throw InvalidArgument(what + " = " + std::to_string(d) + ": must be < 2^32");
  return static_cast<std::uint32_t>(d);
}

void require_filter_matches(const std::string& filter, const std::vector<std::string>& ops, const std::string& what) {
  if (filter.empty()) return;
  std::set<std::string> names;
  for (const std::string& op : ops) {
    if (op.find(filter) != std::string::npos) return;
    names.insert(op);
  }
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  throw InvalidArgument("--filter = " + filter + ": matches no " + what + " (an op's name must contain it; the ops: " + list + ")");
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void write_floats(const std::string& path, const std::vector<float>& values, std::vector<std::uint64_t> shape, DType dtype) {
  if (dtype == DType::F16) {
    auto h = to_half(values);
    write_npy(path, DType::F16, shape, h.data());
  } else if (dtype == DType::BF16) {  // uint16 bit patterns (numpy has no bfloat16)
    auto b = to_bf16(values);
    write_npy(path, DType::BF16, shape, b.data());
  } else {
    write_npy(path, DType::F32, shape, values.data());
  }
}

}  // namespace relpos::tool

int main(int argc, char** argv) {
  using namespace relpos::tool;
  CLI::App app{"relpos: relative position encodings for transformer attention on any Vulkan device"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("relpos ") + relpos::version(), "print relpos's version and exit");
  app.add_option("--device", g_device, "device index or name substring (default: RELPOS_DEVICE, then discrete > integrated > virtual > CPU)");
  app.add_flag("--validation", g_validation, "enable the Vulkan validation layers (also RELPOS_VALIDATION=1)");
  app.add_option("--expansion", g_expansion_name,
                 "how per-distance biases (t5, alibi, kerple, sandwich, fourier) write [.., Q, K]: auto (default; copies on CPU devices with "
                 "few threads), shader or copies")
      ->check(CLI::IsMember({"auto", "shader", "copies"}));
  app.add_option("--kernels", g_kernels_name,
                 "kernel class: auto (default; cpu on CPU devices, gpu elsewhere; RELPOS_KERNELS overrides), cpu (rows per lane, "
                 "subgroup shuffles) or gpu (shared-memory tiles)")
      ->check([](const std::string& name) -> std::string { return relpos::kernels_from_name(name) ? "" : name + ": must be auto, cpu or gpu"; });
  app.add_option("--pipeline-cache", g_pipeline_cache,
                 "directory of the persistent pipeline cache (default: $XDG_CACHE_HOME/relpos or ~/.cache/relpos; '' for none)");

  Registry reg;
  auto* devices = app.add_subcommand("devices", "list the Vulkan devices; '*' marks the one relpos would use");
  auto* run = app.add_subcommand("run", "run one operation on .npy inputs and write the result as .npy");
  run->require_subcommand(1);
  register_tool_families(*run, reg);
  register_attention(*run, reg);  // after every family whose bias it takes
  register_ring_attention(*run, reg);  // so does ring attention

  std::string check_filter;
  bool check_quick = false;
  auto* check = app.add_subcommand("check", "check every operation against its CPU reference on this device");
  check->add_option("--filter", check_filter, "only cases whose op name contains this");
  check->add_flag("--quick", check_quick, "only small cases that between them create every kernel (for slow validation such as GPU-assisted)");

  std::string stats_filter, stats_head_dims = "64,128";
  bool stats_json = false, stats_summary = false;
  auto* stats = app.add_subcommand("stats", "the driver's statistics (registers, spills, ...) of every pipeline relpos would use on this device");
  stats->add_flag("--json", stats_json, "one JSON object per line: op, use (fused attention: prefill or decode), pipeline, variant, workgroup, subgroup_size, executable, stats");
  stats->add_flag("--summary", stats_summary, "one line per pipeline: its occupancy on this device (waves per SIMD, threads per EU) and what limits it; with --json, an occupancy object");
  stats->add_option("--filter", stats_filter, "only ops whose name contains this");
  stats->add_option("--head-dims", stats_head_dims, "fused attention at these head sizes, comma-separated (default 64,128)");

  FuzzOptions fuzz_options;
  auto* fuzz = app.add_subcommand("fuzz", "differential fuzzing: random ops, shapes and parameters against the CPU reference");
  add_fuzz_options(*fuzz, fuzz_options, reg);

  BenchOptions bench_options;
  int repeat = 0;
  auto* bench = app.add_subcommand("bench", "benchmark the shaders: GPU timestamps, ceilings and CPU reference");
  bench->add_flag("--json", bench_options.json, "print a JSON list of records");
  bench->add_flag("--short", bench_options.short_run, "only the short benchmark (what the main command runs)");
  bench->add_option("--filter", bench_options.filter, "only ops whose name contains this");
  bench->add_flag("--skip-cpu", bench_options.skip_cpu, "do not time the CPU reference (cpu_ms 0)");
  bench->add_flag("--dispatches", bench_options.dispatches,
                  "also time each dispatch of the op (timestamps around it) and print each shader's median ms a run (JSON: dispatch_ms)");
  add_number(*bench, "--repeat", repeat, "timed repetitions (default 10, 5 with --short)", 1, 1000);
  add_number(*bench, "--hold-ms", bench_options.hold_ms,
             "run each op this many milliseconds before timing it, so that a GPU's clock is the one it holds under load "
             "(default 500 on a GPU, 0 on a CPU device)",
             0, 60000);

  PlotOptions plot_options;
  auto* plot = app.add_subcommand("plot", "draw one [Q, K] slice of a .npy array as a heat map PNG (no device needed)");
  add_plot_options(*plot, plot_options);

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help
      // A usage error in the tool's one format; CLI11's exit code (100 and up) tells it apart.
      std::fprintf(stderr, "relpos: error: %s (--help lists the flags)\n", e.what());
      return e.get_exit_code();
    }
    int status = 0;
    if (*devices) status = devices_command(g_device);
    else if (*check) status = check_command(reg, check_filter, check_quick);
    else if (*fuzz) status = fuzz_command(reg, fuzz_options);
    else if (*stats) status = stats_command(reg, stats_filter, stats_json, stats_head_dims, stats_summary);
    else if (*plot) status = plot_command(plot_options);
    else if (*bench) {
      bench_options.repeat = repeat ? repeat : (bench_options.short_run ? 5 : 10);
      status = bench_command(reg, bench_options);
    }
    else
      for (const auto& r : reg.runs)
        if (*r.cmd) {
          check_distinct_outputs(*g_run_options.at(r.cmd));
          check_writable_outputs(*g_run_options.at(r.cmd));
          r.action();
        }
    release_tool_contexts();
    return status;
  } catch (const std::bad_alloc&) {
    // A shape every check accepts can still need more host memory than the machine has (the CPU
    // reference holds the whole output): say so rather than print "std::bad_alloc".
    std::fprintf(stderr, "relpos: error: out of host memory: this shape's arrays do not fit in this machine's memory\n");
  } catch (const std::length_error&) {
    std::fprintf(stderr, "relpos: error: out of host memory: this shape's arrays exceed the largest array the host can index\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "relpos: error: %s\n", e.what());
  }
  release_tool_contexts();
  return 1;
}
