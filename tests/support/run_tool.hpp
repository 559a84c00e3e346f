#pragma once
// Running the relpos tool as a script would (tests of the CLI; RELPOS_TOOL is its path).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

namespace relpos::test {

struct ToolResult {
  int status;          // exit status
  std::string output;  // stdout and stderr together
};

// Runs a shell command line (stdout and stderr together).
inline ToolResult tool_command(const std::string& command_line) {
  const std::string cmd = command_line + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  const int status = pclose(pipe.release());
  return {WEXITSTATUS(status), out};
}

inline ToolResult tool(const std::string& args) { return tool_command(std::string(RELPOS_TOOL) + " " + args); }

}  // namespace relpos::test
