#include "options.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>

#include "launch_error.h"

namespace kolorun {
namespace {

using std::chrono::milliseconds;

int parse_positive_int(const std::string& flag, const std::string& text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range) throw UsageError(flag + " '" + text + "' is too large");
  if (text.empty() || ec != std::errc() || ptr != end || value <= 0)
    throw UsageError(flag + " needs a positive whole number, got '" + text + "'");
  return value;
}

milliseconds parse_seconds(const std::string& flag, const std::string& text, bool allow_zero) {
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  bool malformed = text.empty() || end != text.c_str() + text.size() || !std::isfinite(seconds);
  bool out_of_range = seconds < 0 || (!allow_zero && seconds == 0) || seconds > 1e9;
  if (malformed || out_of_range)
    throw UsageError(flag + " needs " + (allow_zero ? "a non-negative" : "a positive") + " number of seconds, got '" +
                     text + "'");
  return milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

struct FlagSpec {
  std::vector<std::string> names;
  bool takes_value = false;
  std::function<void(ParsedCommandLine&, const std::string& name, const std::string& value)> apply;
};

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = {
      {{"-np", "--num-proc"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         p.options.num_proc = parse_positive_int(name, v);
       }},
      {{"-H", "--hosts"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         if (v.empty()) throw UsageError(name + " needs a host list such as localhost:4");
         p.options.hosts = v;
       }},
      {{"--verbose"}, false, [](ParsedCommandLine& p, const std::string&, const std::string&) { p.options.verbose = true; }},
      {{"--no-tag-output"}, false,
       [](ParsedCommandLine& p, const std::string&, const std::string&) { p.options.tag_output = false; }},
      {{"--timeout"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         p.options.timeout = parse_seconds(name, v, false);
       }},
      {{"--kill-grace"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         p.options.kill_grace = parse_seconds(name, v, true);
       }},
      {{"-h", "--help"}, false,
       [](ParsedCommandLine& p, const std::string&, const std::string&) { p.action = CommandLineAction::ShowHelp; }},
      {{"--version"}, false,
       [](ParsedCommandLine& p, const std::string&, const std::string&) { p.action = CommandLineAction::ShowVersion; }},
  };
  return table;
}

// horovodrun flags that belong to multi-host or MPI launching, which this kolorun
// does not do yet: named so that the error says so instead of "unknown flag".
const std::vector<std::string>& planned_flags() {
  static const std::vector<std::string> flags = {
      "--hostfile", "-hostfile", "-p", "--ssh-port", "-i", "--ssh-identity-file", "--network-interface",
      "--mpi", "--gloo", "--mpi-args", "--start-timeout"};
  return flags;
}

const FlagSpec* find_flag(const std::string& name) {
  for (const auto& spec : flag_table()) {
    for (const auto& candidate : spec.names)
      if (candidate == name) return &spec;
  }
  return nullptr;
}

bool is_planned_flag(const std::string& name) {
  for (const auto& flag : planned_flags())
    if (flag == name) return true;
  return false;
}

bool looks_like_flag(const std::string& arg) { return arg.size() > 1 && arg[0] == '-'; }

}  // namespace

ParsedCommandLine parse_command_line(const std::vector<std::string>& args) {
  ParsedCommandLine parsed;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (!looks_like_flag(arg)) break;

    // "--flag=value" and "-np=4" as well as "--flag value".
    std::string name = arg, value;
    bool inline_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    const FlagSpec* spec = find_flag(name);
    if (spec == nullptr) {
      if (is_planned_flag(name))
        throw UsageError(name + " is not supported yet: this kolorun launches on this host only");
      throw UsageError("unknown flag '" + name + "'");
    }
    if (spec->takes_value && !inline_value) {
      if (i + 1 >= args.size()) throw UsageError(name + " needs a value");
      value = args[++i];
    } else if (!spec->takes_value && inline_value) {
      throw UsageError(name + " takes no value");
    }
    spec->apply(parsed, name, value);
  }
  parsed.options.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  if (parsed.action != CommandLineAction::Launch) return parsed;
  if (parsed.options.command.empty()) throw UsageError("no PROGRAM given: usage: kolorun -np N [options] PROGRAM [ARGS...]");
  if (parsed.options.command.front().empty()) throw UsageError("PROGRAM is an empty string");
  if (!parsed.options.num_proc && parsed.options.hosts.empty())
    throw UsageError("give the number of ranks with -np N (or slots with -H localhost:N)");
  return parsed;
}

std::string help_text() {
  return R"(usage: kolorun -np N [-H localhost:N] [options] PROGRAM [ARGS...]

Starts N ranks of PROGRAM as one kolo job: runs the job's rendezvous store, gives
every rank its KOLO_* environment, tags each output line with its rank, forwards
signals, and ends the whole job when one rank fails, exiting with that rank's code.
Everything after PROGRAM is passed to it untouched.

options:
  -np, --num-proc N     number of ranks (default: the slot count of -H)
  -H, --hosts LIST      hosts and slots, e.g. localhost:4 (this host only for now:
                        localhost, 127.0.0.1 or this machine's hostname)
  --verbose             print the launch plan and each rank's exit
  --no-tag-output       do not prefix output lines with [rank]<stdout>: / [rank]<stderr>:
  --timeout SECONDS     stop the whole job after this long (exit status 124)
  --kill-grace SECONDS  how long ranks may take to stop after SIGTERM before they
                        are killed (default 5)
  -h, --help            show this help
  --version             show kolorun's version
  --                    end of kolorun's options (for a PROGRAM starting with '-')

exit status: 0 when every rank exits 0; the failed rank's exit code, or 128+signal
when it was killed; 128+signal when kolorun itself is interrupted; 124 on --timeout;
2 for a malformed command line; 126/127 when PROGRAM cannot be executed / found.
)";
}

}  // namespace kolorun
