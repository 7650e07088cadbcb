// nanobind binding of the C surface (module hvd_selector._core). Accepts any
// DLPack-capable array (numpy, torch, ...), checks layout and dtype, and
// releases the GIL for every collective. The Python package allocates
// outputs with the input's own framework so results keep its type.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace nb = nanobind;
using Array = nb::ndarray<nb::ro>;
using MutArray = nb::ndarray<>;

namespace {

struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct MismatchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct TimeoutError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct PeerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct UnavailableError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct NotInitializedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void raise_status(hvd_status st) {
  if (st == HVD_OK) return;
  std::string msg = hvd_last_error();
  switch (st) {
    case HVD_ERR_INVALID: throw nb::value_error(msg.c_str());
    case HVD_ERR_MISMATCH: throw MismatchError(msg);
    case HVD_ERR_TIMEOUT: throw TimeoutError(msg);
    case HVD_ERR_PEER: throw PeerError(msg);
    case HVD_ERR_UNAVAILABLE: throw UnavailableError(msg);
    case HVD_ERR_NOT_INITIALIZED: throw NotInitializedError(msg);
    default: throw InternalError(msg);
  }
}

template <typename Fn>
void call(Fn&& fn) {
  hvd_status st;
  {
    nb::gil_scoped_release release;
    st = fn();
  }
  raise_status(st);
}

hvd_dtype to_dtype(nb::dlpack::dtype dt, const char* what) {
  using code = nb::dlpack::dtype_code;
  if (dt.lanes == 1) {
    if (dt.code == static_cast<uint8_t>(code::Float)) {
      if (dt.bits == 16) return HVD_FLOAT16;
      if (dt.bits == 32) return HVD_FLOAT32;
      if (dt.bits == 64) return HVD_FLOAT64;
    } else if (dt.code == static_cast<uint8_t>(code::Bfloat) && dt.bits == 16) {
      return HVD_BFLOAT16;
    } else if (dt.code == static_cast<uint8_t>(code::Int)) {
      if (dt.bits == 8) return HVD_INT8;
      if (dt.bits == 16) return HVD_INT16;
      if (dt.bits == 32) return HVD_INT32;
      if (dt.bits == 64) return HVD_INT64;
    } else if (dt.code == static_cast<uint8_t>(code::UInt) && dt.bits == 8) {
      return HVD_UINT8;
    } else if (dt.code == static_cast<uint8_t>(code::Bool) && dt.bits == 8) {
      return HVD_BOOL;
    }
  }
  static const char* names[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string name = dt.code < 7 ? names[dt.code] : "code" + std::to_string(dt.code);
  throw nb::type_error(
      (std::string(what) + ": unsupported dtype " + name + std::to_string(dt.bits) +
       "; supported: float16, bfloat16, float32, float64, int32, int64, uint8, int8, int16, bool")
          .c_str());
}

template <typename A>
hvd_tensor to_tensor(const A& a, const char* what) {
  hvd_tensor t{};
  t.dtype = to_dtype(a.dtype(), what);
  if (a.ndim() > HVD_MAX_DIMS)
    throw nb::value_error((std::string(what) + ": at most 8 dimensions are supported").c_str());
  t.ndim = static_cast<int>(a.ndim());
  int64_t expected = 1;
  bool contiguous = true;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    if (t.shape[i] != 1 && a.stride(i) != expected) contiguous = false;
    expected *= t.shape[i];
  }
  if (!contiguous && expected != 0)
    throw nb::value_error(
        (std::string(what) + ": tensor is not C-contiguous; pass np.ascontiguousarray(x) or x.contiguous()")
            .c_str());
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  int dev = a.device_type();
  if (dev == nb::device::cpu::value) {
    t.device = HVD_DEVICE_CPU;
  } else if (dev == nb::device::cuda::value) {
    t.device = HVD_DEVICE_CUDA;
  } else {
    throw nb::value_error((std::string(what) + ": tensors on DLPack device type " + std::to_string(dev) +
                           " are not supported (CPU and CUDA only)")
                              .c_str());
  }
  t.device_id = a.device_id();
  return t;
}

// The launcher's store client, called back (with the GIL) from the TCP mesh's rendezvous.
struct PyStore {
  nb::callable set_fn, get_fn;
  nb::object gather_fn;  // None: the store has no gather (the core sets and gets key by key)
};

void copy_error(char* error, const std::string& msg) {
  std::strncpy(error, msg.c_str(), 255);
  error[255] = '\0';
}

// The exception's own text (python_error::what() appends a traceback).
std::string python_message(nb::python_error& exc) {
  try {
    return nb::str(exc.value()).c_str();
  } catch (...) {
    return exc.what();
  }
}

// Runs a store callback's body under the GIL: 0, or 1 with the Python
// exception's text in `error` (the C surface's convention for callbacks).
template <class Body>
int calling_python(char* error, Body&& body) {
  nb::gil_scoped_acquire gil;
  try {
    body();
    return 0;
  } catch (nb::python_error& exc) {
    copy_error(error, python_message(exc));
    return 1;
  } catch (const std::exception& exc) {
    copy_error(error, exc.what());
    return 1;
  }
}

// A malloc'ed copy the core frees with free() (never empty: malloc(0) may be NULL).
void* malloc_copy(const void* data, size_t len) {
  void* out = std::malloc(len ? len : 1);
  std::memcpy(out, data, len);
  return out;
}

int store_set(void* ctx, const char* key, const void* value, size_t len, char* error) {
  return calling_python(error, [&] {
    static_cast<PyStore*>(ctx)->set_fn(std::string(key), nb::bytes(static_cast<const char*>(value), len));
  });
}

int store_get(void* ctx, const char* key, void** value, size_t* len, int64_t timeout_ms, char* error) {
  return calling_python(error, [&] {
    nb::bytes data = nb::cast<nb::bytes>(static_cast<PyStore*>(ctx)->get_fn(std::string(key), timeout_ms));
    *len = data.size();
    *value = malloc_copy(data.c_str(), *len);
  });
}

int store_gather(void* ctx, const char* prefix, int rank, int size, const void* value, size_t len,
                 void** table, size_t* table_len, int64_t timeout_ms, char* error) {
  return calling_python(error, [&] {
    nb::list values = nb::cast<nb::list>(static_cast<PyStore*>(ctx)->gather_fn(
        std::string(prefix), rank, size, nb::bytes(static_cast<const char*>(value), len), timeout_ms));
    std::string out;  // each value as a 4-byte big-endian length, then its bytes
    for (nb::handle item : values) {
      nb::bytes one = nb::cast<nb::bytes>(item);
      const size_t n = one.size();
      for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((n >> shift) & 0xff));
      out.append(one.c_str(), n);
    }
    *table_len = out.size();
    *table = malloc_copy(out.data(), out.size());
  });
}

// The C view of a Python store (its gather only where it has one).
hvd_store c_store(PyStore& store, const nb::bytes& key) {
  return hvd_store{&store,      store_set,  store_get,
                   key.c_str(), key.size(), store.gather_fn.is_none() ? nullptr : store_gather};
}

std::vector<hvd_tensor> tensors(const std::vector<Array>& arrays, const char* what) {
  std::vector<hvd_tensor> out;
  out.reserve(arrays.size());
  for (const auto& a : arrays) out.push_back(to_tensor(a, what));
  return out;
}

// A numpy array's dtype from its buffer format (native byte order only).
bool buffer_dtype(const Py_buffer& v, hvd_dtype* out) {
  const char* f = v.format ? v.format : "B";
  if (*f == '=' || *f == '@' || (*f == '<' && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)) ++f;
  if (!*f || f[1]) return false;
  switch (*f) {
    case 'e': *out = HVD_FLOAT16; return true;
    case 'f': *out = HVD_FLOAT32; return true;
    case 'd': *out = HVD_FLOAT64; return true;
    case '?': *out = HVD_BOOL; return true;
    case 'b': *out = HVD_INT8; return true;
    case 'B': *out = HVD_UINT8; return true;
    case 'h': *out = HVD_INT16; return v.itemsize == 2;
    case 'i':
    case 'l':
    case 'q':
      if (v.itemsize == 4) *out = HVD_INT32;
      if (v.itemsize == 8) *out = HVD_INT64;
      return v.itemsize == 4 || v.itemsize == 8;
    default: return false;
  }
}

// grouped_allreduce for a list of C-contiguous numpy arrays of one dtype,
// without a Python-level pass per tensor: inputs are read through the
// buffer protocol, the results land in one flat array from `empty` (the
// fusion buffer itself) and come back as views of it. None when the list
// is anything else: the caller then takes the general path, which also
// explains what is wrong with an input.
nb::object grouped_allreduce_numpy(nb::handle seq, nb::handle ndarray_type, nb::handle empty, int op,
                                   double pre, double post) {
  nb::object items = nb::steal(PySequence_Fast(seq.ptr(), "grouped_allreduce: expected a sequence"));
  if (!items.is_valid()) throw nb::python_error();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(items.ptr());
  PyObject** objs = PySequence_Fast_ITEMS(items.ptr());
  if (n == 0) return nb::none();
  std::vector<hvd_tensor> ins(static_cast<size_t>(n)), outs;
  size_t total = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (Py_TYPE(objs[i]) != reinterpret_cast<PyTypeObject*>(ndarray_type.ptr())) return nb::none();
    Py_buffer v;
    if (PyObject_GetBuffer(objs[i], &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      return nb::none();
    }
    hvd_tensor& t = ins[static_cast<size_t>(i)];
    bool ok = buffer_dtype(v, &t.dtype) && v.ndim <= HVD_MAX_DIMS && (i == 0 || t.dtype == ins[0].dtype);
    t.ndim = v.ndim;
    for (int k = 0; ok && k < v.ndim; ++k) t.shape[k] = static_cast<int64_t>(v.shape[k]);
    t.data = v.buf;  // the list holds the array, which holds its memory
    t.device = HVD_DEVICE_CPU;
    total += static_cast<size_t>(v.itemsize > 0 ? v.len / v.itemsize : 0);
    PyBuffer_Release(&v);
    if (!ok) return nb::none();
  }
  nb::object flat = empty(total, nb::handle(objs[0]).attr("dtype"));
  Py_buffer fv;
  if (PyObject_GetBuffer(flat.ptr(), &fv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) throw nb::python_error();
  auto* at = static_cast<unsigned char*>(fv.buf);
  const size_t esize = static_cast<size_t>(fv.itemsize);
  PyBuffer_Release(&fv);
  outs = ins;
  std::vector<size_t> ends(ins.size());
  size_t end = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    size_t count = 1;
    for (int k = 0; k < ins[i].ndim; ++k) count *= static_cast<size_t>(ins[i].shape[k]);
    outs[i].data = at + end * esize;
    ends[i] = end += count;
  }
  call([&] {
    return hvd_grouped_allreduce(ins.data(), outs.data(), ins.size(), static_cast<hvd_op>(op), pre, post);
  });
  nb::list result;
  for (size_t i = 0; i < ins.size(); ++i) {
    size_t begin = i ? ends[i - 1] : 0;
    nb::object slice = nb::steal(PySlice_New(nb::int_(begin).ptr(), nb::int_(ends[i]).ptr(), nullptr));
    nb::object view = nb::steal(PyObject_GetItem(flat.ptr(), slice.ptr()));
    if (!view.is_valid()) throw nb::python_error();
    if (ins[i].ndim != 1) {
      nb::list shape;
      for (int k = 0; k < ins[i].ndim; ++k) shape.append(ins[i].shape[k]);
      view = view.attr("reshape")(nb::tuple(shape));
    }
    result.append(view);
  }
  return result;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "hvd-selector native core (see docs/reference/native.md)";
  auto base = nb::exception<InternalError>(m, "HorovodInternalError", PyExc_RuntimeError);
  nb::exception<MismatchError>(m, "MismatchError", base);
  nb::exception<TimeoutError>(m, "CollectiveTimeoutError", base);
  nb::exception<PeerError>(m, "PeerFailureError", base);
  nb::exception<UnavailableError>(m, "UnavailableError", PyExc_RuntimeError);
  nb::exception<NotInitializedError>(m, "NotInitializedError", PyExc_ValueError);

  m.def(
      "init_gloo",
      [](int rank, int size, int local_rank, int local_size, nb::callable set_fn, nb::callable get_fn,
         const std::string& hostname, double timeout_s, nb::bytes key, nb::object gather_fn) {
        PyStore store{std::move(set_fn), std::move(get_fn), std::move(gather_fn)};
        hvd_store s = c_store(store, key);  // key: the job secret
        call([&] {
          return hvd_init_gloo(rank, size, local_rank, local_size, &s, hostname.c_str(), timeout_s);
        });
      },
      nb::arg("rank"), nb::arg("size"), nb::arg("local_rank"), nb::arg("local_size"), nb::arg("set_fn"),
      nb::arg("get_fn"), nb::arg("hostname"), nb::arg("timeout_s"), nb::arg("key"),
      nb::arg("gather_fn") = nb::none());
  m.def("init_mpi", [](double timeout_s) { call([&] { return hvd_init_mpi(timeout_s); }); });
  m.def("finalize", [] { call([] { return hvd_finalize(); }); });
  m.def("initialized", [] { return hvd_initialized() != 0; });
  m.def("rank", &hvd_rank);
  m.def("size", &hvd_size);
  m.def("local_rank", &hvd_local_rank);
  m.def("local_size", &hvd_local_size);

  m.def("allreduce", [](const Array& in, const MutArray& out, int op, double pre, double post) {
    hvd_tensor ti = to_tensor(in, "allreduce"), to = to_tensor(out, "allreduce");
    call([&] { return hvd_allreduce(&ti, &to, static_cast<hvd_op>(op), pre, post); });
  });
  m.def("grouped_allreduce",
        [](const std::vector<Array>& ins, const std::vector<Array>& outs, int op, double pre, double post) {
          if (ins.size() != outs.size())
            throw nb::value_error("grouped_allreduce: inputs and outputs differ in count");
          auto ti = tensors(ins, "grouped_allreduce"), to = tensors(outs, "grouped_allreduce");
          call([&] {
            return hvd_grouped_allreduce(ti.data(), to.data(), ti.size(), static_cast<hvd_op>(op), pre, post);
          });
        });
  m.def("grouped_allreduce_numpy", &grouped_allreduce_numpy);
  m.def("allgather_prepare", [](const Array& in) {
    hvd_tensor t = to_tensor(in, "allgather");
    std::vector<int64_t> dims(static_cast<size_t>(std::max(hvd_size(), 1)));
    call([&] { return hvd_allgather_prepare(&t, dims.data()); });
    return dims;
  });
  m.def("allgather", [](const Array& in, const MutArray& out, const std::vector<int64_t>& dims) {
    hvd_tensor ti = to_tensor(in, "allgather"), to = to_tensor(out, "allgather");
    call([&] { return hvd_allgather(&ti, &to, dims.data()); });
  });
  m.def("broadcast", [](const MutArray& inout, int root) {
    hvd_tensor t = to_tensor(inout, "broadcast");
    call([&] { return hvd_broadcast(&t, root); });
  });
  m.def("alltoall_prepare", [](const Array& in, const std::vector<int64_t>& splits) {
    hvd_tensor t = to_tensor(in, "alltoall");
    // The caller checks splits against the size of the process set in use.
    if (hvd_size() > 0 && static_cast<int>(splits.size()) > hvd_size())
      throw nb::value_error(("alltoall: splits has " + std::to_string(splits.size()) +
                             " entries but there are " + std::to_string(hvd_size()) + " ranks")
                                .c_str());
    std::vector<int64_t> recv(splits.size());
    call([&] { return hvd_alltoall_prepare(&t, splits.data(), recv.data()); });
    return recv;
  });
  m.def("alltoall", [](const Array& in, const std::vector<int64_t>& splits, const MutArray& out,
                       const std::vector<int64_t>& recv) {
    hvd_tensor ti = to_tensor(in, "alltoall"), to = to_tensor(out, "alltoall");
    call([&] { return hvd_alltoall(&ti, splits.data(), &to, recv.data()); });
  });
  m.def("barrier", [] { call([] { return hvd_barrier(); }); });
  m.def(
      "add_process_set",
      [](int id, const std::vector<int>& ranks, nb::object set_fn, nb::object get_fn,
         const std::string& hostname, double timeout_s, nb::bytes key, nb::object gather_fn) {
        if (set_fn.is_none()) {  // MPI: no store needed
          call([&] {
            return hvd_add_process_set(id, ranks.data(), ranks.size(), nullptr, hostname.c_str(), timeout_s);
          });
          return;
        }
        PyStore store{nb::borrow<nb::callable>(set_fn), nb::borrow<nb::callable>(get_fn), gather_fn};
        hvd_store st = c_store(store, key);
        call([&] {
          return hvd_add_process_set(id, ranks.data(), ranks.size(), &st, hostname.c_str(), timeout_s);
        });
      },
      nb::arg("set_id"), nb::arg("ranks"), nb::arg("set_fn"), nb::arg("get_fn"), nb::arg("hostname"),
      nb::arg("timeout_s"), nb::arg("key"), nb::arg("gather_fn") = nb::none());
  m.def("remove_process_set", [](int id) { call([&] { return hvd_remove_process_set(id); }); });
  m.def("use_process_set", [](int id) { raise_status(hvd_use_process_set(id)); });
  m.def("fusion_threshold", &hvd_fusion_threshold);
  m.def("set_fusion_threshold", &hvd_set_fusion_threshold);
  m.def("build_string", [] { return std::string(hvd_build_string()); });
  m.def("transport", [] { return std::string(hvd_transport()); });
  m.def("library_versions", [] { return std::string(hvd_library_versions()); });
  m.def("gpu_unavailable_reason", [] { return std::string(hvd_gpu_unavailable_reason()); });
  m.def(
      "gpu_compute_capability",
      [](int device) {
        int cc = 0;
        call([&] { return hvd_gpu_compute_capability(device, &cc); });
        return cc;
      },
      nb::arg("device") = -1);
  m.def("benchmark_sum_kernel", [](int dtype, size_t count, int iterations) {
    nb::gil_scoped_release release;
    return hvd_benchmark_sum_kernel(static_cast<hvd_dtype>(dtype), count, iterations);
  });
}
