#include "options/program_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "launch_error.h"

namespace kolorun {
namespace {

enum class Candidate { Missing, Executable, NotExecutable, Directory };

Candidate inspect(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return Candidate::Missing;
  if (S_ISDIR(info.st_mode)) return Candidate::Directory;
  if (!S_ISREG(info.st_mode) || ::access(path.c_str(), X_OK) != 0) return Candidate::NotExecutable;
  return Candidate::Executable;
}

std::string resolve_explicit_path(const std::string& path) {
  switch (inspect(path)) {
    case Candidate::Executable:
      return path;
    case Candidate::Missing:
      throw LaunchError(system_error_text("cannot run '" + path + "'", ENOENT), kExitNotFound);
    case Candidate::Directory:
      throw LaunchError("cannot run '" + path + "': it is a directory", kExitNotExecutable);
    case Candidate::NotExecutable:
      break;
  }
  throw LaunchError("cannot run '" + path + "': it is not an executable file (check its permissions)",
                    kExitNotExecutable);
}

}  // namespace

std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return resolve_explicit_path(name);

  const char* path_env = std::getenv("PATH");
  std::stringstream dirs(path_env != nullptr ? path_env : "/bin:/usr/bin");
  std::string dir, not_executable;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    switch (inspect(candidate)) {
      case Candidate::Executable:
        return candidate;
      case Candidate::NotExecutable:
        if (not_executable.empty()) not_executable = candidate;
        break;
      case Candidate::Missing:
      case Candidate::Directory:
        break;
    }
  }
  // Like execvp: a match without permission only matters when nothing else matched.
  if (!not_executable.empty()) {
    throw LaunchError("cannot run '" + name + "': " + not_executable + " is not executable (check its permissions)",
                      kExitNotExecutable);
  }
  throw LaunchError("cannot run '" + name + "': command not found in PATH", kExitNotFound);
}

}  // namespace kolorun
