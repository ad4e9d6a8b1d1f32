/* How a rank owns the parameters, gradients and optimizer state: the part
 * of the training step chosen once by mt_trainer_create from the backend
 * strategy's traits (MT_TRAIT_SHARDED). own.c holds both:
 *  replicated: every rank holds the whole flat layout (sp, ddp, a user's
 *    strategy; fsdp's no_shard; the GPU's host copy);
 *  sharded: fsdp's units gathered into a view while a pass uses them and
 *    this rank's flat shard of the layout (backends/fsdp.h) is what its
 *    optimizer steps and its checkpoints write;
 *  zero1 (own_zero.c, -ddp_shard_optimizer 1): one copy of the parameters
 *    per node, shared by its ranks, and every rank's whole gradient; each
 *    rank of a node owns a slice of the layout: the optimizer's state and
 *    step, and its checkpoints' shard.
 * Nothing else in the trainer asks which one runs. */
#ifndef MT_TRAINER_OWN_H
#define MT_TRAINER_OWN_H

#include "trainer/trainer.h"

/* The owner's share of the memory per rank (memory.c): forecast before
 * training, measured after it. */
typedef struct {
  double gathered;   /* parameters gathered beyond the owned part          */
  double unit_grads; /* gradients of gathered units                        */
  double largest_unit; /* measured: the largest unit's bytes               */
  int group;         /* ranks that share the layout (1: replicated)         */
  size_t owned;      /* elements of the layout this rank owns               */
} mt_owner_memory;

typedef struct mt_owner_ops {
  const char *name;
  int sharded; /* 1: a rank owns a range of the layout                     */
  /* 1: every rank reads the whole parameters (the node's shared copy)
   * and holds the whole reduced gradient, which clipping and the loss
   * scaler read whole (zero1) */
  int whole_grads;
  /* After the parameters are initialised and agreed (collective). */
  int (*setup)(mt_trainer *t);
  void (*destroy)(mt_trainer *t);
  /* What this rank's optimizer steps and its checkpoints hold. */
  void (*owned)(const mt_trainer *t, mt_owned *o);
  /* After only the owned part of the parameters was written (the
   * optimizer's step, a checkpoint's restore, the best model's): the whole
   * parameters readable again (zero1: the node's ranks wait for one
   * another; collective; NULL: nothing to do). */
  int (*params_done)(mt_trainer *t);
  /* Optional (NULL: no): 1 when the owner sums the step's gradient itself
   * inside its optimizer step (zero1 when nothing reads the whole reduced
   * gradient: each rank sums its slice and steps it in one pass); the step
   * then skips the backend's reduce and runs reduce_step instead of the
   * optimizer and params_done. */
  int (*sums_in_step)(const mt_trainer *t);
  int (*reduce_step)(mt_trainer *t, double lr, long step, int all_decay);
  /* The step's gradient zeroed. */
  void (*step_begin)(mt_trainer *t);
  /* The global gradient norm when the owned part is not the whole gradient
   * (*norm < 0: clipping computes it from the owned part). */
  int (*grad_norm)(mt_trainer *t, double *norm);
  /* The whole model in t->params for an evaluation or a save, and its
   * release (collective). */
  int (*whole)(mt_trainer *t);
  int (*release)(mt_trainer *t);
  /* A pass's hooks: unit about to be read (NULL: none), a backward's unit
   * done (NULL: the backend's overlap), whether the whole model is held,
   * seconds spent communicating so far. */
  int (*unit_use)(mt_trainer *t, int unit, int pass);
  int (*unit_done)(mt_trainer *t, int unit);
  int (*pinned)(const mt_trainer *t);
  double (*comm_seconds)(const mt_trainer *t);
  /* The owner's memory for the layout tab: measured (after training), or
   * forecast from tab alone (before the model's buffers and the owner's
   * setup exist). */
  void (*memory)(const mt_trainer *t, const mt_param_table *tab, int measured,
                 mt_owner_memory *m);
  /* The end of run's line on communication (rank 0 prints); 0 when the
   * owner has none (the backend's then). */
  int (*report)(const mt_trainer *t, double share);
} mt_owner_ops;

extern const mt_owner_ops mt_owner_replicated, mt_owner_sharded, mt_owner_zero1;

/* -ddp_shard_optimizer auto that the options allowed: 1 where the run
 * shares ddp's window on its nodes, with overlap the backward's all-reduce
 * (own_zero.c); rank 0 prints why not. */
int mt_zero1_auto(const mt_trainer *t, int overlap);

#endif
