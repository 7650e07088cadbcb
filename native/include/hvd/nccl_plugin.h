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
 * All functions return 0 on success, non-zero on failure; on failure
 * last_error() returns a one-line, human-readable reason (thread-local).
 * Pointers named `device_buf` are CUDA device pointers. `stream` is a
 * cudaStream_t passed as void* (NULL: the plugin's own stream).
 */
#ifndef HVD_NCCL_PLUGIN_H
#define HVD_NCCL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_NCCL_PLUGIN_ABI 1
#define HVD_NCCL_UNIQUE_ID_BYTES 128

/* Element types (same numbering as the core's hvd_dtype). */
typedef enum {
  HVD_PLUGIN_FLOAT16 = 0,
  HVD_PLUGIN_BFLOAT16 = 1,
  HVD_PLUGIN_FLOAT32 = 2,
  HVD_PLUGIN_FLOAT64 = 3,
  HVD_PLUGIN_INT32 = 4,
  HVD_PLUGIN_INT64 = 5
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

  const char *(*last_error)(void);

  /* Versions as "cuda_runtime=13.0 cuda_driver=13.0 nccl=2.27.3" (static storage). */
  const char *(*versions)(void);

  /* Number of visible CUDA devices (0 when no driver); never fails. */
  int (*device_count)(void);

  /* Compute capability of `device` as major*10+minor (e.g. 80). */
  int (*compute_capability)(int device, int *cc_out);

  /* Called on rank 0 only: fills HVD_NCCL_UNIQUE_ID_BYTES bytes. The core
   * broadcasts them to every rank over the controller (Gloo or MPI). */
  int (*get_unique_id)(void *out);

  /* Create the communicator on `device` for (rank, size). */
  int (*init)(int rank, int size, const void *unique_id, int device);

  int (*finalize)(void);

  /* In-place allreduce of `count` elements with pre/post scaling.
   * prescale/postscale of 1.0 skip the scaling kernel. */
  int (*allreduce)(void *device_buf, size_t count, int dtype, int op, double prescale,
                   double postscale, void *stream);

  /* Fused allreduce of n buffers: packed into one fusion buffer by a CUDA
   * kernel, reduced with one NCCL call, unpacked. */
  int (*grouped_allreduce)(void *const *device_bufs, const size_t *counts, size_t n, int dtype,
                           int op, double prescale, double postscale, void *stream);

  /* recv holds sum(recv_counts) elements; send holds recv_counts[rank]. */
  int (*allgatherv)(const void *send, void *recv, const size_t *recv_counts, int dtype,
                    void *stream);

  int (*broadcast)(void *device_buf, size_t count, int dtype, int root, void *stream);

  /* send_counts[i] elements go to rank i; recv_counts[i] come from rank i. */
  int (*alltoallv)(const void *send, const size_t *send_counts, void *recv,
                   const size_t *recv_counts, int dtype, void *stream);

  /* Wait for all work the plugin queued on `stream`. */
  int (*synchronize)(void *stream);
} hvd_nccl_plugin;

/* The single exported symbol of libhvd_nccl.so. */
const hvd_nccl_plugin *hvd_nccl_plugin_get(void);
typedef const hvd_nccl_plugin *(*hvd_nccl_plugin_get_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* HVD_NCCL_PLUGIN_H */
