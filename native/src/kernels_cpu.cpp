// See kernels_cpu.h. float16/bfloat16 are reduced in float32 blocks: convert
// a block, apply the op with an auto-vectorised float loop, round back
// (round-to-nearest-even). Hardware conversions (F16C, AVX-512) are used when
// the target flags enable them; otherwise a portable bit-exact fallback runs.
#include "kernels_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common.h"

namespace hvd::kernels {
namespace {

constexpr size_t kBlock = 512;

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float half_to_float_scalar(uint16_t h) {
  uint32_t em = h & 0x7fffu;
  uint32_t r = bits_of(float_of(em << 13) * 0x1p112f);  // normals and subnormals
  r = em >= 0x7c00u ? (r | 0x7f800000u) : r;            // inf / nan
  r = em > 0x7c00u ? (r | 0x00400000u) : r;             // nan comes out quiet, as F16C/fcvt do
  return float_of(r | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

inline uint16_t float_to_half_scalar(float x) {
  uint32_t f = bits_of(x);
  uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint32_t sub = bits_of(float_of(f) + 0.5f) - 0x3f000000u;  // subnormal result
  uint32_t odd = (f >> 13) & 1u;
  uint32_t nrm = (f + 0xc8000fffu + odd) >> 13;  // rebias + round to even
  // nan keeps its top payload bits and comes out quiet (as F16C/AVX-512/fcvt
  // do), so targets with and without hardware conversion agree bit for bit
  uint32_t big = f > 0x7f800000u ? (0x7e00u | ((f >> 13) & 0x3ffu)) : 0x7c00u;
  uint32_t o = f >= 0x47800000u ? big : (f < 0x38800000u ? sub : nrm);
  return static_cast<uint16_t>(o | (sign >> 16));
}

void half_to_float(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#elif defined(__aarch64__)
  // Every AArch64 core converts half precision in hardware; the loop vectorises (fcvtl).
  const __fp16* h = reinterpret_cast<const __fp16*>(src);
  for (; i < n; ++i) dst[i] = static_cast<float>(h[i]);
#endif
  for (; i < n; ++i) dst[i] = half_to_float_scalar(src[i]);
}

void float_to_half(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(dst + i),
        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__aarch64__)
  __fp16* h = reinterpret_cast<__fp16*>(dst);  // round to nearest even (FPCR default)
  for (; i < n; ++i) h[i] = static_cast<__fp16>(src[i]);
#endif
  for (; i < n; ++i) dst[i] = float_to_half_scalar(src[i]);
}

void bf16_to_float(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_of(static_cast<uint32_t>(src[i]) << 16);
}

void float_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = bits_of(src[i]);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

template <typename T>
void reduce_typed(hvd_op op, T* dst, const T* a, const T* b, size_t n) {  // dst may alias a or b
  switch (op) {
    case HVD_SUM:
    case HVD_AVERAGE:
      for (size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
      break;
    case HVD_MIN:
      for (size_t i = 0; i < n; ++i) dst[i] = std::min(a[i], b[i]);
      break;
    case HVD_MAX:
      for (size_t i = 0; i < n; ++i) dst[i] = std::max(a[i], b[i]);
      break;
    case HVD_PRODUCT:
      for (size_t i = 0; i < n; ++i) dst[i] = a[i] * b[i];
      break;
  }
}

// bool: Sum/Average/Max are logical or, Min/Product logical and.
void reduce_bool(hvd_op op, uint8_t* dst, const uint8_t* a, const uint8_t* b, size_t n) {
  bool any = op == HVD_SUM || op == HVD_AVERAGE || op == HVD_MAX;
  for (size_t i = 0; i < n; ++i) dst[i] = any ? (a[i] | b[i]) != 0 : (a[i] & b[i]) != 0;
}

using ToFloat = void (*)(const uint16_t*, float*, size_t);
using FromFloat = void (*)(const float*, uint16_t*, size_t);

void reduce16(hvd_op op, uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n, ToFloat to,
              FromFloat from) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = std::min(kBlock, n - i);
    to(a + i, fa, m);
    to(b + i, fb, m);
    reduce_typed<float>(op, fa, fa, fb, m);
    from(fa, dst + i, m);
  }
}

void scale16(uint16_t* dst, const uint16_t* src, size_t n, float factor, ToFloat to, FromFloat from) {
  alignas(64) float f[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = std::min(kBlock, n - i);
    to(src + i, f, m);
    for (size_t j = 0; j < m; ++j) f[j] *= factor;
    from(f, dst + i, m);
  }
}

// copy()'s unit: the widest integer vector the target has.
#if defined(__AVX__)
using CopyVec = __m256i;
inline CopyVec load(const CopyVec* p) { return _mm256_loadu_si256(p); }
inline void store(CopyVec* p, CopyVec v) { _mm256_storeu_si256(p, v); }
#elif defined(__x86_64__)
using CopyVec = __m128i;
inline CopyVec load(const CopyVec* p) { return _mm_loadu_si128(p); }
inline void store(CopyVec* p, CopyVec v) { _mm_storeu_si128(p, v); }
#endif

template <typename T>
void scale_float(T* dst, const T* src, size_t n, T factor) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i] * factor;
}

template <typename T>
void scale_int(T* dst, const T* src, size_t n, double factor) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(std::trunc(static_cast<double>(src[i]) * factor));
}

}  // namespace

void reduce(hvd_dtype dtype, hvd_op op, void* dst, const void* a, const void* b, size_t n) {
  switch (dtype) {
    case HVD_FLOAT16:
      return reduce16(op, static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                      static_cast<const uint16_t*>(b), n, half_to_float, float_to_half);
    case HVD_BFLOAT16:
      return reduce16(op, static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                      static_cast<const uint16_t*>(b), n, bf16_to_float, float_to_bf16);
    case HVD_FLOAT32:
      return reduce_typed(op, static_cast<float*>(dst), static_cast<const float*>(a),
                          static_cast<const float*>(b), n);
    case HVD_FLOAT64:
      return reduce_typed(op, static_cast<double*>(dst), static_cast<const double*>(a),
                          static_cast<const double*>(b), n);
    case HVD_INT32:
      return reduce_typed(op, static_cast<int32_t*>(dst), static_cast<const int32_t*>(a),
                          static_cast<const int32_t*>(b), n);
    case HVD_INT64:
      return reduce_typed(op, static_cast<int64_t*>(dst), static_cast<const int64_t*>(a),
                          static_cast<const int64_t*>(b), n);
    case HVD_UINT8:
      return reduce_typed(op, static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(a),
                          static_cast<const uint8_t*>(b), n);
    case HVD_INT8:
      return reduce_typed(op, static_cast<int8_t*>(dst), static_cast<const int8_t*>(a),
                          static_cast<const int8_t*>(b), n);
    case HVD_INT16:
      return reduce_typed(op, static_cast<int16_t*>(dst), static_cast<const int16_t*>(a),
                          static_cast<const int16_t*>(b), n);
    case HVD_BOOL:
      return reduce_bool(op, static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(a),
                         static_cast<const uint8_t*>(b), n);
  }
  throw Error(HVD_ERR_INVALID, "unsupported dtype for reduction");
}

void copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  size_t i = 0;
#if defined(__x86_64__)
  constexpr size_t kStep = 4 * sizeof(CopyVec);
  for (; i + kStep <= bytes; i += kStep) {
    const auto* from = reinterpret_cast<const CopyVec*>(s + i);
    auto* to = reinterpret_cast<CopyVec*>(d + i);
    CopyVec v0 = load(from), v1 = load(from + 1), v2 = load(from + 2), v3 = load(from + 3);
    store(to, v0);
    store(to + 1, v1);
    store(to + 2, v2);
    store(to + 3, v3);
  }
#endif
  if (i < bytes) std::memcpy(d + i, s + i, bytes - i);  // the tail (all of it off x86)
}

void scale(hvd_dtype dtype, void* dst, const void* src, size_t n, double factor) {
  switch (dtype) {
    case HVD_FLOAT16:
      return scale16(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n,
                     static_cast<float>(factor), half_to_float, float_to_half);
    case HVD_BFLOAT16:
      return scale16(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n,
                     static_cast<float>(factor), bf16_to_float, float_to_bf16);
    case HVD_FLOAT32:
      return scale_float(static_cast<float*>(dst), static_cast<const float*>(src), n,
                         static_cast<float>(factor));
    case HVD_FLOAT64:
      return scale_float(static_cast<double*>(dst), static_cast<const double*>(src), n, factor);
    case HVD_INT32: return scale_int(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, factor);
    case HVD_INT64: return scale_int(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, factor);
    case HVD_UINT8: return scale_int(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n, factor);
    case HVD_INT8: return scale_int(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), n, factor);
    case HVD_INT16: return scale_int(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src), n, factor);
    case HVD_BOOL:
      if (dst != src) std::memcpy(dst, src, n);
      return;
  }
  throw Error(HVD_ERR_INVALID, "unsupported dtype for scaling");
}

const char* kernel_isa() {
  return ""
#if defined(__AVX512F__)
         "avx512f "
#endif
#if defined(__AVX2__)
         "avx2 "
#endif
#if defined(__F16C__)
         "f16c "
#endif
#if defined(__FMA__)
         "fma "
#endif
#if defined(__SSE4_2__)
         "sse4.2 "
#endif
#if defined(__ARM_NEON)
         "neon "
#endif
#if defined(__aarch64__)
         "fp16-convert "
#endif
         "baseline";
}

}  // namespace hvd::kernels
