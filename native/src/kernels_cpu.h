// Reduction, scaling and float16/bfloat16 conversion kernels. kernels_cpu.cpp
// is compiled with the variant's target flags (HVD_TARGET_FLAGS), which is
// what makes an x86_64_v3/v4 build faster than an x86_64 one.
#pragma once

#include <cstddef>

#include "hvd/hvd.h"

namespace hvd::kernels {

// dst[i] = a[i] (op) b[i]; AVERAGE reduces as SUM. dst may alias a or b.
void reduce(hvd_dtype dtype, hvd_op op, void* dst, const void* a, const void* b, size_t n);

// memcpy for the shared-memory transport's buffers (no overlap), in vector
// registers: glibc's memcpy uses `rep movsb` from 2 KiB on, which some CPUs
// (zen3 here) run at a tenth of the speed for some buffer pairs (see
// docs/reference/transport.md).
void copy(void* dst, const void* src, size_t bytes);

// dst[i] = src[i] * factor (integers truncate toward zero). dst may alias src.
void scale(hvd_dtype dtype, void* dst, const void* src, size_t n, double factor);

// Compile-time facts about the kernels ("avx512f f16c" ...), for build_info.
const char* kernel_isa();

}  // namespace hvd::kernels
