// CUDA forms of fused softmax attention (ops/attention_flash.h) on the kernels of ops/cuda/attention.cu (the
// causal mask with a query offset; no padding, keep, bias or ALiBi yet), and of causal linear attention
// (ops/linear_attention.h) on those of ops/cuda/linear_attention.cu (elu + 1 or identity features, no padding),
// with its recurrent step for generation.
#include "engine/autograd.h"
#include "ops/cuda/dispatch.h"
#include "ops/cuda/dispatch_util.h"

namespace eng::cuda_op {

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale) {
  check_qkv(q, k, v, "flash_attention");
  check_f32(q, "flash_attention", "q");
  check_f32(k, "flash_attention", "k");
  check_f32(v, "flash_attention", "v");
  ENG_CHECK(mask.key_lengths.empty() && !mask.keep.defined() && !mask.bias.defined() && !mask.alibi_slopes.defined(),
            "flash_attention: on cuda the mask may only be causal (with a query offset); key lengths, keep, bias and "
            "ALiBi are not supported on cuda yet");
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), D = q.size(3), Dv = v.size(3);
  const Tensor qd = dense(q), kd = dense(k), vd = dense(v);
  Tensor out = device_empty({B, H, Lq, Dv}), lse = device_empty({B, H, Lq});
  const bool causal = mask.causal;
  const int64_t offset = mask.query_offset;
  if (out.numel() > 0)
    cuda::flash_attention_forward(ptr(qd), ptr(kd), ptr(vd), ptr(out), ptr(lse), B, H, Lq, Lk, D, Dv, float(scale),
                                  causal, offset);
  return record(out, "flash_attention", {q, k, v, mask.bias},
                [qd, kd, vd, o = out.detach(), lse, scale, causal, offset](const Tensor& g) {
                  const int64_t B = qd.size(0), H = qd.size(1), Lq = qd.size(2), Lk = kd.size(2);
                  Tensor dq = device_empty(qd.shape()), dk = device_empty(kd.shape()), dv = device_empty(vd.shape());
                  if (dq.numel() + dk.numel() + dv.numel() > 0)
                    cuda::flash_attention_backward(ptr(qd), ptr(kd), ptr(vd), ptr(o), ptr(lse), ptr(dense(g)), ptr(dq),
                                                   ptr(dk), ptr(dv), B, H, Lq, Lk, qd.size(3), vd.size(3),
                                                   float(scale), causal, offset);
                  return std::vector<Tensor>{dq, dk, dv, Tensor()};
                });
}

Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionArgs& args,
                        bool causal) {
  const char* op = causal ? "causal_linear_attention" : "linear_attention";
  ENG_CHECK(causal, op, ": on cuda only the causal form is supported yet");
  check_f32(q, op, "q");
  check_f32(k, op, "k");
  check_f32(v, op, "v");
  ENG_CHECK(args.feature != LinearFeature::Relu && args.key_lengths.empty(), op, ": on cuda the feature map is elu + 1 "
            "or the identity, without key padding (not supported on cuda yet)");
  const int64_t B = q.size(0), H = q.size(1), N = q.size(2), M = q.size(3), Dv = v.size(3);
  const bool elu = args.feature == LinearFeature::EluPlusOne;
  const float eps = float(args.eps);
  const Tensor qd = dense(q), kd = dense(k), vd = dense(v);
  Tensor out = device_empty({B, H, N, Dv});
  if (out.numel() > 0)
    cuda::causal_linear_attention_forward(ptr(qd), ptr(kd), ptr(vd), ptr(out), B, H, N, M, Dv, eps, elu);
  return record(out, op, {q, k, v}, [qd, kd, vd, o = out.detach(), eps, elu](const Tensor& g) {
    const int64_t B = qd.size(0), H = qd.size(1), N = qd.size(2), M = qd.size(3), Dv = vd.size(3);
    Tensor dq = device_empty(qd.shape()), dk = device_empty(kd.shape()), dv = device_empty(vd.shape());
    if (B * H * N > 0)
      cuda::causal_linear_attention_backward(ptr(qd), ptr(kd), ptr(vd), ptr(o), ptr(dense(g)), ptr(dq), ptr(dk),
                                             ptr(dv), B, H, N, M, Dv, eps, elu);
    return std::vector<Tensor>{dq, dk, dv};
  });
}

Tensor linear_attention_step(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& s, Tensor& z,
                             const LinearAttentionArgs& args) {
  const char* op = "linear_attention_step";
  const bool update = k.defined();
  check_f32(q, op, "q");
  check_f32(s, op, "s");
  check_f32(z, op, "z");
  if (update) {
    check_f32(k, op, "k");
    check_f32(v, op, "v");
  }
  ENG_CHECK(args.feature != LinearFeature::Relu, op, ": on cuda the feature map is elu + 1 or the identity (relu is "
            "not supported on cuda yet)");
  const int64_t B = q.size(0), H = q.size(1), M = q.size(3), Dv = s.size(3);
  const Tensor qd = dense(q), kd = update ? dense(k) : Tensor(), vd = update ? dense(v) : Tensor();
  Tensor out = device_empty({B, H, 1, Dv});
  if (out.numel() > 0)
    cuda::linear_attention_step(ptr(qd), update ? ptr(kd) : nullptr, update ? ptr(vd) : nullptr, ptr(s), ptr(z),
                                ptr(out), B, H, M, Dv, float(args.eps), args.feature == LinearFeature::EluPlusOne);
  return out;
}

}  // namespace eng::cuda_op
