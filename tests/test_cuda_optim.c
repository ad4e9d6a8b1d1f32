/* CUDA kernels against their CPU versions (built only with CUDA), part 3:
 * the optimizers over a parameter table of weights (decayed) and 1-d
 * tensors (not decayed unless all_decay), one of them large enough for
 * grid-stride loops, float and double (cuda_optim_t.h): SGD (no momentum,
 * momentum with dampening, nesterov; weight decay) and AdamW (amsgrad or
 * not, decoupled decay, bias correction) over three steps with changing
 * learning rates: parameters, momentum, exp_avg, exp_avg_sq,
 * max_exp_avg_sq and the step count, the padding between tensors left
 * alone, bad hyper-parameters refused as on the CPU; the global L2 norm
 * (and the same bits twice), clipping by norm (on the device's norm, and
 * by a given one) and by value (NaN and inf), scaling.
 * Tolerances relative to the largest CPU value: fp32 1e-6, fp64 1e-14 to
 * 1e-15 (a few operations per element; FMA contraction may differ); the
 * norm 1e-12 (double sums either way); exact for clamping and scaling.
 * Without a CUDA device: one line "skipped: no CUDA device", exit 77. */
#include "cuda/cuda_optim.h"
#include "cudatest.h"

#define MT_TEMPLATE "tests/cuda_optim_t.h"
#include "core/real_t.h"

int main(void) {
  cu_start("test_cuda_optim");
  mt_param_table t = {0};
  const int64_t w1[] = {7, 13}, b1[] = {13}, w2[] = {3, 5, 2, 2}, b2[] = {1}, big[] = {1200007, 1};
  if (mt_param_table_add(&t, "w1", 2, w1, 0) || mt_param_table_add(&t, "b1", 1, b1, 0) ||
      mt_param_table_add(&t, "w2", 4, w2, 1) || mt_param_table_add(&t, "b2", 1, b2, 1) ||
      mt_param_table_add(&t, "big", 2, big, 2)) {
    printf("FAIL parameter table: %s\n", mt_error_message());
    return 1;
  }
  mt_cuda_table dt;
  if (mt_cuda_table_create(&dt, &t)) {
    printf("FAIL mt_cuda_table_create: %s\n", mt_error_message());
    return 1;
  }
  test_optim(&t, &dt);
  test_optim_f64(&t, &dt);
  mt_cuda_table_destroy(&dt);
  mt_param_table_free(&t);
  return cu_finish("test_cuda_optim");
}
