// Relays ranks' output to kolorun's stdout and stderr as whole lines, each tagged
// with its rank ("[2]<stdout>:text"), the way horovodrun does.
//
// Lines from different ranks never mix mid-line: a rank's bytes are held until
// its line is complete, and kolorun writes only whole lines. Writes are batched so
// that a chatty job costs few system calls.
#pragma once

#include <string>
#include <string_view>

namespace kolorun {

// One of kolorun's own output streams.
class OutputSink {
 public:
  explicit OutputSink(int fd) : fd_(fd) {}
  // Appends prefix + line + '\n'; writes out when enough has gathered.
  void append_line(std::string_view prefix, std::string_view line);
  // Appends bytes as they are (the untagged end of a stream without a newline).
  void append_raw(std::string_view bytes);
  // Writes everything gathered. Once a write fails (a closed reader: EPIPE; a
  // full disk: ENOSPC) the sink is broken and drops what it is given.
  void flush();
  bool broken() const { return error_ != 0; }
  // The errno of the write that failed; 0 while none has.
  int error() const { return error_; }

 private:
  int fd_;
  int error_ = 0;
  std::string buffer_;
};

// One stream (stdout or stderr) of one rank.
class LineRelay {
 public:
  LineRelay(std::string prefix, OutputSink& sink) : prefix_(std::move(prefix)), sink_(&sink) {}
  void consume(std::string_view bytes);
  // The stream ended: a last line without a newline is still passed on (tagged,
  // with a newline added; untagged, as it is: binary output stays byte for byte).
  void finish();

 private:
  // Passes on the held bytes that are not a whole line.
  void emit_partial();

  std::string prefix_;
  OutputSink* sink_;
  std::string partial_;
};

// "[rank]<stdout>:" or "" without tagging.
std::string line_prefix(const std::string& tag, const char* stream_name, bool tag_output);

}  // namespace kolorun
