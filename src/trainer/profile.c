/* Where a step's time goes: PETSc logging events (so -log_view prints them
 * per rank and over ranks at the end) and mpitrain's own per-epoch tallies
 * of the same phases, printed by rank 0 after every epoch with the achieved
 * GFLOP/s, its share of the measured peak, and the bytes communicated. */
#include "trainer/trainer.h"

#include "comm/comm.h"
#include "nn/gemm_matmul.h"
#include "nn/trace.h"

#include <petscsys.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const char *const ev_name[MT_EV_COUNT] = {
    "mtData", "mtForward", "mtBackward", "mtCommExposed", "mtOptimizer", "mtCheckpoint",
    "mtValidation"};
static const char *const ev_label[MT_EV_COUNT] = {
    "data", "forward", "backward", "exposed comm", "optimizer", "checkpoint", "validation"};
static PetscLogEvent ev_[MT_EV_COUNT];
static int registered_;
static double start_[MT_EV_COUNT], total_[MT_EV_COUNT]; /* this epoch */

/* The layers' kernel events (nn/trace.h), inside the phases above. */
static const char *const kev_name[MT_K_COUNT] = {
    "mtLinear",     "mtGemm",        "mtConv", "mtPool",      "mtNorm",   "mtAttention",
    "mtActivation", "mtElementwise", "mtLoss", "mtEmbedding", "mtConvert"};
static PetscLogEvent kev_[MT_K_COUNT];
static pthread_t logger_; /* PETSc's logging is this thread's */

static int kernel_event(mt_kernel k, int begin) {
  if (!pthread_equal(pthread_self(), logger_)) return 0;
  if (begin)
    (void)PetscLogEventBegin(kev_[k], 0, 0, 0, 0);
  else
    (void)PetscLogEventEnd(kev_[k], 0, 0, 0, 0);
  return 1;
}

int mt_profile_init(void) {
  if (registered_) return 0;
  PetscClassId cid;
  if (PetscClassIdRegister("mpitrain", &cid)) return MT_ERR(MT_ERR_LIB, "PetscClassIdRegister failed");
  for (int e = 0; e < MT_EV_COUNT; e++)
    if (PetscLogEventRegister(ev_name[e], cid, &ev_[e]))
      return MT_ERR(MT_ERR_LIB, "PetscLogEventRegister %s failed", ev_name[e]);
  /* the kernels' marks only where PETSc logs (-log_view and its kin):
   * elsewhere each costs the layers a branch, not a call */
  PetscBool logging = PETSC_FALSE;
  if (PetscLogIsActive(&logging)) return MT_ERR(MT_ERR_LIB, "PetscLogIsActive failed");
  if (logging) {
    for (int k = 0; k < MT_K_COUNT; k++)
      if (PetscLogEventRegister(kev_name[k], cid, &kev_[k]))
        return MT_ERR(MT_ERR_LIB, "PetscLogEventRegister %s failed", kev_name[k]);
    logger_ = pthread_self();
    mt_nn_trace_set(kernel_event);
  }
  registered_ = 1;
  return 0;
}

void mt_ev_begin(mt_event e) {
  if (registered_) (void)PetscLogEventBegin(ev_[e], 0, 0, 0, 0);
  start_[e] = mt_now();
}

void mt_ev_end(mt_event e) {
  total_[e] += mt_now() - start_[e];
  if (registered_) (void)PetscLogEventEnd(ev_[e], 0, 0, 0, 0);
}

/* PETSc adds the flops logged between an event's begin and end to that
 * event (and to every other event open then); its counter is one global,
 * so this is called on the thread that opened the event. */
void mt_ev_flops(double flops) {
  if (registered_ && flops > 0) (void)PetscLogFlops(flops);
}

void mt_ev_move(mt_event from, mt_event to, double secs) {
  total_[from] -= secs;
  total_[to] += secs;
}

/* -peak_gflops 0 (the default): one core's fp32 GEMM speed, measured once
 * on this machine (the constant it replaced, 265 from a Zen 5 core, was
 * 3-4x an AVX2 EPYC core's):
 * the linear layers' forward ('N','T', mt_sgemm, as mt_gemm runs it on
 * one thread) at 256 x 1024 x 1024, best of 5 after one warm-up call, on
 * one thread, in about 20-60 ms. 0 when it cannot be measured. */
static double core_gflops(void) {
  enum { M = 256, N = 1024, K = 1024 };
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K);
  float *c = malloc(sizeof(float) * M * N);
  double best = 0;
  if (a && b && c) {
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 17) * 0.01f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 13) * 0.01f;
#ifdef _OPENMP
    const int nt = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    for (int r = 0; r < 6; r++) {
      const double t0 = mt_now();
      if (mt_sgemm('N', 'T', M, N, K, 1.0f, a, K, b, K, 0.0f, c, N) != dnnl_success) break;
      const double dt = mt_now() - t0, g = 2.0 * M * N * K / dt / 1e9;
      if (r > 0 && dt > 0 && g > best) best = g;
    }
#ifdef _OPENMP
    omp_set_num_threads(nt);
#endif
  }
  free(a), free(b), free(c);
  return best;
}

void mt_profile_epoch(const mt_trainer *t, int epoch, double secs, double bytes) {
  const mt_config *c = t->cfg;
  const mt_model *m = t->model;
  char line[512];
  size_t k = 0;
  k += (size_t)snprintf(line, sizeof(line), "epoch %d/%d time:", epoch + 1, c->epochs);
  for (int e = 0; e < MT_EV_COUNT && k < sizeof(line); e++) {
    if (total_[e] <= 0) continue;
    k += (size_t)snprintf(line + k, sizeof(line) - k, " %s %.1f%%", ev_label[e],
                          secs > 0 ? 100.0 * total_[e] / secs : 0.0);
  }
  const double samples = (double)t->steps_per_epoch * c->batch_size;
  const double flops = m->ops->flops_per_sample ? m->ops->flops_per_sample(m) * samples : 0;
  static double measured = -1; /* rank 0's, at its first epoch line, once; 0: failed */
  if (c->peak_gflops == 0 && measured < 0 && t->comm->rank == 0 && flops > 0 && secs > 0)
    measured = core_gflops();
  const double core = c->peak_gflops > 0 ? c->peak_gflops : measured > 0 ? measured : 0;
  const int cores = c->threads * c->world_size;
  if (k < sizeof(line) && flops > 0 && secs > 0) {
    k += (size_t)snprintf(line + k, sizeof(line) - k, "; %.1f GFLOP/s", flops / secs / 1e9);
    char what[64];
    if (c->peak_gflops > 0)
      snprintf(what, sizeof(what), "-peak_gflops %g", core);
    else
      snprintf(what, sizeof(what), "one core's GEMM measured at %.0f GFLOP/s", core);
    if (k < sizeof(line) && core > 0)
      k += (size_t)snprintf(line + k, sizeof(line) - k, ", %.1f%% of %.0f (%s x %d cores)",
                            100.0 * flops / secs / 1e9 / (core * cores), core * cores, what,
                            cores);
    else if (k < sizeof(line))
      k += (size_t)snprintf(line + k, sizeof(line) - k, " (a core's peak not measured)");
  }
  if (k < sizeof(line) && m->spec.tokens && secs > 0)
    k += (size_t)snprintf(line + k, sizeof(line) - k, "; %.0f tokens/s",
                          samples * (double)m->spec.sample_numel / secs);
  if (k < sizeof(line) && bytes > 0)
    snprintf(line + k, sizeof(line) - k, "; %.1f MB all-reduced", bytes / 1e6);
  mt_print0("%s\n", line);
  memset(total_, 0, sizeof(total_));
}
