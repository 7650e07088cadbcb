// Prints the gloo controller's algorithm rule and connection sets
// (native/src/tcp_algorithms.h) for test_tcp_algorithms.py:
//   print_rule rule COLLECTIVE BYTES RANKS   -> the algorithm's name
//   print_rule peers RANKS                   -> per rank: its peers, space
//   separated
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tcp_algorithms.h"

using namespace hvd::tcp;

int main(int argc, char **argv) {
  if (argc == 5 && std::strcmp(argv[1], "rule") == 0) {
    Collective c = Collective::Barrier;
    if (std::strcmp(argv[2], "allreduce") == 0)
      c = Collective::Allreduce;
    if (std::strcmp(argv[2], "allgather") == 0)
      c = Collective::Allgather;
    if (std::strcmp(argv[2], "broadcast") == 0)
      c = Collective::Broadcast;
    std::printf("%s\n", algorithm_name(choose_algorithm(
                            c, std::strtoull(argv[3], nullptr, 10),
                            std::atoi(argv[4]))));
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "peers") == 0) {
    int size = std::atoi(argv[2]);
    for (int r = 0; r < size; ++r) {
      for (int q : algorithm_peers(r, size))
        std::printf("%d ", q);
      std::printf("\n");
    }
    return 0;
  }
  std::fprintf(stderr,
               "usage: print_rule rule COLLECTIVE BYTES RANKS | peers RANKS\n");
  return 2;
}
