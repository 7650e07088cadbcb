/*
 * The contract between the core library (libhvd / hvd_selector._core) and the
 * lazily loaded CUDA + NCCL plugin (libhvd_nccl.so).
 *
 * Why a plugin: the nccl variant must import and serve CPU tensors on a machine
 * without a GPU or driver. The core never links CUDA or NCCL; it dlopen()s
 * libhvd_nccl.so (installed next to the core module) on the first GPU
 * operation and calls hvd_nccl_plugin_get(). If dlopen or any entry point
 * fails, the core raises a clear "GPU operations unavailable: <why>" error.
 *
 * All functions return 0 on success; on failure one of hvd_plugin_status
 * (the core's hvd_status numbering) and last_error() returns a one-line,
 * human-readable reason (thread-local). After HVD_PLUGIN_ERR_TIMEOUT or
 * HVD_PLUGIN_ERR_PEER the communicator is aborted: every later collective
 * fails with HVD_PLUGIN_ERR_PEER until finalize() and init() again.
 * Pointers named `send`/`recv`/`device_buf` are CUDA device pointers; a send
 * buffer may equal its recv buffer (in place). `stream` is a cudaStream_t
 * passed as void* (NULL: the plugin's own stream). Counts are elements.
 *
 * ABI 2 (this file): every hvd_dtype, out-of-place reductions, init()'s
 * timeout, abort(), status codes. ABI 1 plugins (6 dtypes, in place only)
 * are refused by the core with one line.
 */
#ifndef HVD_NCCL_PLUGIN_H
#define HVD_NCCL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_NCCL_PLUGIN_ABI 2
#define HVD_NCCL_UNIQUE_ID_BYTES 128

/* Failure codes (same numbering as the core's hvd_status). */
typedef enum {
  HVD_PLUGIN_ERR_INVALID = 1, /* bad argument, or no communicator */
  HVD_PLUGIN_ERR_TIMEOUT = 3, /* peers did not answer within init()'s timeout */
  HVD_PLUGIN_ERR_PEER = 4,    /* NCCL reported a failed peer or network; or aborted earlier */
  HVD_PLUGIN_ERR_INTERNAL = 7 /* a CUDA or NCCL failure on this rank */
} hvd_plugin_status;

/* Element types (same numbering as the core's hvd_dtype). Reductions of
 * each follow the CPU path (see native/nccl/plan.h); allgather, broadcast
 * and alltoall move bytes, whatever the type. */
typedef enum {
  HVD_PLUGIN_FLOAT16 = 0,
  HVD_PLUGIN_BFLOAT16 = 1,
  HVD_PLUGIN_FLOAT32 = 2,
  HVD_PLUGIN_FLOAT64 = 3,
  HVD_PLUGIN_INT32 = 4,
  HVD_PLUGIN_INT64 = 5,
  HVD_PLUGIN_UINT8 = 6,
  HVD_PLUGIN_INT8 = 7,
  HVD_PLUGIN_INT16 = 8,
  HVD_PLUGIN_BOOL = 9
} hvd_plugin_dtype;

/* Reductions (same numbering as the core's hvd_op). AVERAGE is SUM followed
 * by a postscale of 1/size, applied by the plugin. */
typedef enum {
  HVD_PLUGIN_SUM = 0,
  HVD_PLUGIN_AVERAGE = 1,
  HVD_PLUGIN_MIN = 2,
  HVD_PLUGIN_MAX = 3,
  HVD_PLUGIN_PRODUCT = 4
} hvd_plugin_op;

typedef struct hvd_nccl_plugin {
  int abi_version; /* == HVD_NCCL_PLUGIN_ABI */

  const char* (*last_error)(void);

  /* Versions as "cuda_runtime=13.0 cuda_driver=13.0 nccl=2.27.3" (static storage). */
  const char* (*versions)(void);

  /* Number of visible CUDA devices (0 when no driver); never fails. */
  int (*device_count)(void);

  /* Compute capability of `device` as major*10+minor (e.g. 80). */
  int (*compute_capability)(int device, int* cc_out);

  /* Called on rank 0 only: fills HVD_NCCL_UNIQUE_ID_BYTES bytes. The core
   * broadcasts them to every rank over the controller (Gloo or MPI). */
  int (*get_unique_id)(void* out);

  /* Create the communicator on `device` for (rank, size). Every rank must
   * join within timeout_s seconds, else HVD_PLUGIN_ERR_TIMEOUT (and nothing is left
   * behind); the same timeout bounds synchronize() and finalize(). */
  int (*init)(int rank, int size, const void* unique_id, int device, double timeout_s);

  /* Wait (at most the timeout) for queued work, leave the communicator with
   * the peers and free it; when that cannot finish it aborts instead. */
  int (*finalize)(void);

  /* Drop the communicator now, waiting for nobody (after a peer failed):
   * queued work is cancelled; finalize() then only frees what is left. */
  int (*abort)(void);

  /* recv = postscale * op_r(prescale * send_r), `count` elements; send may
   * equal recv. prescale/postscale of 1.0 skip scaling. */
  int (*allreduce)(const void* send, void* recv, size_t count, int dtype, int op, double prescale,
                   double postscale, void* stream);

  /* Fused allreduce of n buffers: packed (with the prescale) into one fusion
   * buffer by a CUDA kernel, reduced with one NCCL call, unpacked (with the
   * postscale) into recvs; sends[i] may equal recvs[i]. */
  int (*grouped_allreduce)(const void* const* sends, void* const* recvs, const size_t* counts, size_t n,
                           int dtype, int op, double prescale, double postscale, void* stream);

  /* recv holds sum(recv_counts) elements; send holds recv_counts[rank]. */
  int (*allgatherv)(const void* send, void* recv, const size_t* recv_counts, int dtype, void* stream);

  int (*broadcast)(void* device_buf, size_t count, int dtype, int root, void* stream);

  /* send_counts[i] elements go to rank i; recv_counts[i] come from rank i. */
  int (*alltoallv)(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                   int dtype, void* stream);

  /* Wait for all work the plugin queued on `stream`: at most the timeout
   * (then HVD_PLUGIN_ERR_TIMEOUT); a failure NCCL reports meanwhile (a peer
   * died, the network failed) is HVD_PLUGIN_ERR_PEER. Either aborts the
   * communicator. */
  int (*synchronize)(void* stream);
} hvd_nccl_plugin;

/* The single exported symbol of libhvd_nccl.so. */
const hvd_nccl_plugin* hvd_nccl_plugin_get(void);
typedef const hvd_nccl_plugin* (*hvd_nccl_plugin_get_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* HVD_NCCL_PLUGIN_H */
