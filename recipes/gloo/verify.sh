# shellcheck shell=bash
# Compile and run a one-process Gloo ring allreduce over TCP on loopback
# (sourced by the Gloo recipes). Needs GLOO_CFLAGS/GLOO_LIBS; uses SCRATCH.
verify_gloo() {
  cat > "$SCRATCH/gloo.cc" <<'CC'
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <cstdio>
#include <memory>
#include <vector>
int main() {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::HashStore store;
  auto ctx = std::make_shared<gloo::rendezvous::Context>(0, 1);
  ctx->connectFullMesh(store, dev);
  std::vector<float> data = {1.5f, 2.5f};
  std::vector<float *> ptrs = {data.data()};
  gloo::AllreduceRing<float> ring(ctx, ptrs, static_cast<int>(data.size()));
  ring.run();
  std::printf("gloo allreduce size=%d value=%.1f\n", ctx->size, data[0]);
  return data[0] == 1.5f ? 0 : 1;
}
CC
  # shellcheck disable=SC2086
  ${CXX:-c++} -std=c++17 "$SCRATCH/gloo.cc" -o "$SCRATCH/gloo" $GLOO_CFLAGS $GLOO_LIBS -pthread >&2 \
    || die "cannot compile and link a Gloo program (flags: $GLOO_CFLAGS $GLOO_LIBS)"
  local out
  out="$(timeout 60 "$SCRATCH/gloo" 2>&1)" || die "the Gloo test program failed: $out"
  say "verified: $out"
}
