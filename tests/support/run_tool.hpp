#pragma once
// Running the relpos tool as a script would (tests of the CLI; RELPOS_TOOL is its path).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
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

inline ToolResult tool(const std::string& args) {
  std::string command = RELPOS_TOOL;  // appended: g++ 12 warns falsely of string + string here (its bug 105329)
  command += ' ';
  command += args;
  return tool_command(command);
}

// The environment that makes RADV (Mesa's AMD driver) enumerate a null-hardware `family` (navi10,
// navi21, vega10, ...): a real GPU compiler without a GPU. Empty where the radeon ICD is missing or
// the driver does not offer that family.
inline std::string radv_null_env(const std::string& family = "navi21") {
  const std::string icd = "/usr/share/vulkan/icd.d/radeon_icd.x86_64.json";
  if (!std::filesystem::exists(icd)) return "";
  const std::string env = "RADV_FORCE_FAMILY=" + family + " VK_ICD_FILENAMES=" + icd + " RELPOS_DEVICE= ";
  const auto devices = tool_command(env + std::string(RELPOS_TOOL) + " devices");
  return devices.status == 0 && devices.output.find("Null hardware") != std::string::npos ? env : "";
}

}  // namespace relpos::test
