// Prints native/nccl/plan.h's plan for every dtype x op x prescale x fold x size, one
// JSON object per line, for tests/nccl/test_reduction_plan.py (no CUDA, no
// NCCL: the plan is plain C++). Codes past the last dtype and op are included.
#include <cstdio>
#include <initializer_list>

#include "plan.h"

int main() {
  const double prescales[] = {1.0, 0.5, 0.1, 3.0, 1.0 / 3.0, 65536.0, 1e-30};
  for (int dtype = 0; dtype <= 10; ++dtype)
    for (int op = 0; op <= 5; ++op)
      for (double pre : prescales)
        for (int fold = 0; fold <= 1; ++fold)
          for (int size : {4, 1}) {
            hvd_nccl::Plan p = hvd_nccl::plan_reduction(dtype, op, pre, 0.25, size, fold != 0);
            std::printf(
                "{\"dtype\":%d,\"op\":%d,\"pre\":%.17g,\"fold\":%d,\"size\":%d,\"error\":%s%s%s,\"wire\":%d,"
                "\"red\":%d,\"widen\":%d,\"plan_pre\":%.17g,\"premul\":%.17g,\"post\":%.17g}\n",
                dtype, op, pre, fold, size, p.error ? "\"" : "", p.error ? p.error : "null",
                p.error ? "\"" : "", static_cast<int>(p.wire), static_cast<int>(p.red), p.widen ? 1 : 0,
                p.pre, p.premul, p.post);
          }
  return 0;
}
