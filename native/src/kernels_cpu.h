// Reduction, scaling and float16/bfloat16 conversion kernels. kernels_cpu.cpp
// is compiled with the variant's target flags (HVD_TARGET_FLAGS), which is
// what makes an x86_64_v3/v4 build faster than an x86_64 one.
#pragma once

#include <cstddef>

#include "hvd/hvd.h"

namespace hvd::kernels {

// dst[i] = a[i] (op) b[i]; AVERAGE reduces as SUM. dst may alias a or b.
void reduce(hvd_dtype dtype, hvd_op op, void* dst, const void* a, const void* b, size_t n);

// dst[i] = src[i] * factor (integers truncate toward zero). dst may alias src.
void scale(hvd_dtype dtype, void* dst, const void* src, size_t n, double factor);

// Compile-time facts about the kernels ("avx512f f16c" ...), for build_info.
const char* kernel_isa();

}  // namespace hvd::kernels
