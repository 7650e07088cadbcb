#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# MPI from Debian/Ubuntu packages: HVD_MPI=mpich (default) or openmpi.
# Both may be installed side by side; Debian suffixes the tools
# (mpicc.mpich, mpiexec.openmpi), so this recipe names them explicitly.
# Prints FindMPI hints: MPI_C_COMPILER, MPI_CXX_COMPILER, MPIEXEC_EXECUTABLE.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
impl="${HVD_MPI:-mpich}"
case "$impl" in
  mpich) apt_ensure libmpich-dev mpich ;;
  openmpi) apt_ensure libopenmpi-dev openmpi-bin ;;
  *) die "HVD_MPI=$impl is not mpich or openmpi" ;;
esac
MPICC="$(command -v "mpicc.$impl" || true)"
MPICXX="$(command -v "mpicxx.$impl" || true)"
MPIEXEC="$(command -v "mpiexec.$impl" || true)"
[ -n "$MPICC" ] && [ -n "$MPIEXEC" ] || die "mpicc.$impl/mpiexec.$impl not on PATH after install"
scratch
verify_mpi
emit MPI_C_COMPILER "$MPICC"
emit MPI_CXX_COMPILER "$MPICXX"
emit MPIEXEC_EXECUTABLE "$MPIEXEC"
emit HVD_MPI "$impl"
