/*
 * hvd-selector's C-level surface: Horovod-style collectives over Gloo, MPI or
 * (lazily loaded) NCCL, chosen when the library is built.
 *
 * Why a C surface: the Python binding, tests in other languages and the NCCL
 * plugin all meet at plain structs and status codes; C++ exceptions never
 * cross it. Every call returns an hvd_status; on failure hvd_last_error()
 * returns a one-line reason (thread-local, valid until the next call).
 *
 * Collectives are synchronous and must be called by every rank in the same
 * order with matching shapes and dtypes; a mismatch is detected (each
 * collective first exchanges a small descriptor) and reported on every rank
 * as HVD_ERR_MISMATCH instead of corrupting data or hanging.
 */
#ifndef HVD_HVD_H
#define HVD_HVD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  HVD_OK = 0,
  HVD_ERR_INVALID = 1,         /* bad argument on this rank (dtype, layout, splits) */
  HVD_ERR_MISMATCH = 2,        /* ranks disagree on shape, dtype, op or root */
  HVD_ERR_TIMEOUT = 3,         /* a peer did not answer within the timeout */
  HVD_ERR_PEER = 4,            /* a peer closed its connection (died) */
  HVD_ERR_UNAVAILABLE = 5,     /* feature not in this build / GPU plugin missing */
  HVD_ERR_NOT_INITIALIZED = 6, /* hvd_init_* not called (or after finalize) */
  HVD_ERR_INTERNAL = 7         /* backend failure not covered above */
} hvd_status;

/* Same numbering as hvd_plugin_dtype in nccl_plugin.h. */
typedef enum {
  HVD_FLOAT16 = 0,
  HVD_BFLOAT16 = 1,
  HVD_FLOAT32 = 2,
  HVD_FLOAT64 = 3,
  HVD_INT32 = 4,
  HVD_INT64 = 5,
  HVD_UINT8 = 6,
  HVD_INT8 = 7,
  HVD_INT16 = 8,
  HVD_BOOL = 9 /* one byte, 0 or 1; Sum/Max reduce as logical or, Min/Product as and */
} hvd_dtype;

/* Same numbering as hvd_plugin_op. AVERAGE = SUM then postscale 1/size. */
typedef enum { HVD_SUM = 0, HVD_AVERAGE = 1, HVD_MIN = 2, HVD_MAX = 3, HVD_PRODUCT = 4 } hvd_op;

typedef enum { HVD_DEVICE_CPU = 0, HVD_DEVICE_CUDA = 1 } hvd_device;

#define HVD_MAX_DIMS 8

/* A dense, C-contiguous tensor (the caller checks layout). */
typedef struct {
  void* data;
  hvd_dtype dtype;
  hvd_device device;
  int device_id;
  int ndim;
  int64_t shape[HVD_MAX_DIMS];
} hvd_tensor;

/* Key-value store the Gloo controller rendezvouses through (the launcher's
 * authenticated TCP store). get blocks until the key exists or timeout_ms
 * passes; it returns a malloc()ed buffer the library free()s. Each returns
 * 0 on success, non-zero on failure with a reason in `error` (256 bytes).
 * key/key_len: the job secret that authenticates the store's clients; the
 * core's TCP data connections prove it too (required when size > 1, at
 * least 16 bytes; see docs/reference/security.md). */
typedef struct {
  void* ctx;
  int (*set)(void* ctx, const char* key, const void* value, size_t len, char* error);
  int (*get)(void* ctx, const char* key, void** value, size_t* len, int64_t timeout_ms, char* error);
  const void* key;
  size_t key_len;
  /* Optional (NULL: the library uses set and get): sets `prefix` followed by
   * `rank` (decimal) to `value`, waits until the keys of every rank 0..size-1
   * exist, and returns all of them in one malloc()ed buffer the library
   * free()s: per rank in order, a big-endian u32 length and the bytes. One
   * store round trip for what every rank needs from every other. */
  int (*gather)(void* ctx, const char* prefix, int rank, int size, const void* value, size_t len,
                void** table, size_t* table_len, int64_t timeout_ms, char* error);
} hvd_store;

const char* hvd_last_error(void);

/* Gloo controller: rank/size from the launcher, peers found through `store`.
 * `hostname` is the address this rank listens on (e.g. "127.0.0.1"). */
hvd_status hvd_init_gloo(int rank, int size, int local_rank, int local_size, const hvd_store* store,
                         const char* hostname, double timeout_s);
/* MPI controller: rank/size from MPI_COMM_WORLD (started by mpiexec). */
hvd_status hvd_init_mpi(double timeout_s);
hvd_status hvd_finalize(void);
int hvd_initialized(void);
int hvd_rank(void);
int hvd_size(void);
int hvd_local_rank(void);
int hvd_local_size(void);

/* Elementwise reduction across ranks: out = postscale * op_r(prescale * in_r).
 * `in` and `out` have identical shape and dtype; they may be the same buffer. */
hvd_status hvd_allreduce(const hvd_tensor* in, hvd_tensor* out, hvd_op op, double prescale, double postscale);

/* Allreduce of n tensors fused into buffers of at most hvd_fusion_threshold()
 * bytes per dtype (Horovod's tensor fusion): one descriptor check and one
 * collective per fused buffer instead of one per tensor. */
hvd_status hvd_grouped_allreduce(const hvd_tensor* in, hvd_tensor* out, size_t n, hvd_op op, double prescale,
                                 double postscale);
size_t hvd_fusion_threshold(void);
void hvd_set_fusion_threshold(size_t bytes);

/* Allgather along the first dimension, which may differ per rank. Phase 1
 * checks the other dimensions and dtype and fills first_dims[size]; the
 * caller allocates out with sum(first_dims) rows and calls phase 2. */
hvd_status hvd_allgather_prepare(const hvd_tensor* in, int64_t* first_dims);
hvd_status hvd_allgather(const hvd_tensor* in, hvd_tensor* out, const int64_t* first_dims);

hvd_status hvd_broadcast(hvd_tensor* inout, int root);

/* Alltoall along the first dimension: splits[i] rows go to rank i. Phase 1
 * fills recv_splits[size]; the caller allocates out accordingly. */
hvd_status hvd_alltoall_prepare(const hvd_tensor* in, const int64_t* splits, int64_t* recv_splits);
hvd_status hvd_alltoall(const hvd_tensor* in, const int64_t* splits, hvd_tensor* out,
                        const int64_t* recv_splits);

hvd_status hvd_barrier(void);

/* Process sets (Horovod's process_set=): a sub-communicator of the ranks
 * `ranks` (global ranks, ascending). Every member calls add with the same id
 * and ranks (non-members do not call it); the Gloo build connects the
 * members through `store` (ignored by MPI). Id 0 is the global set. */
hvd_status hvd_add_process_set(int id, const int* ranks, size_t n, const hvd_store* store,
                               const char* hostname, double timeout_s);
hvd_status hvd_remove_process_set(int id);
/* Collectives called from this thread go to process set `id` (0: global)
 * until the next call; the GPU path serves the global set only. */
hvd_status hvd_use_process_set(int id);

/* Build facts: "tensor_ops=gloo controllers=gloo target=x86_64_v3 ..." and
 * library versions ("mpi=MPICH 4.0.2"; "" without MPI). Static storage. */
const char* hvd_build_string(void);
const char* hvd_library_versions(void);

/* How data travels once initialised: the overall transport, then each rank
 * pair ("shm; 0-1 shm" or "hierarchical: ...; 0-1 shm, 0-2 gloo tcp"; the
 * first 16 ranks). "" before init. Valid until the next call on this thread. */
const char* hvd_transport(void);

/* Why GPU tensors cannot be served ("" when they can; loads the plugin). */
const char* hvd_gpu_unavailable_reason(void);

/* Compute capability (major*10+minor) of CUDA device `device` (-1: the
 * device this rank's communicator uses, local_rank % device count) through
 * the plugin; needs hvd_init_* first (the NCCL communicator is created). */
hvd_status hvd_gpu_compute_capability(int device, int* cc);

/* Sum-reduce `count` elements of `src` into `dst` `iterations` times with the
 * target-compiled kernel; returns seconds taken (for benchmarks). */
double hvd_benchmark_sum_kernel(hvd_dtype dtype, size_t count, int iterations);

#ifdef __cplusplus
}
#endif

#endif /* HVD_HVD_H */
