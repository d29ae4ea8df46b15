// The rendezvous store over real loopback sockets: commands, blocking, concurrency
// across threads and forked processes, authentication, hostile input and shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kolo/error.h"
#include "store/store.h"

namespace kolo::store {
namespace {

using namespace std::chrono_literals;

Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

class StoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<StoreClient> connect(const std::string& secret = {}) {
    return StoreClient::connect("127.0.0.1", server_.port(), secret.empty() ? secret_ : secret, 5s);
  }

  std::string secret_ = make_secret();
  StoreServer server_{secret_};
};

TEST_F(StoreTest, SetThenGet) {
  auto client = connect();
  client->set("alpha", bytes_of("one"));
  EXPECT_EQ(client->get("alpha", 1s), bytes_of("one"));
  client->set("alpha", bytes_of("two"));
  EXPECT_EQ(client->get("alpha", 1s), bytes_of("two"));
  client->set("empty", {});
  EXPECT_EQ(client->get("empty", 1s), Bytes{});
}

}  // namespace
}  // namespace kolo::store
