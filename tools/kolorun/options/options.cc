#include "options/options.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

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
  bool out_of_range = seconds < 0 || (!allow_zero && seconds == 0);
  if (malformed || out_of_range)
    throw UsageError(flag + " needs " + (allow_zero ? "a non-negative" : "a positive") + " number of seconds, got '" +
                     text + "'");
  // Past this the milliseconds would not fit an int64.
  if (seconds > 1e9) throw UsageError(flag + " takes at most 1e9 seconds (about 31 years), got '" + text + "'");
  return milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

// "ip netns exec {host}" -> its words. No shell quoting: a word with spaces needs
// a wrapper script.
std::vector<std::string> split_words(const std::string& flag, const std::string& text) {
  std::vector<std::string> words;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) words.push_back(word);
  if (words.empty()) throw UsageError(flag + " needs a command, got '" + text + "'");
  return words;
}

struct FlagSpec {
  std::vector<std::string> names;
  bool takes_value = false;
  std::function<void(ParsedCommandLine&, const std::string& name, const std::string& value)> apply;
  // May be given more than once (each adds); any other flag given twice is an error.
  bool repeatable = false;
  // Words the value takes as separate arguments ("--flag LOW HIGH"), joined by a space.
  int words = 1;
};

ElasticOptions& elastic(ParsedCommandLine& p) {
  if (!p.options.elastic) p.options.elastic.emplace();
  return *p.options.elastic;
}

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
      {{"--hostfile", "-hostfile"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         if (v.empty()) throw UsageError(name + " needs a file name");
         p.options.hostfile = v;
       }},
      {{"-p", "--ssh-port"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         int port = parse_positive_int(name, v);
         if (port > 65535) throw UsageError(name + " '" + v + "' is not a TCP port (1-65535)");
         p.options.ssh_port = port;
       }},
      {{"-i", "--ssh-identity-file"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         if (v.empty()) throw UsageError(name + " needs a file name");
         p.options.ssh_identity_file = v;
       }},
      {{"--ssh-option"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         if (v.empty() || v.front() == '-') throw UsageError(name + " needs an ssh option such as ConnectTimeout=5");
         p.options.ssh_options.push_back(v);
       },
       true},
      {{"--launcher-command"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         p.options.launcher_command = split_words(name, v);
       }},
      {{"--network-interface"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         if (v.empty()) throw UsageError(name + " needs an interface name such as eth0");
         p.options.network_interface = v;
       }},
      {{"--bind-to"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         p.options.cpu_binding = parse_cpu_binding(name, v);
       }},
      {{"--host-timeout"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         p.options.host_timeout = parse_seconds(name, v, false);
       }},
      {{"--mpi"}, false, [](ParsedCommandLine& p, const std::string&, const std::string&) { p.options.mpi = true; }},
      {{"--mpi-args"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         p.options.mpi_args = split_words(name, v);
       }},
      {{"--num-servers"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         p.options.num_servers = parse_positive_int(name, v);
       }},
      {{"--server-hosts"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         if (v.empty()) throw UsageError(name + " needs a host list such as node3:1,node4:1");
         p.options.server_hosts = v;
       }},
      {{"--gloo"}, false, [](ParsedCommandLine&, const std::string&, const std::string&) {}},
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
      {{"--min-np", "--min-num-proc"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         elastic(p).min_np = parse_positive_int(name, v);
       }},
      {{"--max-np", "--max-num-proc"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         elastic(p).max_np = parse_positive_int(name, v);
       }},
      {{"--host-discovery-script"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         if (v.empty()) throw UsageError(name + " needs a program that prints the hosts, one per line");
         elastic(p).discovery_script = v;
       }},
      {{"--slots-per-host"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         elastic(p).slots_per_host = parse_positive_int(name, v);
       }},
      {{"--reset-limit"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         elastic(p).reset_limit = parse_positive_int(name, v);
       }},
      {{"--blacklist-cooldown-range"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         const auto words = split_words(name, v);
         if (words.size() != 2) throw UsageError(name + " needs two numbers of seconds, LOW HIGH, got '" + v + "'");
         const auto low = parse_seconds(name, words[0], true), high = parse_seconds(name, words[1], true);
         if (high < low) throw UsageError(name + ": LOW " + words[0] + " is above HIGH " + words[1]);
         elastic(p).cooldown = std::pair{low, high};
       },
       false, 2},
      {{"--elastic-timeout"}, true,
       [](ParsedCommandLine& p, const std::string& name, const std::string& v) {
         elastic(p).timeout = parse_seconds(name, v, false);
       }},
      {{"-h", "--help"}, false,
       [](ParsedCommandLine& p, const std::string&, const std::string&) { p.action = CommandLineAction::ShowHelp; }},
      {{"--version"}, false,
       [](ParsedCommandLine& p, const std::string&, const std::string&) { p.action = CommandLineAction::ShowVersion; }},
  };
  return table;
}

const FlagSpec* find_flag(const std::string& name) {
  for (const auto& spec : flag_table()) {
    for (const auto& candidate : spec.names)
      if (candidate == name) return &spec;
  }
  return nullptr;
}

bool looks_like_flag(const std::string& arg) { return arg.size() > 1 && arg[0] == '-'; }

void check_elastic(const LaunchOptions& o) {
  const ElasticOptions& e = *o.elastic;
  if (!e.min_np && !e.max_np && e.discovery_script.empty())
    throw UsageError("--slots-per-host, --reset-limit, --blacklist-cooldown-range and --elastic-timeout need an "
                     "elastic job: give --min-np, --max-np or --host-discovery-script");
  if (o.mpi) throw UsageError("an elastic job cannot be handed to mpirun (--mpi): kolorun starts its workers itself");
  if (o.num_servers) throw UsageError("--num-servers cannot be used in an elastic job");
  if (!e.discovery_script.empty() && (!o.hosts.empty() || !o.hostfile.empty()))
    throw UsageError("give the hosts with --host-discovery-script or with -H/--hostfile, not both");
  if (e.slots_per_host && e.discovery_script.empty())
    throw UsageError("--slots-per-host needs --host-discovery-script (-H gives each host's slots)");
  if (!e.discovery_script.empty() && !o.num_proc && !e.min_np)
    throw UsageError("with --host-discovery-script give -np N (or --min-np M): how many workers to start");
  const int np = o.num_proc.value_or(e.min_np.value_or(1));
  if (e.min_np && *e.min_np > np)
    throw UsageError("--min-np " + std::to_string(*e.min_np) + " is above -np " + std::to_string(np));
  if (e.max_np && *e.max_np < np)
    throw UsageError("--max-np " + std::to_string(*e.max_np) + " is below -np " + std::to_string(np));
}

// Flags that cannot go together, found before anything is planned.
void check_combination(const LaunchOptions& o) {
  if (!o.hosts.empty() && !o.hostfile.empty()) throw UsageError("give the hosts with -H or with --hostfile, not both");
  const bool discovered = o.elastic && !o.elastic->discovery_script.empty();
  if (!o.num_proc && o.hosts.empty() && o.hostfile.empty() && !discovered)
    throw UsageError("give the number of ranks with -np N (or slots with -H localhost:N)");
  if (!o.launcher_command.empty()) {
    if (o.mpi) throw UsageError("--launcher-command cannot be used with --mpi (mpirun starts the ranks)");
    if (o.ssh_port || !o.ssh_identity_file.empty() || !o.ssh_options.empty())
      throw UsageError("--launcher-command replaces ssh: --ssh-port, --ssh-identity-file and --ssh-option do not apply");
  }
  if (!o.mpi_args.empty() && !o.mpi) throw UsageError("--mpi-args needs --mpi");
  if (o.mpi && !o.ssh_options.empty()) throw UsageError("--ssh-option cannot be used with --mpi (use --mpi-args)");
  if (o.mpi && (o.num_servers || !o.server_hosts.empty()))
    throw UsageError("--num-servers and --server-hosts cannot be used with --mpi (kolorun starts the servers itself)");
  if (o.elastic) check_elastic(o);
  if (!o.server_hosts.empty() && !o.num_servers)
    throw UsageError("--server-hosts needs --num-servers (how many servers to place on those hosts)");
}

}  // namespace

ParsedCommandLine parse_command_line(const std::vector<std::string>& args) {
  ParsedCommandLine parsed;
  std::set<const FlagSpec*> seen;
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
    if (spec == nullptr) throw UsageError("unknown flag '" + name + "'");
    if (!spec->repeatable && !seen.insert(spec).second) throw UsageError(name + " is given more than once");
    if (spec->takes_value && !inline_value) {
      if (i + static_cast<std::size_t>(spec->words) >= args.size()) throw UsageError(name + " needs a value");
      value = args[++i];
      for (int w = 1; w < spec->words; ++w) value += " " + args[++i];
    } else if (!spec->takes_value && inline_value) {
      throw UsageError(name + " takes no value");
    }
    spec->apply(parsed, name, value);
  }
  parsed.options.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  if (parsed.action != CommandLineAction::Launch) return parsed;
  if (parsed.options.command.empty()) throw UsageError("no PROGRAM given: usage: kolorun -np N [options] PROGRAM [ARGS...]");
  if (parsed.options.command.front().empty()) throw UsageError("PROGRAM is an empty string");
  check_combination(parsed.options);
  return parsed;
}

std::string help_text() {
  return R"(usage: kolorun -np N [-H host:slots,... | --hostfile FILE] [options] PROGRAM [ARGS...]

Starts N ranks of PROGRAM as one kolo job: runs the job's rendezvous store, gives
every rank its KOLO_* environment, tags each output line with its rank, forwards
signals, and ends the whole job when one rank fails, exiting with that rank's code.
Everything after PROGRAM is passed to it untouched.

options:
  -np, --num-proc N     number of ranks (default: every slot of the hosts)
  -H, --hosts LIST      hosts and slots, e.g. localhost:4 or node1:4,node2:4;
                        ranks fill the hosts in order
  --hostfile FILE       hosts from a file: lines "host slots=N" ('#' comments)
  -p, --ssh-port PORT   ssh port of the other hosts
  -i, --ssh-identity-file FILE
                        ssh key for the other hosts
  --ssh-option OPTION   extra ssh option (as ssh -o OPTION), may be repeated
  --launcher-command CMD
                        start ranks on other hosts with CMD instead of ssh:
                        words, "{host}" replaced by the host name, e.g.
                        'ip netns exec {host}' (kolorun must be at the same path)
  --network-interface IF
                        the interface the other hosts reach this one on: the
                        store listens on its IPv4 (else IPv6) address; ranks
                        get KOLO_IFACE (without it, each host's ranks get
                        KOLO_HOST_ADDR when kolorun knows an address for the
                        host)
  --bind-to core|none   core (default): each rank on its own equal share of the
                        CPUs of its host, as mpirun binds; none when the ranks
                        of a host outnumber its CPUs, or with none
  --host-timeout SECONDS
                        a host silent this long counts as unreachable: the job
                        ends and its ranks are killed there (default 20)
  --mpi                 hand the job to Open MPI's mpirun (kolorun keeps the store);
                        the ranks use MPI unless KOLO_BACKEND says otherwise
  --mpi-args ARGS       extra words for mpirun (with --mpi)
  --num-servers K       reduce the ranks' allreduces through K parameter servers
                        (kolo-server, next to kolorun) instead of among the ranks
  --server-hosts LIST   where the servers run, e.g. node5:1,node6:1 (filled in
                        order); without it, on the ranks' hosts in turn
  --min-np, --min-num-proc M
                        elastic job: a failed worker's host is excluded and
                        the others go on while at least M workers remain
  --max-np, --max-num-proc X
                        elastic job: take in new workers on new slots, up to X
  --host-discovery-script S
                        elastic job: S prints the hosts, "host" or "host:slots"
                        per line; run about every second
  --slots-per-host N    slots of a host S prints without ":slots" (default 1)
  --reset-limit R       fail the job after R changes of its workers
  --blacklist-cooldown-range LOW HIGH
                        an excluded host is back after LOW to HIGH seconds
                        (default: never)
  --elastic-timeout SECONDS
                        how long an elastic job may have fewer than --min-np
                        workers before it fails (default 600)
  --gloo                accepted for horovodrun compatibility (the default)
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
2 for a malformed command line; 126/127 when PROGRAM cannot be executed / found;
255 when ssh cannot reach a host.
)";
}

}  // namespace kolorun
