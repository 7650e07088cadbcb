#include "common.h"

#include <signal.h>

#include <cerrno>
#include <fstream>

namespace hvd {

size_t dtype_size(hvd_dtype dtype) {
  switch (dtype) {
    case HVD_UINT8:
    case HVD_INT8:
    case HVD_BOOL: return 1;
    case HVD_INT16:
    case HVD_FLOAT16:
    case HVD_BFLOAT16: return 2;
    case HVD_FLOAT32:
    case HVD_INT32: return 4;
    case HVD_FLOAT64:
    case HVD_INT64: return 8;
  }
  throw Error(HVD_ERR_INVALID, "unsupported dtype code " + std::to_string(static_cast<int>(dtype)));
}

const char* dtype_name(hvd_dtype dtype) {
  switch (dtype) {
    case HVD_FLOAT16: return "float16";
    case HVD_BFLOAT16: return "bfloat16";
    case HVD_FLOAT32: return "float32";
    case HVD_FLOAT64: return "float64";
    case HVD_INT32: return "int32";
    case HVD_INT64: return "int64";
    case HVD_UINT8: return "uint8";
    case HVD_INT8: return "int8";
    case HVD_INT16: return "int16";
    case HVD_BOOL: return "bool";
  }
  return "unknown";
}

const char* op_name(hvd_op op) {
  switch (op) {
    case HVD_SUM: return "Sum";
    case HVD_AVERAGE: return "Average";
    case HVD_MIN: return "Min";
    case HVD_MAX: return "Max";
    case HVD_PRODUCT: return "Product";
  }
  return "unknown";
}

bool valid_dtype(int dtype) { return dtype >= HVD_FLOAT16 && dtype <= HVD_BOOL; }
bool valid_op(int op) { return op >= HVD_SUM && op <= HVD_PRODUCT; }

int64_t num_elements(const hvd_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

std::string shape_string(const hvd_tensor& t) {
  std::string s = std::string(dtype_name(t.dtype)) + "[";
  for (int i = 0; i < t.ndim; ++i) {
    if (i) s += ",";
    s += std::to_string(t.shape[i]);
  }
  return s + "]";
}

bool process_gone(int32_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() &&
         (stat[close_paren + 2] == 'Z' || stat[close_paren + 2] == 'X');
}

}  // namespace hvd
