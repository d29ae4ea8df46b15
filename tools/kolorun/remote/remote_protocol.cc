#include "remote/remote_protocol.h"

#include <charconv>

#include "kolo/error.h"

namespace kolorun {
namespace {

constexpr std::string_view kMagic = "KOLO-REMOTE 1\n";
// Bounds that no real job reaches, so that garbage cannot make us allocate
// without limit.
constexpr std::size_t kMaxFieldBytes = 16u << 20;
constexpr std::size_t kMaxSpecBytes = 64u << 20;
constexpr std::size_t kMaxCount = 1u << 20;

void put_field(std::string& out, std::string_view field) {
  out += std::to_string(field.size());
  out += ':';
  out += field;
}

// Reads fields from the front of a buffer; nullopt means "not all here yet".
class FieldReader {
 public:
  explicit FieldReader(std::string_view data) : data_(data) {}

  std::optional<std::string> field() {
    auto colon = data_.find(':', pos_);
    if (colon == std::string_view::npos) {
      if (data_.size() - pos_ > 10) throw kolo::Error("remote spec: malformed field length");
      return std::nullopt;
    }
    std::size_t length = 0;
    auto [ptr, ec] = std::from_chars(data_.data() + pos_, data_.data() + colon, length);
    if (ec != std::errc() || ptr != data_.data() + colon || colon == pos_ || length > kMaxFieldBytes)
      throw kolo::Error("remote spec: malformed field length");
    if (data_.size() - (colon + 1) < length) return std::nullopt;
    std::string value(data_.substr(colon + 1, length));
    pos_ = colon + 1 + length;
    return value;
  }

  std::optional<std::size_t> number(std::size_t max) {
    auto text = field();
    if (!text) return std::nullopt;
    std::size_t value = 0;
    auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (ec != std::errc() || ptr != text->data() + text->size() || text->empty() || value > max)
      throw kolo::Error("remote spec: malformed number '" + *text + "'");
    return value;
  }

  std::optional<std::vector<std::string>> list() {
    auto count = number(kMaxCount);
    if (!count) return std::nullopt;
    std::vector<std::string> items;
    for (std::size_t i = 0; i < *count; ++i) {
      auto item = field();
      if (!item) return std::nullopt;
      items.push_back(std::move(*item));
    }
    return items;
  }

  std::size_t position() const { return pos_; }
  void skip(std::size_t n) { pos_ += n; }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
};

// The whole spec, or nullopt while incomplete; `end` gets the byte after it.
std::optional<RemoteSpec> try_decode(std::string_view data, std::size_t& end) {
  if (data.size() < kMagic.size()) {
    if (kMagic.substr(0, data.size()) != data) throw kolo::Error("remote spec: not a kolorun spec");
    return std::nullopt;
  }
  if (data.substr(0, kMagic.size()) != kMagic)
    throw kolo::Error("remote spec: not a kolorun spec (is this kolorun the same version as the launching one?)");
  FieldReader reader(data);
  reader.skip(kMagic.size());
  RemoteSpec spec;
  auto rank = reader.number(1u << 30);
  if (!rank) return std::nullopt;
  spec.rank = static_cast<int>(*rank);
  auto label = reader.field();
  if (!label) return std::nullopt;
  spec.label = std::move(*label);
  auto cwd = reader.field();
  if (!cwd) return std::nullopt;
  spec.working_directory = std::move(*cwd);
  auto timeout_ms = reader.number(std::size_t{1} << 40);
  if (!timeout_ms) return std::nullopt;
  spec.host_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*timeout_ms));
  auto argv = reader.list();
  if (!argv) return std::nullopt;
  spec.argv = std::move(*argv);
  auto env = reader.list();
  if (!env) return std::nullopt;
  spec.env = std::move(*env);
  if (spec.argv.empty() || spec.argv.front().empty()) throw kolo::Error("remote spec: no program");
  end = reader.position();
  return spec;
}

}  // namespace

std::string encode_remote_spec(const RemoteSpec& spec) {
  std::string out(kMagic);
  put_field(out, std::to_string(spec.rank));
  put_field(out, spec.label);
  put_field(out, spec.working_directory);
  put_field(out, std::to_string(spec.host_timeout.count()));
  put_field(out, std::to_string(spec.argv.size()));
  for (const auto& arg : spec.argv) put_field(out, arg);
  put_field(out, std::to_string(spec.env.size()));
  for (const auto& entry : spec.env) put_field(out, entry);
  return out;
}

std::size_t RemoteSpecDecoder::feed(std::string_view bytes) {
  if (spec_) return 0;
  const std::size_t before = buffer_.size();
  buffer_.append(bytes);
  std::size_t end = 0;
  spec_ = try_decode(buffer_, end);
  if (!spec_) {
    if (buffer_.size() > kMaxSpecBytes) throw kolo::Error("remote spec: larger than 64 MiB");
    return bytes.size();
  }
  buffer_.clear();
  return end - before;
}

}  // namespace kolorun
