// Debian's libgloo-dev (0.0~git20220518) installs gloo/transport/tcp/pair.h and
// unbound_buffer.h but not the gloo/common/memory.h they include. kolo includes
// them only to read a pair's recorded error and a buffer's completion counts
// (connection_watch.cc) and calls nothing that uses these types; they are
// declared here with the one member each that libgloo was built with (a
// std::shared_ptr or std::weak_ptr), so that the classes' layout as compiled in
// kolo is libgloo's.
#pragma once

#include <memory>

namespace gloo {

template <typename T>
class NonOwningPtr final {
 private:
  std::shared_ptr<T> ptr_;
};

template <typename T>
class ShareableNonOwningPtr;

template <typename T>
class WeakNonOwningPtr final {
 public:
  // Named by an inline function of tcp::UnboundBuffer that kolo never calls:
  // declared for it to compile, defined nowhere.
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& from);

 protected:
  std::weak_ptr<T> ptr_;
};

template <typename T>
class ShareableNonOwningPtr final {
 protected:
  std::shared_ptr<T> ptr_;
};

}  // namespace gloo
