#include "comm/gloo/gloo_exchange.h"

#include <exception>

#include "kolo/error.h"

namespace kolo::comm::gloo_impl {

Exchange::Exchange(Mesh& mesh, const char* what) : mesh_(mesh), what_(what), slot_(mesh.next_slot()) {}

Exchange::~Exchange() {
  for (auto& t : transfers_) mesh_.release_buffer(t.buffer.get());
}

void Exchange::send(int peer, const void* data, std::size_t bytes) {
  // gloo reads a send buffer only; its interface is not const-correct.
  post(peer, true, const_cast<void*>(data), bytes);
}

void Exchange::recv(int peer, void* data, std::size_t bytes) { post(peer, false, data, bytes); }

void Exchange::post(int peer, bool is_send, void* data, std::size_t bytes) {
  if (bytes == 0) return;
  auto buffer = mesh_.make_buffer(data, bytes);
  auto* raw = buffer.get();
  transfers_.push_back(Transfer{peer, is_send, std::move(buffer)});
  try {
    if (is_send) {
      raw->send(peer, slot_);
    } else {
      raw->recv(peer, slot_);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // A connection that already failed refuses new transfers at once.
    mesh_.fail(peer, what_, e.what());
  }
}

void Exchange::wait() {
  for (auto& t : transfers_) {
    bool completed = false;
    std::string lost;
    try {
      completed = mesh_.wait(*t.buffer, t.is_send, t.peer, lost);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      mesh_.fail(t.peer, what_, e.what());
    }
    if (completed) continue;
    if (!lost.empty()) mesh_.fail(t.peer, what_, lost);
    mesh_.throw_interrupted();
  }
}

}  // namespace kolo::comm::gloo_impl
