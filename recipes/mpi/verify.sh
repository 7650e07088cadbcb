# shellcheck shell=bash
# Compile and run a two-rank MPI program (sourced by the MPI recipes).
# Needs MPICC and MPIEXEC set; uses SCRATCH.
verify_mpi() {
  cat > "$SCRATCH/hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, sum = 0, one = 1;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("allreduce=%d size=%d\n", sum, size);
  MPI_Finalize();
  return sum == size ? 0 : 1;
}
C
  "$MPICC" "$SCRATCH/hello.c" -o "$SCRATCH/hello" >&2 || die "$MPICC cannot compile an MPI program"
  local extra=()
  if "$MPIEXEC" --version 2>&1 | grep -qi 'open mpi\|OpenRTE'; then
    extra=(--oversubscribe)
    [ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
  fi
  local out
  out="$(timeout 60 "$MPIEXEC" "${extra[@]}" -n 2 "$SCRATCH/hello" 2>&1)" \
    || die "$MPIEXEC -n 2 failed: $(printf '%s' "$out" | tail -n 1)"
  printf '%s' "$out" | grep -q 'allreduce=2 size=2' || die "2-rank allreduce gave: $out"
  say "verified: $MPICC compiles, $MPIEXEC runs 2 ranks (allreduce=2)"
}
