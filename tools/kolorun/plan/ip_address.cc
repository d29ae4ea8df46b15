#include "plan/ip_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace kolorun {

bool is_ip_literal(const std::string& text) {
  in_addr v4{};
  in6_addr v6{};
  return ::inet_pton(AF_INET, text.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, text.c_str(), &v6) == 1;
}

std::string without_brackets(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return host;
}

std::string address_with_port(const std::string& address, int port) {
  const bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

std::optional<std::string> usable_address_text(const sockaddr& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof(text));
    return std::string(text);
  }
  if (address.sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
    if (IN6_IS_ADDR_LINKLOCAL(&a)) return std::nullopt;
    ::inet_ntop(AF_INET6, &a, text, sizeof(text));
    return std::string(text);
  }
  return std::nullopt;
}

bool is_loopback_address(const sockaddr& address) {
  if (address.sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in&>(address).sin_addr.s_addr) >> 24) == 127;
  if (address.sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6&>(address).sin6_addr);
  return false;
}

ResolvedAddresses resolve(const std::string& name, int family, int socktype, const char* port) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = socktype;
  addrinfo* result = nullptr;
  if (::getaddrinfo(name.c_str(), port, &hints, &result) != 0) result = nullptr;
  return ResolvedAddresses(result, ::freeaddrinfo);
}

}  // namespace kolorun
