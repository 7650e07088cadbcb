// MPI transport: whatever MPI `mpicc` found at build time (MPICH or Open MPI).
// Native MPI reductions for float32/64 and int32/64; float16/bfloat16 use
// user-defined MPI_Ops backed by the core's target-compiled kernels.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "common.h"
#include "kernels_cpu.h"
#include "state.h"

namespace hvd {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(HVD_ERR_PEER, std::string(what) + ": MPI error: " + text);
}

template <hvd_dtype D, hvd_op O>
void user_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  kernels::reduce(D, O, inout, in, inout, static_cast<size_t>(*len));
}

template <hvd_dtype D>
void make_ops(MPI_Op* ops) {
  MPI_Op_create(&user_reduce<D, HVD_SUM>, 1, &ops[HVD_SUM]);
  ops[HVD_AVERAGE] = ops[HVD_SUM];
  MPI_Op_create(&user_reduce<D, HVD_MIN>, 1, &ops[HVD_MIN]);
  MPI_Op_create(&user_reduce<D, HVD_MAX>, 1, &ops[HVD_MAX]);
  MPI_Op_create(&user_reduce<D, HVD_PRODUCT>, 1, &ops[HVD_PRODUCT]);
}

MPI_Datatype mpi_type(hvd_dtype dtype) {
  switch (dtype) {
    case HVD_FLOAT16:
    case HVD_BFLOAT16: return MPI_UINT16_T;
    case HVD_FLOAT32: return MPI_FLOAT;
    case HVD_FLOAT64: return MPI_DOUBLE;
    case HVD_INT32: return MPI_INT32_T;
    case HVD_INT64: return MPI_INT64_T;
    case HVD_UINT8:
    case HVD_BOOL: return MPI_UINT8_T;
    case HVD_INT8: return MPI_INT8_T;
    case HVD_INT16: return MPI_INT16_T;
  }
  throw Error(HVD_ERR_INVALID, "unsupported dtype");
}

MPI_Op builtin_op(hvd_op op) {
  switch (op) {
    case HVD_SUM:
    case HVD_AVERAGE: return MPI_SUM;
    case HVD_MIN: return MPI_MIN;
    case HVD_MAX: return MPI_MAX;
    case HVD_PRODUCT: return MPI_PROD;
  }
  throw Error(HVD_ERR_INVALID, "unsupported op");
}

// bool holds 0/1 bytes: or is MAX, and is MIN.
MPI_Op bool_op(hvd_op op) { return op == HVD_MIN || op == HVD_PRODUCT ? MPI_MIN : MPI_MAX; }

int to_int(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX))
    throw Error(HVD_ERR_INVALID,
                std::string(what) + ": more than 2 GiB per rank is not supported by the MPI backend");
  return static_cast<int>(n);
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  long long total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (total > INT_MAX) throw Error(HVD_ERR_INVALID, "MPI backend: total exceeds 2 GiB");
    d[i] = static_cast<int>(total);
    total += counts[i];
  }
  return d;
}

// MPI starts at most once per process (MPI_Init after MPI_Finalize is an
// error that aborts), so shutdown() frees only the communicators and a later
// init() reuses the running MPI; when this library started MPI, the process's
// exit finalises it (an exit handler, after Python's own exit handlers have
// run shutdown()). After a collective failed on a peer (died, SIGSTOPped,
// timed out over shared memory) MPI_Finalize would wait for that peer for
// good (Open MPI's finalize fence), so the job is ended with MPI_Abort
// instead: mpiexec then stops every rank, the stopped one included.
constexpr std::chrono::milliseconds kLastWordsDelay{200};  // for mpiexec to forward the reason

void leave_mpi(int status) {
  int finalized = 0;
  MPI_Finalized(&finalized);  // another owner (mpi4py) may have done it already
  if (finalized) return;
  if (!collective_failed_ever()) {
    MPI_Finalize();
    return;
  }
  int code = status != 0 ? status : 1;
  std::fprintf(
      stderr,
      "hvd_selector: a collective failed in this process (a peer died, stopped or timed out), so MPI "
      "cannot finalise with it: ending the job with MPI_Abort(MPI_COMM_WORLD, %d)\n",
      code);
  std::fflush(stderr);
  // The line is in the pipe to mpiexec's proxy, which stops forwarding once the abort reaches it:
  // on a loaded machine MPICH's Hydra dropped it in 3 of 16 runs (tests/native/test_shm.py).
  std::this_thread::sleep_for(kLastWordsDelay);
  MPI_Abort(MPI_COMM_WORLD, code);
}

#ifdef __GLIBC__
void leave_mpi_at_exit(int status, void*) { leave_mpi(status); }  // on_exit: gets the exit status
#else
struct LeaveAtExit {
  ~LeaveAtExit() { leave_mpi(1); }
};
#endif

void start_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    throw Error(HVD_ERR_UNAVAILABLE,
                "MPI was finalised in this process (by mpi4py's MPI.Finalize() or another library), and MPI "
                "cannot start twice in one process: call hvd_selector.init() in a new process");
  if (initialized) return;
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init");
#ifdef __GLIBC__
  on_exit(leave_mpi_at_exit, nullptr);  // registered once, after MPI_Init: runs at exit
#else
  static LeaveAtExit leave_at_exit;  // constructed once, after MPI_Init: destroyed at exit
#endif
}

class MpiBackend : public Backend {
 public:
  explicit MpiBackend(double /*timeout_s: MPI has no per-call timeout*/) {
    start_mpi();
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    setup();
  }

  // A process set's communicator (already created; this object frees it).
  explicit MpiBackend(MPI_Comm comm) : comm_(comm) { setup(); }

  void setup() {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_), "split");
    MPI_Comm_rank(local_, &local_rank_);
    MPI_Comm_size(local_, &local_size_);
    make_ops<HVD_FLOAT16>(f16_ops_);
    make_ops<HVD_BFLOAT16>(bf16_ops_);
  }

  ~MpiBackend() override {
    // Another owner (mpi4py's atexit hook) may have finalised MPI already:
    // then nothing may be called any more. MPI itself stays up (start_mpi).
    // After a failed collective the communicators are left as they are: freeing one may wait for
    // the peer that failed, and the process ends with MPI_Abort (leave_mpi).
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || collective_failed_ever()) return;
    for (hvd_op op : {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT}) {
      MPI_Op_free(&f16_ops_[op]);
      MPI_Op_free(&bf16_ops_[op]);
    }
    MPI_Comm_free(&local_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "mpi"; }
  std::string version() const override { return mpi_version(); }

  void allgather(const void* in, void* out, size_t bytes) override {
    int n = to_int(bytes, "allgather");
    check(MPI_Allgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_), "allgather");
  }

  void allreduce(const void* in, void* buf, size_t count, hvd_dtype dtype, hvd_op op) override {
    MPI_Op mop = dtype == HVD_FLOAT16    ? f16_ops_[op]
                 : dtype == HVD_BFLOAT16 ? bf16_ops_[op]
                 : dtype == HVD_BOOL     ? bool_op(op)
                                         : builtin_op(op);
    char* p = static_cast<char*>(buf);
    const size_t chunk = static_cast<size_t>(1) << 30;
    for (size_t done = 0; done < count; done += chunk) {
      size_t n = std::min(chunk, count - done);
      const void* src =
          in && in != buf ? static_cast<const char*>(in) + done * dtype_size(dtype) : MPI_IN_PLACE;
      check(
          MPI_Allreduce(src, p + done * dtype_size(dtype), static_cast<int>(n), mpi_type(dtype), mop, comm_),
          "allreduce");
    }
  }

  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    std::vector<int> counts;
    for (size_t b : bytes) counts.push_back(to_int(b, "allgather"));
    auto displs = displacements(counts);
    check(MPI_Allgatherv(in, counts[rank_], MPI_BYTE, out, counts.data(), displs.data(), MPI_BYTE, comm_),
          "allgather");
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    check(MPI_Bcast(buf, to_int(bytes, "broadcast"), MPI_BYTE, root, comm_), "broadcast");
  }

  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) override {
    std::vector<int> sc, rc;
    for (size_t b : send_bytes) sc.push_back(to_int(b, "alltoall"));
    for (size_t b : recv_bytes) rc.push_back(to_int(b, "alltoall"));
    auto sd = displacements(sc), rd = displacements(rc);
    check(MPI_Alltoallv(in, sc.data(), sd.data(), MPI_BYTE, out, rc.data(), rd.data(), MPI_BYTE, comm_),
          "alltoall");
  }

  void barrier() override { check(MPI_Barrier(comm_), "barrier"); }

  // Collective over the members only (MPI_Comm_create_group), tagged by id.
  std::unique_ptr<Backend> subset(int id, const std::vector<int>& ranks, const hvd_store*, const std::string&,
                                  double) override {
    MPI_Group world = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    check(MPI_Comm_group(comm_, &world), "add_process_set");
    check(MPI_Group_incl(world, static_cast<int>(ranks.size()), ranks.data(), &group), "add_process_set");
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_create_group(comm_, group, id, &sub);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    check(rc, "add_process_set");
    return std::make_unique<MpiBackend>(sub);
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL, local_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  MPI_Op f16_ops_[5] = {}, bf16_ops_[5] = {};
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(double timeout_s) {
  return std::make_unique<MpiBackend>(timeout_s);
}

std::string mpi_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, len);
  auto nl = s.find_first_of("\r\n,");
  if (nl != std::string::npos) s = s.substr(0, nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace hvd
