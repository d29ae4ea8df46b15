#include "net/host_name.h"

#include <unistd.h>

namespace kolo::net {

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace kolo::net
