// Timing harness for benchmarks/bench_copy.py: glibc memcpy vs the
// shared-memory transport's kernels::copy (native/src/kernels_cpu.cpp),
// L1/L2/L3-sized copies with the destination 0, 16, 64 or 2048 bytes past a
// page boundary and the source on one. Prints one JSON object per line: bytes,
// offset, seconds per copy.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "kernels_cpu.h"

namespace {

template <typename F>
double best_seconds(F copy, size_t bytes) {
  const long reps = static_cast<long>(200000000 / bytes) + 10;
  double best = 1e9;
  for (int round = 0; round < 5; ++round) {
    auto start = std::chrono::steady_clock::now();
    for (long r = 0; r < reps; ++r) {
      copy();
      asm volatile("" ::: "memory");  // keep every copy
    }
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (took.count() / reps < best) best = took.count() / reps;
  }
  return best;
}

}  // namespace

int main() {
  const size_t most = size_t{4} << 20;
  auto* src = static_cast<unsigned char*>(std::aligned_alloc(4096, most));
  auto* dst = static_cast<unsigned char*>(std::aligned_alloc(4096, most + 4096));
  std::memset(src, 1, most);
  std::memset(dst, 2, most + 4096);
  for (size_t bytes : {size_t{4} << 10, size_t{16} << 10, size_t{64} << 10, size_t{512} << 10, most}) {
    for (size_t offset : {0, 16, 64, 2048}) {
      unsigned char* to = dst + offset;
      double glibc = best_seconds([&] { std::memcpy(to, src, bytes); }, bytes);
      double ours = best_seconds([&] { hvd::kernels::copy(to, src, bytes); }, bytes);
      std::printf(
          "{\"bytes\": %zu, \"offset\": %zu, \"memcpy_s\": %.4e, "
          "\"copy_s\": %.4e}\n",
          bytes, offset, glibc, ours);
    }
  }
  return 0;
}
