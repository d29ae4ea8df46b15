#include "comm/ps/ps_server.h"

#include <array>
#include <cstring>
#include <optional>
#include <vector>

#include "comm/ps/ps_communicator.h"
#include "comm/ps/ps_protocol.h"
#include "comm/tcp/tcp_mesh.h"
#include "common/logging.h"
#include "common/reduce.h"
#include "kolo/error.h"

namespace kolo::comm::ps {
namespace {

// How often a server waiting for a session looks whether the store is still there.
constexpr std::chrono::milliseconds kAwaitSlice{1000};

class Session {
 public:
  Session(const ServerSetup& setup, store::StoreClient& store, int generation)
      : setup_(setup),
        group_(server_group(generation, setup.servers, setup.workers, setup.server)),
        mesh_(group_, store, setup.network, server_options(setup.options), setup.secret),
        headers_(static_cast<std::size_t>(setup.workers)),
        pushes_(static_cast<std::size_t>(setup.workers)),
        sources_(static_cast<std::size_t>(setup.workers)) {}

  void run() {
    for (;;) {
      const std::optional<PushHeader> push = next_push();
      if (!push) break;
      receive_data(*push);
      answer(*push);
    }
    for (auto& a : answering_)
      if (a) a->wait();
  }

 private:
  static CommunicatorOptions server_options(CommunicatorOptions options) {
    options.peer_timeout = std::max(options.peer_timeout / 2, std::chrono::milliseconds(1));
    return options;
  }

  int member(int worker) const { return setup_.servers + worker; }
  std::string server_name() const { return "server " + std::to_string(setup_.server); }

  // Every worker's next header; nullopt when all said Bye.
  std::optional<PushHeader> next_push() {
    {
      tcp::Exchange in(mesh_, "a parameter server's wait for pushes");
      for (int w = 0; w < setup_.workers; ++w) in.recv(member(w), headers_[w].data(), headers_[w].size());
      in.wait_patiently();
    }
    std::vector<PushHeader> got(static_cast<std::size_t>(setup_.workers));
    for (int w = 0; w < setup_.workers; ++w) {
      try {
        got[w] = decode(headers_[w]);
      } catch (const InvalidArgumentError& e) {
        blame(w, rank_name(w) + " sent a malformed push to " + server_name() + ": " + e.what());
      }
    }
    for (int w = 1; w < setup_.workers; ++w) {
      if (got[w] == got[0]) continue;
      blame(w, rank_name(w) + " is out of step with rank 0 at " + server_name() + ": it sent " + got[w].describe() +
                   " where rank 0 sent " + got[0].describe());
    }
    if (got[0].kind == Kind::Bye) return std::nullopt;
    return got[0];
  }

  void receive_data(const PushHeader& push) {
    const std::size_t bytes = push.bytes();
    tcp::Exchange in(mesh_, "a push to a parameter server");
    for (int w = 0; w < setup_.workers; ++w) {
      pushes_[w].resize(bytes);
      in.recv(member(w), pushes_[w].data(), bytes);
      sources_[w] = pushes_[w].data();
    }
    in.wait();
  }

  // Reduces in worker-rank order into the free one of two answer buffers, scales
  // it as the push says, and sends it to every worker; the sends move while the
  // next push comes in.
  void answer(const PushHeader& push) {
    auto& pending = answering_[turn_];
    if (pending) {
      pending->wait();
      pending.reset();
    }
    auto& sum = sums_[turn_];
    sum.resize(push.bytes());
    // One worker's allreduce is its input unchanged, as the self communicator's
    // (a reduction would, for one, normalize bools).
    if (setup_.workers == 1) std::memcpy(sum.data(), sources_[0], sum.size());
    else reduce_many(sum.data(), sources_.data(), setup_.workers, static_cast<std::size_t>(push.count), push.dtype, push.op);
    push.scale.apply(sum.data(), static_cast<std::size_t>(push.count), push.dtype);
    pending.emplace(mesh_, "a parameter server's answer");
    for (int w = 0; w < setup_.workers; ++w) pending->send(member(w), sum.data(), sum.size());
    turn_ ^= 1;
  }

  // Worker `w` broke the protocol: the verdict names it, every connection closes.
  [[noreturn]] void blame(int w, const std::string& message) {
    mesh_.fail_from_outside(w, message);
    for (auto& a : answering_) a.reset();
    mesh_.check_usable();  // throws the verdict
    throw PeerFailureError(w, message);
  }

  const ServerSetup& setup_;
  const MeshGroup group_;
  tcp::Mesh mesh_;
  std::vector<EncodedHeader> headers_;
  std::vector<std::vector<std::byte>> pushes_;
  std::vector<const void*> sources_;
  std::array<std::vector<std::byte>, 2> sums_;
  std::array<std::optional<tcp::Exchange>, 2> answering_;
  int turn_ = 0;
};

// Waits until every worker of `generation` has announced itself; false when the
// store went away first.
bool await_workers(const ServerSetup& setup, store::StoreClient& store, int generation) {
  std::vector<std::string> keys;
  const std::string prefix = "init/" + std::to_string(generation) + "/rank/";
  for (int r = 0; r < setup.workers; ++r) keys.push_back(prefix + std::to_string(r));
  for (;;) {
    try {
      store.wait(keys, kAwaitSlice);
      return true;
    } catch (const TimeoutError&) {
    } catch (const std::exception& e) {
      KOLO_LOG(Info, "server " << setup.server << ": the job's store is gone (" << e.what() << "); leaving");
      return false;
    }
  }
}

}  // namespace

void serve_session(const ServerSetup& setup, store::StoreClient& store, int generation) {
  Session(setup, store, generation).run();
}

ServerEnd serve_job(const ServerSetup& setup, store::StoreClient& store) {
  for (int generation = 0;; ++generation) {
    if (!await_workers(setup, store, generation)) return ServerEnd::StoreGone;
    try {
      serve_session(setup, store, generation);
      KOLO_LOG(Debug, "server " << setup.server << ": session " << generation << " ended");
    } catch (const PeerFailureError& e) {
      KOLO_LOG(Error, "server " << setup.server << ": " << e.what());
      return ServerEnd::PeerFailed;
    } catch (const std::exception& e) {
      KOLO_LOG(Error, "server " << setup.server << ": " << e.what());
      return ServerEnd::ServerFailed;
    }
  }
}

}  // namespace kolo::comm::ps
