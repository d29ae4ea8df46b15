// The TCP communicator's connections and the progress loop that moves its data.
//
// DESIGN. Every collective runs on the calling thread (the engine's background
// thread): there is no progress thread, so a message costs no thread wake-up,
// only the system calls that move it. Batches of transfers (direct::Batch) queue
// on each peer's connection in posting order; waiting drives every connection
// with non-blocking readv/sendmsg, gathering several queued messages per call,
// spins for a moment (spin_time) when nothing moves, and only then sleeps in
// poll(), as NCCL's socket transport does.
//
// FRAMES. Every message carries a 16-byte header (a magic word, its sequence
// number on that connection, its length). A header that does not match what the
// receiver posted means the stream is broken: the sender is declared failed.
//
// FAILURE and ABORT work as in gloo_mesh.h: the first error (a connection closed
// or reset, a peer that moves no byte for the peer timeout, a malformed frame)
// goes to the job-wide verdict, every connection is reset at once so that the
// peers waiting on this rank wake, and the call throws PeerFailureError with the
// verdict. abort() only sets a flag and wakes poll() through an eventfd; the
// connections close softly when the mesh is destroyed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/direct/failure_state.h"
#include "comm/direct/point_to_point.h"
#include "comm/mesh/mesh_communicator.h"
#include "net/socket.h"
#include "store/store.h"

namespace kolo::comm::tcp {

struct FrameHeader {
  std::uint32_t magic = 0;
  std::uint32_t sequence = 0;
  std::uint64_t bytes = 0;
};

// One message to or from one peer. `bytes`: its length, or for a receive of
// unknown length its capacity (the sender's length lands in *got; bytes past the
// capacity are read into `overflow`, so the stream stays in step; the capacity
// past the message's length may be overwritten).
struct Transfer {
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  bool any_length = false;
  std::size_t* got = nullptr;
  std::vector<std::byte> overflow;
  FrameHeader header;
  std::uint32_t expected_sequence = 0;  // receives: what the sender's header must say
  std::size_t header_done = 0;
  std::size_t done = 0;
  std::size_t* unfinished = nullptr;  // the batch's count, decremented on completion
};

// KOLO_TCP_SPIN_US (0 to 1,000,000; default 50): how long a wait spins before it
// sleeps in poll().
std::chrono::nanoseconds spin_from_env();

class Mesh final : public direct::Links {
 public:
  // `secret`: the job's, which every connection must prove (tcp_handshake.h).
  Mesh(const MeshGroup& group, store::StoreClient& store, const MeshNetwork& network,
       const CommunicatorOptions& options, const std::string& secret);
  ~Mesh() override;
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void check_usable() override { state_.check_usable(); }
  std::unique_ptr<direct::Batch> batch(const char* what) override;
  void progress() override;

  void post_send(int peer, Transfer& t);
  void post_recv(int peer, Transfer& t);
  // Drives the connections until `unfinished` reaches 0. `patient`: a peer with
  // only receives queued is not timed out until some peer's bytes arrive (a
  // parameter server so awaits the next push, which may be a whole computation
  // away); from then on every peer's clock runs from that moment.
  void wait(const std::size_t& unfinished, const char* what, bool patient = false);
  // After abort(), at an orderly end: `bytes` of `data` as one last frame to
  // every connected peer, written straight to the sockets within `limit`. Best
  // effort and silent: nothing is sent after a failure or with transfers queued,
  // and a peer already gone is skipped.
  void send_final(const void* data, std::size_t bytes, std::chrono::milliseconds limit);
  // A batch is gone with transfers still queued (an error unwound it): the
  // streams are out of step, so everything queued is dropped and the mesh closed.
  void break_off();

  // Whether this host's ranks of the group outnumber its cores, so that every
  // wait yields the core between its polls. Elsewhere only the engine's thread
  // yields, while the application computes beside it (common/spin_policy.h).
  bool ranks_share_cores() const { return share_cores_; }

  void fail_from_outside(int job_rank, const std::string& message) { state_.fail_from_outside(job_rank, message); }
  [[noreturn]] void fail_locally(std::exception_ptr error) { state_.fail_locally(error); }
  void abort(const std::string& reason);

 private:
  struct Fifo {
    std::vector<Transfer*> items;
    std::size_t head = 0;
    bool empty() const { return head == items.size(); }
    std::size_t size() const { return items.size() - head; }
    Transfer& operator[](std::size_t i) const { return *items[head + i]; }
    void push(Transfer* t) { items.push_back(t); }
    void pop() {
      if (++head == items.size()) items.clear(), head = 0;
    }
  };
  struct Peer {
    net::Fd fd;
    Fifo sends, recvs;
    std::uint32_t send_sequence = 0, recv_sequence = 0;
    std::chrono::steady_clock::time_point last_progress;
    // Bytes read past the end of a message of unknown length (its header and
    // payload come in one readv, see progress_recvs), for the receives after it.
    std::vector<std::byte> ahead;
    std::size_t ahead_head = 0;
  };

  // The peer's queues, marked busy.
  Peer& queue_on(int peer);
  bool progress_sends(int peer, const char* what);
  bool progress_recvs(int peer, const char* what);
  // Takes `n` received bytes into the peer's queued receives, in order.
  void consume_received(int peer, std::size_t n, const char* what);
  // Copies the peer's read-ahead bytes into its queued receives, never past the
  // end of a message; true when some moved.
  bool deliver_ahead(int peer, const char* what);
  // One pass over every busy connection; true when bytes moved.
  bool progress_all(const char* what);
  // Sleeps until a connection can move, abort() fires, or a peer times out
  // (while `patient`, only peers with sends queued do).
  void block(const char* what, bool patient);
  void touch(Peer& p);
  [[noreturn]] void fail(int peer, const std::string& message);
  void drop_queued();
  void close_all_hard();

  const MeshGroup group_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds peer_timeout_;
  const std::chrono::microseconds wake_slice_;
  const std::chrono::nanoseconds spin_time_;
  // This host's ranks of the group outnumber its cores: a spinning wait yields.
  bool share_cores_ = true;
  std::vector<Peer> peers_;
  std::vector<int> busy_;  // peers with queued transfers
  std::uint64_t received_ = 0;  // bytes received so far, for patient waits
  net::Fd wake_;           // eventfd written by abort()
  std::atomic<bool> aborted_{false};
  direct::FailureState state_;
};

// A direct::Batch on the mesh; also receives of unknown length (recv_any).
class Exchange final : public direct::Batch {
 public:
  Exchange(Mesh& mesh, const char* what) : mesh_(mesh), what_(what) {}
  ~Exchange() override;
  void send(int peer, const void* data, std::size_t bytes) override;
  void recv(int peer, void* data, std::size_t bytes) override;
  // A message of at most `capacity` bytes (its length lands in *got; bytes past
  // the capacity are dropped). Posted even when empty.
  void recv_any(int peer, void* data, std::size_t capacity, std::size_t* got);
  // Sends `bytes` even when 0, matching a recv_any.
  void send_always(int peer, const void* data, std::size_t bytes);
  void wait() override;
  // wait(), with no timeout until some peer's bytes arrive (Mesh::wait's patience).
  void wait_patiently();

 private:
  Transfer& add(void* data, std::size_t bytes);

  Mesh& mesh_;
  const char* what_;
  std::deque<Transfer> transfers_;  // stable addresses while queued
  std::size_t unfinished_ = 0;
};

}  // namespace kolo::comm::tcp
