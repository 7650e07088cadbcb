// Exhaustive float16 / bfloat16 check harness for native/src/kernels_cpu.cpp.
//
// Compiled by tests/native/test_kernels.py for each target's flags (and for
// aarch64 under qemu when a cross compiler is installed). Writes raw
// little-endian results to stdout; the test compares them with torch/numpy:
//   op "sum16"   : float16 a+b for a = every half value, b = a reversed
//   op "sumbf16" : the same for bfloat16
//   op "scale16" : float16 a*0.3
//   op "f32"     : float32 sum/min/max/product of small vectors
//   op "copy"    : kernels::copy at every length 0..599 and every source and
//                  destination offset 0..63; writes "ok" or the first failure
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels_cpu.h"

// Copies land exactly and touch nothing outside [dst, dst + n).
static int check_copy() {
  std::vector<unsigned char> src(700), dst(700), want(700);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<unsigned char>(i * 7 + 1);
  for (size_t n = 0; n < 600; ++n)
    for (size_t s = 0; s < 64; ++s)
      for (size_t d = 0; d < 64; ++d) {
        std::memset(dst.data(), 0xa5, dst.size());
        want = dst;
        std::memcpy(want.data() + d, src.data() + s, n);
        hvd::kernels::copy(dst.data() + d, src.data() + s, n);
        if (dst != want) {
          std::printf("copy of %zu bytes from +%zu to +%zu differs", n, s, d);
          return 0;
        }
      }
  std::printf("ok");
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  if (!std::strcmp(argv[1], "copy"))
    return check_copy();
  std::vector<uint16_t> a(65536), b(65536), out(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    a[i] = static_cast<uint16_t>(i);
    b[i] = static_cast<uint16_t>(65535 - i);
  }
  if (!std::strcmp(argv[1], "sum16")) {
    hvd::kernels::reduce(HVD_FLOAT16, HVD_SUM, out.data(), a.data(), b.data(),
                         a.size());
  } else if (!std::strcmp(argv[1], "sumbf16")) {
    hvd::kernels::reduce(HVD_BFLOAT16, HVD_SUM, out.data(), a.data(), b.data(),
                         a.size());
  } else if (!std::strcmp(argv[1], "scale16")) {
    hvd::kernels::scale(HVD_FLOAT16, out.data(), a.data(), a.size(), 0.3);
  } else if (!std::strcmp(argv[1], "f32")) {
    std::vector<float> x(1000), y(1000), r(4000);
    for (int i = 0; i < 1000; ++i) {
      x[i] = static_cast<float>(i % 13) - 6.0f;
      y[i] = static_cast<float>(i % 7) - 3.0f;
    }
    hvd_op ops[] = {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT};
    for (int k = 0; k < 4; ++k)
      hvd::kernels::reduce(HVD_FLOAT32, ops[k], r.data() + 1000 * k, x.data(),
                           y.data(), 1000);
    std::fwrite(r.data(), sizeof(float), r.size(), stdout);
    return 0;
  } else {
    return 2;
  }
  std::fwrite(out.data(), sizeof(uint16_t), out.size(), stdout);
  return 0;
}
