#pragma once
// CLI11's classes by name only, for the tool's headers. Debian's CLI11 (2.1, header-only) defines
// its validators as objects at namespace scope, so every source that includes <CLI/CLI.hpp>
// compiles them again (5 s at -O2, twice that under the sanitizers): only the sources that add
// flags include it.
namespace CLI {
class App;
class Option;
}  // namespace CLI
