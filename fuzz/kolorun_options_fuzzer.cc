// kolorun's command-line parser; the input is its arguments, one per line.
// Anything malformed must be a UsageError (any other exception is a crash), and
// whatever is accepted must be a launch that can be started.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "launch_error.h"
#include "options/options.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  while (!input.empty()) {
    const auto end = input.find('\n');
    args.emplace_back(input.substr(0, end));
    input.remove_prefix(end == std::string_view::npos ? input.size() : end + 1);
  }
  kolorun::ParsedCommandLine parsed;
  try {
    parsed = kolorun::parse_command_line(args);
  } catch (const kolorun::UsageError& e) {
    FUZZ_CHECK(e.exit_code() == kolorun::kExitUsage);
    return 0;
  }
  if (parsed.action != kolorun::CommandLineAction::Launch) return 0;
  const auto& options = parsed.options;
  FUZZ_CHECK(!options.command.empty() && !options.command.front().empty());
  FUZZ_CHECK(options.num_proc.has_value() || !options.hosts.empty() || !options.hostfile.empty());
  FUZZ_CHECK(options.hosts.empty() || options.hostfile.empty());
  FUZZ_CHECK(!options.mpi || options.launcher_command.empty());
  FUZZ_CHECK(options.mpi_args.empty() || options.mpi);
  FUZZ_CHECK(!options.ssh_port || *options.ssh_port > 0);
  FUZZ_CHECK(options.host_timeout.count() > 0);
  FUZZ_CHECK(!options.num_proc || *options.num_proc > 0);
  FUZZ_CHECK(!options.timeout || options.timeout->count() > 0);
  FUZZ_CHECK(options.kill_grace.count() >= 0);
  return 0;
}
