#include "comm/gloo/gloo_mesh.h"

#include <algorithm>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "comm/gloo/gloo_exchange.h"
#include "comm/gloo/gloo_store.h"
#include "common/logging.h"
#include "kolo/error.h"

namespace kolo::comm::gloo_impl {
namespace {

std::shared_ptr<::gloo::transport::Device> make_device(const MeshNetwork& network) {
  const ListenAddress address = listen_address(network);
  ::gloo::transport::tcp::attr attr;
  attr.hostname = address.host;
  const std::string& source = address.source;
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw InvalidArgumentError("cannot use " + source + " for kolo's TCP connections: " + e.what());
  }
}

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

}  // namespace

Mesh::Mesh(const MeshGroup& group, store::StoreClient& store, const MeshNetwork& network,
           const CommunicatorOptions& options)
    : group_(group),
      rank_(group.rank),
      size_(group.size),
      peer_timeout_(options.peer_timeout),
      state_("gloo",
             FailureVerdict(&store, group.verdict_prefix.empty() ? group.key_prefix + "failure/" : group.verdict_prefix,
                            group.member_name(group.rank)),
             [this] { close_connections(); }) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_)
    throw InvalidArgumentError("gloo communicator: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                               " is out of range");
  if (size_ == 1) return;  // nothing to connect: every collective is a local copy
  auto device = make_device(network);
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank_, size_);
  // gloo waits five times its timeout for a pair to connect; the pairs' timeout
  // serves nothing else here (every transfer wait passes the peer timeout).
  context->setTimeout(std::max<std::chrono::milliseconds>(std::chrono::seconds(1), options.connect_timeout / 5));
  GlooStore rendezvous(store, group.key_prefix + "addr/", options.connect_timeout);
  try {
    context->connectFullMesh(rendezvous, device);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerFailureError(-1, std::string("gloo: connecting the ranks failed: ") + e.what());
  }
  context_ = std::move(context);
  watch_ = std::make_unique<ConnectionWatch>(*context_);
  KOLO_LOG(Debug, "gloo: rank " << rank_ << " of " << size_ << " connected (" << device->str() << ")");
}

Mesh::~Mesh() = default;

std::unique_ptr<direct::Batch> Mesh::batch(const char* what) { return std::make_unique<Exchange>(*this, what); }

std::unique_ptr<::gloo::transport::UnboundBuffer> Mesh::make_buffer(void* data, std::size_t bytes) {
  // Registered before the check, so that an abort() after the check finds it.
  std::lock_guard lock(mutex_);
  state_.check_usable();
  auto buffer = context_->createUnboundBuffer(data, bytes);
  live_.insert(buffer.get());
  return buffer;
}

void Mesh::release_buffer(::gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard lock(mutex_);
  live_.erase(buffer);
}

void Mesh::abort(const std::string& reason) {
  if (!state_.abort(reason)) return;
  std::lock_guard lock(mutex_);
  for (auto* buffer : live_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

std::string Mesh::judge(int job_rank, const std::string& what, const std::string& detail) const {
  if (contains(detail, "Timed out")) return stalled_peer_message(rank_name(job_rank), peer_timeout_, what);
  return lost_peer_message(rank_name(job_rank), what, detail);
}

void Mesh::close_connections() {
  try {
    if (context_) context_->closeConnections();
  } catch (const std::exception&) {
  }
}

void Mesh::fail(int peer, const std::string& what, const std::string& detail) {
  const int job_rank = group_.job_rank(peer);
  state_.fail(job_rank, judge(job_rank, what, detail));
}

}  // namespace kolo::comm::gloo_impl
