// Every validation error reaches every rank with the same message, and the job
// goes on: each case is followed by a successful operation.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "harness/agreement.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

// Runs `op` on this rank, expects it to throw `Expected` with `fragment` in the
// message, checks that every rank got the same message, then proves the job still
// works with an allreduce.
template <typename Expected>
void expect_everywhere(const std::string& what, const std::function<void()>& op, const std::string& fragment) {
  std::string message;
  try {
    op();
    ADD_FAILURE() << what << ": no error on rank " << kolo::rank();
  } catch (const Expected& e) {
    message = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong error type on rank " << kolo::rank() << ": " << e.what();
  }
  EXPECT_NE(message.find(fragment), std::string::npos) << what << ": message was: " << message;
  expect_same_everywhere(fnv1a(message), what + " message");
  float x = 1.0f;
  kolo::allreduce(make_tensor(&x, 1), {.op = ReduceOp::Sum, .name = "after:" + what});
  EXPECT_EQ(x, static_cast<float>(kolo::size())) << "allreduce after " << what;
}

void all_error_cases(int rank) {
  const int n = kolo::size();
  std::vector<float> f(6, 1.0f);
  std::vector<std::int32_t> i32(6, 1);

  expect_everywhere<MismatchError>("shapes", [&] {
    Shape shape = rank == 0 ? Shape{2, 3} : Shape{3, 2};  // same element count
    kolo::allreduce(Tensor{f.data(), DataType::Float32, shape}, {.name = "shapes"});
  }, "Mismatched shapes");

  expect_everywhere<MismatchError>("dtypes", [&] {
    Tensor t = rank == 0 ? Tensor{f.data(), DataType::Float32, {6}} : Tensor{i32.data(), DataType::Int32, {6}};
    kolo::allreduce(t, {.name = "dtypes"});
  }, "Mismatched data types");

  expect_everywhere<MismatchError>("ops", [&] {
    Tensor t{f.data(), DataType::Float32, {6}};
    if (rank == 0) kolo::allreduce(t, {.name = "ops"});
    else kolo::broadcast(t, 0, {.name = "ops"});
  }, "Mismatched operations");

  expect_everywhere<MismatchError>("reduce ops", [&] {
    kolo::allreduce(Tensor{f.data(), DataType::Float32, {6}},
                    {.op = rank == 0 ? ReduceOp::Sum : ReduceOp::Max, .name = "reduce-ops"});
  }, "Mismatched reduce operations");

  expect_everywhere<MismatchError>("scale factors", [&] {
    kolo::allreduce(Tensor{f.data(), DataType::Float32, {6}}, {.prescale = rank == 0 ? 1.0 : 2.0, .name = "prescale"});
  }, "Mismatched prescale");

  expect_everywhere<MismatchError>("root ranks", [&] {
    kolo::broadcast(Tensor{f.data(), DataType::Float32, {6}}, rank == 0 ? 0 : 1, {.name = "roots"});
  }, "Mismatched root ranks");

  expect_everywhere<InvalidArgumentError>("invalid root", [&] {
    kolo::broadcast(Tensor{f.data(), DataType::Float32, {6}}, n + 3, {.name = "bad-root"});
  }, "Invalid root rank");

  expect_everywhere<MismatchError>("allgather other dims", [&] {
    Shape shape = rank == 0 ? Shape{1, 6} : Shape{2, 3};
    kolo::allgather(Tensor{f.data(), DataType::Float32, shape}, {.name = "gather-dims"});
  }, "all but the first dimension");

  expect_everywhere<InvalidArgumentError>("scalar allgather", [&] {
    kolo::allgather(Tensor{f.data(), DataType::Float32, {}}, {.name = "gather-scalar"});
  }, "scalar");

  expect_everywhere<InvalidArgumentError>("splits count", [&] {
    kolo::alltoall(Tensor{f.data(), DataType::Float32, {6}}, std::vector<std::int64_t>(n + 1, 0), {.name = "splits-count"});
  }, "splits given");

  expect_everywhere<InvalidArgumentError>("splits sum", [&] {
    std::vector<std::int64_t> splits(n, 1);  // sums to n, not 6 (n <= 4 here)
    kolo::alltoall(Tensor{f.data(), DataType::Float32, {6}}, splits, {.name = "splits-sum"});
  }, "splits sum");

  expect_everywhere<InvalidArgumentError>("negative split", [&] {
    std::vector<std::int64_t> splits(n, 0);
    splits[0] = 7;
    splits[n - 1] = -1;
    kolo::alltoall(Tensor{f.data(), DataType::Float32, {6}}, splits, {.name = "splits-negative"});
  }, "negative split");

  // {MAX, MAX, 8} wrapped around to 6, the first dimension, and passed.
  expect_everywhere<InvalidArgumentError>("splits overflow", [&] {
    std::vector<std::int64_t> splits(n, 0);
    splits[0] = splits[1] = INT64_MAX;
    if (n > 2) splits[2] = 8;
    kolo::alltoall(Tensor{f.data(), DataType::Float32, {6}}, splits, {.name = "splits-overflow"});
  }, "int64");

  // Ranks whose groups have different members: the members only some ranks
  // submitted used to wait forever, on one rank or on all of them.
  auto grouped = [&](int count, const std::string& name) {
    std::vector<std::vector<float>> data(count, std::vector<float>(2, 1.0f));
    std::vector<Tensor> tensors;
    for (auto& d : data) tensors.push_back(make_tensor(d.data(), 2));
    kolo::grouped_allreduce(tensors, {.name = name});
  };
  expect_everywhere<MismatchError>("group sizes growing with rank", [&] { grouped(2 + rank, "group-up"); },
                                   "Mismatched group sizes");
  expect_everywhere<MismatchError>("group sizes shrinking with rank", [&] { grouped(1 + n - rank, "group-down"); },
                                   "Mismatched group sizes");
  expect_everywhere<MismatchError>("grouped on one rank only", [&] {
    if (rank == 0) return grouped(2, "group-mixed");
    float x = 1.0f;
    kolo::allreduce(make_tensor(&x, 1), {.name = "group-mixed.0"});
  }, "Mismatched groups");

  expect_everywhere<InvalidArgumentError>("scale on bool", [&] {
    std::vector<std::uint8_t> b(6, 1);
    kolo::allreduce(Tensor{b.data(), DataType::Bool, {6}},
                    {.op = ReduceOp::Sum, .postscale = 2.0, .name = "bool-scale"});
  }, "need a numeric tensor, not bool");

  expect_everywhere<InvalidArgumentError>("bool average", [&] {
    std::vector<std::uint8_t> b(6, 1);
    kolo::allreduce(Tensor{b.data(), DataType::Bool, {6}}, {.op = ReduceOp::Average, .name = "bool-avg"});
  }, "not defined for bool");

  expect_everywhere<InvalidArgumentError>("reducescatter max", [&] {
    kolo::reducescatter(Tensor{f.data(), DataType::Float32, {6}}, ReduceOp::Max, {.name = "rs-max"});
  }, "supports sum and average");
}

TEST(CollectiveErrors, ReachEveryRankAndTheJobGoesOn) {
  for (int n : {2, 3}) run_ranks(n, [](int rank) {
      kolo::init();
      all_error_cases(rank);
      kolo::shutdown();
    });
}

TEST(CollectiveErrors, NameInFlightFailsAtOnceLocally) {
  run_ranks(2, [](int rank) {
    kolo::init();
    float a = 1.0f, b = 2.0f;
    if (rank == 0) {
      Handle first = kolo::allreduce_async(make_tensor(&a, 1), {.op = ReduceOp::Sum, .name = "dup"});
      EXPECT_THROW(kolo::allreduce_async(make_tensor(&b, 1), {.op = ReduceOp::Sum, .name = "dup"}), InvalidArgumentError);
      kolo::barrier({.name = "dup-submitted"});
      first.wait();
    } else {
      kolo::barrier({.name = "dup-submitted"});
      kolo::allreduce(make_tensor(&a, 1), {.op = ReduceOp::Sum, .name = "dup"});
    }
    EXPECT_EQ(a, 2.0f);
    // The name is free again once the operation has completed.
    kolo::allreduce(make_tensor(&b, 1), {.op = ReduceOp::Sum, .name = "dup"});
    EXPECT_EQ(b, 4.0f);
    kolo::shutdown();
  });
}

TEST(CollectiveErrors, LocalArgumentErrorsThrowAtOnce) {
  run_ranks(1, [](int) {
    kolo::init();
    float x[4] = {};
    double y[4] = {};
    EXPECT_THROW(kolo::allreduce(Tensor{nullptr, DataType::Float32, {3}}), InvalidArgumentError);
    EXPECT_THROW(kolo::allreduce(Tensor{x, DataType::Float32, {-1}}), InvalidArgumentError);
    EXPECT_THROW(kolo::allreduce(Tensor{x, static_cast<DataType>(42), {1}}), InvalidArgumentError);
    EXPECT_THROW(kolo::allreduce(make_tensor(x, 4), make_tensor(y, 4)), InvalidArgumentError);
    EXPECT_THROW(kolo::allreduce(make_tensor(x, 4), {.op = static_cast<ReduceOp>(9)}), InvalidArgumentError);
    EXPECT_THROW(kolo::grouped_allreduce(std::span<const Tensor>{}), InvalidArgumentError);
    // NaN was sent, and each rank told it disagreed with itself ("rank 0 submitted
    // nan, rank 0 submitted nan").
    EXPECT_THROW(kolo::allreduce(make_tensor(x, 4), {.prescale = std::nan("")}), InvalidArgumentError);
    EXPECT_THROW(kolo::allreduce(make_tensor(x, 4), {.postscale = INFINITY}), InvalidArgumentError);
    Tensor t = make_tensor(x, 4);
    EXPECT_THROW(kolo::grouped_allreduce({&t, 1}, {.prescale = std::nan("")}), InvalidArgumentError);
    kolo::shutdown();
  }, {.use_store = false});
}

// A NUL byte in an operation's name ended the message there (what() is read as
// a C string): the local error and the coordinator's show it, as \x00.
TEST(CollectiveErrors, ANulByteInANameIsShownInTheMessage) {
  run_ranks(2, [](int rank) {
    kolo::init();
    const std::string name("grad\0layer1", 11);
    try {
      kolo::allreduce(Tensor{nullptr, DataType::Float32, {3}}, {.name = name});
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("'grad\\x00layer1' has null data"), std::string::npos) << e.what();
    }
    std::vector<float> f(6, 1.0f);
    expect_everywhere<MismatchError>("a name with a NUL byte", [&] {
      Shape shape = rank == 0 ? Shape{2, 3} : Shape{3, 2};
      kolo::allreduce(Tensor{f.data(), DataType::Float32, shape}, {.name = name});
    }, "grad\\x00layer1");
    kolo::shutdown();
  });
}

// Arguments this rank alone can judge, past what a request can carry or a size
// can count: they used to break the coordinator's message for every rank (a name
// past 4096 bytes), or wrap around (an element count past int64). They fail the
// call on the rank that made it, and the job goes on.
TEST(CollectiveErrors, OversizedArgumentsFailTheCallAndTheJobGoesOn) {
  run_ranks(2, [](int) {
    kolo::init();
    float x[8] = {};
    auto expect_invalid = [](const char* what, const std::function<void()>& call, const std::string& fragment) {
      try {
        call();
        ADD_FAILURE() << what << ": no error";
      } catch (const InvalidArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << what << ": " << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": wrong error: " << e.what();
      }
      float y = 1.0f;
      kolo::allreduce(make_tensor(&y, 1), {.op = ReduceOp::Sum, .name = std::string("after ") + what});
      EXPECT_EQ(y, 2.0f) << "allreduce after " << what;
    };
    const std::string long_name(5000, 'n');
    expect_invalid("long allreduce name", [&] { kolo::allreduce(make_tensor(x, 1), {.name = long_name}); },
                   "name's length");
    expect_invalid("long async name", [&] { kolo::allreduce_async(make_tensor(x, 1), {.name = long_name}).wait(); },
                   "name's length");
    expect_invalid("long broadcast name", [&] { kolo::broadcast(make_tensor(x, 1), 0, {.name = long_name}); },
                   "name's length");
    expect_invalid("long group name", [&] {
      Tensor t = make_tensor(x, 1);
      kolo::grouped_allreduce({&t, 1}, {.name = long_name});
    }, "length");
    expect_invalid("long barrier name", [&] { kolo::barrier({.name = long_name}); }, "name's length");
    expect_invalid("too many dimensions", [&] {
      kolo::allreduce(Tensor{x, DataType::Float32, Shape(65, 1)}, {.name = "dims"});
    }, "dimensions");
    expect_invalid("element count past int64", [&] {
      kolo::allgather(Tensor{x, DataType::Float32, {(std::int64_t{1} << 62) + 1, 4}}, {.name = "huge"});
    }, "int64");
    expect_invalid("rows past int64 in an empty tensor", [&] {
      kolo::allgather(Tensor{x, DataType::Float32, {0, std::int64_t{1} << 62, 4}}, {.name = "huge-rows"});
    }, "int64");
    expect_invalid("Buffer of a negative dimension", [] { Buffer b(DataType::Float32, {-1}); }, "negative");
    kolo::shutdown();
  }, {.timeout = std::chrono::seconds(60)});
}

TEST(CollectiveErrors, ApiBeforeInitAndAfterShutdown) {
  run_ranks(1, [](int) {
    float x = 1.0f;
    EXPECT_FALSE(kolo::is_initialized());
    EXPECT_THROW(kolo::allreduce(make_tensor(&x, 1)), ShutdownError);
    EXPECT_THROW(kolo::rank(), ShutdownError);
    kolo::init();
    EXPECT_THROW(kolo::init(), InvalidArgumentError);
    kolo::shutdown();
    kolo::shutdown();  // idempotent
    EXPECT_THROW(kolo::allreduce(make_tensor(&x, 1)), ShutdownError);
    kolo::init();  // a new session works
    kolo::allreduce(make_tensor(&x, 1));
    EXPECT_EQ(x, 1.0f);
    kolo::shutdown();
  }, {.use_store = false});
}

}  // namespace
}  // namespace kolo::testing
