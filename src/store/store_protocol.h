// The rendezvous store's wire protocol, shared by StoreServer and StoreClient.
//
// 1. Handshake (fixed-size, unframed):
//      server -> client  "KOLOSTR1" (8 bytes) + nonce (32 random bytes)
//      client -> server  HMAC-SHA256(key = job secret, message = nonce) (32 bytes)
//      server -> client  one status byte: 0 accepted; anything else refused, after
//                        which the server closes the connection.
//    A connection that has not completed the handshake within kHandshakeTimeout is
//    closed, so that idle or slow peers cannot hold connections open.
//
// 2. Then request/reply frames, in both directions:
//      u32 payload length (little-endian, at most kMaxFrame) + payload
//    Request payload: u8 opcode, then the fields below. Strings and byte arrays are
//    u32 length + bytes; key lists are u32 count + strings; integers little-endian.
//      SET    key, value                     -> Ok
//      GET    key, u32 timeout_ms            -> Ok value | Timeout
//      ADD    key, i64 delta                 -> Ok i64 new_value | Error message
//      WAIT   keys, u32 timeout_ms           -> Ok | Timeout
//      CHECK  keys                           -> Ok u8 all_exist
//      DELETE key                            -> Ok u8 existed
//    Reply payload: u8 status (Ok, Timeout, Error), then the fields above; Error is
//    followed by a string message.
//    GET and WAIT are parked on the server until their keys exist or the timeout
//    passes; the client sends nothing else meanwhile.
//    ADD treats a missing key as 0 and stores the result as 8 bytes little-endian;
//    ADD on a value of any other size is an Error reply (the connection stays up).
//
// Anything else — an oversized or truncated frame, an unknown opcode, a field over
// its limit, trailing bytes — closes that one connection; the server logs it and
// counts it in rejected_connections().
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace kolo::store::protocol {

inline constexpr std::array<std::uint8_t, 8> kMagic = {'K', 'O', 'L', 'O', 'S', 'T', 'R', '1'};
inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kMacSize = 32;
inline constexpr std::chrono::milliseconds kHandshakeTimeout{10000};

inline constexpr std::size_t kMaxFrame = 64u << 20;
inline constexpr std::size_t kMaxKey = 4096;
inline constexpr std::size_t kMaxValue = 32u << 20;
inline constexpr std::size_t kMaxKeysPerRequest = 4096;
// Every key on the wire costs at least its u32 length.
inline constexpr std::size_t kMinKeyBytes = 4;

enum class Opcode : std::uint8_t { Set = 1, Get = 2, Add = 3, Wait = 4, Check = 5, Delete = 6 };
enum class Status : std::uint8_t { Ok = 0, Timeout = 1, Error = 2 };

inline constexpr std::uint8_t kHandshakeAccepted = 0;
inline constexpr std::uint8_t kHandshakeRefused = 1;

}  // namespace kolo::store::protocol
