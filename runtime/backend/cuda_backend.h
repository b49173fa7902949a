// The CUDA backend as the runtime sees it: an interface with no CUDA type in it. Its one
// implementation (runtime/backend/cuda/, docs/BACKENDS.md) is the only code that links the CUDA
// runtime, cuBLAS and NCCL; it lives in libpipeforge_cuda.so.<abi>, loaded the first time a CUDA
// device is asked for, or is linked in statically (the GPU tests). Either way it registers itself
// (register_cuda_backend) from a static initializer and, with it, the CUDA allocator and copy
// hooks of //runtime/tensor.
//
// Conventions: every call may throw pf::Error (kCudaError, kCublasError, kNcclError, kTimeout, ...).
// "The current stream" is the calling thread's current stream for the device in question (set by a
// stream_scope()); with none set, the device's legacy default stream. Tensor-level operations run
// on the current stream of their tensors' device, inside a device scope of it, and allocate their
// outputs with Tensor::empty on that device (charged to the thread's memory category).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/gpu_transport_group.h"
#include "runtime/comm/in_process_transport.h"
#include "runtime/comm/world.h"
#include "runtime/tensor/tensor.h"

namespace pf {

// Bumped whenever this interface changes; a backend built against another revision is refused.
constexpr int kCudaBackendInterfaceRevision = 4;

// The id of an embedding row whose token another vocabulary-parallel member holds (embedding_forward).
constexpr int32_t kEmbeddingIdNotHeld = -1;

struct CudaAvailability {
  int device_count = 0;
  std::string reason;  // why there are none (the backend's or the CUDA runtime's message); "" when count > 0
};

// Restores what it changed (current device, current stream) when destroyed.
class BackendScope {
 public:
  virtual ~BackendScope() = default;
};

// An owned non-blocking stream on one device (it never synchronizes with the legacy default stream).
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  virtual int device() const = 0;
  // Host wait for all work issued so far; kTimeout naming `what` after `timeout_seconds`.
  virtual void synchronize(double timeout_seconds, const std::string& what) const = 0;
};

// An owned event on one device. `stream` nullptr: the current stream (of the event's device).
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual void record(const DeviceStream* stream) = 0;
  // Work issued on `stream` after this call waits until the recorded work is done.
  virtual void make_wait(const DeviceStream* stream) const = 0;
  virtual bool query() const = 0;  // the recorded work has completed (true when never recorded)
  virtual void synchronize(double timeout_seconds, const std::string& what) const = 0;
};

// Page-locked host memory (fast, asynchronous device copies).
class PinnedBuffer {
 public:
  virtual ~PinnedBuffer() = default;
  virtual char* data() const = 0;
  virtual size_t size() const = 0;
};

// AdamW's hyperparameters (PyTorch's AdamW on fp32 values).
struct AdamWHyperparameters {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
};

// A convolution's sizes (runtime/layers/conv2d.h): input [batch, channels, height, width] (or its
// image rows), output [batch, out_channels, out_height, out_width]; square kernel, zero padding.
struct ConvGeometry {
  int64_t batch = 0, channels = 0, height = 0, width = 0, out_channels = 0;
  int64_t kernel = 1, stride = 1, padding = 0, out_height = 0, out_width = 0;
};

// A Vision Transformer's patch embedding (runtime/layers/patch_embedding.h): images [batch, C*H*W]
// -> tokens [batch, 1 + (H / patch) (W / patch), dim].
struct PatchGeometry {
  int64_t channels = 0, height = 0, width = 0, patch = 1, dim = 0;
};

class CudaBackend {
 public:
  virtual ~CudaBackend() = default;

  // ---- Devices, scopes, streams, events, memory ----
  virtual CudaAvailability probe() = 0;  // never throws
  virtual std::unique_ptr<BackendScope> device_scope(int ordinal) = 0;
  // Makes `stream` the calling thread's current stream for its device (scopes nest).
  virtual std::unique_ptr<BackendScope> stream_scope(const DeviceStream& stream) = 0;
  virtual std::unique_ptr<DeviceStream> new_stream(int ordinal) = 0;
  virtual std::unique_ptr<DeviceEvent> new_event(int ordinal) = 0;
  virtual std::unique_ptr<PinnedBuffer> new_pinned_buffer(size_t bytes) = 0;
  // Copies `bytes` between device and (pinned) host memory on `stream`; `what` names it in errors.
  virtual void copy_async(void* dst, const void* src, size_t bytes, const DeviceStream& stream,
                          const std::string& what) = 0;

  // ---- Transports: CUDA ranks of one process (in process on one device, NCCL across devices) ----
  // devices[r]: the ordinal of rank r; nccl_pairs: rank pairs on distinct devices that exchange
  // messages (comm::GpuTransportGroup).
  virtual std::unique_ptr<comm::GpuTransportGroup> new_gpu_transport(
      std::vector<int> devices, const std::vector<std::pair<int, int>>& nccl_pairs,
      const comm::InProcessTransport::Options& local, int max_pending_sends) = 0;
  // ---- One CUDA rank per process: NCCL between the processes of `world`, bootstrapped over it ----
  // Collective over `world` (comm::NcclProcessTransport): this process runs rank world->rank() on
  // CUDA device `device`; `talking`: the rank pairs that exchange messages (either order).
  virtual std::unique_ptr<comm::GpuTransportGroup> new_process_gpu_transport(
      std::shared_ptr<comm::World> world, int device, const std::vector<std::pair<int, int>>& talking,
      int max_pending_sends, double init_timeout_seconds) = 0;

  // ---- The layers and the loss (the CPU code in runtime/layers calls these for CUDA tensors) ----
  // y = x W^T (+ b); x [..., in] -> y [..., out]. `bias` may be undefined.
  virtual Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias) = 0;
  // dx = dy W, shaped `input_shape`.
  virtual Tensor linear_backward_input(const Tensor& dy, const Tensor& weight, const Shape& input_shape) = 0;
  // dW += dy^T x; db += column sums of dy (`dbias` may be undefined).
  virtual void linear_backward_weight(const Tensor& x, const Tensor& dy, const Tensor& dweight,
                                      const Tensor& dbias) = 0;
  virtual Tensor relu_forward(const Tensor& x) = 0;
  virtual Tensor relu_backward(const Tensor& x, const Tensor& dy) = 0;
  virtual Tensor gelu_forward(const Tensor& x) = 0;
  virtual Tensor gelu_backward(const Tensor& x, const Tensor& dy) = 0;
  virtual Tensor add(const Tensor& a, const Tensor& b) = 0;  // same shape
  // y, and per-row mean and rstd ([rows] each), for x [..., dim].
  virtual void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor* y,
                                  Tensor* mean, Tensor* rstd) = 0;
  virtual Tensor layer_norm_backward_input(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                           const Tensor& gamma, const Tensor& dy) = 0;
  virtual void layer_norm_backward_weight(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                                          const Tensor& dgamma, const Tensor& dbeta) = 0;
  // The attention core: qkv [B, T, dim + 2 kv_dim] (q | k | v, kv_dim = kv_heads dim / heads) ->
  // probs [B, heads, T, T] and attended [B, T, dim]; causal or bidirectional; query head h reads
  // key/value head h / (heads / kv_heads).
  virtual void attention_core_forward(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal, Tensor* probs,
                                      Tensor* attended) = 0;
  // d_qkv (qkv's shape) from the saved qkv and probs and d_attended [B, T, dim].
  virtual Tensor attention_core_backward(const Tensor& qkv, const Tensor& probs, const Tensor& d_attended,
                                         int64_t heads, int64_t kv_heads, bool causal) = 0;
  // Rotary positions in place on qkv [B, T, width]: the first `rotated_heads` heads of head_dim
  // columns at positions offset + t; `inverse` rotates back (the gradients).
  virtual void rotary_embedding(const Tensor& qkv, int64_t rotated_heads, int64_t head_dim, int64_t offset,
                                float theta, bool inverse) = 0;
  // RMSNorm over the last dimension: y, xhat = x rstd, and rstd [rows].
  virtual void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor* y, Tensor* xhat,
                                Tensor* rstd) = 0;
  virtual Tensor rms_norm_backward_input(const Tensor& xhat, const Tensor& rstd, const Tensor& weight,
                                         const Tensor& dy) = 0;
  virtual void rms_norm_backward_weight(const Tensor& xhat, const Tensor& dy, const Tensor& dweight) = 0;
  // SwiGLU: x [..., 2 H] = [gate | up] -> [..., H]; the backward from the saved x.
  virtual Tensor swiglu_forward(const Tensor& x) = 0;
  virtual Tensor swiglu_backward(const Tensor& x, const Tensor& dy) = 0;
  // GroupNorm of x [B, C, ...]: y, xhat and rstd [B, groups].
  virtual void group_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups,
                                  float eps, Tensor* y, Tensor* xhat, Tensor* rstd) = 0;
  virtual Tensor group_norm_backward_input(const Tensor& xhat, const Tensor& rstd, const Tensor& weight,
                                           int64_t groups, const Tensor& dy) = 0;
  virtual void group_norm_backward_weight(const Tensor& xhat, const Tensor& dy, const Tensor& dweight,
                                          const Tensor& dbias) = 0;
  // Conv2d by im2col + GEMM (`bias` may be undefined): y [B, O, Ho, Wo].
  virtual Tensor conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                const ConvGeometry& geometry) = 0;
  // dx shaped `input_shape`; *grad_rows = the output gradient as GEMM rows [B Ho Wo, O], for W.
  virtual Tensor conv2d_backward_input(const Tensor& dy, const Tensor& weight, const ConvGeometry& geometry,
                                       const Shape& input_shape, Tensor* grad_rows) = 0;
  // dW += grad_rows^T im2col(x); db += column sums of grad_rows (`dbias` may be undefined).
  virtual void conv2d_backward_weight(const Tensor& x, const Tensor& grad_rows, const ConvGeometry& geometry,
                                      const Tensor& dweight, const Tensor& dbias) = 0;
  // Max / average pooling of x [B, C, H, W] (no padding): y [B, C, Ho, Wo] and, for max, the i32
  // argmax within each plane.
  virtual void pool2d_forward(const Tensor& x, bool max, int64_t kernel, int64_t stride, Tensor* y,
                              Tensor* argmax) = 0;
  virtual Tensor pool2d_backward(const Tensor& dy, const Tensor& argmax, bool max, int64_t kernel, int64_t stride,
                                 const Shape& input_shape) = 0;
  // The mean over all but the first two dimensions: [B, C, ...] -> [B, C], and its gradient.
  virtual Tensor global_avg_pool_forward(const Tensor& x) = 0;
  virtual Tensor global_avg_pool_backward(const Tensor& dy, const Shape& input_shape) = 0;
  // A ViT's patch embedding: images [B, C*H*W] -> tokens [B, 1 + N, dim] (class token first).
  virtual Tensor patch_embedding_forward(const Tensor& images, const Tensor& weight, const Tensor& bias,
                                         const Tensor& cls, const Tensor& positions,
                                         const PatchGeometry& geometry) = 0;
  virtual Tensor patch_embedding_backward_input(const Tensor& dy, const Tensor& weight, const PatchGeometry& geometry,
                                                const Shape& input_shape) = 0;
  virtual void patch_embedding_backward_weight(const Tensor& images, const Tensor& dy, const PatchGeometry& geometry,
                                               const Tensor& dweight, const Tensor& dbias, const Tensor& dcls,
                                               const Tensor& dpositions) = 0;
  // Class-token readout: [B, T, D] -> [B, D] (token 0), and dx [B, T, D] (dy at token 0, zeros else).
  virtual Tensor class_token_forward(const Tensor& x) = 0;
  virtual Tensor class_token_backward(const Tensor& dy, int64_t steps) = 0;
  // ids i32 [B, T] -> [B, T, dim] (ids already validated); `position_weight` may be undefined (an
  // embedding without learned positions), and then `dposition` too. An id kEmbeddingIdNotHeld is a
  // vocabulary-parallel member's row whose token another member holds: a zero token row (its
  // position's row still added), no token gradient, but its position's gradient.
  virtual Tensor embedding_forward(const Tensor& ids, const Tensor& token_weight, const Tensor& position_weight) = 0;
  virtual void embedding_backward_weight(const Tensor& ids, const Tensor& dy, const Tensor& dtoken,
                                         const Tensor& dposition) = 0;
  // Cross-entropy over logits [..., C] and i32 targets (already validated): the scaled mean loss
  // (copied to the host, so this waits for the device), and the gradient.
  virtual float cross_entropy_forward(const Tensor& logits, const Tensor& targets, float scale) = 0;
  virtual Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, float scale) = 0;
  // The vocabulary-parallel cross-entropy's parts (runtime/layers/cross_entropy.cc): this member
  // holds classes [first, first + C) of logits [..., C]; the group combines the host results.
  // Each row's largest logit (waits for the device).
  virtual std::vector<float> logits_row_max(const Tensor& logits) = 0;
  // [2 rows]: each row's sum of exp(x - maxima[r]) (fp64), then each row's target logit where this
  // member holds the target (0 else); `maxima` the whole rows' (waits for the device).
  virtual std::vector<double> vocab_cross_entropy_sums(const Tensor& logits, const Tensor& targets, int64_t first,
                                                       const std::vector<float>& maxima) = 0;
  // coef * (exp(x - maxima[r]) * inverse_sums[r] - [first + c == target]), the whole rows' maxima
  // and inverse sums of exponentials.
  virtual Tensor vocab_cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t first,
                                              const std::vector<float>& maxima,
                                              const std::vector<double>& inverse_sums, double coef) = 0;
  // A host copy of an i32 tensor (ids, targets) for validation; waits for the device.
  virtual std::vector<int32_t> i32_to_host(const Tensor& t) = 0;

  // ---- The optimizers (runtime/optim calls these for CUDA parameters) ----
  // runtime/optim/sgd.cc's update element by element; `buf` undefined when momentum == 0.
  virtual void sgd_update(const Tensor& value, const Tensor& grad, const Tensor& buf, float lr, float weight_decay,
                          float momentum, bool first_step) = 0;
  virtual void adamw_update(const Tensor& value, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                            const AdamWHyperparameters& hyper, int64_t step) = 0;
  // Sum of squares in double, deterministic (waits for the device to return it).
  virtual double squared_norm(const Tensor& grad) = 0;
  virtual void scale_in_place(const Tensor& grad, float scale) = 0;
};

// The CUDA backend: the registered one, else libpipeforge_cuda.so.<abi> loaded now (loader.h).
// Throws kCudaError "the CUDA backend is not available: <why>" when it cannot be loaded.
CudaBackend& cuda_backend();

// What CUDA devices this process can use: 0 (never throws) without a backend, a driver or a GPU,
// so callers fall back to the CPU and GPU tests skip themselves; `reason` says which.
CudaAvailability probe_cuda();

// Throws kInvalidArgument "<who>: cuda:N is not available: no CUDA device is visible to this process
// (<reason>)" or "<who>: cuda:N does not exist (K CUDA device(s) visible: ...)" unless `ordinal` names
// a visible CUDA device.
void require_cuda_device(int ordinal, const std::string& who, const CudaAvailability& availability = probe_cuda());

// Called once by the backend implementation from a static initializer. A backend built against
// another interface revision is refused (cuda_backend() then says so).
void register_cuda_backend(CudaBackend* backend, int interface_revision);

}  // namespace pf
