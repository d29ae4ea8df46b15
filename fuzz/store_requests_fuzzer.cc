// The store server's side of the protocol after the handshake: the input is the
// byte stream an authenticated client sends. It is cut into frames and parsed as
// the server does (front_frame, parse_request), and every request is carried out
// on a StoreTable, as the server's loop would, with parked GET/WAIT requests.
// Properties: the framing and the request encoding are canonical (each accepted
// frame re-encodes to the same bytes); the table wakes exactly the parked
// requests whose keys all exist, and never keeps one whose keys all exist.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "common/wire.h"
#include "fuzz_check.h"
#include "store/store_messages.h"
#include "store/store_table.h"

namespace {

namespace proto = kolo::store::protocol;
using kolo::store::StoreTable;

class TableModel {
 public:
  void run(const proto::Request& request) {
    switch (request.op) {
      case proto::Opcode::Set:
        woke(table_.set(request.keys.front(), request.value));
        break;
      case proto::Opcode::Add: {
        std::vector<StoreTable::WaiterId> woken;
        const bool was_integer = !table_.find(request.keys.front()) || table_.find(request.keys.front())->size() == 8;
        FUZZ_CHECK(table_.add(request.keys.front(), request.delta, woken).has_value() == was_integer);
        woke(woken);
        break;
      }
      case proto::Opcode::Get:
      case proto::Opcode::Wait: park(request.keys, request.timeout_ms); break;
      case proto::Opcode::Check: (void)table_.contains_all(request.keys); break;
      case proto::Opcode::Delete: (void)table_.erase(request.keys.front()); break;
    }
    FUZZ_CHECK(table_.parked_count() == parked_.size());
    for (const auto& [id, keys] : parked_) FUZZ_CHECK(!table_.contains_all(keys));
  }

 private:
  void park(const std::vector<std::string>& keys, std::uint32_t timeout_ms) {
    const StoreTable::WaiterId id = next_id_++;
    if (!table_.park(id, keys)) {
      FUZZ_CHECK(table_.contains_all(keys));
      return;
    }
    // A zero timeout is answered at once by the server, which forgets the wait.
    if (timeout_ms == 0) return table_.unpark(id);
    parked_.emplace(id, keys);
  }

  void woke(const std::vector<StoreTable::WaiterId>& ids) {
    for (StoreTable::WaiterId id : ids) {
      auto it = parked_.find(id);
      FUZZ_CHECK(it != parked_.end());
      FUZZ_CHECK(table_.contains_all(it->second));
      parked_.erase(it);
    }
  }

  StoreTable table_;
  std::map<StoreTable::WaiterId, std::vector<std::string>> parked_;
  StoreTable::WaiterId next_id_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> unread(data, size);
  TableModel model;
  try {
    while (const auto payload = proto::front_frame(unread)) {
      const proto::Request request = proto::parse_request(*payload);
      const auto frame = proto::encode_request_frame(request);
      FUZZ_CHECK(std::equal(frame.begin(), frame.end(), unread.begin(), unread.begin() + 4 + payload->size()));
      model.run(request);
      unread = unread.subspan(4 + payload->size());
    }
  } catch (const kolo::wire::WireError&) {
    // The server closes this connection.
  }
  return 0;
}
