#include "c_api/tensor_view.h"

#include <cstring>

#include "runtime/core/error.h"

namespace pf::capi {
namespace {

const char* dtype_label(int32_t dtype) {
  switch (dtype) {
    case PF_DTYPE_F32: return "f32";
    case PF_DTYPE_BF16: return "bf16";
    case PF_DTYPE_F16: return "f16";
    case PF_DTYPE_I32: return "i32";
    default: return nullptr;
  }
}

}  // namespace

Tensor tensor_from_view(const pf_tensor_view& view, const std::string& what) {
  PF_CHECK_ARG(dtype_label(view.dtype) != nullptr, what, ": dtype ", view.dtype, " is not a pf_dtype");
  if (view.device_kind == PF_DEVICE_CUDA) {
    fail(ErrorCode::kUnimplemented, what, ": device cuda:", view.device_ordinal,
         " is not supported by this build (CPU only); pass host memory");
  }
  PF_CHECK_ARG(view.device_kind == PF_DEVICE_CPU, what, ": device_kind ", view.device_kind,
               " is not a pf_device_kind");
  PF_CHECK_ARG(view.device_ordinal == 0, what, ": device_ordinal must be 0 for the CPU, got ",
               view.device_ordinal);
  PF_CHECK_ARG(view.ndim >= 1 && view.ndim <= kMaxViewDims, what, ": ndim must be in [1, ", kMaxViewDims,
               "], got ", view.ndim);
  PF_CHECK_ARG(view.shape != nullptr, what, ": shape is NULL (ndim is ", view.ndim, ")");

  Shape shape(view.shape, view.shape + view.ndim);
  int64_t numel = 1;
  for (int i = 0; i < view.ndim; ++i) {
    PF_CHECK_ARG(shape[i] >= 0, what, ": shape[", i, "] is negative in ", shape_to_string(shape));
    PF_CHECK_ARG(!__builtin_mul_overflow(numel, shape[i], &numel) && numel <= (int64_t{1} << 40), what,
                 ": shape ", shape_to_string(shape), " has too many elements");
  }
  if (view.strides != nullptr) {
    int64_t expected = 1;
    for (int i = view.ndim - 1; i >= 0; --i) {
      // A dimension of extent 1 may carry any stride (as in DLPack and numpy).
      PF_CHECK_ARG(shape[i] == 1 || view.strides[i] == expected, what, ": strides [",
                   [&] {
                     std::string s;
                     for (int j = 0; j < view.ndim; ++j) s += (j ? ", " : "") + std::to_string(view.strides[j]);
                     return s;
                   }(),
                   "] (in elements) are not the contiguous row-major strides of shape ",
                   shape_to_string(shape), "; pass a contiguous copy");
      expected *= shape[i];
    }
  }
  PF_CHECK_ARG(view.data != nullptr || numel == 0, what, ": data is NULL for shape ", shape_to_string(shape));

  const DType dtype = static_cast<DType>(view.dtype);
  Tensor tensor = Tensor::empty(shape, dtype);
  if (numel > 0) std::memcpy(tensor.data<char>(), view.data, tensor.nbytes());
  return tensor;
}

}  // namespace pf::capi
