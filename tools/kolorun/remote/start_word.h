// The first word of `kolorun --remote-exec`: written on its stdout as soon as it
// runs, before the spec is read, so that kolorun knows the launcher command (ssh,
// or --launcher-command) did reach the far end. A command that never gets there
// (it hangs, or exits without running anything) would otherwise leave kolorun
// waiting for a rank that does not exist. The word travels in the rank's stdout
// stream, which is the only channel back, and is taken out of it here.
#pragma once

#include <string>
#include <string_view>

namespace kolorun {

// A NUL first, so that no text a launcher command prints before it looks the same.
inline constexpr std::string_view kStartedWord{"\0KOLO-REMOTE-STARTED 1\n", 23};

// Writes the word on stdout; best effort (a closed stdout ends the job anyway).
void say_started();

// Takes the word out of a remote rank's stdout stream. Output before the word
// (a launcher command's own) passes through; a tail that may be the beginning of
// the word is held back until the next bytes tell.
class StartWordFilter {
 public:
  // Returns the bytes to pass on.
  std::string consume(std::string_view bytes);
  // At the end of the stream: what was held back.
  std::string finish();
  bool seen() const { return seen_; }

 private:
  std::string held_;
  bool seen_ = false;
};

}  // namespace kolorun
