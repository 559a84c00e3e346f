#pragma once
// What each operation family contributes to the tool: `relpos run` subcommands, `relpos check`
// cases, `relpos fuzz` draws and `relpos bench` cases. Each family has one tools/op_<family>.cpp with a register_*
// function; main.cpp calls them all.
#include <relpos/relpos.hpp>

#include "attention_bias.hpp"
#include "cli_fwd.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace relpos::tool {

struct CheckResult {
  double error = 0.0;      // normalised max error (floats) or mismatch count (integers)
  double tolerance = 0.0;  // passes when error <= tolerance
  std::string metric;      // what `error` is: "max_err" or "mismatches"
};

struct CheckCase {
  std::string op;
  std::string shape;
  std::function<CheckResult(Context&)> run;
  // Part of `relpos check --quick`: small cases that between them create every pipeline variant
  // the full check does, the fused attention's at head_dims 20 and 12 only (what CI runs under
  // GPU-assisted validation, where lavapipe compiles each instrumented kernel slowly).
  bool quick = false;
};

// One check case run: its result, or the exception it threw, and the validation messages the
// context received meanwhile (any fails the case).
struct CaseOutcome {
  CheckResult result;
  std::string error;
  std::uint64_t validation_messages = 0;
  bool ok() const { return error.empty() && validation_messages == 0 && result.error <= result.tolerance; }
  std::string describe() const;  // "max_err=... (tol ...)" or "error: ...", and any messages
};
CaseOutcome run_check_case(Context& ctx, const std::function<CheckResult(Context&)>& run);

class FuzzRng;

// A `relpos fuzz` family: draws one random case of its ops (shapes, parameters, dtypes, edges
// included), which compares the GPU with the CPU reference like a check case.
struct FuzzFamily {
  std::string name;  // what `relpos fuzz --op` selects
  std::function<CheckCase(FuzzRng&)> draw;
};

// A prepared benchmark: buffers allocated and inputs uploaded.
struct BenchRun {
  std::function<void(Recorder&)> record;  // one execution of the GPU op
  std::function<void()> cpu;              // the CPU reference of the same work
  std::shared_ptr<void> keep;             // owns the buffers and inputs
  // Optional: another implementation of the same work (an issue's speed target is a ratio to it),
  // timed in the same submission as the op, so that both see the same machine load.
  std::string baseline;
  std::function<void(Recorder&)> record_baseline;
  // Optional: a loop the case runs on its own (a decode loop, one submission per step); the named
  // figures it returns join the case's record.
  std::function<std::vector<std::pair<std::string, double>>()> loop;
};

enum class Ceiling { Write, Copy };

struct BenchCase {
  std::string op;
  std::string shape;
  std::uint64_t bytes = 0;  // bytes the op writes plus those it must read
  Ceiling ceiling = Ceiling::Write;
  bool in_short = false;  // part of `relpos bench --short`
  std::function<BenchRun(Context&)> prepare;
};

// relpos bench's flags.
struct BenchOptions {
  std::string filter;  // only ops whose name contains this
  bool json = false, short_run = false;
  bool skip_cpu = false;  // no CPU reference timed (cpu_ms 0)
  bool dispatches = false;  // each shader's time a run, from timestamps around every dispatch
  int repeat = 10;
  // Milliseconds each case's streams (the op, the ceilings, a baseline) run untimed before the
  // timed submission, so that a GPU that lowers its clocks between short submissions times at the
  // clock it holds under load (none where the warm-up alone took that long); -1: 500 on a GPU, 0
  // on a CPU device.
  int hold_ms = -1;
};

// A `relpos run` subcommand and what it does once its options are parsed.
struct RunCommand {
  CLI::App* cmd;
  std::function<void()> action;
};

struct Registry {
  std::vector<RunCommand> runs;
  std::vector<CheckCase> checks;
  std::vector<BenchCase> benches;
  std::vector<FuzzFamily> fuzz;
  // Every bias family fused attention takes (attention_bias.hpp), registered before the commands
  // that take a bias (register_attention).
  std::vector<AttentionBiasTool> attention_biases;
};

// Options every run subcommand shares.
struct RunOptions {
  std::string out;
  bool reference = false;  // compute with the CPU reference instead of the GPU
  // Every file the command writes, by flag (--out and those add_output adds); the tool refuses
  // two of them naming one file before it computes or writes anything.
  std::vector<std::pair<std::string, const std::string*>> outputs;
};
// --out and --reference; the tool finds `o` again from `cmd` when the command runs.
void add_run_options(CLI::App& cmd, RunOptions& o);
// A further output file of the command (e.g. --lse).
CLI::Option* add_output(CLI::App& cmd, RunOptions& o, const std::string& flag, std::string& path, const std::string& help);

// The context the tool runs on (--device, --validation, RELPOS_DEVICE, RELPOS_VALIDATION).
Context& tool_context();
// Options of that context; `relpos fuzz` makes its own contexts from them.
ContextOptions tool_context_options();
// Destroys the tool's context (main does, before it returns).
void release_tool_contexts();

// A dimension of an input file as a 32-bit count (what every parameter struct holds), or
// InvalidArgument naming it: a cast would silently wrap 2^32 + 1 to 1.
std::uint32_t dimension32(const std::string& what, std::uint64_t d);

// InvalidArgument unless some name of `ops` contains `filter` (empty: every one): a --filter that
// matches nothing is most likely a typo, not a run of no cases. `what` names the cases ("check
// case"); the message lists the names there are.
void require_filter_matches(const std::string& filter, const std::vector<std::string>& ops, const std::string& what);

// One array a run holds on the host: its elements are the product of `dims` (each a flag, or an
// input's dimension, with its value), of `element_bytes` each.
struct HostArray {
  std::vector<std::pair<std::string, std::uint64_t>> dims;
  std::uint64_t element_bytes = 4;
};
// Refuses, before anything is allocated or computed, a run whose host arrays (its output, and the
// inputs it builds itself) would take more than a quarter of this machine's physical memory: the
// kernel kills a process that outgrows the memory (or it thrashes for minutes) instead of
// std::bad_alloc reaching main. InvalidArgument ("out of host memory: ...") names the sizes, the
// bytes and the limit. Every `relpos run` whose output size comes from flags calls it.
void check_host_memory(const std::vector<HostArray>& arrays);

// "[d0, d1, ...]": an input's shape in messages.
std::string shape_text(const std::vector<std::uint64_t>& shape);

// Writes [dims...] of float values as f32 or f16.
void write_floats(const std::string& path, const std::vector<float>& values, std::vector<std::uint64_t> shape, DType dtype);

// An operation family's registration (its run commands, check, fuzz and bench cases, and its bias
// description if fused attention takes it), which its tools/op_<family>.cpp defines with
// RELPOS_TOOL_FAMILY(name) { ... }: main() runs every family's, in the order of their names, then
// fused attention's (register_attention), which takes the biases they described.
using FamilyRegistration = void (*)(CLI::App& run, Registry& reg);
bool add_tool_family(const char* name, FamilyRegistration registration);
void register_tool_families(CLI::App& run, Registry& reg);
#define RELPOS_TOOL_FAMILY(name)                                                                              \
  void register_##name(CLI::App& run, Registry& reg);                                                        \
  [[maybe_unused]] static const bool registered_##name = add_tool_family(#name, register_##name); \
  void register_##name(CLI::App& run, Registry& reg)

void register_attention(CLI::App& run, Registry& reg);
// Ring attention's commands (op_ring_attention.cpp), registered after fused attention's: they take
// every bias the same way.
void register_ring_attention(CLI::App& run, Registry& reg);

}  // namespace relpos::tool
