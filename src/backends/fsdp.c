/* fsdp: see fsdp.h. */
#include "backends/fsdp.h"
#include "backends/backends.h"
#include "backends/pagepool.h"
#include "comm/comm.h"
#include "core/core.h"
#include "optim/optim.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { RELEASED = 0, IN_FLIGHT, GATHERED };

struct mt_fsdp {
  int strategy, prefetch;
  MPI_Comm group;    /* the ranks that shard among themselves                 */
  MPI_Comm replicas; /* hybrid_shard: the ranks that hold the same shard     */
  int grank, gsize;
  size_t n, lo, hi;
  size_t *plo, *phi; /* group rank r holds [plo[r], phi[r])                   */
  mt_param_table table; /* the tensors' pieces in [lo, hi), offsets - lo     */
  float *params, *grads; /* the shards                                       */
  float *pview, *gview;  /* n floats of address space each                   */
  size_t view_bytes;
  /* units: the model's, or one for the whole model */
  int nmodel_units, nunits;
  int *unit_of;      /* model unit -> unit                                   */
  int *members, *ndone; /* model units in a unit; done in this backward      */
  size_t *ulo, *uhi;
  int *counts, *displs; /* unit u, group rank r: [u * gsize + r], from ulo   */
  int *pstate;       /* RELEASED, IN_FLIGHT, GATHERED                        */
  MPI_Request *greq; /* per unit: its all-gather                             */
  int last;          /* the unit used last, -1 none                          */
  int pass;          /* of the last use                                      */
  int *seen;         /* units used in this pass (forward or backward)        */
  int pinned;
  int *used;         /* forward used unit u since the step began             */
  /* the gradient reduction in flight (one unit: the next unit's backward
   * runs while it moves; a second would hold a third unit's gradient) */
  int pend;          /* its unit, -1 none                                    */
  mt_coll *rcoll;    /* its reduce-scatter (the ring, comm/collectives.c)    */
  float *rtmp;       /* this rank's piece of the sum                         */
  size_t rtmp_n;
  double comm_seconds, comm_bytes;
  double told_seconds, told_bytes; /* the part added to the backend's      */
  mt_fsdp_memory mem;
  unsigned char *vec; /* mincore                                             */
  size_t page;
  /* the physical pages of released units (pagepool.h); per unit the slot
   * lent to its range of each view, -1 none */
  mt_page_pool *ppool, *gpool;
  int *pslot, *gslot;
};

static const char *const names_[] = {"full_shard", "shard_grad_op", "hybrid_shard", "no_shard"};

const char *mt_fsdp_strategy_name(int s) {
  return s >= 0 && s < 4 ? names_[s] : "?";
}

int mt_fsdp_strategy_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, names_[i])) return i;
  return -1;
}

/* ------------------------------------------------------------- views */

static int view_map(float **v, size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  MT_CHECK(p != MAP_FAILED, MT_ERR_MEM, "fsdp: cannot reserve %.1f MiB of address space",
           (double)bytes / 1048576.0);
  *v = p;
  return 0;
}

/* The pages wholly inside unit u's elements of view v: [*va, *va + *len). */
static void interior(const mt_fsdp *f, const float *v, int u, char **va, size_t *len) {
  uintptr_t s = (uintptr_t)(v + f->ulo[u]), e = (uintptr_t)(v + f->uhi[u]);
  uintptr_t ps = (s + f->page - 1) & ~(uintptr_t)(f->page - 1), pe = e & ~(uintptr_t)(f->page - 1);
  *va = (char *)ps;
  *len = pe > ps ? pe - ps : 0;
}

/* Backs unit u's range of a view with pooled pages before it is written:
 * the gathered parameters, or (grads) a gradient zeroed for the backward
 * to add into. */
static int unit_lend(mt_fsdp *f, int grads, int u) {
  int *slot = grads ? &f->gslot[u] : &f->pslot[u];
  if (*slot >= 0) return 0;
  char *va;
  size_t len;
  interior(f, grads ? f->gview : f->pview, u, &va, &len);
  if (!len) return 0;
  MT_CALL(mt_page_pool_lend(grads ? f->gpool : f->ppool, va, len, slot));
  if (grads) memset(va, 0, len);
  return 0;
}

/* Gives unit u's pages of a view back (into the pool; pages faulted in
 * without a lend, with madvise). A gradient's edges, which share pages
 * with the neighbouring units, are zeroed: the next backward adds there.
 * Given-back ranges read zero. */
static int unit_give_back(mt_fsdp *f, int grads, int u) {
  float *v = grads ? f->gview : f->pview;
  int *slot = grads ? &f->gslot[u] : &f->pslot[u];
  char *va, *s = (char *)(v + f->ulo[u]), *e = (char *)(v + f->uhi[u]);
  size_t len;
  interior(f, v, u, &va, &len);
  if (grads && len) {
    memset(s, 0, (size_t)(va - s));
    memset(va + len, 0, (size_t)(e - (va + len)));
  } else if (grads) {
    memset(s, 0, (size_t)(e - s));
  }
  if (*slot >= 0)
    MT_CALL(mt_page_pool_take(grads ? f->gpool : f->ppool, va, len, slot, !f->pinned));
  else if (len)
    madvise(va, len, MADV_DONTNEED);
  return 0;
}

static double resident(mt_fsdp *f, const float *v) {
  if (mincore((void *)v, f->view_bytes, f->vec)) return 0;
  size_t np = (f->view_bytes + f->page - 1) / f->page, k = 0;
  for (size_t i = 0; i < np; i++) k += f->vec[i] & 1;
  return (double)k * (double)f->page;
}

/* The views' resident pages and the pools' kept ones. */
static void sample_memory(mt_fsdp *f) {
  double p = resident(f, f->pview) + mt_page_pool_resident(f->ppool);
  double g = resident(f, f->gview) + mt_page_pool_resident(f->gpool);
  if (p > f->mem.peak_params_view) f->mem.peak_params_view = p;
  if (g > f->mem.peak_grads_view) f->mem.peak_grads_view = g;
}

/* ------------------------------------------------------------- set-up */

int mt_fsdp_plan_units(const mt_param_table *t, int whole_model, int *nmodel, int *nunits,
                       int **unit_of, int **members, size_t **ulo, size_t **uhi) {
  int nm = 0;
  for (int i = 0; i < t->n; i++) {
    MT_CHECK(t->p[i].unit >= 0, MT_ERR_STATE, "fsdp: tensor %s has no unit", t->p[i].name);
    if (t->p[i].unit + 1 > nm) nm = t->p[i].unit + 1;
  }
  const int nu = whole_model ? 1 : nm;
  *nmodel = nm;
  *nunits = nu;
  MT_CALL(mt_calloc(unit_of, (size_t)nm, sizeof(int), "fsdp units"));
  MT_CALL(mt_calloc(members, (size_t)nu, sizeof(int), "fsdp units"));
  MT_CALL(mt_calloc(ulo, (size_t)nu, sizeof(size_t), "fsdp units"));
  MT_CALL(mt_calloc(uhi, (size_t)nu, sizeof(size_t), "fsdp units"));
  int *uo = *unit_of, *mb = *members;
  size_t *lo = *ulo, *hi = *uhi;
  for (int u = 0; u < nm; u++) uo[u] = whole_model ? 0 : u;
  for (int u = 0; u < nu; u++) lo[u] = SIZE_MAX;
  int *seen = NULL;
  MT_CALL(mt_calloc(&seen, (size_t)nm, sizeof(int), "fsdp units"));
  for (int i = 0; i < t->n; i++) {
    const mt_param *q = &t->p[i];
    const int u = uo[q->unit];
    if (!seen[q->unit]) mb[u]++;
    seen[q->unit] = 1;
    if (q->offset < lo[u]) lo[u] = q->offset;
    if (q->offset + q->numel > hi[u]) hi[u] = q->offset + q->numel;
  }
  mt_free(&seen);
  for (int u = 0; u < nu; u++) {
    MT_CHECK(mb[u] > 0, MT_ERR_STATE, "fsdp: unit %d of the model holds no tensor", u);
    for (int v = 0; v < nu; v++)
      MT_CHECK(v == u || hi[v] <= lo[u] || lo[v] >= hi[u], MT_ERR_STATE,
               "fsdp: the model's units %d and %d overlap in the flat layout", u, v);
  }
  return 0;
}

static int plan_units(mt_fsdp *f, const mt_param_table *t, int whole_model) {
  MT_CALL(mt_fsdp_plan_units(t, whole_model, &f->nmodel_units, &f->nunits, &f->unit_of,
                             &f->members, &f->ulo, &f->uhi));
  const int nu = f->nunits, G = f->gsize;
  MT_CALL(mt_calloc(&f->ndone, (size_t)nu, sizeof(int), "fsdp units"));
  MT_CALL(mt_calloc(&f->used, (size_t)nu, sizeof(int), "fsdp units"));
  MT_CALL(mt_calloc(&f->seen, (size_t)nu, sizeof(int), "fsdp units"));
  MT_CALL(mt_calloc(&f->pstate, (size_t)nu, sizeof(int), "fsdp units"));
  MT_CALL(mt_calloc(&f->greq, (size_t)nu, sizeof(MPI_Request), "fsdp units"));
  MT_CALL(mt_calloc(&f->counts, (size_t)nu * G, sizeof(int), "fsdp units"));
  MT_CALL(mt_calloc(&f->displs, (size_t)nu * G, sizeof(int), "fsdp units"));
  for (int u = 0; u < nu; u++) f->greq[u] = MPI_REQUEST_NULL;
  for (int u = 0; u < nu; u++) {
    MT_CHECK(f->uhi[u] - f->ulo[u] <= (size_t)INT_MAX, MT_ERR_ARG,
             "fsdp: unit %d holds %zu elements, more than one MPI message (-fsdp_unit layer)", u,
             f->uhi[u] - f->ulo[u]);
    double bytes = (double)(f->uhi[u] - f->ulo[u]) * sizeof(float);
    if (bytes > f->mem.largest_unit) f->mem.largest_unit = bytes;
    for (int r = 0; r < G; r++) {
      size_t a = f->ulo[u] > f->plo[r] ? f->ulo[u] : f->plo[r];
      size_t b = f->uhi[u] < f->phi[r] ? f->uhi[u] : f->phi[r];
      f->counts[u * G + r] = b > a ? (int)(b - a) : 0;
      f->displs[u * G + r] = b > a ? (int)(a - f->ulo[u]) : 0;
      if (r == f->grank && b > a && b - a > f->rtmp_n) f->rtmp_n = b - a;
    }
  }
  return 0;
}

void mt_fsdp_partition(size_t n, int gsize, int grank, size_t *lo, size_t *hi) {
  size_t per = (n + (size_t)gsize - 1) / (size_t)gsize;
  per = (per + 15) & ~(size_t)15;
  *lo = (size_t)grank * per < n ? (size_t)grank * per : n;
  *hi = *lo + per < n ? *lo + per : n;
}

int mt_fsdp_create(mt_fsdp **out, MPI_Comm world, const mt_param_table *t, const float *params,
                   int strategy, int whole_model, int node_size, int prefetch) {
  mt_fsdp *f;
  *out = NULL;
  MT_CALL(mt_calloc(&f, 1, sizeof(*f), "fsdp"));
  *out = f;
  f->strategy = strategy;
  f->prefetch = prefetch;
  f->group = f->replicas = MPI_COMM_NULL;
  f->last = -1;
  f->pend = -1;
  f->pass = -1;
  f->page = (size_t)sysconf(_SC_PAGESIZE);
  int rank, size;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  int gs = strategy == MT_FSDP_HYBRID_SHARD ? node_size : size;
  MT_CHECK(gs >= 1 && size % gs == 0, MT_ERR_OPTION,
           "option -fsdp_node_size: %d ranks are not whole nodes of %d ranks", size, gs);
  MT_MPI(MPI_Comm_split(world, rank / gs, rank, &f->group));
  if (strategy == MT_FSDP_HYBRID_SHARD)
    MT_MPI(MPI_Comm_split(world, rank % gs, rank, &f->replicas));
  MPI_Comm_rank(f->group, &f->grank);
  MPI_Comm_size(f->group, &f->gsize);
  /* the partition: equal ranges rounded to 16 floats (64 bytes) */
  f->n = t->total;
  MT_CALL(mt_calloc(&f->plo, (size_t)f->gsize, sizeof(size_t), "fsdp partition"));
  MT_CALL(mt_calloc(&f->phi, (size_t)f->gsize, sizeof(size_t), "fsdp partition"));
  for (int r = 0; r < f->gsize; r++) mt_fsdp_partition(f->n, f->gsize, r, &f->plo[r], &f->phi[r]);
  f->lo = f->plo[f->grank];
  f->hi = f->phi[f->grank];
  MT_CALL(plan_units(f, t, whole_model));
  MT_CALL(mt_param_table_slice(t, f->lo, f->hi, &f->table)); /* the optimizer's view */
  size_t sn = f->hi - f->lo;
  MT_CALL(mt_calloc(&f->params, sn ? sn : 1, sizeof(float), "fsdp parameter shard"));
  MT_CALL(mt_calloc(&f->grads, sn ? sn : 1, sizeof(float), "fsdp gradient shard"));
  if (sn) memcpy(f->params, params + f->lo, sn * sizeof(float));
  f->mem.shard_params = f->mem.shard_grads = (double)sn * sizeof(float);
  MT_CALL(mt_calloc(&f->rtmp, f->rtmp_n ? f->rtmp_n : 1, sizeof(float), "fsdp reduction"));
  f->view_bytes = (f->n ? f->n : 1) * sizeof(float);
  f->view_bytes = (f->view_bytes + f->page - 1) & ~(f->page - 1);
  MT_CALL(view_map(&f->pview, f->view_bytes));
  MT_CALL(view_map(&f->gview, f->view_bytes));
  MT_CALL(mt_calloc(&f->vec, f->view_bytes / f->page, 1, "fsdp mincore"));
  /* pools of slots as large as the largest unit's pages: up to every unit
   * at once (an evaluation gathers the whole model) */
  MT_CALL(mt_calloc(&f->pslot, (size_t)f->nunits, sizeof(int), "fsdp units"));
  MT_CALL(mt_calloc(&f->gslot, (size_t)f->nunits, sizeof(int), "fsdp units"));
  size_t most = 0;
  for (int u = 0; u < f->nunits; u++) {
    char *va;
    size_t len;
    interior(f, f->pview, u, &va, &len);
    most = len > most ? len : most;
    interior(f, f->gview, u, &va, &len);
    most = len > most ? len : most;
    f->pslot[u] = f->gslot[u] = -1;
  }
  MT_CALL(mt_page_pool_create(&f->ppool, most, f->nunits));
  MT_CALL(mt_page_pool_create(&f->gpool, most, f->nunits));
  return 0;
}

void mt_fsdp_destroy(mt_fsdp **pf) {
  mt_fsdp *f = *pf;
  if (!f) return;
  for (int u = 0; f->greq && u < f->nunits; u++)
    if (f->greq[u] != MPI_REQUEST_NULL) MPI_Wait(&f->greq[u], MPI_STATUS_IGNORE);
  (void)mt_coll_wait(&f->rcoll);
  if (f->pview) munmap(f->pview, f->view_bytes);
  if (f->gview) munmap(f->gview, f->view_bytes);
  mt_page_pool_destroy(&f->ppool);
  mt_page_pool_destroy(&f->gpool);
  if (f->group != MPI_COMM_NULL) MPI_Comm_free(&f->group);
  if (f->replicas != MPI_COMM_NULL) MPI_Comm_free(&f->replicas);
  void *bufs[] = {&f->plo, &f->phi, &f->params, &f->grads, &f->unit_of, &f->members, &f->ndone,
                  &f->used, &f->seen, &f->ulo, &f->uhi, &f->counts, &f->displs, &f->pstate, &f->greq,
                  &f->vec, &f->rtmp, &f->pslot, &f->gslot};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) mt_free(bufs[i]);
  mt_param_table_free(&f->table);
  mt_free(pf);
}

void mt_fsdp_range(const mt_fsdp *f, size_t *lo, size_t *hi) {
  *lo = f->lo;
  *hi = f->hi;
}
float *mt_fsdp_params(mt_fsdp *f) { return f->params; }
float *mt_fsdp_grads(mt_fsdp *f) { return f->grads; }
const mt_param_table *mt_fsdp_table(const mt_fsdp *f) { return &f->table; }
float *mt_fsdp_params_view(mt_fsdp *f) { return f->pview; }
float *mt_fsdp_grads_view(mt_fsdp *f) { return f->gview; }
void mt_fsdp_memory_get(const mt_fsdp *f, mt_fsdp_memory *m) { *m = f->mem; }
double mt_fsdp_comm_seconds(const mt_fsdp *f) { return f->comm_seconds; }
double mt_fsdp_comm_bytes(const mt_fsdp *f) { return f->comm_bytes; }

static int reduce_finish(mt_fsdp *f);

/* ------------------------------------------------------- parameters */

/* Time in communication calls (starting, driving and waiting for them, and
 * summing the reduced pieces) goes to f->comm_seconds: the trainer counts
 * it as exposed communication. */
#define COMM_TIMED(f, call)                                                                        \
  do {                                                                                             \
    double t0_ = mt_now();                                                                         \
    int e_ = (call);                                                                               \
    (f)->comm_seconds += mt_now() - t0_;                                                           \
    MT_CALL(e_);                                                                                   \
  } while (0)

static int gather_start_call(mt_fsdp *f, int u) {
  const int G = f->gsize;
  const int mine = f->counts[u * G + f->grank];
  const float *send = mine ? f->params + (f->ulo[u] + (size_t)f->displs[u * G + f->grank] - f->lo)
                           : f->params;
  MT_MPI(MPI_Iallgatherv(send, mine, MPI_FLOAT, f->pview + f->ulo[u], f->counts + u * G,
                         f->displs + u * G, MPI_FLOAT, f->group, &f->greq[u]));
  return 0;
}

static int gather_start(mt_fsdp *f, int u) {
  MT_CALL(unit_lend(f, 0, u));
  COMM_TIMED(f, gather_start_call(f, u));
  f->pstate[u] = IN_FLIGHT;
  f->comm_bytes += (double)(f->uhi[u] - f->ulo[u]) * sizeof(float);
  return 0;
}

static int gather_wait_call(mt_fsdp *f, int u) {
  MT_MPI(MPI_Wait(&f->greq[u], MPI_STATUS_IGNORE));
  return 0;
}

static int gather_wait(mt_fsdp *f, int u) {
  if (f->pstate[u] == RELEASED) MT_CALL(gather_start(f, u));
  if (f->pstate[u] == IN_FLIGHT) {
    COMM_TIMED(f, gather_wait_call(f, u));
    f->pstate[u] = GATHERED;
  }
  return 0;
}

static int param_release(mt_fsdp *f, int u) {
  if (f->pstate[u] != GATHERED) return 0;
  f->pstate[u] = RELEASED;
  MT_CALL(unit_give_back(f, 0, u));
  return 0;
}

/* Moves the non-blocking operations in flight on (OpenMPI progresses them
 * only inside MPI calls): the reduction, and the gathers started. */
static int progress_calls(mt_fsdp *f) {
  int done;
  MT_CALL(mt_coll_test(f->rcoll, &done));
  for (int u = 0; u < f->nunits; u++)
    if (f->pstate[u] == IN_FLIGHT) {
      MT_MPI(MPI_Test(&f->greq[u], &done, MPI_STATUS_IGNORE));
      if (done) f->pstate[u] = GATHERED;
    }
  return 0;
}

static int progress(mt_fsdp *f) {
  COMM_TIMED(f, progress_calls(f));
  return 0;
}

int mt_fsdp_unit_use(void *ctx, int munit, int pass) {
  mt_fsdp *f = ctx;
  MT_CHECK(munit >= 0 && munit < f->nmodel_units, MT_ERR_ARG, "fsdp: unit %d of %d", munit,
           f->nmodel_units);
  if (f->pinned) return 0;
  const int u = f->unit_of[munit];
  if (pass == 0) f->used[u] = 1;
  if (pass != f->pass) memset(f->seen, 0, (size_t)f->nunits * sizeof(int));
  f->pass = pass;
  /* the unit used before is done with (shard_grad_op: only in backward) */
  if (f->last >= 0 && f->last != u && (pass == 1 || f->strategy != MT_FSDP_SHARD_GRAD_OP))
    MT_CALL(param_release(f, f->last));
  f->last = u;
  /* the unit's gradient of the previous micro-step must have left the
   * view before this backward adds into it; without prefetch every
   * reduction ends before the next unit's backward */
  if (pass == 1 && (f->pend == u || !f->prefetch)) MT_CALL(reduce_finish(f));
  if (pass == 1) MT_CALL(unit_lend(f, 1, u)); /* its gradient, zeroed */
  MT_CALL(gather_wait(f, u));
  /* prefetch the next unit of the pass, unless the pass used it already
   * (gpt's forward ends with its first unit, the tied head) */
  f->seen[u] = 1;
  int next = pass == 0 ? u + 1 : u - 1;
  if (f->prefetch && next >= 0 && next < f->nunits && !f->seen[next] &&
      f->pstate[next] == RELEASED)
    MT_CALL(gather_start(f, next));
  MT_CALL(progress(f));
  sample_memory(f);
  return 0;
}

/* -------------------------------------------------------- gradients */

static int reduce_start(mt_fsdp *f, int u) {
  const int G = f->gsize;
  COMM_TIMED(f, mt_coll_start_reduce_scatter_v(&f->rcoll, f->rtmp, f->gview + f->ulo[u],
                                               f->counts + u * G, f->displs + u * G, f->group));
  f->pend = u;
  f->comm_bytes += (double)(f->uhi[u] - f->ulo[u]) * sizeof(float);
  return 0;
}

/* Waits for the reduction in flight, adds this rank's piece to the
 * gradient shard and gives the unit's gradient pages back. */
static int reduce_finish(mt_fsdp *f) {
  const int u = f->pend, G = f->gsize;
  if (u < 0) return 0;
  const double t0 = mt_now();
  MT_CALL(mt_coll_wait(&f->rcoll));
  const int c = f->counts[u * G + f->grank];
  if (c) {
    float *g = f->grads + (f->ulo[u] + (size_t)f->displs[u * G + f->grank] - f->lo);
    const float *s = f->rtmp;
#pragma omp simd
    for (int i = 0; i < c; i++) g[i] += s[i];
  }
  f->comm_seconds += mt_now() - t0; /* the wait above and the sum */
  f->pend = -1;
  MT_CALL(unit_give_back(f, 1, u));
  return 0;
}

int mt_fsdp_unit_done(mt_fsdp *f, int munit) {
  MT_CHECK(munit >= 0 && munit < f->nmodel_units, MT_ERR_ARG, "fsdp: unit %d of %d", munit,
           f->nmodel_units);
  const int u = f->unit_of[munit];
  MT_CHECK(f->pinned || f->used[u], MT_ERR_STATE,
           "fsdp: the model's forward did not announce unit %d (mt_model_unit_use), so its "
           "parameters were never gathered; this model cannot run under -backend fsdp", munit);
  if (++f->ndone[u] < f->members[u]) return 0;
  f->ndone[u] = 0;
  sample_memory(f);
  MT_CALL(reduce_finish(f));
  MT_CALL(reduce_start(f, u));
  return 0;
}

void mt_fsdp_step_begin(mt_fsdp *f) {
  memset(f->grads, 0, (f->hi - f->lo) * sizeof(float));
  memset(f->used, 0, (size_t)f->nunits * sizeof(int));
}

int mt_fsdp_finish_grads(mt_fsdp *f) {
  MT_CALL(reduce_finish(f));
  for (int u = 0; u < f->nunits; u++) {
    MT_CHECK(f->ndone[u] == 0, MT_ERR_STATE,
             "fsdp: the backward reported %d of the %d model units of unit %d as done", f->ndone[u],
             f->members[u], u);
    if (f->pstate[u] == IN_FLIGHT) MT_CALL(gather_wait(f, u));
    MT_CALL(param_release(f, u));
  }
  f->last = -1;
  if (f->replicas != MPI_COMM_NULL) {
    double t0 = mt_now();
    size_t sn = f->hi - f->lo;
    for (size_t o = 0; o < sn; o += (size_t)1 << 28) {
      size_t c = sn - o < ((size_t)1 << 28) ? sn - o : ((size_t)1 << 28);
      MT_MPI(MPI_Allreduce(MPI_IN_PLACE, f->grads + o, (int)c, MPI_FLOAT, MPI_SUM, f->replicas));
    }
    f->comm_seconds += mt_now() - t0;
    f->comm_bytes += (double)sn * sizeof(float);
  }
  return 0;
}

int mt_fsdp_grad_norm2(mt_fsdp *f, double *norm2) {
  double s = mt_l2_norm(f->grads, f->hi - f->lo);
  s *= s;
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_SUM, f->group));
  *norm2 = s;
  return 0;
}

int mt_fsdp_pin(mt_fsdp *f) {
  if (f->pinned) return 0;
  /* evaluation's and saving's gathers: not training's communication */
  const double secs = f->comm_seconds, bytes = f->comm_bytes;
  int err = 0;
  for (int u = 0; u < f->nunits && !err; u++) err = gather_wait(f, u);
  f->comm_seconds = secs;
  f->comm_bytes = bytes;
  MT_CALL(err);
  f->pinned = 1; /* not sampled: the peaks are those of training */
  return 0;
}

int mt_fsdp_pinned(const mt_fsdp *f) { return f->pinned; }
int mt_fsdp_group_size(const mt_fsdp *f) { return f->gsize; }

int mt_fsdp_unpin(mt_fsdp *f) {
  if (!f->pinned) return 0;
  int err = 0; /* released while pinned: the pools keep training's pages */
  for (int u = 0; u < f->nunits; u++)
    if (!err) err = param_release(f, u);
  f->pinned = 0;
  f->last = -1;
  MT_CALL(err);
  return 0;
}

/* ------------------------------------------------------------ backend */

/* The trainer drives the shards (trainer.c, compute.c); the backend's part
 * is the agreement at start and the end of the gradient reduction. b->data
 * is the trainer's mt_fsdp. */
static int fsdp_sync(mt_backend *b, float *params, size_t n) {
  for (size_t o = 0; o < n; o += (size_t)1 << 28) {
    size_t k = n - o < ((size_t)1 << 28) ? n - o : ((size_t)1 << 28);
    MT_MPI(MPI_Bcast(params + o, (int)k, MPI_FLOAT, 0, b->comm));
  }
  return 0;
}

static int fsdp_reduce(mt_backend *b, float *grads, size_t n) {
  (void)grads, (void)n;
  mt_fsdp *f = b->data;
  MT_CHECK(f, MT_ERR_STATE, "fsdp: the backend has no shards (set up by the trainer)");
  MT_CALL(mt_fsdp_finish_grads(f));
  /* the step's gathers and reductions, in the backward and here */
  b->comm_seconds += f->comm_seconds - f->told_seconds;
  b->comm_bytes += f->comm_bytes - f->told_bytes;
  f->told_seconds = f->comm_seconds;
  f->told_bytes = f->comm_bytes;
  return 0;
}

/* the -amp policy (autocast-style, trainer/amp.c) runs over the same shards */
const mt_backend_ops mt_fsdp_ops = {.name = "fsdp",
                                    .traits = MT_TRAIT_SHARDED | MT_TRAIT_AMP | MT_TRAIT_CUDA,
                                    .sync_params = fsdp_sync,
                                    .reduce_grads = fsdp_reduce};
