// The TCP limit of this machine, which bounds any TCP collective here: 8-byte
// ping-pong latency over one connection, and the throughput of 1 MiB messages
// over 1 to N connections, one way or both ways at once (as an allreduce moves
// data): each end of each connection driven by its own thread, or with --duplex
// one thread per end for all its connections, sending and receiving at once with
// poll(), as a rank's one thread moves an allreduce.
//
//   tcp_loopback [--streams 1,2,4] [--seconds 2] [--both-ways | --duplex] [--no-latency]
//                [--netns CLIENT_NS,SERVER_NS --address SERVER_ADDRESS]
//
// --streams '' measures the latency alone, --no-latency the throughput alone.
//
// Over loopback by default. With --netns the server end of every connection is
// made inside network namespace SERVER_NS, listening on SERVER_ADDRESS, and the
// client end inside CLIENT_NS (bench/netns_hosts.py makes such "hosts"): one
// process, two namespaces, since a socket stays in the namespace it was made in
// whichever thread then uses it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
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

// Where the two ends live: loopback in this namespace, or two namespaces.
struct Ends {
  std::string client_ns, server_ns;
  in_addr server_address{htonl(INADDR_LOOPBACK)};
  std::string label = "loopback";
} ends;

// Moves the calling thread into network namespace `name` ("" : stays).
void enter_netns(const std::string& name) {
  if (name.empty()) return;
  int fd = ::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) die(("enter network namespace " + name).c_str());
  ::close(fd);
}

// A connected pair of sockets: first the client's end, then the server's.
std::pair<int, int> socket_pair() {
  enter_netns(ends.server_ns);
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr = ends.server_address;
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die("listen");
  enter_netns(ends.client_ns);
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

// GB/s summed over `streams` connections, each sending one way (client to
// server), or both ways at once: then the GB/s of each direction.
double throughput(int streams, double seconds, bool both_ways) {
  constexpr std::size_t kMessage = 1 << 20;
  std::vector<std::thread> threads;
  std::atomic<long> bytes{0};
  std::vector<std::pair<int, int>> pairs;
  for (int s = 0; s < streams; ++s) pairs.push_back(socket_pair());
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  auto sender = [&](int fd) {
    std::vector<char> buf(kMessage, 1);
    while (Clock::now() < end) {
      write_all(fd, buf.data(), kMessage);
      bytes += kMessage;
    }
    ::shutdown(fd, SHUT_WR);
  };
  auto receiver = [](int fd) {
    std::vector<char> buf(kMessage);
    while (::recv(fd, buf.data(), kMessage, 0) > 0) {
    }
  };
  for (auto [a, b] : pairs) {
    threads.emplace_back(sender, a);
    threads.emplace_back(receiver, b);
    if (both_ways) {
      threads.emplace_back(sender, b);
      threads.emplace_back(receiver, a);
    }
  }
  const auto start = Clock::now();
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto [a, b] : pairs) ::close(a), ::close(b);
  return static_cast<double>(bytes.load()) / elapsed / 1e9 / (both_ways ? 2 : 1);
}

// GB/s each way with both ends sending at once, each end one thread driving all
// of its `streams` connections (non-blocking, poll()).
double duplex_throughput(int streams, double seconds) {
  constexpr std::size_t kMessage = 1 << 20;
  std::vector<int> client_ends, server_ends;
  for (int s = 0; s < streams; ++s) {
    auto [a, b] = socket_pair();
    client_ends.push_back(a);
    server_ends.push_back(b);
  }
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::atomic<long> bytes{0};
  auto drive = [&](const std::vector<int>& fds) {
    std::vector<char> out(kMessage, 1), in(kMessage);
    std::vector<pollfd> polled;
    for (int fd : fds) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      polled.push_back({fd, POLLIN | POLLOUT, 0});
    }
    long sent = 0;
    std::size_t reading = fds.size();
    while (reading > 0) {
      if (Clock::now() >= end)
        for (auto& p : polled)
          if (p.events & POLLOUT) ::shutdown(p.fd, SHUT_WR), p.events &= ~POLLOUT;
      if (::poll(polled.data(), polled.size(), 100) < 0) die("poll");
      for (auto& p : polled) {
        if ((p.revents & POLLOUT) && (p.events & POLLOUT)) {
          const ssize_t w = ::send(p.fd, out.data(), kMessage, MSG_NOSIGNAL | MSG_DONTWAIT);
          if (w > 0) sent += w;
          else if (w < 0 && errno != EAGAIN) die("send");
        }
        if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && (p.events & POLLIN)) {
          const ssize_t r = ::recv(p.fd, in.data(), kMessage, MSG_DONTWAIT);
          if (r == 0) p.events &= ~POLLIN, --reading;
          else if (r < 0 && errno != EAGAIN) die("recv");
        }
      }
    }
    bytes += sent;
  };
  const auto start = Clock::now();
  std::thread server(drive, std::cref(server_ends));
  drive(client_ends);
  server.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  for (int fd : client_ends) ::close(fd);
  for (int fd : server_ends) ::close(fd);
  return static_cast<double>(bytes.load()) / elapsed / 1e9 / 2;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "tcp_loopback: %s\nusage: tcp_loopback [--streams 1,2,4] [--seconds 2] [--both-ways | --duplex] [--no-latency]\n"
               "                    [--netns CLIENT_NS,SERVER_NS --address SERVER_ADDRESS]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string streams = "1,2,4", netns, address;
  double seconds = 2;
  bool both_ways = false, duplex = false, latency = true;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--both-ways") {
      both_ways = true;
      continue;
    }
    if (flag == "--duplex") {
      duplex = true;
      continue;
    }
    if (flag == "--no-latency") {
      latency = false;
      continue;
    }
    if (i + 1 >= argc) usage(("no value after " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--streams") streams = value;
    else if (flag == "--seconds") seconds = std::atof(value);
    else if (flag == "--netns") netns = value;
    else if (flag == "--address") address = value;
    else usage(("unknown flag " + flag).c_str());
  }
  if (seconds <= 0) usage("--seconds needs a positive number");
  if (!netns.empty()) {
    const auto comma = netns.find(',');
    if (comma == std::string::npos || address.empty()) usage("--netns CLIENT_NS,SERVER_NS needs --address too");
    ends.client_ns = netns.substr(0, comma);
    ends.server_ns = netns.substr(comma + 1);
    if (::inet_pton(AF_INET, address.c_str(), &ends.server_address) != 1) usage("--address needs an IPv4 address");
    ends.label = ends.client_ns + " -> " + address;
  }
  const char* direction = duplex      ? "both ways at once, one thread per end, each way"
                          : both_ways ? "both ways at once, each way"
                                      : "one way";
  if (latency)
    std::printf("%s 8 B one-way latency (ping-pong / 2): %.2f us\n", ends.label.c_str(), ping_pong_us(seconds));
  for (std::size_t at = 0; at < streams.size();) {
    const std::size_t comma = streams.find(',', at);
    const int n = std::atoi(streams.substr(at, comma - at).c_str());
    if (n < 1) usage("--streams needs positive counts");
    std::printf("%s 1 MiB messages, %d connection(s), %s: %.2f GB/s (all connections)\n", ends.label.c_str(), n, direction,
                duplex ? duplex_throughput(n, seconds) : throughput(n, seconds, both_ways));
    at = comma == std::string::npos ? streams.size() : comma + 1;
  }
  return 0;
}
