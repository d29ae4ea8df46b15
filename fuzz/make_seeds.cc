// Writes the seed corpora of the binary fuzzers, made with kolo's own encoders so
// that they stay valid as the formats change: OUTDIR/<fuzzer>/<name> per seed.
// The text fuzzers' seeds are checked in under fuzz/corpus/.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "comm/tcp/tcp_handshake.h"
#include "common/wire.h"
#include "engine/messages.h"
#include "engine/stall_inspector.h"
#include "remote/remote_protocol.h"
#include "store/store_messages.h"

namespace {

namespace fs = std::filesystem;
namespace proto = kolo::store::protocol;
using kolo::engine::OpType;
using Bytes = std::vector<std::uint8_t>;

void write(const fs::path& dir, const std::string& name, const Bytes& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void engine_seeds(const fs::path& out) {
  kolo::engine::Request allreduce{.name = "grad.w", .shape = {4, 3}};
  kolo::engine::Request alltoall{.name = "a2a", .op = OpType::Alltoall, .dtype = kolo::DataType::Int64,
                                 .shape = {6}, .splits = {1, 2, 3}, .group = "g", .group_size = 2};
  kolo::engine::Request broadcast{.name = "b", .op = OpType::Broadcast, .root = 1};
  write(out / "engine_requests_fuzzer", "empty", kolo::engine::encode_requests({}));
  write(out / "engine_requests_fuzzer", "one", kolo::engine::encode_requests({allreduce}));
  write(out / "engine_requests_fuzzer", "three", kolo::engine::encode_requests({allreduce, alltoall, broadcast}));

  kolo::engine::Response fused{.names = {"a", "b"}, .sizes = {3, 4}, .shape = {3}};
  kolo::engine::Response error{.op = OpType::Allgather, .names = {"x"}, .error_kind = kolo::engine::ErrorKind::Mismatch,
                               .error = "shape differs", .rank_rows = {1, 2}};
  kolo::engine::Response join{.op = OpType::Join, .last_joined = 2};
  write(out / "engine_responses_fuzzer", "empty", kolo::engine::encode_responses({}));
  write(out / "engine_responses_fuzzer", "one", kolo::engine::encode_responses({fused}));
  write(out / "engine_responses_fuzzer", "three", kolo::engine::encode_responses({fused, error, join}));
}

void stall_seeds(const fs::path& out) {
  kolo::engine::PendingReport waiting{.joined = false, .pending = {{"grad.w", 61000}, {"grad.b", 5}}};
  kolo::engine::PendingReport joined{.joined = true, .pending = {}};
  write(out / "stall_report_fuzzer", "empty", kolo::engine::encode_report({}));
  write(out / "stall_report_fuzzer", "waiting", kolo::engine::encode_report(waiting));
  write(out / "stall_report_fuzzer", "joined", kolo::engine::encode_report(joined));
}

void store_seeds(const fs::path& out) {
  const std::vector<proto::Request> requests = {
      {.op = proto::Opcode::Set, .keys = {"init/0/rank/0"}, .value = {1, 2, 3}},
      {.op = proto::Opcode::Get, .keys = {"init/0/rank/1"}, .timeout_ms = 1000},
      {.op = proto::Opcode::Add, .keys = {"counter"}, .delta = 1},
      {.op = proto::Opcode::Wait, .keys = {"a", "b"}, .timeout_ms = 5},
      {.op = proto::Opcode::Check, .keys = {"a"}},
      {.op = proto::Opcode::Delete, .keys = {"a"}},
  };
  Bytes stream;
  for (const auto& request : requests) {
    const Bytes frame = proto::encode_request_frame(request);
    write(out / "store_requests_fuzzer", "op" + std::to_string(static_cast<int>(request.op)), frame);
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  // Parks on "a" and "b", then sets them: exercises waking.
  for (const char* key : {"a", "b"}) {
    const Bytes frame = proto::encode_request_frame({.op = proto::Opcode::Set, .keys = {key}, .value = {}});
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  write(out / "store_requests_fuzzer", "stream", stream);

  auto reply = [](proto::Status status, const std::function<void(kolo::wire::Writer&)>& fields) {
    kolo::wire::Writer w;
    w.put(status);
    if (fields) fields(w);
    return w.take();
  };
  const fs::path replies = out / "store_replies_fuzzer";
  write(replies, "ok", reply(proto::Status::Ok, {}));
  write(replies, "timeout", reply(proto::Status::Timeout, {}));
  write(replies, "value", reply(proto::Status::Ok, [](auto& w) { w.put_bytes(Bytes{7, 8, 9}); }));
  write(replies, "integer", reply(proto::Status::Ok, [](auto& w) { w.template put<std::int64_t>(42); }));
  write(replies, "flag", reply(proto::Status::Ok, [](auto& w) { w.template put<std::uint8_t>(1); }));
  write(replies, "error", reply(proto::Status::Error, [](auto& w) { w.put_string("not an 8-byte integer"); }));
}

void remote_seeds(const fs::path& out) {
  kolorun::RemoteSpec spec;
  spec.rank = 3;
  spec.label = "rank 3 on host h1";
  spec.working_directory = "/tmp";
  spec.argv = {"./train", "--epochs", "2"};
  spec.env = {"KOLO_RANK=3", "KOLO_SECRET=00ff"};
  const std::string encoded = kolorun::encode_remote_spec(spec);
  // The first byte says where the fuzzer cuts the stream in two; then control bytes.
  Bytes seed = {7};
  seed.insert(seed.end(), encoded.begin(), encoded.end());
  seed.push_back(0);
  seed.push_back(15);
  write(out / "remote_spec_fuzzer", "spec", seed);
}

// A challenge nonce, then a genuine Hello for it.
void handshake_seeds(const fs::path& out) {
  kolo::comm::tcp::Nonce challenge{}, nonce;
  for (std::size_t i = 0; i < challenge.size(); ++i) challenge[i] = static_cast<std::uint8_t>(i * 7);
  const kolo::comm::tcp::HandshakeKeys keys{"the job's secret", "comm/0/tcp/world/"};
  const auto hello = kolo::comm::tcp::hello_message(keys, kolo::comm::tcp::challenge_message(challenge), 1, 0, &nonce);
  Bytes seed(challenge.begin(), challenge.end());
  seed.insert(seed.end(), hello.begin(), hello.end());
  write(out / "tcp_handshake_fuzzer", "hello", seed);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  engine_seeds(out);
  stall_seeds(out);
  store_seeds(out);
  remote_seeds(out);
  handshake_seeds(out);
  return 0;
}
