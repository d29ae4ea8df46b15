// IP addresses as kolorun chooses them and hands them to ranks: IPv4 or IPv6,
// as text, an IPv6 one written in brackets where a port follows it.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <memory>
#include <optional>
#include <string>

namespace kolorun {

// Whether `text` is an IPv4 or IPv6 address (without brackets).
bool is_ip_literal(const std::string& text);

// "[fd00::1]" -> "fd00::1"; any other text unchanged.
std::string without_brackets(const std::string& host);

// "10.0.0.1:5000", "[fd00::1]:5000": what KOLO_STORE_ADDR holds.
std::string address_with_port(const std::string& address, int port);

// The text of an AF_INET or AF_INET6 address a rank can listen on and publish;
// nullopt for other families and IPv6 link-local addresses (which only mean
// something with an interface beside them, and kolo's peers name none).
std::optional<std::string> usable_address_text(const sockaddr& address);

// 127.0.0.0/8 or ::1: no other host reaches it.
bool is_loopback_address(const sockaddr& address);

// What getaddrinfo() found for `name` in `family` (AF_INET or AF_INET6) for a
// socket of `socktype`, `port` filled in; null when the name has no such address.
using ResolvedAddresses = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;
ResolvedAddresses resolve(const std::string& name, int family, int socktype, const char* port = nullptr);

}  // namespace kolorun
