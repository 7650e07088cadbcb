// Internal helpers shared by the core's translation units: the error type
// that carries an hvd_status across C++ code, and dtype/op facts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "hvd/hvd.h"

namespace hvd {

// Thrown anywhere in the core; the C surface turns it into status + message.
class Error : public std::runtime_error {
 public:
  Error(hvd_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  hvd_status status() const { return status_; }

 private:
  hvd_status status_;
};

size_t dtype_size(hvd_dtype dtype);
const char* dtype_name(hvd_dtype dtype);
const char* op_name(hvd_op op);
bool valid_dtype(int dtype);
bool valid_op(int op);
int64_t num_elements(const hvd_tensor& t);
std::string shape_string(const hvd_tensor& t);

// A dead process: no such process, or a zombie its launcher has not reaped
// yet (a peer rank on this host; the launcher may reap late).
bool process_gone(int32_t pid);

// The exact variant this core was built as (build_string.cpp).
const char* variant_string();

// Folds v into the running digest h (a multiply-xorshift step, so every bit
// of v reaches every bit of h): grouped shapes and agreement summaries.
inline uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

}  // namespace hvd
