// The KOLO_* environment variables kolo and kolorun read or set: the declared
// settings (common/settings.h). A variable of that prefix outside the list is
// most likely a misspelt setting, which would otherwise be ignored without a
// word (KOLO_FUSION_THRESOLD leaves fusion at its default): init() warns about
// each one, with the known name closest to it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kolo::detail {

const std::vector<std::string_view>& known_settings();

// One warning per KOLO_* entry of `environment` ("NAME=value" strings, as in
// environ, ending at a null pointer) that is not a known setting.
std::vector<std::string> unknown_setting_warnings(const char* const* environment);

// Logs unknown_setting_warnings(environ) as warnings.
void warn_about_unknown_settings();

}  // namespace kolo::detail
