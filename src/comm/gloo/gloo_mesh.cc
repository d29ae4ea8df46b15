#include "comm/gloo/gloo_mesh.h"

#include <arpa/inet.h>

#include <algorithm>
#include <netdb.h>
#include <unistd.h>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "comm/gloo/gloo_store.h"
#include "common/logging.h"
#include "kolo/error.h"

namespace kolo::comm::gloo_impl {
namespace {

std::string local_hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// True when `host` resolves to a loopback address only: peers on other hosts
// could never connect to it.
bool resolves_to_loopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return false;
  bool loopback = true;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) != 127) loopback = false;
    } else if (ai->ai_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) loopback = false;
    }
  }
  freeaddrinfo(result);
  return loopback;
}

std::shared_ptr<::gloo::transport::Device> make_device(const GlooNetwork& network) {
  ::gloo::transport::tcp::attr attr;
  std::string source;
  if (!network.host_addr.empty()) {
    attr.hostname = network.host_addr;
    source = "KOLO_HOST_ADDR=" + network.host_addr;
  } else if (!network.iface.empty()) {
    attr.iface = network.iface;
    source = "KOLO_IFACE=" + network.iface;
  } else if (network.all_local) {
    attr.hostname = "127.0.0.1";
    source = "loopback";
  } else {
    attr.hostname = local_hostname();
    source = "this host's name '" + attr.hostname + "'";
    if (resolves_to_loopback(attr.hostname))
      throw InvalidArgumentError("the job spans several hosts but " + source +
                                 " resolves to a loopback address that other hosts cannot reach; set "
                                 "KOLO_IFACE to the network interface to use, or KOLO_HOST_ADDR to this host's address");
  }
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw InvalidArgumentError("cannot use " + source + " for kolo's TCP connections: " + e.what());
  }
}

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

}  // namespace

Mesh::Mesh(const GlooGroup& group, store::StoreClient& store, const GlooNetwork& network,
           const CommunicatorOptions& options)
    : group_(group),
      rank_(group.rank),
      size_(group.size),
      peer_timeout_(options.peer_timeout),
      verdict_(&store, group.verdict_prefix.empty() ? group.key_prefix + "failure/" : group.verdict_prefix,
               group.job_rank(group.rank)) {
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
  KOLO_LOG(Debug, "gloo: rank " << rank_ << " of " << size_ << " connected (" << device->str() << ")");
}

Mesh::~Mesh() = default;

std::unique_ptr<::gloo::transport::UnboundBuffer> Mesh::make_buffer(void* data, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  if (aborted_) throw ShutdownError(abort_reason_);
  auto buffer = context_->createUnboundBuffer(data, bytes);
  live_.insert(buffer.get());
  return buffer;
}

void Mesh::release_buffer(::gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard lock(mutex_);
  live_.erase(buffer);
}

void Mesh::check_usable() {
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  if (aborted_) throw ShutdownError(abort_reason_);
}

void Mesh::throw_interrupted() {
  check_usable();
  throw ShutdownError("gloo: a wait was interrupted");  // not reached: only abort() interrupts
}

void Mesh::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = reason;
  for (auto* buffer : live_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

std::string Mesh::judge(int job_rank, const std::string& what, const std::string& detail) const {
  const std::string who = "rank " + std::to_string(job_rank);
  if (contains(detail, "Timed out"))
    return who + " made no progress for " + std::to_string(peer_timeout_.count() / 1000.0).substr(0, 5) +
           " s during " + what + " (it stalled or its host is unreachable; KOLO_PEER_TIMEOUT sets the limit)";
  return "lost the connection to " + who + " during " + what +
         " (the process exited or failed, or its host is unreachable): " + detail;
}

std::exception_ptr Mesh::record_failure(int job_rank, const std::string& message) {
  auto [culprit, verdict] = verdict_.claim(job_rank, message);
  auto error = std::make_exception_ptr(PeerFailureError(culprit, verdict));
  {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = error;
    error = failure_;
  }
  try {
    if (context_) context_->closeConnections();
  } catch (const std::exception&) {
  }
  return error;
}

void Mesh::fail(int peer, const std::string& what, const std::string& detail) {
  {
    std::lock_guard lock(mutex_);
    if (failure_) std::rethrow_exception(failure_);
    // After abort() the peers may be closing too: that is a shutdown, not a failure.
    if (aborted_) throw ShutdownError(abort_reason_);
  }
  const int job_rank = group_.job_rank(peer);
  std::rethrow_exception(record_failure(job_rank, judge(job_rank, what, detail)));
}

void Mesh::fail_from_outside(int job_rank, const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (failure_) return;
  }
  record_failure(job_rank, message);
}

void Mesh::fail_locally(std::exception_ptr error) {
  std::string what = "unknown error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = std::make_exception_ptr(ShutdownError("kolo's gloo communicator stopped after an error: " + what));
  }
  try {
    if (context_) context_->closeConnections();
  } catch (const std::exception&) {
  }
  std::rethrow_exception(error);
}

}  // namespace kolo::comm::gloo_impl
