/*
 * How one Horovod reduction runs in NCCL's element types and reduction ops,
 * decided in plain C++ (no CUDA, no NCCL), so the decision is checked on
 * machines without a GPU: the real plugin (plugin.cpp) executes a Plan with
 * CUDA kernels and NCCL calls; the tests' stand-in plugin
 * (tests/nccl/standin/) executes the same Plan over host memory, and
 * tests/nccl/plan/ prints the Plan of every dtype x op.
 *
 * The answer for every dtype is the CPU path's (native/src/kernels_cpu.cpp),
 * but for scaling float16, which follows Horovod's GPU kernels (below):
 *  - uint8, int8, int32, int64, float16, bfloat16, float32, float64: NCCL's
 *    own type (integers wrap around, as on the CPU).
 *  - int16: NCCL has no 16-bit integer. It travels as 32-bit integers (widened
 *    with the prescale applied in int16 first, narrowed back before the
 *    postscale): a sum or product modulo 2^32 truncated to 16 bits is the
 *    int16 sum or product modulo 2^16, and min/max of sign-extended values
 *    are the int16 min/max, so the result is exactly the CPU path's.
 *  - bool: one byte 0/1 as uint8; Sum/Average/Max are logical or (NCCL max),
 *    Min/Product logical and (NCCL min); scale factors do not apply.
 * Scale factors: float32/float64 multiply by the factor in their own type;
 * float16 by the factor rounded to float16 (as Horovod's GPU kernels do: its
 * users' tests compare GPU results bit for bit; the CPU path, like Horovod's,
 * multiplies float16 in float32); bfloat16 in float32, like the CPU path;
 * integers in float64, truncated toward zero.
 * A prescale of a Sum/Average is folded into the reduction
 * (ncclRedOpCreatePreMulSum, which multiplies in the reduction's type) where
 * that gives the same bits as the separate pass: always for float16, float32
 * and float64, for bfloat16 when the factor is exact in bfloat16 (0.5, 2 ...);
 * every other scaling is a kernel pass over the data. Never at one rank:
 * there NCCL runs a one-rank kernel of its own, and with NCCL 2.28.9 on an
 * H200 it left one element of a 4913-element float32 PreMulSum unscaled (in
 * place) or unwritten (out of place), where the kernel pass was exact.
 */
#ifndef HVD_NCCL_PLAN_H
#define HVD_NCCL_PLAN_H

#include <cmath>
#include <cstddef>

#include "hvd/nccl_plugin.h"

namespace hvd_nccl {

// NCCL element types a reduction can run in (ncclUint8, ncclInt8, ...).
enum class Wire { Uint8, Int8, Int32, Uint32, Int64, Float16, Bfloat16, Float32, Float64 };
// NCCL reduction ops (ncclSum, ncclProd, ncclMin, ncclMax, a PreMulSum op).
enum class Red { Sum, Prod, Min, Max, PreMulSum };

struct Plan {
  const char* error = nullptr;  // why this dtype/op cannot run (one line), else nullptr
  Wire wire = Wire::Float32;    // the type NCCL reduces in
  Red red = Red::Sum;
  bool widen = false;   // int16 <-> 32-bit integers around the reduction
  double pre = 1.0;     // a pass scaling each input first (in the tensor's dtype)
  double premul = 1.0;  // the prescale folded into the reduction (red == PreMulSum)
  double post = 1.0;    // a pass scaling the result (AVERAGE's 1/size included)
};

// Bytes of one element of an hvd_plugin_dtype, 0 for an unknown code.
inline size_t dtype_bytes(int dtype) {
  switch (dtype) {
    case HVD_PLUGIN_UINT8:
    case HVD_PLUGIN_INT8:
    case HVD_PLUGIN_BOOL: return 1;
    case HVD_PLUGIN_INT16:
    case HVD_PLUGIN_FLOAT16:
    case HVD_PLUGIN_BFLOAT16: return 2;
    case HVD_PLUGIN_FLOAT32:
    case HVD_PLUGIN_INT32: return 4;
    case HVD_PLUGIN_FLOAT64:
    case HVD_PLUGIN_INT64: return 8;
    default: return 0;
  }
}

inline size_t wire_bytes(Wire wire) {
  switch (wire) {
    case Wire::Uint8:
    case Wire::Int8: return 1;
    case Wire::Float16:
    case Wire::Bfloat16: return 2;
    case Wire::Int32:
    case Wire::Uint32:
    case Wire::Float32: return 4;
    case Wire::Int64:
    case Wire::Float64: return 8;
  }
  return 0;
}

// Whether `factor` is a normal number (or zero) with at most `digits`
// significant bits and a binary exponent (frexp's) in [min_exp, max_exp].
inline bool exactly_representable(double factor, int digits, int min_exp, int max_exp) {
  if (factor == 0.0) return true;
  if (!std::isfinite(factor)) return false;
  int exp = 0;
  double mantissa = std::frexp(factor, &exp);  // factor = mantissa * 2^exp, 0.5 <= |mantissa| < 1
  double scaled = std::ldexp(mantissa, digits);
  return exp >= min_exp && exp <= max_exp && scaled == std::trunc(scaled);
}

// Whether a prescale can ride in an NCCL PreMulSum of `dtype` and give the
// separate pass's result. NCCL multiplies by the factor in the dtype; the
// pass does too for float16/32/64, and for bfloat16 multiplies in float32
// and rounds once, which NCCL's multiply matches only when the factor itself
// is exact in bfloat16 (the product of two bfloat16 values is exact in float32).
inline bool premul_exact(int dtype, double factor) {
  switch (dtype) {
    case HVD_PLUGIN_FLOAT16:
    case HVD_PLUGIN_FLOAT32:
    case HVD_PLUGIN_FLOAT64: return std::isfinite(factor);
    case HVD_PLUGIN_BFLOAT16: return exactly_representable(factor, 8, -125, 128);
    default: return false;
  }
}

// The plan of a reduction of `dtype` with `op` over `size` ranks. `fold`:
// the caller may fold the prescale into the reduction (NCCL >= 2.11 and no
// copy pass that could scale for free, e.g. not tensor fusion's packing);
// it never folds at one rank (above).
inline Plan plan_reduction(int dtype, int op, double prescale, double postscale, int size, bool fold) {
  Plan plan;
  Red red;
  switch (op) {
    case HVD_PLUGIN_SUM:
    case HVD_PLUGIN_AVERAGE: red = Red::Sum; break;
    case HVD_PLUGIN_MIN: red = Red::Min; break;
    case HVD_PLUGIN_MAX: red = Red::Max; break;
    case HVD_PLUGIN_PRODUCT: red = Red::Prod; break;
    default: plan.error = "unknown reduction op"; return plan;
  }
  switch (dtype) {
    case HVD_PLUGIN_UINT8: plan.wire = Wire::Uint8; break;
    case HVD_PLUGIN_INT8: plan.wire = Wire::Int8; break;
    case HVD_PLUGIN_INT32: plan.wire = Wire::Int32; break;
    case HVD_PLUGIN_INT64: plan.wire = Wire::Int64; break;
    case HVD_PLUGIN_FLOAT16: plan.wire = Wire::Float16; break;
    case HVD_PLUGIN_BFLOAT16: plan.wire = Wire::Bfloat16; break;
    case HVD_PLUGIN_FLOAT32: plan.wire = Wire::Float32; break;
    case HVD_PLUGIN_FLOAT64: plan.wire = Wire::Float64; break;
    case HVD_PLUGIN_INT16:
      plan.widen = true;  // min/max compare sign-extended values; sum/product wrap modulo 2^32
      plan.wire = red == Red::Min || red == Red::Max ? Wire::Int32 : Wire::Uint32;
      break;
    case HVD_PLUGIN_BOOL:
      plan.wire = Wire::Uint8;
      plan.red = red == Red::Min || red == Red::Prod ? Red::Min : Red::Max;  // and / or
      return plan;                                                           // no scaling
    default: plan.error = "unknown dtype"; return plan;
  }
  plan.red = red;
  plan.post = op == HVD_PLUGIN_AVERAGE ? postscale / static_cast<double>(size) : postscale;
  if (prescale != 1.0 && red == Red::Sum && fold && size > 1 && premul_exact(dtype, prescale)) {
    plan.red = Red::PreMulSum;
    plan.premul = prescale;
  } else {
    plan.pre = prescale;
  }
  return plan;
}

}  // namespace hvd_nccl

#endif /* HVD_NCCL_PLAN_H */
