#include "runtime/kernels/cuda/gemm.h"

#include <climits>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/kernels/cuda/check.h"

namespace pf::cuda {

namespace {

struct HandleEntry {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

// (device, stream) -> handle + workspace. Entries live for the process (a destroyed stream's
// address may be reused by a new stream; the entry is then simply reused for it).
std::map<std::pair<int, cudaStream_t>, HandleEntry>& handle_cache() {
  static auto* cache = new std::map<std::pair<int, cudaStream_t>, HandleEntry>();
  return *cache;
}

HandleEntry& entry_for(cudaStream_t stream) {
  int device = 0;
  PF_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(cache_mutex());
  HandleEntry& e = handle_cache()[{device, stream}];
  if (e.handle == nullptr) {
    cublasHandle_t handle = nullptr;
    PF_CUBLAS_CHECK(cublasCreate(&handle));
    void* workspace = nullptr;
    const cudaError_t err = cudaMalloc(&workspace, kCublasWorkspaceBytes);
    if (err != cudaSuccess) {
      cublasDestroy(handle);
      PF_CUDA_CHECK(err);
    }
    PF_CUBLAS_CHECK(cublasSetStream(handle, stream));
    PF_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, kCublasWorkspaceBytes));
    PF_CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
    PF_CUBLAS_CHECK(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED));
    PF_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    e.handle = handle;
    e.workspace = workspace;
  }
  return e;
}

template <typename T>
constexpr cudaDataType_t data_type();
template <>
constexpr cudaDataType_t data_type<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t data_type<bf16>() { return CUDA_R_16BF; }

int to_int(int64_t v, const char* what) {
  PF_CHECK_ARG(v >= 0 && v <= INT_MAX, "gemm: ", what, " = ", v, " is outside cuBLAS's int range");
  return static_cast<int>(v);
}

template <typename TA>
cublasComputeType_t compute_type(const GemmOptions& options) {
  if (data_type<TA>() == CUDA_R_32F && options.allow_tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

}  // namespace

cublasHandle_t cublas_handle(cudaStream_t stream) { return entry_for(stream).handle; }
void* cublas_workspace(cudaStream_t stream) { return entry_for(stream).workspace; }

cublasLtHandle_t cublaslt_handle() {
  int device = 0;
  PF_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(cache_mutex());
  static auto* handles = new std::map<int, cublasLtHandle_t>();
  cublasLtHandle_t& h = (*handles)[device];
  if (h == nullptr) PF_CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first, with the
// row-major leading dimensions unchanged and m and n swapped.
template <typename TA, typename TC>
void gemm_strided_batched(cudaStream_t stream, bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, float alpha, const TA* a, int64_t lda, int64_t stride_a,
                          const TA* b, int64_t ldb, int64_t stride_b, float beta, TC* c, int64_t ldc,
                          int64_t stride_c, int64_t batch, const GemmOptions& options) {
  if (m == 0 || n == 0 || batch == 0) return;
  const int im = to_int(m, "m"), in = to_int(n, "n"), ik = to_int(k, "k");
  const int ilda = to_int(lda, "lda"), ildb = to_int(ldb, "ldb"), ildc = to_int(ldc, "ldc");
  const int ibatch = to_int(batch, "batch");
  PF_CHECK_ARG(lda >= (trans_a ? m : k) && ldb >= (trans_b ? k : n) && ldc >= n,
               "gemm: leading dimensions too small (lda ", lda, ", ldb ", ldb, ", ldc ", ldc, ")");
  cublasHandle_t handle = cublas_handle(stream);
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    PF_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, in, im, ik, &alpha, b, data_type<TA>(), ildb, a,
                                 data_type<TA>(), ilda, &beta, c, data_type<TC>(), ildc,
                                 compute_type<TA>(options), CUBLAS_GEMM_DEFAULT));
  } else {
    PF_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, op_b, op_a, in, im, ik, &alpha, b, data_type<TA>(), ildb, stride_b, a,
        data_type<TA>(), ilda, stride_a, &beta, c, data_type<TC>(), ildc, stride_c, ibatch,
        compute_type<TA>(options), CUBLAS_GEMM_DEFAULT));
  }
}

template <typename TA, typename TC>
void gemm(cudaStream_t stream, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const TA* a, const TA* b, float beta, TC* c, const GemmOptions& options) {
  gemm_strided_batched<TA, TC>(stream, trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, 0, b,
                               trans_b ? k : n, 0, beta, c, n, 0, 1, options);
}

template void gemm<float, float>(cudaStream_t, bool, bool, int64_t, int64_t, int64_t, float,
                                 const float*, const float*, float, float*, const GemmOptions&);
template void gemm<bf16, bf16>(cudaStream_t, bool, bool, int64_t, int64_t, int64_t, float, const bf16*,
                               const bf16*, float, bf16*, const GemmOptions&);
template void gemm<bf16, float>(cudaStream_t, bool, bool, int64_t, int64_t, int64_t, float, const bf16*,
                                const bf16*, float, float*, const GemmOptions&);
template void gemm_strided_batched<float, float>(cudaStream_t, bool, bool, int64_t, int64_t, int64_t,
                                                 float, const float*, int64_t, int64_t, const float*,
                                                 int64_t, int64_t, float, float*, int64_t, int64_t,
                                                 int64_t, const GemmOptions&);
template void gemm_strided_batched<bf16, bf16>(cudaStream_t, bool, bool, int64_t, int64_t, int64_t,
                                               float, const bf16*, int64_t, int64_t, const bf16*,
                                               int64_t, int64_t, float, bf16*, int64_t, int64_t,
                                               int64_t, const GemmOptions&);
template void gemm_strided_batched<bf16, float>(cudaStream_t, bool, bool, int64_t, int64_t, int64_t,
                                                float, const bf16*, int64_t, int64_t, const bf16*,
                                                int64_t, int64_t, float, float*, int64_t, int64_t,
                                                int64_t, const GemmOptions&);

namespace {

// RAII for the cuBLASLt descriptors of one call.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

// Row-major y[rows, out] = x[rows, in] W[out, in]^T is column-major D[out, rows] = op(A) B with
// A = W seen column-major as [in, out] (ld in) and op = T, B = x seen as [in, rows] (ld in). The
// bias has one entry per row of D, i.e. per output feature.
template <typename T>
bool linear_forward_lt(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* x,
                       const T* weight, const T* bias, T* y, T* pre_activation, LtEpilogue epilogue,
                       const GemmOptions& options) {
  if (rows == 0) return true;
  PF_CHECK_ARG(bias != nullptr, "linear_forward_lt: bias must not be null");
  PF_CHECK_ARG(epilogue == LtEpilogue::kBias || pre_activation != nullptr,
               "linear_forward_lt: kBiasGelu needs a pre_activation buffer");
  if (!aligned16(x) || !aligned16(weight) || !aligned16(bias) || !aligned16(y)) return false;
  if (epilogue == LtEpilogue::kBiasGelu && (out % 8 != 0 || !aligned16(pre_activation))) return false;
  to_int(rows, "rows");
  to_int(in, "in");
  to_int(out, "out");
  const cudaDataType_t type = data_type<T>();
  LtDescriptors desc;
  PF_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, compute_type<T>(options), CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  PF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  PF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  const cublasLtEpilogue_t epi =
      epilogue == LtEpilogue::kBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  PF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  PF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  PF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)));
  if (epilogue == LtEpilogue::kBiasGelu) {
    const int64_t aux_ld = out;
    PF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                   &pre_activation, sizeof(pre_activation)));
    PF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                   sizeof(aux_ld)));
    PF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                                   &type, sizeof(type)));
  }
  PF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, type, in, out, in));
  PF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, type, in, rows, in));
  PF_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, type, out, rows, out));
  PF_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.pref));
  const uint64_t workspace_bytes = kCublasWorkspaceBytes;
  PF_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtHandle_t lt = cublaslt_handle();
  void* workspace = cublas_workspace(stream);
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc.op, desc.a, desc.b, desc.d, desc.d,
                                                           desc.pref, 1, &heuristic, &found);
  if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  PF_CUBLAS_CHECK(hs);
  const float alpha = 1.0f, beta = 0.0f;
  PF_CUBLAS_CHECK(cublasLtMatmul(lt, desc.op, &alpha, weight, desc.a, x, desc.b, &beta, y, desc.d, y,
                                 desc.d, &heuristic.algo, workspace, kCublasWorkspaceBytes, stream));
  return true;
}

template bool linear_forward_lt<float>(cudaStream_t, int64_t, int64_t, int64_t, const float*, const float*,
                                       const float*, float*, float*, LtEpilogue, const GemmOptions&);
template bool linear_forward_lt<bf16>(cudaStream_t, int64_t, int64_t, int64_t, const bf16*, const bf16*,
                                      const bf16*, bf16*, bf16*, LtEpilogue, const GemmOptions&);

}  // namespace pf::cuda
