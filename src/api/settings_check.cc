#include "api/settings_check.h"

#include "comm/transport_settings.h"
#include "common/logging.h"
#include "memory/mapping_cache.h"
#include "memory/shareable_memory.h"

namespace kolo::detail {

void check_late_settings() {
  log::check_level_setting();
  MappingCache::limit_from_env();
  wants_shareable(false);  // parses KOLO_SHAREABLE_BUFFERS
  comm::check_transport_settings();
}

}  // namespace kolo::detail
