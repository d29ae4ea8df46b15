// This host's name, as gethostname(2) gives it: what a rank tells its peers when
// it has no address of its own to give.
#pragma once

#include <string>

namespace kolo::net {

std::string host_name();

}  // namespace kolo::net
