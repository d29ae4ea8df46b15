// The loopback TCP limit of this machine, which bounds any TCP collective here:
// 8-byte ping-pong latency over one connection, and the throughput of 1 MiB
// messages over 1 to N connections in one direction, each end of each
// connection driven by its own thread.
//
//   tcp_loopback [--streams 1,2,4] [--seconds 2]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// A connected pair of loopback sockets.
std::pair<int, int> socket_pair() {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die("listen");
  int a = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(a, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("connect");
  int b = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  int one = 1;
  ::setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return {a, b};
}

void write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) die("send");
    p += w, n -= static_cast<std::size_t>(w);
  }
}

void read_all(int fd, char* p, std::size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) die("recv");
    p += r, n -= static_cast<std::size_t>(r);
  }
}

double ping_pong_us(double seconds) {
  auto [a, b] = socket_pair();
  std::atomic<bool> stop{false};
  std::thread echo([&, fd = b] {
    char m[8];
    while (true) {
      ssize_t r = ::recv(fd, m, sizeof m, MSG_WAITALL);
      if (r <= 0) return;
      write_all(fd, m, sizeof m);
    }
  });
  char m[8] = {};
  long rounds = 0;
  const auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    write_all(a, m, sizeof m);
    read_all(a, m, sizeof m);
    ++rounds;
  }
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / rounds;
  ::close(a);
  echo.join();
  ::close(b);
  return us / 2;  // one way
}

// GB/s summed over `streams` connections, each sending one way.
double throughput(int streams, double seconds) {
  constexpr std::size_t kMessage = 1 << 20;
  std::vector<std::thread> threads;
  std::atomic<long> bytes{0};
  std::vector<std::pair<int, int>> pairs;
  for (int s = 0; s < streams; ++s) pairs.push_back(socket_pair());
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (auto [a, b] : pairs) {
    threads.emplace_back([&, fd = a] {
      std::vector<char> buf(kMessage, 1);
      while (Clock::now() < end) {
        write_all(fd, buf.data(), kMessage);
        bytes += kMessage;
      }
      ::shutdown(fd, SHUT_WR);
    });
    threads.emplace_back([fd = b] {
      std::vector<char> buf(kMessage);
      while (::recv(fd, buf.data(), kMessage, 0) > 0) {
      }
    });
  }
  const auto start = Clock::now();
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto [a, b] : pairs) ::close(a), ::close(b);
  return static_cast<double>(bytes.load()) / elapsed / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string streams = "1,2,4";
  double seconds = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--streams") == 0) streams = argv[i + 1];
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
  }
  std::printf("loopback 8 B one-way latency (ping-pong / 2): %.2f us\n", ping_pong_us(seconds));
  for (std::size_t at = 0; at < streams.size();) {
    const std::size_t comma = streams.find(',', at);
    const int n = std::atoi(streams.substr(at, comma - at).c_str());
    std::printf("loopback 1 MiB messages, %d connection(s), one way: %.2f GB/s in total\n", n,
                throughput(n, seconds));
    at = comma == std::string::npos ? streams.size() : comma + 1;
  }
  return 0;
}
