// Python: the low-level module pipeforge.core (extension pipeforge/_core.so). The public API is the
// pure-Python layer in src/pipeforge/, which wraps these classes.
//
// threads="1": every call releases the GIL while it runs (a step can take long), and director
// calls (the data loader) take it back on whichever thread the runtime calls them.
%module(package="pipeforge", directors="1", threads="1") core

%{
#include <memory>
#include <string>
#include <vector>

#include "bindings/pipeforge_core.h"
%}

// ---- errors: pipeforge::Error -> the class pipeforge._errors.from_status picks ----------------
%{
// Sets the Python exception for a runtime error (the GIL is held: SWIG restores it before the catch).
static void pf_python_raise(int code, const std::string& message) {
  PyObject* module = PyImport_ImportModule("pipeforge._errors");
  if (module == nullptr) return;
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace");
  PyObject* exc = text == nullptr ? nullptr : PyObject_CallMethod(module, "from_status", "iO", code, text);
  Py_XDECREF(text);
  Py_DECREF(module);
  if (exc == nullptr) return;
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
  Py_DECREF(exc);
}
%}

%exception {
  try {
    $action
  } catch (const pipeforge::Error& e) {
    pf_python_raise(e.code(), e.message());
    SWIG_fail;
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
    SWIG_fail;
  } catch (const std::exception& e) {
    pf_python_raise(PF_INTERNAL, e.what());
    SWIG_fail;
  }
}

// ---- tensors in: any C-contiguous buffer (numpy array) of float32 or int32, borrowed, no copy ----
%{
// Holds a buffer export for as long as a Tensor borrows it; may be released on a thread that does
// not hold the GIL (a data loader's last micro-batch), so it takes the GIL itself.
struct PfBufferKeeper {
  Py_buffer view;
  bool held = false;
  ~PfBufferKeeper() {
    if (!held) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyBuffer_Release(&view);
    PyGILState_Release(gil);
  }
};

// The element type of a buffer format: 'f' (float32), 'i' (int32), other or 0.
static char pf_python_format(const Py_buffer& view) {
  const char* f = view.format != nullptr ? view.format : "B";
  if (*f == '@' || *f == '=' || *f == '<') ++f;  // native or little-endian, as on every supported host
  if (f[0] == '\0' || f[1] != '\0') return 0;
  if (*f == 'f' && view.itemsize == 4) return 'f';
  if ((*f == 'i' || *f == 'l' || *f == 'q') && view.itemsize == 4) return 'i';
  return 0;
}

static bool pf_python_tensor(PyObject* obj, pipeforge::Tensor* out, const char* what) {
  auto keeper = std::make_shared<PfBufferKeeper>();
  if (PyObject_GetBuffer(obj, &keeper->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous float32 or int32 array, got %R", what, obj);
    return false;
  }
  keeper->held = true;
  const char kind = pf_python_format(keeper->view);
  if (kind == 0) {
    PyErr_Format(PyExc_ValueError, "%s: unsupported element type '%s' (itemsize %zd): use float32 or int32", what,
                 keeper->view.format != nullptr ? keeper->view.format : "B", keeper->view.itemsize);
    return false;
  }
  std::vector<int64_t> shape(keeper->view.shape, keeper->view.shape + keeper->view.ndim);
  const void* data = keeper->view.buf;
  *out = pipeforge::Tensor::borrow(data, kind == 'f' ? pipeforge::F32 : pipeforge::I32, std::move(shape),
                                   std::shared_ptr<const void>(keeper, data));
  return true;
}

// A writable C-contiguous buffer of `kind` ('f' or 'i'); released by the caller.
static bool pf_python_writable(PyObject* obj, Py_buffer* view, char kind, const char* what) {
  if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: expected a writable C-contiguous %s array, got %R", what,
                 kind == 'f' ? "float32" : "int32", obj);
    return false;
  }
  if (pf_python_format(*view) != kind) {
    PyBuffer_Release(view);
    PyErr_Format(PyExc_ValueError, "%s: expected a %s array", what, kind == 'f' ? "float32" : "int32");
    return false;
  }
  return true;
}
%}

%typemap(in) const pipeforge::Tensor& (pipeforge::Tensor temp) {
  if (!pf_python_tensor($input, &temp, "$1_name")) SWIG_fail;
  $1 = &temp;
}

%typemap(in) (float* out, size_t count) (Py_buffer view, bool held = false) {
  if (!pf_python_writable($input, &view, 'f', "$1_name")) SWIG_fail;
  held = true;
  $1 = static_cast<float*>(view.buf);
  $2 = static_cast<size_t>(view.len / 4);
}
%typemap(freearg) (float* out, size_t count) {
  if (held$argnum) PyBuffer_Release(&view$argnum);
}
%typemap(in) (int32_t* out, size_t count) (Py_buffer view, bool held = false) {
  if (!pf_python_writable($input, &view, 'i', "$1_name")) SWIG_fail;
  held = true;
  $1 = static_cast<int32_t*>(view.buf);
  $2 = static_cast<size_t>(view.len / 4);
}
%typemap(freearg) (int32_t* out, size_t count) {
  if (held$argnum) PyBuffer_Release(&view$argnum);
}

// A sequence of ints in; a tuple of ints out.
%typemap(in) (const int64_t* values, size_t count) (std::vector<int64_t> temp) {
  PyObject* seq = PySequence_Fast($input, "expected a sequence of ints");
  if (seq == nullptr) SWIG_fail;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      SWIG_fail;
    }
    temp.push_back(static_cast<int64_t>(v));
  }
  Py_DECREF(seq);
  $1 = temp.data();
  $2 = temp.size();
}
// A sequence of floats in (per-stage costs).
%typemap(in) (const double* values, size_t count) (std::vector<double> temp) {
  PyObject* seq = PySequence_Fast($input, "expected a sequence of numbers");
  if (seq == nullptr) SWIG_fail;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1.0 && PyErr_Occurred()) {
      Py_DECREF(seq);
      SWIG_fail;
    }
    temp.push_back(v);
  }
  Py_DECREF(seq);
  $1 = temp.data();
  $2 = temp.size();
}
%typemap(out) std::vector<int64_t> {
  const std::vector<int64_t>& v = $1;
  $result = PyTuple_New(static_cast<Py_ssize_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) PyTuple_SET_ITEM($result, i, PyLong_FromLongLong(v[i]));
}

// Java and Go build tensors from arrays; Python passes buffers straight through.
%ignore pipeforge::Tensor::from_floats;
%ignore pipeforge::Tensor::from_ints;

// ---- the ABI check, when the module is imported -----------------------------------------------
%init %{
  if (pipeforge::library_abi_version() != pipeforge::header_abi_version()) {
    PyErr_Format(PyExc_ImportError,
                 "pipeforge: libpipeforge.so has ABI version %d (version %s) but this module was built for ABI "
                 "version %d",
                 pipeforge::library_abi_version(), pipeforge::version().c_str(), pipeforge::header_abi_version());
    return NULL;
  }
%}

// Go's forms of partition and partition_balanced (this language takes the returned vector).
%ignore pipeforge::Trainer::partition_into;
%ignore pipeforge::Model::partition_balanced_into;
%ignore pipeforge::Model::partition_by_parameters_into;
// `lambda` is a Python keyword.
%rename(lambda_) pipeforge::GlmOptions::lambda;

%include "bindings/pipeforge.i"
