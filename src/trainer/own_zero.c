/* The third owner of the parameters (own.h): zero1, -ddp_shard_optimizer 1,
 * DeepSpeed's ZeRO stage 1 (PyTorch's ZeroRedundancyOptimizer) inside a
 * node, over ddp's shared-memory window.
 *
 * Why: with every rank running the whole optimizer step, the step reads
 * and writes the parameters, the gradient and the state (SGD's momentum,
 * AdamW's two moments) on every rank at once, a memory-bound pass that the
 * node's ranks repeat identically; at 2 ranks x 1 thread it was 11-13% of
 * the MLP's step. Here rank j of a node owns slice j of the flat layout
 * (the in-node reduction's partition of the whole layout,
 * mt_shm_partition), keeps the optimizer state of that slice only (the
 * state's memory / L) and steps only it.
 *
 * The parameters themselves lie once per node, in a buffer of the window
 * that its ranks share (mt_shm_shared): each rank's optimizer writes its
 * slice there, and the node's ranks wait for one another once
 * (mt_shm_arrive) before anyone's next forward reads them whole. A first
 * version kept a copy per rank and copied each stepped slice into the
 * others' (PyTorch's all-gather, in the window): the copy, 3.6 MB into
 * lines the other core held, ran at ~7 GB/s and took back what the halved
 * update saved (0.99x samples/s over 5 pairs); one copy has nothing to
 * copy, and the parameters' memory per rank is / L too.
 *
 * Where something reads the whole reduced gradient (clipping, the loss
 * scaler's inf check and unscale, buckets summed during the backward),
 * every rank keeps it whole (ddp's in-place all-reduce is unchanged) and
 * those run on it as the replicated owner's do (whole_grads). Where
 * nothing does, the sum goes into the step (sums_in_step): each rank sums
 * only its slice, a piece at a time, and steps the piece while it is in
 * cache (mt_backend_reduce_apply), so no rank writes the sum into every
 * rank's buffer and reads it back; its final wait is params_done's. On a
 * 4096-wide MLP (80 MB) at 2 ranks the sum and step took 13-15% less time
 * than the two passes; on the 1024-wide one (7 MB, in cache) the same. Either
 * way the slice each rank steps holds the replicated run's bits, and so does
 * the result. Across nodes nothing more is needed: local rank j of every
 * node owns the same slice of its node's copy and steps it from the same
 * reduced gradient (checkpoints: overlapping shards, written once). Every
 * node must run as many ranks (setup refuses another run). No rank writes
 * the shared parameters while another reads them: a rank steps its slice
 * only after the step's in-place reductions, whose waits every rank passes
 * after its backward, and the forward and evaluations come after the wait;
 * a checkpoint's restore and -restore_best write a rank's slice between
 * collectives, and wait too. */
#include "trainer/own.h"
#include "backends/backends.h"
#include "comm/shm_reduce.h"
#include "trainer/amp.h"
#include "trainer/step.h"

#include <string.h>

#define OPTION "-ddp_shard_optimizer"

struct mt_zero {
  size_t lo, hi;       /* this rank's slice of the layout                 */
  mt_param_table table; /* the optimizer's view of it (offsets from lo)  */
  /* fused (sums_in_step): the slice's sum and step in one pass, piece by
   * piece; each piece's view of the table, kept from the first step on
   * (the pieces are the same every step) */
  int fused;
  int npieces, cap;
  struct piece {
    size_t a, k; /* elements [a, a + k) of the slice                     */
    mt_param_table table;
  } *pieces;
};

/* This rank's slice of a layout of n elements: node index j of L. */
static void slice_of(const mt_trainer *t, size_t n, size_t *lo, size_t *hi) {
  const mt_comm *m = t->comm;
  mt_shm_partition(n, t->esz, m->node_min, m->local_rank, lo, hi);
}

/* Why the run will have no shared window for the parameters, the
 * gradients being summed by method allreduce (NULL: it will, room allowing). */
static const char *window_why(const mt_trainer *t, int allreduce) {
  const mt_config *c = t->cfg;
  if (t->device >= 0) return "this rank computes on a GPU (-device auto chose cuda)";
  if (t->comm->size == 1) return "the run has one rank: nothing to shard";
  if (t->comm->node_max == 1) return "every node runs one rank: nothing to share a window with";
  if (allreduce != MT_ALLREDUCE_SHM)
    return c->ddp_allreduce == MT_ALLREDUCE_AUTO
               ? "-ddp_allreduce auto chose mpi (the overlap without the communication "
                 "thread); give -ddp_allreduce shm or -ddp_overlap 0"
               : "it needs -ddp_allreduce shm (or auto)";
  return NULL;
}

/* -ddp_shard_optimizer auto, where the options allow it (config_zero.c):
 * 1 where the run shares ddp's window on a node (several ranks on every
 * node, as many on each, the window's all-reduce). Sharded, the node's
 * ranks step one copy of the parameters and each its slice: the same
 * bits, the update's memory traffic / L, and the parameters, the state
 * and the gradients of 2 ranks of the MLP (45 MB) fit a 32 MB cache as
 * 30 MB (bench/README.md, "ZeRO-1 by default"). Rank 0 says why not. */
int mt_zero1_auto(const mt_trainer *t, int overlap) {
  const mt_config *c = t->cfg;
  const mt_comm *m = t->comm;
  const char *why = window_why(t, mt_allreduce_use(c->ddp_allreduce, t->device >= 0, overlap,
                                                   c->ddp_comm_thread));
  if (!why && m->node_min != m->node_max) why = "the nodes run different numbers of ranks";
  if (why && m->size > 1) mt_print0("ddp: optimizer not sharded (" OPTION " auto: %s)\n", why);
  return why == NULL;
}

/* The parameters move into the buffer the node's ranks share, after they
 * were initialised and agreed (every rank holds rank 0's): local rank 0
 * copies them in, and nobody reads them before the wait. */
static int to_shared(mt_trainer *t) {
  void *w = NULL;
  const size_t bytes = t->model->params.total * t->esz;
  int err = t->grads_in_window ? mt_backend_params_window(t->backend, bytes, &w) : 0;
  MT_CALL(mt_agree(t->comm->world, err));
  int none = w == NULL; /* the same on every rank: the room was agreed */
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, &none, 1, MPI_INT, MPI_MAX, t->comm->world));
  const char *why = window_why(t, t->backend->allreduce);
  if (!why) why = "the window could not be made (see the line on /dev/shm above)";
  if (none && t->cfg->ddp_shard_optimizer < 0) { /* auto: ddp's own copy, as without */
    mt_print0("ddp: optimizer not sharded (" OPTION " auto: %s)\n", why);
    t->owner = &mt_owner_replicated;
    return 0;
  }
  MT_CALL(mt_agree(t->comm->world,
                   !none ? 0 : MT_ERR(MT_ERR_OPTION, "option " OPTION " 1: shards the optimizer "
                                      "among the ranks of a node through ddp's shared-memory "
                                      "window, which this run does not use: %s", why)));
  if (t->comm->local_rank == 0) memcpy(w, t->params, bytes);
  MT_CALL(mt_agree(t->comm->world, mt_backend_window_arrive(t->backend)));
  mt_free(&t->params);
  t->params = w;
  t->params_in_window = 1;
  return 0;
}

static int z_setup(mt_trainer *t) {
  const mt_comm *m = t->comm;
  MT_CALL(mt_agree(m->world, m->node_min == m->node_max ? 0
                   : MT_ERR(MT_ERR_OPTION, "option " OPTION " 1: the nodes run %d to %d ranks; "
                            "it needs the same number on every node", m->node_min, m->node_max)));
  MT_CALL(to_shared(t));
  if (t->owner != &mt_owner_zero1) return 0; /* auto, without the window */
  struct mt_zero *z = NULL;
  int err = mt_calloc(&z, 1, sizeof(*z), "zero1 slice");
  t->zero = z;
  if (!err) {
    slice_of(t, t->model->params.total, &z->lo, &z->hi);
    err = mt_param_table_slice(&t->model->params, z->lo, z->hi, &z->table);
  }
  MT_CALL(mt_agree(m->world, err));
  mt_print0("ddp: optimizer sharded over the %d ranks of each node (" OPTION " %s): rank 0 "
            "steps elements [%zu, %zu) of %zu of the parameters the node's ranks share\n",
            m->node_min, t->cfg->ddp_shard_optimizer < 0 ? "auto" : "1", z->lo, z->hi,
            t->model->params.total);
  z->fused = -1; /* at the first step, when the loss scaler and the privacy policy are known */
  return 0;
}

/* Nothing reads the whole reduced gradient (no clipping, no loss scaler,
 * no privacy hook) and the backward starts no bucket: each rank sums only
 * its slice, and steps each piece of it while the piece is in cache,
 * instead of the node's ranks writing the whole sum back into every rank's
 * buffer and the optimizer reading it again. The same sums, the same bits. */
static int z_sums_in_step(const mt_trainer *t) {
  struct mt_zero *z = t->zero;
  if (z->fused < 0) {
    const mt_config *c = t->cfg;
    z->fused = c->clip_grad_norm == 0 && c->clip_grad_value == 0 && !mt_amp_reads_grads(t) &&
               !t->privacy->before_reduce && !t->privacy->after_reduce && !t->backend->overlap;
    mt_print0("ddp: %s\n", z->fused ? "each rank sums its slice of the gradient and steps it in "
                                       "one pass"
                                     : "the gradient summed whole (clipping, the loss scaler or "
                                       "the backward's buckets read it), then each slice stepped");
  }
  return z->fused;
}

/* The view of the slice's elements [a, a + k) as piece i (made at the
 * first step, checked after: the pieces do not change). */
static int piece_table(struct mt_zero *z, int i, size_t a, size_t k, const mt_param_table **tab) {
  if (i < z->npieces && z->pieces[i].a == a && z->pieces[i].k == k) {
    *tab = &z->pieces[i].table;
    return 0;
  }
  MT_CHECK(i == z->npieces, MT_ERR_STATE, "zero1: piece %d of the slice moved (%zu, %zu)", i, a, k);
  if (z->npieces == z->cap) {
    const int cap = z->cap ? 2 * z->cap : 64;
    struct piece *p = NULL;
    MT_CALL(mt_calloc(&p, (size_t)cap, sizeof(*p), "zero1's pieces of the slice"));
    if (z->npieces) memcpy(p, z->pieces, (size_t)z->npieces * sizeof(*p));
    mt_free(&z->pieces);
    z->pieces = p;
    z->cap = cap;
  }
  struct piece *p = &z->pieces[z->npieces];
  p->a = a;
  p->k = k;
  MT_CALL(mt_param_table_slice(&z->table, a, a + k, &p->table));
  z->npieces++;
  *tab = &p->table;
  return 0;
}

typedef struct {
  mt_trainer *t;
  double lr;
  long step;
  int all_decay, next;
} fused_step;

/* One summed piece of the slice (layout elements [first, first + k)):
 * stepped from the sum, the state at its place in the slice's. */
static int step_piece(void *ctx, size_t first, size_t k, const void *sum) {
  fused_step *f = ctx;
  mt_trainer *t = f->t;
  struct mt_zero *z = t->zero;
  const mt_param_table *tab = NULL;
  MT_CHECK(first >= z->lo && first + k <= z->hi, MT_ERR_STATE,
           "zero1: the window's slice [%zu, %zu) is not this rank's [%zu, %zu)", first, first + k,
           z->lo, z->hi);
  MT_CALL(piece_table(z, f->next++, first - z->lo, k, &tab));
  return mt_optimizer_step(t->optim, tab, (char *)t->params + first * t->esz, sum, first - z->lo,
                           f->lr, f->step, f->all_decay);
}

/* The step's gradient summed and stepped slice by slice; the wait at its
 * end is params_done's (nobody reads the parameters before every rank
 * stepped its slice) */
static int z_reduce_step(mt_trainer *t, double lr, long step, int all_decay) {
  fused_step f = {t, lr, step, all_decay, 0};
  return mt_backend_reduce_apply(t->backend, t->grads, t->model->params.total, step_piece, &f);
}

static void z_destroy(mt_trainer *t) {
  if (!t->zero) return;
  for (int i = 0; i < t->zero->npieces; i++) mt_param_table_free(&t->zero->pieces[i].table);
  mt_free(&t->zero->pieces);
  mt_param_table_free(&t->zero->table);
  mt_free(&t->zero);
}

static void z_owned(const mt_trainer *t, mt_owned *o) {
  const struct mt_zero *z = t->zero;
  *o = (mt_owned){&z->table, (char *)t->params + z->lo * t->esz,
                  (char *)t->grads + z->lo * t->esz, z->lo, z->hi - z->lo};
}

/* every rank stepped its slice of the shared parameters: the node's ranks
 * wait for one another before anyone reads them whole */
static int z_params_done(mt_trainer *t) { return mt_backend_window_arrive(t->backend); }

/* the replicated owner's: the whole gradient, zeroed or written */
static void z_step_begin(mt_trainer *t) { mt_owner_replicated.step_begin(t); }

/* clipping computes the norm of the whole gradient it clips (whole_grads) */
static int z_grad_norm(mt_trainer *t, double *norm) { return mt_owner_replicated.grad_norm(t, norm); }

static int z_pinned(const mt_trainer *t) {
  (void)t;
  return 1;
}

static double z_comm_seconds(const mt_trainer *t) { return t->backend->comm_seconds; }

/* The owned slice of the parameters (the node's one copy over its L
 * ranks), of the optimizer state and of the gradient, and beyond it the
 * rest of the whole gradient every rank holds (the "unit gradients"
 * column: what lies past the owned part); forecast and measured alike. */
static void z_memory(const mt_trainer *t, const mt_param_table *tab, int measured,
                     mt_owner_memory *m) {
  (void)measured;
  size_t lo, hi;
  slice_of(t, tab->total, &lo, &hi);
  const double rest = (double)(tab->total - (hi - lo)) * (double)t->esz;
  *m = (mt_owner_memory){0, rest, 0, 1, hi - lo};
}

/* The end of run's line when the sum went into the steps: the bytes and
 * the wait for the slowest rank (the sum itself is the optimizer's time) */
static int z_report(const mt_trainer *t, double share) {
  const mt_backend *b = t->backend;
  if (t->zero->fused != 1) return 0;
  mt_print0("\ngradient sum (rank 0): each rank summed its slice in its optimizer step, %.0f MB; "
            "%.2f s waiting for the slowest rank, %.0f%% of training",
            b->comm_bytes / 1e6, b->wait_seconds, share);
  return 1;
}

const mt_owner_ops mt_owner_zero1 = {.name = "zero1",
                                     .sharded = 1,
                                     .whole_grads = 1,
                                     .setup = z_setup,
                                     .destroy = z_destroy,
                                     .owned = z_owned,
                                     .params_done = z_params_done,
                                     .sums_in_step = z_sums_in_step,
                                     .reduce_step = z_reduce_step,
                                     .step_begin = z_step_begin,
                                     .grad_norm = z_grad_norm,
                                     .pinned = z_pinned,
                                     .comm_seconds = z_comm_seconds,
                                     .memory = z_memory,
                                     .report = z_report};
