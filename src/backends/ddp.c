/* ddp: every rank holds the whole model; gradients are summed over ranks in
 * contiguous buckets of the flat gradient buffer (each already carries the
 * 1/global_batch factor, so the sum is the global-batch mean).
 *
 * Buckets are planned once, from the top of the buffer down (the last
 * layers' gradients are ready first): a small first bucket
 * (-ddp_first_bucket_mb, PyTorch's 1 MB), then -ddp_bucket_mb each. With
 * overlap (-ddp_overlap 1, the default) the model's backward reports each
 * finished unit (mt_model_unit_done -> unit_ready); a bucket whose units are
 * all done is started at once: handed to the rank's communication thread,
 * which runs the buckets' blocking MPI_Allreduce in order on a duplicate
 * communicator (-ddp_comm_thread 1, the default), or started as an
 * MPI_Iallreduce that every later report drives on with MPI_Test (OpenMPI
 * progresses non-blocking collectives only inside MPI calls).
 * reduce_grads starts what is left and waits. Without overlap the same
 * buckets are reduced with MPI_Allreduce after the backward, after a
 * barrier that separates the wait for the slowest rank. At 2 ranks all give
 * the same bits (a + b). Measured (bench/README.md): the thread ties with
 * no overlap on shared memory and is 16-18% faster over TCP with 1 MiB
 * buckets; the MPI_Test path is slower than no overlap everywhere (the
 * ranks' cores do the copies, and progress happens only at layer ends).
 *
 * The thread must not hold a core while it waits for the other ranks to
 * reach a bucket: a blocking MPI_Allreduce (OpenMPI's) polls until they
 * do, and that wait lasts most of the backward pass, on the cores the
 * ranks compute on (2 ranks x 2 threads on 2 cores: each rank's backward
 * ran at about half speed; measured in bench/README.md, "Two cores against
 * one"). So before each bucket's MPI_Allreduce the thread meets the other
 * ranks in an MPI_Ibarrier that it tests between sleeps on its condition
 * variable, 10 us doubling to 250 us (a wake-up costs ~30 us of CPU). When
 * the rank's own backward is done (reduce_any waits) the sleeps start
 * again at 10 us and stop doubling at 80 us: the wait is now the step's
 * critical path, but the core is not free on a machine that runs more
 * than the ranks (polling there took as much CPU as the rank's compute).
 * The all-reduce itself then starts with every rank present, so its
 * polling lasts only the transfer -- unless a rank loses its core during
 * it (a busy machine: -ddp_allreduce shm, whose waits sleep on a futex,
 * costs the thread the same there as on an idle machine). Its CPU and
 * wall time in the calls are reported (b->comm_thread_cpu,
 * b->comm_thread_busy).
 *
 * -ddp_allreduce shm: each bucket is summed in a shared-memory window
 * instead of by MPI_Allreduce (comm/shm_reduce.h: the node's ranks reduce
 * slices of it in place, across nodes the slices are all-reduced by MPI):
 * the same call sites, through d->reduce. It has no non-blocking form, so
 * without the communication thread its buckets go after the backward. At 2
 * ranks it gives MPI_Allreduce's bits (a + b); at more, its own fixed
 * order, the same on every rank. The trainer's gradient buffer then lies
 * in the window (mt_backend_grads_window): the node's ranks sum each
 * bucket where the backward wrote it, with no copy in (shm_reduce.c); the
 * -amp low-precision all-reduce, which converts a copy, keeps the copy in.
 *
 * -precision fp64 (b->dtype): the same on double buffers (the *64 entries),
 * all-reduced as MPI_DOUBLE; bucket sizes stay in MiB, so a bucket holds
 * half as many elements. */
#include "backends/backends.h"
#include "comm/buckets.h"
#include "comm/shm_reduce.h"
#include "core/core.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The communication thread's sleeps between tests of the rendezvous: short
 * first (the others are often close), then doubling to a bound that caps
 * the latency it adds to a bucket; a lower bound once the rank waits. */
enum { POLL_FIRST_NS = 10000, POLL_MAX_NS = 250000, POLL_WAIT_MAX_NS = 80000 };

typedef struct ddp ddp;
/* One bucket summed over the ranks in place, blocking: -ddp_allreduce's
 * method (MPI_Allreduce on comm, or the shared-memory window, which has
 * communicators of its own). */
typedef int (*bucket_fn)(ddp *d, void *buf, size_t n, MPI_Comm comm);

struct ddp {
  mt_buckets bk;       /* the buckets and the units' spans (comm/buckets.h) */
  bucket_fn reduce;    /* how a bucket is summed (-ddp_allreduce)            */
  mt_shm_reduce *shm;  /* -ddp_allreduce shm: the node's window              */
  int *started;
  MPI_Request *req;
  int active;          /* unit_ready was called this step                   */
  int nstarted;
  /* -ddp_comm_thread 1: a thread of the rank runs the started buckets'
   * MPI_Allreduce (blocking, on a communicator of its own) while the
   * backward goes on; nstarted buckets are handed over, ndone finished */
  int thread_on, stop, ndone, terr;
  int main_waits;      /* reduce_any waits for the thread: the core is free */
  double tcpu, tbusy;  /* the thread's CPU and wall seconds in its calls    */
  long tsleeps;        /* its sleeps while it waited for the other ranks    */
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  MPI_Comm tcomm;
  void *tgrads;
  size_t tesz;        /* the thread's element size and type (b->dtype)      */
  MPI_Datatype ttype;
  char tmsg[512];      /* the thread's error message (errors are per thread) */
};

/* Where a rank's gradient buffer is: the bytes it sums through the window
 * in place so far (b->comm_bytes_in_place). */
static void in_place_bytes(mt_backend *b, ddp *d) {
  double copied;
  if (d->shm) mt_shm_bytes(d->shm, &b->comm_bytes_in_place, &copied);
}

static int mpi_bucket(ddp *d, void *buf, size_t n, MPI_Comm comm) {
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, d->ttype, MPI_SUM, comm));
  return 0;
}

static int shm_bucket(ddp *d, void *buf, size_t n, MPI_Comm comm) {
  (void)comm;
  return mt_shm_allreduce(d->shm, buf, n, d->tesz == sizeof(double) ? MT_SHM_F64 : MT_SHM_F32);
}

static void ddp_free(ddp *d) {
  if (!d) return;
  mt_shm_destroy(&d->shm);
  mt_buckets_free(&d->bk);
  mt_free(&d->started);
  mt_free(&d->req);
}

/* The buffers' element size and MPI type. */
static size_t esz(const mt_backend *b) { return b->dtype == MT_FP64 ? sizeof(double) : sizeof(float); }
static MPI_Datatype mpi_type(const mt_backend *b) {
  return b->dtype == MT_FP64 ? MPI_DOUBLE : MPI_FLOAT;
}

/* Element i of a buffer of the backend's type. */
static void *at(const mt_backend *b, void *buf, size_t i) { return (char *)buf + i * esz(b); }

static int plan(mt_backend *b, size_t n) {
  ddp *d = b->data;
  MT_CALL(mt_buckets_plan(&d->bk, n, esz(b), b->bucket_mb, b->first_bucket_mb,
                          b->overlap ? b->table : NULL));
  MT_CALL(mt_calloc(&d->started, (size_t)d->bk.nb + 1, sizeof(int), "ddp buckets"));
  MT_CALL(mt_calloc(&d->req, (size_t)d->bk.nb + 1, sizeof(MPI_Request), "ddp buckets"));
  for (int k = 0; k < d->bk.nb; k++) d->req[k] = MPI_REQUEST_NULL;
  return 0;
}

/* The calling thread's CPU time in seconds. */
static double thread_cpu(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)) return 0;
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The communication thread: returns when every rank of tcomm has called it
 * (an MPI_Ibarrier), sleeping between tests (see the top of the file).
 * Sleeps on the condition variable, so that reduce_any's wait (main_waits)
 * ends a long sleep at once and the shorter ones begin. */
static int rendezvous(ddp *d) {
  MPI_Request rq;
  MT_MPI(MPI_Ibarrier(d->tcomm, &rq));
  long ns = POLL_FIRST_NS;
  int waited = 0; /* main_waits as last seen */
  for (;;) {
    int flag = 0;
    MT_MPI(MPI_Test(&rq, &flag, MPI_STATUS_IGNORE));
    if (flag) return 0;
    pthread_mutex_lock(&d->mu);
    if (d->main_waits && !waited) ns = POLL_FIRST_NS;
    waited = d->main_waits;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += ns;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&d->cv, &d->mu, &until);
    d->tsleeps++;
    const long cap = waited ? POLL_WAIT_MAX_NS : POLL_MAX_NS;
    ns = ns * 2 < cap ? ns * 2 : cap;
    pthread_mutex_unlock(&d->mu);
  }
}

/* The communication thread: all-reduces the buckets handed over, in
 * order, until told to stop. */
static void *comm_thread(void *arg) {
  ddp *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->stop && d->ndone == d->nstarted) pthread_cond_wait(&d->cv, &d->mu);
    if (d->ndone == d->nstarted) break; /* stop, nothing pending */
    const int k = d->ndone;
    char *g = d->tgrads;
    pthread_mutex_unlock(&d->mu);
    const double w0 = mt_now(), c0 = thread_cpu();
    int rc = d->reduce == mpi_bucket ? rendezvous(d) : 0;
    if (!rc) rc = d->reduce(d, g + d->bk.lo[k] * d->tesz, d->bk.hi[k] - d->bk.lo[k], d->tcomm);
    const double c2 = thread_cpu(), w2 = mt_now();
    pthread_mutex_lock(&d->mu);
    d->tcpu += c2 - c0;
    d->tbusy += w2 - w0;
    if (rc && !d->terr) {
      d->terr = rc;
      snprintf(d->tmsg, sizeof(d->tmsg), "%s", mt_error_message());
      mt_error_clear();
    }
    d->ndone++;
    pthread_cond_broadcast(&d->cv);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* A condition variable whose timed waits count on CLOCK_MONOTONIC
 * (rendezvous' deadlines). */
static int cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t a;
  if (pthread_condattr_init(&a)) return 1;
  int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) || pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
  return rc;
}

/* Collective (the communicator's duplicate): every rank calls it. */
static int thread_start(ddp *d, MPI_Comm comm) {
  MT_MPI(MPI_Comm_dup(comm, &d->tcomm));
  int err = 0;
  if (pthread_mutex_init(&d->mu, NULL)) {
    err = MT_ERR(MT_ERR_LIB, "ddp: cannot make the communication thread's lock "
                 "(-ddp_comm_thread 0 runs without the thread)");
  } else if (cond_init_monotonic(&d->cv)) {
    pthread_mutex_destroy(&d->mu);
    err = MT_ERR(MT_ERR_LIB, "ddp: cannot make the communication thread's condition variable "
                 "(-ddp_comm_thread 0 runs without the thread)");
  } else if (pthread_create(&d->th, NULL, comm_thread, d)) {
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    err = MT_ERR(MT_ERR_LIB, "ddp: cannot start the communication thread (-ddp_comm_thread 0 "
                 "runs without it)");
  }
  if (err) {
    MPI_Comm_free(&d->tcomm);
    return err;
  }
  d->thread_on = 1;
  return 0;
}

static void thread_stop(ddp *d) {
  if (!d->thread_on) return;
  pthread_mutex_lock(&d->mu);
  d->stop = 1;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->th, NULL);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->cv);
  MPI_Comm_free(&d->tcomm);
  d->thread_on = 0;
}

static int ddp_setup(mt_backend *b, float *params, float *grads, size_t n) {
  (void)params, (void)grads;
  ddp *d = NULL;
  const int method = b->allreduce;
  int err = mt_calloc(&d, 1, sizeof(*d), "ddp");
  b->data = d;
  /* the window's buckets have no non-blocking form: without the
   * communication thread they are reduced after the backward */
  if (!err && method == MT_ALLREDUCE_SHM && !b->comm_thread) b->overlap = 0;
  if (!err) err = plan(b, n);
  /* the thread's communicator and the window are collectives: only when
   * every rank got here */
  MT_CALL(mt_agree(b->comm, err));
  d->tesz = esz(b);
  d->ttype = mpi_type(b);
  d->reduce = mpi_bucket;
  if (method == MT_ALLREDUCE_SHM && b->size > 1) {
    MT_CALL(mt_agree(b->comm, mt_shm_create(&d->shm, b->comm, 0, MT_SHM_SYNC_FLAGS)));
    d->reduce = shm_bucket;
    mt_print0("ddp: gradient buckets summed in a shared-memory window (-ddp_allreduce shm), "
              "%d slice%s per node\n", mt_shm_slices(d->shm), mt_shm_slices(d->shm) > 1 ? "s" : "");
  }
  if (b->overlap && b->comm_thread && b->size > 1) MT_CALL(thread_start(d, b->comm));
  return 0;
}

static void ddp_destroy(mt_backend *b) {
  ddp *d = b->data;
  if (d) {
    thread_stop(d);
    for (int k = 0; d->req && k < d->bk.nb; k++)
      if (d->req[k] != MPI_REQUEST_NULL) MPI_Wait(&d->req[k], MPI_STATUS_IGNORE);
  }
  ddp_free(d);
  mt_free(&b->data);
}

/* Entries of the other type than the backend was set up for are a bug. */
static int check_type(const mt_backend *b, mt_dtype dt) {
  MT_CHECK(b->dtype == dt, MT_ERR_STATE, "ddp: a %s buffer for a backend set up for %s",
           dt == MT_FP64 ? "double" : "float", b->dtype == MT_FP64 ? "double" : "float");
  return 0;
}

static int sync_any(mt_backend *b, void *params, size_t n) {
  for (size_t o = 0; o < n; o += (size_t)1 << 28) {
    size_t k = n - o < ((size_t)1 << 28) ? n - o : ((size_t)1 << 28);
    MT_MPI(MPI_Bcast(at(b, params, o), (int)k, mpi_type(b), 0, b->comm));
  }
  return 0;
}

static int start(mt_backend *b, ddp *d, void *grads, int k) {
  if (d->thread_on) { /* handed to the thread (buckets go in order) */
    pthread_mutex_lock(&d->mu);
    d->tgrads = grads;
    d->started[k] = 1;
    d->nstarted++;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    return 0;
  }
  MT_MPI(MPI_Iallreduce(MPI_IN_PLACE, at(b, grads, d->bk.lo[k]),
                        (int)(d->bk.hi[k] - d->bk.lo[k]),
                        mpi_type(b), MPI_SUM, b->comm, &d->req[k]));
  d->started[k] = 1;
  d->nstarted++;
  return 0;
}

/* Waits until the thread has reduced every bucket; its error if any. */
static int thread_wait(mt_backend *b, ddp *d) {
  pthread_mutex_lock(&d->mu);
  d->main_waits = 1; /* the thread's sleeps shorten (rendezvous) */
  pthread_cond_broadcast(&d->cv);
  while (d->ndone < d->bk.nb) pthread_cond_wait(&d->cv, &d->mu);
  d->main_waits = 0;
  int rc = d->terr;
  d->terr = 0;
  d->ndone = 0;
  d->nstarted = 0;
  b->comm_thread_cpu = d->tcpu;
  b->comm_thread_busy = d->tbusy;
  b->comm_thread_sleeps = d->tsleeps;
  pthread_mutex_unlock(&d->mu);
  MT_CHECK(!rc, rc, "ddp: the communication thread's all-reduce: %s", d->tmsg);
  return 0;
}

static int unit_ready_any(mt_backend *b, void *grads, int unit) {
  ddp *d = b->data;
  if (b->size == 1 || !d->bk.nunits) return 0;
  MT_CALL(mt_buckets_done(&d->bk, unit));
  const double t0 = mt_now();
  d->active = 1;
  /* start in bucket order only: every rank must start the same sequence */
  for (int k = d->nstarted; k < d->bk.nb && mt_buckets_ready(&d->bk, k); k++) {
    MT_CALL(start(b, d, grads, k));
    b->early_buckets++;
  }
  for (int k = 0; k < d->nstarted && !d->thread_on; k++) /* drive the started ones on */
    if (d->req[k] != MPI_REQUEST_NULL) {
      int flag;
      MT_MPI(MPI_Test(&d->req[k], &flag, MPI_STATUS_IGNORE));
    }
  b->comm_seconds += mt_now() - t0;
  return 0;
}

static int reduce_any(mt_backend *b, void *grads, size_t n) {
  ddp *d = b->data;
  if (b->size == 1) return 0;
  double t0 = mt_now();
  if (!d->active) MT_CALL(mt_backend_arrive(b, &t0));
  if (d->active) {
    for (int k = d->nstarted; k < d->bk.nb; k++) MT_CALL(start(b, d, grads, k));
    if (d->thread_on) {
      MT_CALL(thread_wait(b, d)); /* which also resets nstarted, under the lock */
    } else {
      MT_MPI(MPI_Waitall(d->bk.nb, d->req, MPI_STATUSES_IGNORE));
      d->nstarted = 0;
    }
    mt_buckets_reset(&d->bk);
    memset(d->started, 0, (size_t)d->bk.nb * sizeof(int));
    d->active = 0;
  } else {
    for (int k = 0; k < d->bk.nb; k++)
      MT_CALL(d->reduce(d, at(b, grads, d->bk.lo[k]), d->bk.hi[k] - d->bk.lo[k], b->comm));
  }
  b->comm_seconds += mt_now() - t0;
  b->comm_bytes += (double)n * (double)esz(b);
  in_place_bytes(b, d); /* the thread's calls are done */
  return 0;
}

int mt_backend_grads_window(mt_backend *b, size_t bytes, void **buf) {
  *buf = NULL;
  ddp *d = b->ops == &mt_ddp_ops ? b->data : NULL; /* not under the -amp wrapper */
  if (!d || !d->shm) return 0;
  MT_CALL(mt_shm_buffer(d->shm, bytes, buf));
  if (*buf)
    mt_print0("ddp: the gradients lie in the window: the buckets are summed where the backward "
              "writes them (no copy in)\n");
  return 0;
}

int mt_backend_params_window(mt_backend *b, size_t bytes, void **buf) {
  *buf = NULL;
  ddp *d = b->ops == &mt_ddp_ops ? b->data : NULL;
  if (!d || !d->shm) return 0;
  return mt_shm_shared(d->shm, bytes, buf);
}

int mt_backend_window_arrive(mt_backend *b) {
  ddp *d = b->ops == &mt_ddp_ops ? b->data : NULL;
  MT_CHECK(d && d->shm, MT_ERR_STATE, "ddp: no shared window to wait on");
  return mt_shm_arrive(d->shm);
}

int mt_backend_reduce_apply(mt_backend *b, void *grads, size_t n,
                            int (*fn)(void *ctx, size_t first, size_t k, const void *sum),
                            void *ctx) {
  ddp *d = b->ops == &mt_ddp_ops ? b->data : NULL;
  MT_CHECK(d && d->shm && !d->active, MT_ERR_STATE,
           "ddp: a fused sum needs the shared window and no bucket under way");
  double t0;
  MT_CALL(mt_backend_arrive(b, &t0)); /* the wait for the slowest rank, as reduce_any */
  /* the sum is the optimizer's time now: comm_seconds keeps the wait */
  MT_CALL(mt_shm_reduce_apply(d->shm, grads, n, d->tesz == sizeof(double) ? MT_SHM_F64 : MT_SHM_F32,
                              fn, ctx));
  b->comm_bytes += (double)n * (double)esz(b);
  in_place_bytes(b, d);
  return 0;
}

static int ddp_sync(mt_backend *b, float *params, size_t n) {
  MT_CALL(check_type(b, MT_FP32));
  return sync_any(b, params, n);
}

static int ddp_sync64(mt_backend *b, double *params, size_t n) {
  MT_CALL(check_type(b, MT_FP64));
  return sync_any(b, params, n);
}

static int ddp_reduce(mt_backend *b, float *grads, size_t n) {
  MT_CALL(check_type(b, MT_FP32));
  return reduce_any(b, grads, n);
}

static int ddp_reduce64(mt_backend *b, double *grads, size_t n) {
  MT_CALL(check_type(b, MT_FP64));
  return reduce_any(b, grads, n);
}

static int ddp_unit_ready(mt_backend *b, float *grads, int unit) {
  MT_CALL(check_type(b, MT_FP32));
  return unit_ready_any(b, grads, unit);
}

static int ddp_unit_ready64(mt_backend *b, double *grads, int unit) {
  MT_CALL(check_type(b, MT_FP64));
  return unit_ready_any(b, grads, unit);
}

const mt_backend_ops mt_ddp_ops = {.name = "ddp",
                                   .traits = MT_TRAIT_AMP | MT_TRAIT_AMP_O2 | MT_TRAIT_DP |
                                             MT_TRAIT_LOWP_REDUCE | MT_TRAIT_CUDA,
                                   .setup = ddp_setup,
                                   .sync_params = ddp_sync,
                                   .reduce_grads = ddp_reduce,
                                   .unit_ready = ddp_unit_ready,
                                   .destroy = ddp_destroy,
                                   .sync_params64 = ddp_sync64,
                                   .reduce_grads64 = ddp_reduce64,
                                   .unit_ready64 = ddp_unit_ready64};
