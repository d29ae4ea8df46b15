#include "remote/start_word.h"

#include <unistd.h>

#include <algorithm>

namespace kolorun {

void say_started() {
  [[maybe_unused]] auto n = ::write(STDOUT_FILENO, kStartedWord.data(), kStartedWord.size());
}

std::string StartWordFilter::consume(std::string_view bytes) {
  if (seen_) return std::string(bytes);
  held_.append(bytes);
  if (const auto at = held_.find(kStartedWord); at != std::string::npos) {
    seen_ = true;
    std::string passed = held_.substr(0, at) + held_.substr(at + kStartedWord.size());
    held_.clear();
    return passed;
  }
  // Keep the longest tail that is a beginning of the word.
  std::size_t keep = std::min(held_.size(), kStartedWord.size() - 1);
  while (keep > 0 && held_.compare(held_.size() - keep, keep, kStartedWord.substr(0, keep)) != 0) --keep;
  std::string passed = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return passed;
}

std::string StartWordFilter::finish() {
  std::string rest;
  rest.swap(held_);
  return rest;
}

}  // namespace kolorun
