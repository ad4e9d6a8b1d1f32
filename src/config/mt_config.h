/* The resolved configuration: every option of a run read from the PETSc
 * options database, checked, and agreed by all ranks (config.c and the
 * config_*.c beside it, one per part of the run). It sits above the parts
 * whose options it reads (backends, nn, optim) and below the trainer. */
#ifndef MT_CONFIG_H
#define MT_CONFIG_H

#include "core/core.h"

#include <strings.h>

/* Every option after validation. Plain data: hashed byte-for-byte to check
 * that all ranks resolved the same configuration, so it is zero-filled
 * before use and holds no pointers. */
typedef struct {
  /* -mode: what the run does (trainer/mode.h): train, or a trained
   * model's evaluate, predict, ...; the training options apply to train */
  char mode[16];
  char model_file[MT_PATH_MAX]; /* -model_file: the model of the other modes */
  char data[MT_PATH_MAX];       /* -data: predict's samples                  */
  char predictions[MT_PATH_MAX]; /* -predictions: predict's file            */
  int outputs_probs;            /* predict: the softmax probabilities too   */
  char backend[32];
  /* -backend parsed once (mt_backend_parse): its strategy's MT_TRAIT_* and
   * the policies amp, dp and fsdp below */
  unsigned backend_traits;
  int backend_fp64; /* the strategy has double operations (mt_backend_has_dtype) */
  char model[32]; /* its own options (-mlp_*, -cnn_*, -gpt_*, a user's) are
                     the model's: mt_model_read_options, models/models.h */
  char data_train[MT_PATH_MAX];
  char data_val[MT_MAX_VAL][MT_PATH_MAX];
  int nval;
  int data_check; /* -data_check: mt_data_check (data/data.h)          */
  int epochs;
  int batch_size;       /* global                                           */
  int micro_batch_size; /* per rank per micro-step                          */
  int val_batch_size;   /* per rank                                         */
  int max_train_steps;  /* per epoch, 0 = all                               */
  int max_val_steps;    /* per epoch and set, 0 = all                       */
  char optimizer[16];
  double lr, momentum, dampening, weight_decay;
  int nesterov;
  double adam_beta1, adam_beta2, adam_eps;
  int adam_amsgrad;
  int weight_decay_skip_1d;
  char lr_schedule[16];
  int warmup_steps;
  int lr_step_size;
  double lr_gamma, lr_min;
  int lr_milestones[32];
  int lr_nmilestones;
  double lr_end_factor;
  double onecycle_pct_start, onecycle_div_factor, onecycle_final_div_factor;
  int plateau_patience, plateau_cooldown;
  double plateau_threshold;
  /* validation loss smoothing (EMA factor), best model, early stop */
  double val_smoothing;
  int early_stop_patience; /* epochs without improvement, 0 = off         */
  double early_stop_min_delta;
  int restore_best;
  double clip_grad_norm;  /* 0 = off                                        */
  double clip_grad_value; /* 0 = off                                        */
  uint64_t seed;
  int threads;
  char thread_split[8]; /* auto | batch | gemm                            */
  int log_every;
  char output_dir[MT_PATH_MAX];
  char init_from[MT_PATH_MAX];
  int log_step_losses;
  char log_gemm_shapes[MT_PATH_MAX]; /* one step's GEMM shapes (nn/gemm_log.h) */
  int plot;            /* rank 0 draws OUTPUT_DIR/curve.png each epoch     */
  double plot_timeout; /* seconds gnuplot may take per picture            */
  char checkpoint_dir[MT_PATH_MAX];
  int checkpoint_every_steps, checkpoint_every_epochs, checkpoint_keep, checkpoint_at_end;
  int checkpoint_write_continue; /* -checkpoint_write_error continue      */
  int checkpoint_overwrite; /* a fresh run removes the folder's old checkpoints */
  double checkpoint_every_minutes;
  char restart[MT_PATH_MAX]; /* none | auto | FILE                          */
  double ddp_bucket_mb;
  double comm_timeout; /* hang guard: seconds without progress, 0 = off   */
  double signal_grace; /* seconds from SIGTERM to SIGKILL, 0: find out   */
  double peak_gflops;  /* a core's fp32 GEMM peak, for the shares printed */
  double ddp_first_bucket_mb;
  int ddp_overlap; /* 1, 0, or -1: auto (the trainer decides, trainer.c) */
  int ddp_comm_thread;
  int ddp_allreduce; /* MT_ALLREDUCE_MPI | _SHM (comm/shm_reduce.h)     */
  int ddp_shard_optimizer; /* ZeRO-1 in a node, -1 auto (config_zero.c, own_zero.c) */
  int prefetch;
  /* mixed precision (backends *-amp, *-amp-apex; read by config_amp.c) */
  int amp;              /* the policy: 0 fp32; 1 autocast-style (-amp, O1);
                           2 O2 (-amp-apex)                                */
  int amp_dtype;        /* mt_precision (nn/precision.h): bf16 | fp16     */
  int ddp_reduce_dtype; /* mt_precision of the gradient all-reduce        */
  int loss_scale_mode;  /* 0: none; 1: dynamic; 2: static                 */
  double loss_scale_init, loss_scale_growth_factor, loss_scale_backoff_factor;
  double loss_scale_min;
  long loss_scale_growth_interval, loss_scale_hysteresis;
  /* -precision fp32 | fp64 (config_amp.c): mt_dtype of every flat buffer */
  int dtype;
  /* derived */
  int world_size;
  int accum_steps;
  /* per-sample outputs and test sets */
  int outputs;        /* MT_OUTPUTS_* bits: the sets whose outputs are written */
  int outputs_logits; /* and their logits                                     */
  char data_test[MT_MAX_VAL][MT_PATH_MAX];
  int ntest;
  /* DP-SGD (backends sp-dp, ddp-dp; read and checked by config_dp.c) */
  int dp;                     /* the backend has the -dp (DP-SGD) policy      */
  double dp_noise_multiplier; /* -1: not given (solved from the target)      */
  double dp_max_grad_norm;
  double dp_delta;            /* 0: 1/N rounded down to a power of ten       */
  double dp_target_epsilon;   /* 0: no budget                                */
  int dp_max_physical_batch;  /* 0: the rank's share of -batch_size          */
  char dp_sampling[16];       /* poisson | shuffle                          */
  char dp_accountant[8];      /* rdp                                         */
  char dp_grad_sample[8];     /* auto (batched where the model can) | exact  */
  /* sharding (backend fsdp; read and checked by config_fsdp.c) */
  int fsdp;                   /* the strategy is sharded (MT_TRAIT_SHARDED)   */
  int fsdp_strategy;          /* mt_fsdp_strategy (backends/fsdp.h)           */
  int fsdp_whole_model;       /* -fsdp_unit model: one unit                   */
  int fsdp_node_size;         /* hybrid_shard's group; 0: the node's ranks    */
  int fsdp_prefetch;          /* gather ahead, reduce behind (1) or not (0)   */
  int fsdp_cpu_offload;       /* -device cuda: shards and optimizer on the host */
  int sync_module_states;     /* parameters broadcast from rank 0 at start    */
  double memory_limit_mb;     /* 0: the node's memory / its ranks            */
  char device[8];             /* -device: cpu | cuda | auto (config_device.c) */
} mt_config;

/* -outputs words: per-sample outputs of the validation sets (every epoch),
 * of an evaluation pass over the training set (every epoch), of the test
 * sets (after training). */
#define MT_OUTPUTS_VAL 1
#define MT_OUTPUTS_TRAIN 2
#define MT_OUTPUTS_TEST 4

/* Reads and validates every option from the PETSc options database on every
 * rank, then agrees collectively: if any rank fails, every rank returns
 * MT_ERR_OPTION and rank 0 (or the lowest failing rank) holds the message.
 * *help is set when -help was given (nothing else should run then). */
int mt_config_from_options(MPI_Comm comm, mt_config *cfg, int *help);
/* The DP-SGD options (config_dp.c): read, and checked against the backend
 * and the other options (after those are derived); the DP line of
 * mt_config_print. */
int mt_config_dp(mt_config *cfg);
void mt_config_dp_print(const mt_config *cfg, FILE *f);
/* The sharding options (config_fsdp.c), read after the others are derived
 * and checked against the backend; the fsdp line of mt_config_print. */
int mt_config_fsdp(mt_config *cfg);
/* A boolean option's word: 1 (1, true, yes, on), 0 (0, false, no, off),
 * -1 (auto), -2 anything else; any case. */
static inline int mt_config_bool_word(const char *s) {
  static const char *const w[] = {"1", "true", "yes", "on", "0", "false", "no", "off"};
  for (int i = 0; i < 8; i++)
    if (!strcasecmp(s, w[i])) return i < 4;
  return strcasecmp(s, "auto") ? -2 : -1;
}
/* -ddp_shard_optimizer (config_zero.c), read last: it checks the backend,
 * -amp, -dp, -ddp_allreduce and -device. */
int mt_config_zero(mt_config *cfg);
void mt_config_fsdp_print(const mt_config *cfg, FILE *f);
/* -device (config_device.c): read and checked against what the trainer's
 * device path supports, after every other option; mt_config_device_why
 * writes into buf why this run has no device path (and returns buf), or
 * returns NULL when it has one. */
int mt_config_device(mt_config *cfg);
const char *mt_config_device_why(const mt_config *cfg, char *buf, size_t len);
/* The mixed-precision options (config_amp.c): read and checked against
 * the backend; called by mt_config_from_options. mt_config_precision reads
 * -precision and refuses what fp64 does not cover (called after the DP and
 * sharding options are known). */
int mt_config_amp(mt_config *cfg);
int mt_config_precision(mt_config *cfg);
/* Refuses an option the user gave that the backend does not use (an -amp
 * option under sp, a -dp_ option without the DP-SGD policy, ...), naming
 * the option, the backend and the backends where it applies
 * (config_applies.c); called once the backend is parsed. */
int mt_config_applies(const mt_config *cfg);
/* The options of a mode other than train (config_mode.c): checked (the
 * first problem, MT_ERR_OPTION naming the option) and derived; their
 * part of mt_config_print. */
int mt_config_mode(mt_config *cfg);
void mt_config_mode_print(const mt_config *cfg, FILE *f);
/* Prints the configuration (rank 0 only prints). */
void mt_config_print(const mt_config *cfg, FILE *f);
/* Fails on every rank unless every rank has the same hash. */
int mt_config_check_same(MPI_Comm comm, const mt_config *cfg);

#endif
