#include "remote/env_export.h"

#include <array>
#include <cctype>

namespace kolorun {
namespace {

// The remote login sets its own values for these; ours would mislead.
constexpr std::array<std::string_view, 25> kHostSpecific = {
    "HOSTNAME", "HOST", "PWD", "OLDPWD", "SHLVL", "_", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY",
    "SSH_AUTH_SOCK", "SSH_AGENT_PID", "DISPLAY", "XAUTHORITY", "TMUX", "TMUX_PANE", "STY", "WINDOW",
    "TERMCAP", "XDG_SESSION_ID", "XDG_RUNTIME_DIR", "XDG_SESSION_TYPE", "XDG_SESSION_CLASS",
    "DBUS_SESSION_BUS_ADDRESS", "MAIL", "LS_COLORS"};
// Set per process by mpirun / the MPI runtime.
constexpr std::array<std::string_view, 3> kLauncherPrefixes = {"OMPI_", "PMIX_", "PMI_"};

bool is_identifier(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front()))) return false;
  for (unsigned char c : name)
    if (!std::isalnum(c) && c != '_') return false;
  return true;
}

}  // namespace

bool is_exportable(std::string_view entry) {
  auto eq = entry.find('=');
  if (eq == std::string_view::npos) return false;
  std::string_view name = entry.substr(0, eq);
  // Exported bash functions ("BASH_FUNC_f%%") and other odd names cannot be
  // named safely on every side.
  if (!is_identifier(name)) return false;
  for (auto host_specific : kHostSpecific)
    if (name == host_specific) return false;
  for (auto prefix : kLauncherPrefixes)
    if (name.substr(0, prefix.size()) == prefix) return false;
  return true;
}

std::vector<std::string> exportable_environment(const char* const* env) {
  std::vector<std::string> exported;
  for (const char* const* entry = env; entry != nullptr && *entry != nullptr; ++entry)
    if (is_exportable(*entry)) exported.emplace_back(*entry);
  return exported;
}

}  // namespace kolorun
