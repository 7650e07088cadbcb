// Debian's libgloo-dev (0.0~git20220518, Gloo 0.5.0) installs
// gloo/transport/tcp/{pair,context}.h, which include gloo/common/memory.h,
// but not that header. The core includes those two headers only to hand
// Gloo's tcp pairs an authenticated socket (gloo_backend.cpp); it never
// calls the pointer wrappers, so it needs their names and their layout (a
// std::weak_ptr / std::shared_ptr each, as in the library) and nothing
// else. CMake adds this directory only when the installed Gloo lacks the
// header.
#pragma once

#include <memory>

namespace gloo {

template <typename T>
class NonOwningPtr final {
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr final {
  std::weak_ptr<T> ptr_;
};

template <typename T>
class ShareableNonOwningPtr final {
  std::shared_ptr<T> ptr_;
};

}  // namespace gloo
