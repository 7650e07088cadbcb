// Process sets (Horovod's process_set=): sub-communicators keyed by id. The
// ops layer is unchanged: backend() answers the set the calling thread chose
// with hvd_use_process_set(), so every op, the agreement check and fusion
// work on a set exactly as on the global communicator.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "state.h"

namespace hvd {
namespace {

std::map<int, std::unique_ptr<Backend>> g_sets;
thread_local int g_current = 0;

}  // namespace

int current_process_set() { return g_current; }

Backend& process_set_backend(int id) {
  auto it = g_sets.find(id);
  if (it == g_sets.end())
    throw Error(HVD_ERR_INVALID, "process set " + std::to_string(id) +
                                     " is not registered on this rank (add_process_set first; a rank that is "
                                     "not a member cannot call its collectives)");
  return *it->second;
}

void clear_process_sets() {
  g_sets.clear();
  g_current = 0;
}

}  // namespace hvd

using namespace hvd;

extern "C" {

hvd_status hvd_add_process_set(int id, const int* ranks, size_t n, const hvd_store* store,
                               const char* hostname, double timeout_s) {
  return wrap_collective([&] {
    Backend& global = global_backend();
    if (id <= 0) throw Error(HVD_ERR_INVALID, "add_process_set: id must be positive (0 is the global set)");
    if (g_sets.count(id))
      throw Error(HVD_ERR_INVALID, "add_process_set: id " + std::to_string(id) + " is taken");
    std::vector<int> members(ranks, ranks + n);
    for (size_t i = 0; i < n; ++i)
      if (members[i] < 0 || members[i] >= global.size() || (i && members[i] <= members[i - 1]))
        throw Error(HVD_ERR_INVALID, "add_process_set: ranks must be ascending, distinct and in 0.." +
                                         std::to_string(global.size() - 1));
    g_sets[id] = global.subset(id, members, store, hostname ? hostname : "127.0.0.1", timeout_s);
  });
}

hvd_status hvd_remove_process_set(int id) {
  return wrap([&] {
    if (g_sets.erase(id) == 0)
      throw Error(HVD_ERR_INVALID,
                  "remove_process_set: process set " + std::to_string(id) + " is not registered");
    if (g_current == id) g_current = 0;
  });
}

hvd_status hvd_use_process_set(int id) {
  return wrap([&] {
    if (id != 0) process_set_backend(id);
    g_current = id;
  });
}

}  // extern "C"
