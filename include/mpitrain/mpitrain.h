/* mpitrain — public C API.
 *
 * What a user links against (libmpitrain) to add a model or a backend
 * without forking mpitrain. Everything here is plain C11 plus <mpi.h>.
 *
 * Conventions (see DESIGN.md):
 *  - every fallible function returns an int status, 0 on success, and callers
 *    wrap calls in MT_CALL() so a failure becomes a traceback;
 *  - all parameters of a model live in ONE flat buffer described by a
 *    parameter table (name, shape, offset); gradients and optimizer state use
 *    the same layout. The buffer is float, or double under -precision fp64
 *    (mt_dtype: the *64 operations below).
 */
#ifndef MPITRAIN_H
#define MPITRAIN_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPITRAIN_VERSION "0.1.0"

/* The element type of the flat buffers (parameters, gradients, optimizer
 * state, model buffers) and of a model's compute: -precision fp32 | fp64. */
typedef enum { MT_FP32 = 0, MT_FP64 = 1 } mt_dtype;

/* ---------------------------------------------------------------- errors */

typedef enum {
  MT_OK = 0,
  MT_ERR_ARG,    /* bad argument to a function (a bug in the caller)      */
  MT_ERR_OPTION, /* bad user option                                        */
  MT_ERR_FILE,   /* a file cannot be opened, read or written               */
  MT_ERR_DATA,   /* a data file has the wrong content                      */
  MT_ERR_MPI,    /* an MPI call failed                                     */
  MT_ERR_HDF5,   /* an HDF5 call failed                                    */
  MT_ERR_MEM,    /* out of memory                                          */
  MT_ERR_LIB,    /* oneDNN, PETSc or another library failed                */
  MT_ERR_STATE,  /* an invariant does not hold                             */
  MT_ERR_NUMERIC,/* NaN or inf where a finite value is required            */
  MT_ERR_WRITE,  /* a file could not be written: disk full, quota, I/O     */
  MT_ERR_COUNT_
} mt_err_code;

/* Records the first error of a chain: its message, code and location, and
 * returns code. Later calls with the same chain add a traceback frame only. */
int mt_error_set(const char *file, int line, const char *func, int code,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Adds a traceback frame (called by MT_CALL on the way up). */
void mt_error_push(const char *file, int line, const char *func, int code);
/* The recorded message ("" when none) and traceback, and a reset. */
const char *mt_error_message(void);
const char *mt_error_traceback(void);
void mt_error_clear(void);
/* Short name of an error code. */
const char *mt_error_name(int code);

#define MT_ERR(code, ...) mt_error_set(__FILE__, __LINE__, __func__, (code), __VA_ARGS__)

#define MT_CALL(expr)                                                        \
  do {                                                                       \
    int mt_e_ = (expr);                                                      \
    if (mt_e_) {                                                             \
      mt_error_push(__FILE__, __LINE__, __func__, mt_e_);                    \
      return mt_e_;                                                          \
    }                                                                        \
  } while (0)

#define MT_CHECK(cond, code, ...)                                            \
  do {                                                                       \
    if (!(cond)) return MT_ERR((code), __VA_ARGS__);                         \
  } while (0)

int mt_mpi_error(const char *file, int line, const char *func, int rc, const char *expr);
#define MT_MPI(expr)                                                         \
  do {                                                                       \
    int mt_e_ = (expr);                                                      \
    if (mt_e_ != MPI_SUCCESS)                                                \
      return mt_mpi_error(__FILE__, __LINE__, __func__, mt_e_, #expr);       \
  } while (0)

/* Allocation that reports the size and the purpose on failure. 64-byte
 * aligned, zero-filled. Free with mt_free. */
int mt_calloc(void *pptr, size_t count, size_t size, const char *what);
void mt_free(void *pptr); /* frees *(void**)pptr and sets it to NULL */

/* ------------------------------------------------------- parameter table */

#define MT_NAME_MAX 96
#define MT_MAX_DIMS 4

typedef struct {
  char name[MT_NAME_MAX]; /* PyTorch name, e.g. "layers.0.weight"          */
  int ndim;
  int64_t shape[MT_MAX_DIMS];
  size_t offset; /* in elements, into the flat buffer                       */
  size_t numel;
  int unit;      /* sharding / gathering unit (a layer or a block)          */
  int decay;     /* 1 when weight decay applies (weights), 0 for 1-d params */
} mt_param;

typedef struct {
  mt_param *p;
  int n, cap;
  size_t total; /* elements in the flat buffer                              */
  int nunits;
} mt_param_table;

/* Appends a tensor; offsets are assigned in order, each tensor padded to a
 * multiple of 16 floats (64 bytes) so every tensor starts aligned. */
int mt_param_table_add(mt_param_table *t, const char *name, int ndim,
                       const int64_t *shape, int unit);
const mt_param *mt_param_table_find(const mt_param_table *t, const char *name);
void mt_param_table_free(mt_param_table *t);
/* The tensors' pieces in [lo, hi) of t's layout, as a table of 1-d pieces
 * (names, units and decay flags kept) whose offsets are relative to lo and
 * whose total is hi - lo: the optimizer's view of a shard (fsdp). *out is
 * made anew; free it with mt_param_table_free. */
int mt_param_table_slice(const mt_param_table *t, size_t lo, size_t hi, mt_param_table *out);

/* -------------------------------------------------------------- options */

/* Options of a user's model or backend, read from the same options database
 * as mpitrain's own (command line, -options_file, PETSC_OPTIONS). Each read
 * marks the option used, so it is not reported as unknown, and prints a help
 * line under -help. A malformed or out-of-range value is MT_ERR_OPTION with
 * a message naming the option. Call them from a model's options op. */
int mt_option_string(const char *name, const char *help, const char *def, char *out, size_t len);
int mt_option_int(const char *name, const char *help, long def, long lo, long hi, long *out);
int mt_option_real(const char *name, const char *help, double def, double lo, double hi,
                   double *out);

/* mpitrain's whole program: MPI and PETSc start-up, options, training,
 * clean shut-down; returns the process exit status. A program that links
 * libmpitrain registers its models and backends, then returns mt_main(). */
int mt_main(int argc, char **argv);
/* mt_main's exit status when SIGUSR1 or SIGTERM made the run write a
 * checkpoint and stop: a job script requeues and restarts with -restart auto
 * (75 is sysexits' EX_TEMPFAIL). 0: finished; 1: an error. */
#define MT_EXIT_REQUEUE 75
/* mt_main's exit status when an output could not be written (MT_ERR_WRITE:
 * a full disk, a quota, an I/O error) and the run stopped; the checkpoints
 * written before are intact (74 is sysexits' EX_IOERR). */
#define MT_EXIT_WRITE 74

/* ------------------------------------------- small per-rank values */

/* One small value of a rank: a count, a time, a host name (aitoolbox's
 * mp_sync gathers such values). Make them with the constructors below;
 * only the field of the type is meaningful. */
typedef enum { MT_VALUE_I64 = 1, MT_VALUE_F64, MT_VALUE_STR } mt_value_type;

#define MT_VALUE_STR_MAX 64 /* string bytes with the NUL; longer is cut   */

typedef struct {
  int type; /* mt_value_type                                               */
  int64_t i;
  double f;
  char s[MT_VALUE_STR_MAX];
} mt_value;

/* Not collective, cannot fail. */
mt_value mt_value_i64(int64_t v);
mt_value mt_value_f64(double v);
mt_value mt_value_str(const char *v); /* NULL is ""; cut to MT_VALUE_STR_MAX-1 */

/* Gathers n values of every rank of comm to every rank (the counterpart of
 * aitoolbox's mp_sync): all[r * n + k] receives rank r's mine[k]; all has
 * room for size * n values (the caller's) and is written on every rank, so
 * every rank can combine them the same way (a sum of counts, the slowest
 * rank's time, the distinct hosts). Collective over comm: one small
 * all-reduce and one all-gather of a derived MPI datatype (so it holds
 * across architectures). Every rank passes the same n and the same types in
 * the same order: anything else fails on every rank with MT_ERR_ARG naming
 * the first rank and position at fault (never a hang); an MPI failure is
 * MT_ERR_MPI. Meant for metrics and summaries, not for bulk data. */
int mt_allgather_values(MPI_Comm comm, const mt_value *mine, int n, mt_value *all);

/* --------------------------------------------------------------- models */

/* What a data set tells a model: sample shape and target kind. */
typedef struct {
  int ndim;               /* sample dims, excluding N                       */
  int64_t shape[MT_MAX_DIMS];
  int64_t sample_numel;
  int nclasses;           /* > 0 for class labels; the vocabulary for tokens */
  int tokens;             /* 1: token windows of sample_numel + 1 tokens     */
  int ntargets;           /* > 0: regression, that many float targets per
                             sample (/y float (N) or (N,K)); nclasses is 0   */
} mt_data_spec;

/* A batch of n samples handed to a model. Each present array is row-major
 * with the given row length; absent ones are NULL. */
typedef struct {
  int n;
  const float *x;        /* (n, x_len) inputs                                */
  const int32_t *labels; /* (n) class labels                                 */
  const int32_t *tokens; /* (n, tokens_len) token windows: a language-model
                            sample is T+1 tokens, inputs [0,T), targets [1,T] */
  const float *targets;  /* (n, targets_len) regression targets             */
  int64_t x_len, tokens_len, targets_len;
  /* Where the rows come from and what the pass is, for layers that draw
   * random numbers (dropout) or keep statistics (batch norm):
   * ids: each row's index in its data set (NULL: row numbers); train: 1 in
   * a training forward (dropout on, batch statistics used and the running
   * ones updated), 0 in evaluation; key: the step's random key. A layer
   * draws sample ids[i]'s numbers from (key, ids[i]), so the masks do not
   * depend on how the rows are split over ranks, threads or micro-batches,
   * and a restarted run draws the same ones. */
  const int64_t *ids;
  int train;
  uint64_t key;
} mt_batch;

/* Rows [r0, r1) of b (no copy). */
static inline mt_batch mt_batch_rows(const mt_batch *b, int r0, int r1) {
  mt_batch s = *b;
  s.n = r1 - r0;
  if (s.x) s.x += (int64_t)r0 * b->x_len;
  if (s.labels) s.labels += r0;
  if (s.tokens) s.tokens += (int64_t)r0 * b->tokens_len;
  if (s.targets) s.targets += (int64_t)r0 * b->targets_len;
  if (s.ids) s.ids += r0;
  return s;
}

/* Per-batch results of a forward pass over B samples. Callers
 * zero-initialise it ({0}); the sums accumulate over forwards. The output
 * pointers are optional: NULL when not wanted, otherwise the forward fills
 * rows [0, B) of them for the B samples of this call. */
typedef struct {
  double loss_sum;  /* sum of per-sample losses                             */
  double correct;   /* correct top-1 predictions, counted per sample: a
                       sample with several targets (tokens) adds the
                       fraction of them predicted correctly               */
  int32_t *pred;    /* (B) top-1 class (the first of equal maxima); -1 for
                       a model without one per sample (tokens)            */
  float *logits;    /* (B, logits_len) the outputs before the softmax; a
                       model that offers none fails with MT_ERR_ARG       */
  int logits_len;   /* row length of logits: the number of classes        */
  double *logits64; /* the same for forward64 (-precision fp64), which
                       fills this one instead of logits                    */
} mt_batch_stats;

typedef struct mt_model mt_model;

/* A model's own metric (its metrics op): a name, written to curve.csv as
 * the column metric.NAME, and this pass's value. */
#define MT_METRIC_NAME_MAX 32 /* name bytes with the NUL                  */
#define MT_METRICS_MAX 8      /* metrics one model may report             */
typedef struct {
  char name[MT_METRIC_NAME_MAX]; /* letters, digits, '_' and '.'            */
  double value;
} mt_metric;

/* A model's operations. Forward consumes a batch of b->n <= max_batch
 * samples, keeps what backward needs (it may keep pointers into the batch
 * until backward returns), fills per-sample losses (may be NULL) and the
 * per-sample outputs st asks for (pred, logits), and adds to st's sums.
 * Backward ADDS into grads the gradient of scale * sum_i loss_i for the
 * batch of the last forward (B is its size, a check). Neither allocates:
 * buffers are sized for max_batch at setup. */
typedef struct {
  const char *name;
  /* Optional: reads the model's own options with mt_option_*; called once,
   * on every rank, before any setup (and under -help). */
  int (*options)(void);
  /* Fills m->params and sizes buffers for batches of up to max_batch. May be
   * called several times (one model per thread of a rank). */
  int (*setup)(mt_model *m, const mt_data_spec *spec, int max_batch);
  int (*init)(mt_model *m, float *params, uint64_t seed);
  int (*forward)(mt_model *m, const float *params, const mt_batch *b, float *losses,
                 mt_batch_stats *st);
  int (*backward)(mt_model *m, const float *params, float *grads, float scale, int B);
  /* FLOPs of one forward+backward per sample (for metrics); may be NULL. */
  double (*flops_per_sample)(const mt_model *m);
  void (*destroy)(mt_model *m);
  /* Optional: -precision fp64, PyTorch's model.double(). A model made with
   * m->dtype == MT_FP64 (mt_model_create_as) computes with double
   * parameters, gradients, activations and losses: forward64 and
   * backward64 are forward and backward with double buffers (the batch's
   * inputs and targets stay float and are widened at the model's input;
   * per-sample logits go to st->logits64, st->logits is NULL) and read and
   * update m->buf64 instead of m->buf. setup sees m->dtype and sizes its
   * buffers for it; init still fills float parameters and m->buf, which
   * mt_model_init widens (as model.double() after construction). A model
   * without them is refused under -precision fp64. */
  int (*forward64)(mt_model *m, const double *params, const mt_batch *b, double *losses,
                   mt_batch_stats *st);
  int (*backward64)(mt_model *m, const double *params, double *grads, double scale, int B);
  /* Optional, DP-SGD's fast path (Opacus's ghost clipping): after a
   * forward of B samples, ADDS to grads the sum over the samples of
   * c_i g_i, where g_i is the gradient of sample i's loss alone and c_i =
   * min(1, max_norm / (||g_i|| + 1e-6)), the norm over all parameters;
   * norms[i] receives ||g_i|| (B doubles). A model offers it when it can
   * find ||g_i|| without making g_i (a linear layer's is ||dout_i||
   * ||in_i||); without it DP-SGD runs one forward and backward per
   * sample. */
  int (*backward_clipped)(mt_model *m, const float *params, float *grads, double max_norm, int B,
                          double *norms);
  /* Optional: the forward's share of flops_per_sample (the rest is the
   * backward's), logged with PetscLogFlops so -log_view's mtForward,
   * mtBackward and mtValidation show flops; without it they show none. */
  double (*forward_flops_per_sample)(const mt_model *m);
  /* Optional: the model's own metrics, which the trainer writes to
   * curve.csv as columns metric.NAME (and to curve.h5, and to checkpoints
   * with the curve, so a restarted run's curve keeps them). Called on every
   * rank after each validation pass (set: the validation set's index) or,
   * without validation sets, after each epoch's training (set -1);
   * collective over comm (the run's ranks). models: the rank's nmodels
   * models (one per thread with a model of its own, -thread_split batch;
   * with one model for the rank's threads, one evaluation model a thread
   * after it; models[0] is the rank's main one), so a model that counts in
   * its forward sums its threads' counts. The op combines the ranks' values
   * itself over comm (mt_allgather_values, or MPI) and fills out[0, *n),
   * *n <= max: the same names in the same order at every call, and the
   * same values on every rank. The trainer refuses other names, a changed
   * list or values that differ between ranks with an error naming the
   * model and the metric; an error the op returns on any rank stops the run
   * on every rank. */
  int (*metrics)(mt_model *const *models, int nmodels, MPI_Comm comm, int set, mt_metric *out,
                 int max, int *n);
  /* Optional: 1 when backward and backward64 honour mt_model.grads_set
   * (write every element of grads instead of adding to it); the trainer
   * then leaves a step's gradients unzeroed before its first backward
   * (PyTorch's zero_grad(set_to_none=True)): a pass over them fewer, and
   * GEMMs that write their output instead of reading and adding to it. */
  int sets_grads;
} mt_model_ops;

struct mt_model {
  const mt_model_ops *ops;
  mt_param_table params;
  /* State that is not trained but belongs to the model (batch norm's
   * running statistics, PyTorch's buffers): a table the setup op fills like
   * params, and its flat buffer, allocated by mt_model_create after setup
   * and filled by the init op. It is saved with the model and in
   * checkpoints; under data parallelism rank 0's values are broadcast
   * after every step (PyTorch DDP's broadcast_buffers=True). A model with
   * buffers runs each forward over the whole batch of a rank (no batch
   * split over threads), so its statistics are those of that batch. */
  mt_param_table buffers;
  float *buf;
  /* Set by the trainer when a backend overlaps communication with the
   * backward pass (NULL otherwise): backward calls mt_model_unit_done(m, u)
   * as soon as the gradients of every tensor of unit u (mt_param.unit) are
   * final for this backward, so their all-reduce can start. */
  void (*unit_done)(void *ctx, int unit);
  void *unit_ctx;
  /* Set by the trainer when a backend shards the parameters (fsdp; NULL
   * otherwise): forward and backward call mt_model_unit_use(m, u, pass)
   * before they read a parameter of unit u (pass 0 in forward, 1 in
   * backward), so the backend can gather the unit into the buffer `params`
   * points to (and release units no longer needed). Until then the unit's
   * elements of that buffer may hold anything. unit_ctx is its context. */
  int (*unit_use)(void *ctx, int unit, int pass);
  /* Set by the trainer before a backward, for a model whose ops->sets_grads
   * is 1 (0 otherwise): when 1, grads may hold anything and backward must
   * write the batch's gradient into every element of it (=); when 0 it
   * adds as documented. */
  int grads_set;
  mt_data_spec spec;
  int max_batch;
  void *data; /* implementation state                                      */
  /* The element type the model was made for (mt_model_create_as; set
   * before setup) and, under MT_FP64, its buffers in double (allocated
   * with buf; mt_model_init widens buf into them). */
  mt_dtype dtype;
  double *buf64;
};

/* A model's backward reports a finished unit (see mt_model.unit_done). */
static inline void mt_model_unit_done(const mt_model *m, int unit) {
  if (m->unit_done) m->unit_done(m->unit_ctx, unit);
}

/* A model's forward (pass 0) or backward (pass 1) is about to read unit
 * `unit`'s parameters (see mt_model.unit_use); 0 or an error to return. */
static inline int mt_model_unit_use(const mt_model *m, int unit, int pass) {
  return m->unit_use ? m->unit_use(m->unit_ctx, unit, pass) : 0;
}

/* Registers a model under ops->name for -model (replacing one of the same
 * name). The ops must outlive use. */
int mt_model_register(const mt_model_ops *ops);
/* The ops registered under name, or NULL; names of all, comma-separated. */
const mt_model_ops *mt_model_find(const char *name);
void mt_model_names(char *buf, size_t len);
int mt_model_create(const char *name, const mt_data_spec *spec, int max_batch, mt_model **m);
/* The same for an element type: MT_FP64 needs the model's forward64 and
 * backward64 (else MT_ERR_OPTION naming -precision). */
int mt_model_create_as(const char *name, const mt_data_spec *spec, int max_batch, mt_dtype dtype,
                       mt_model **m);
/* Initialises params (float, or double for an MT_FP64 model) and the model
 * buffers from seed with the init op; for MT_FP64 the op fills a float copy
 * that is then widened, and m->buf is widened into m->buf64. */
int mt_model_init(mt_model *m, void *params, uint64_t seed);
void mt_model_destroy(mt_model **m);

/* ------------------------------------------------------------- backends */

typedef struct mt_backend mt_backend;

/* A backend's parallel strategy (the registered part of a -backend name)
 * declares its traits: what it is and which policies of the training step
 * compose with it. A -backend name is STRATEGY or STRATEGY-SUFFIX, parsed
 * once (mt_backend_parse) into the strategy and the step's precision and
 * privacy policies:
 *   -amp       autocast-style mixed precision (O1): needs MT_TRAIT_AMP
 *   -amp-apex  O2: low-precision working weights, fp32 master: MT_TRAIT_AMP_O2
 *   -dp        DP-SGD: per-sample clipping, noise, accountant: MT_TRAIT_DP
 * A combination the traits do not allow is refused naming -backend and the
 * strategies that have the trait. A user's strategy registered with
 * mt_backend_register composes the same way (e.g. -backend mine-amp once
 * it declares MT_TRAIT_AMP); -precision fp64 needs its *64 operations. */
#define MT_TRAIT_ONE_RANK 0x01    /* runs on one rank only (sp)              */
#define MT_TRAIT_SHARDED 0x02     /* parameters, gradients and optimizer state
                                     sharded over the ranks (fsdp; built-in) */
#define MT_TRAIT_AMP 0x04         /* the -amp policy composes                 */
#define MT_TRAIT_AMP_O2 0x08      /* the -amp-apex policy composes            */
#define MT_TRAIT_DP 0x10          /* the -dp (DP-SGD) policy composes         */
#define MT_TRAIT_LOWP_REDUCE 0x20 /* -amp gradients may be all-reduced in bf16
                                     or fp16 (-ddp_reduce_dtype)             */
#define MT_TRAIT_CUDA 0x40        /* has a -device cuda path (built-in only)  */

/* A backend decides how gradients become one global gradient and how
 * parameters stay in agreement. The trainer calls, per global step:
 *   for each micro-step: model forward/backward into grads;
 *   reduce_grads(last micro-step only);  clip; optimizer; */
typedef struct {
  const char *name;
  unsigned traits; /* MT_TRAIT_* (0: a replicated fp32 strategy, no policies) */
  int (*setup)(mt_backend *b, float *params, float *grads, size_t n);
  /* Makes all ranks hold rank 0's parameters. */
  int (*sync_params)(mt_backend *b, float *params, size_t n);
  /* Sums grads over all ranks, in place (grads already carry 1/global_batch). */
  int (*reduce_grads)(mt_backend *b, float *grads, size_t n);
  /* Optional, for overlap: during the last backward of a step, unit
   * `unit`'s gradients are final (in b->table's layout); the backend may
   * start reducing them. reduce_grads then finishes the step's reduction. */
  int (*unit_ready)(mt_backend *b, float *grads, int unit);
  void (*destroy)(mt_backend *b);
  /* Optional: -precision fp64 (b->dtype == MT_FP64). The same operations on
   * double buffers; setup is then called with NULL params and grads. A
   * backend without sync_params64 and reduce_grads64 is refused under
   * -precision fp64; unit_ready64 (overlap) may be NULL. */
  int (*sync_params64)(mt_backend *b, double *params, size_t n);
  int (*reduce_grads64)(mt_backend *b, double *grads, size_t n);
  int (*unit_ready64)(mt_backend *b, double *grads, int unit);
} mt_backend_ops;

/* A -backend name parsed into its parts (mt_backend_parse). */
typedef struct {
  const mt_backend_ops *ops; /* the parallel strategy                      */
  int amp;                   /* precision policy: 0 fp32, 1 O1 (-amp), 2 O2 */
  int dp;                    /* privacy policy: 1 DP-SGD (-dp)              */
} mt_backend_spec;

struct mt_backend {
  const mt_backend_ops *ops;
  char name[64];       /* the -backend name it was made from               */
  mt_backend_spec spec; /* its parts                                       */
  MPI_Comm comm;       /* the data-parallel communicator                   */
  int rank, size;
  double bucket_mb;    /* ddp: bucket size                                 */
  double first_bucket_mb; /* ddp: the first bucket (the last layers)        */
  int overlap;         /* ddp: start buckets during the backward pass      */
  int comm_thread;     /* ddp overlap: a thread runs the buckets' all-reduce */
  const mt_param_table *table; /* the model's layout (set before setup)    */
  double comm_seconds; /* time spent in gradient communication             */
  double wait_seconds; /* of it: waiting for the last rank to arrive (the
                          ranks' skew; see mt_backend_arrive)              */
  long early_buckets;  /* ddp: buckets started during a backward pass     */
  double comm_thread_cpu;  /* ddp's communication thread: CPU seconds and   */
  double comm_thread_busy; /* wall seconds in its rendezvous and all-reduce */
  long comm_thread_sleeps; /* calls; its sleeps while the others were late  */
  int allreduce;       /* ddp, amp: how buckets are summed, 0 MPI_Allreduce,
                          1 the node's shared-memory window (-ddp_allreduce,
                          comm/shm_reduce.h; set before setup)             */
  double comm_bytes;   /* bytes all-reduced                                */
  double comm_bytes_in_place; /* of them: summed where the backward wrote
                          them (ddp's gradients in the shared window)      */
  void *data;
  mt_dtype dtype;      /* the buffers' element type (set before setup)      */
  int reduce_dtype;    /* -amp: the gradient all-reduce's type, 0 fp32, 1
                          bf16, 2 fp16 (-ddp_reduce_dtype; set before setup) */
};

/* Registers a parallel strategy under ops->name (replacing one of the same
 * name); the ops must outlive use. */
int mt_backend_register(const mt_backend_ops *ops);
/* The strategy registered under name exactly, or NULL. */
const mt_backend_ops *mt_backend_find(const char *name);
/* Every -backend name the registered strategies and their traits allow,
 * comma-separated. */
void mt_backend_names(char *buf, size_t len);
/* Parses a -backend name into its strategy and policies (see MT_TRAIT_*):
 * an exact strategy name first, else STRATEGY-SUFFIX; MT_ERR_OPTION naming
 * -backend when unknown or when the strategy lacks the suffix's trait. */
int mt_backend_parse(const char *name, mt_backend_spec *spec);
/* Creates the backend named by name ("sp", "ddp-amp", ...) over comm. */
int mt_backend_create(const char *name, MPI_Comm comm, double bucket_mb, mt_backend **b);
void mt_backend_destroy(mt_backend **b);

/* ----------------------------------------------------------- optimizers */

typedef struct mt_optimizer mt_optimizer;

/* The hyper-parameters mpitrain's options give every optimizer (-momentum,
 * -dampening, -nesterov, -weight_decay, -adam_beta1, -adam_beta2,
 * -adam_eps, -adam_amsgrad); an optimizer reads those it uses, and may
 * read more of its own with mt_option_* in its options op. */
typedef struct {
  double momentum, dampening, weight_decay;
  int nesterov;
  double beta1, beta2, eps;
  int amsgrad;
} mt_optim_hparams;

/* Which device kernels step an optimizer under -device cuda: the built-in
 * sgd's or adamw's; a registered optimizer must say none (its state would
 * not be theirs), and -device cuda refuses it naming -optimizer. */
typedef enum {
  MT_OPTIM_DEVICE_NONE = 0,
  MT_OPTIM_DEVICE_SGD,
  MT_OPTIM_DEVICE_ADAMW
} mt_optim_device;

/* An optimizer's operations on flat buffers of o->dtype with the layout of
 * a parameter table (or of one contiguous range of it: an fsdp shard). */
typedef struct {
  const char *name; /* for -optimizer                                      */
  /* Optional: reads the optimizer's own options with mt_option_*, once,
   * on every rank, before setup (and under -help). */
  int (*options)(void);
  /* Checks o->hp (MT_ERR_OPTION naming the option) and allocates the state
   * for o->n elements of o->dtype (zeroed: mt_calloc). */
  int (*setup)(mt_optimizer *o);
  /* One step over the tensors of tab, whose offsets index params and grads
   * (a range's table: offsets from its start) and the state from element
   * lo on. step: the optimizer steps taken before this one (0: the first,
   * which has no state yet; AdamW's bias correction counts step + 1); the
   * ranges of one global step all get the same. all_decay = 0 exempts 1-d
   * tensors (decay == 0 in tab) from weight decay. */
  int (*step)(mt_optimizer *o, const mt_param_table *tab, void *params, const void *grads,
              size_t lo, double lr, long step, int all_decay);
  /* The k-th state buffer (k = 0, 1, ...): its name in checkpoints
   * (PyTorch's state key, e.g. "exp_avg") and its o->n elements; returns 0
   * past the last. */
  int (*state)(mt_optimizer *o, int k, const char **name, void **data);
  void (*destroy)(mt_optimizer *o);
  mt_optim_device device; /* MT_OPTIM_DEVICE_NONE for a user's            */
} mt_optimizer_ops;

struct mt_optimizer {
  const mt_optimizer_ops *ops;
  mt_optim_hparams hp;
  mt_dtype dtype; /* of params, grads and the state                      */
  size_t n;       /* elements of each state buffer                       */
  void *data;     /* implementation state                                */
};

/* Registers an optimizer under ops->name for -optimizer (replacing one of
 * the same name); the ops must outlive use. */
int mt_optimizer_register(const mt_optimizer_ops *ops);
const mt_optimizer_ops *mt_optimizer_find(const char *name);
void mt_optimizer_names(char *buf, size_t len);
/* Create -> step ... -> destroy. create: the optimizer registered under
 * name, for n elements of dtype (MT_ERR_OPTION naming -optimizer when
 * unknown or when hp is out of range). destroy NULLs *o and accepts NULL. */
int mt_optimizer_create(const char *name, const mt_optim_hparams *hp, mt_dtype dtype, size_t n,
                        mt_optimizer **o);
int mt_optimizer_step(mt_optimizer *o, const mt_param_table *tab, void *params, const void *grads,
                      size_t lo, double lr, long step, int all_decay);
/* The state buffers: names[i], data[i] for i < the count returned (at most
 * max). */
int mt_optimizer_state(mt_optimizer *o, const char **names, void **data, int max);
void mt_optimizer_destroy(mt_optimizer **o);

#ifdef __cplusplus
}
#endif
#endif
