/* The typed part of cuda_optim.h, declared for REAL = float (plain names)
 * and double (_f64) through core/real_t.h. */

/* mt_sgd_step on device buffers (buf may be NULL when momentum == 0). */
int MT_T(mt_cuda_sgd_step)(const mt_cuda_table *t, REAL *params, const REAL *grads, REAL *buf,
                           int first_step, const mt_sgd_hparams *h, int all_decay, double lr,
                           cudaStream_t s);

/* mt_adamw_state with device buffers (the step count on the host). */
typedef struct {
  REAL *exp_avg;        /* first moment m (device)                          */
  REAL *exp_avg_sq;     /* second moment v (device)                         */
  REAL *max_exp_avg_sq; /* running max of v (amsgrad only, else NULL)       */
  size_t n;             /* values in each buffer                            */
  long step;            /* steps taken; the next step is step + 1           */
} MT_T(mt_cuda_adamw_state);

/* mt_adamw_state_init: zeroed device buffers of n values (it allocates and
 * waits); nothing stays allocated on failure. Free accepts a zeroed or
 * freed state. */
int MT_T(mt_cuda_adamw_state_init)(MT_T(mt_cuda_adamw_state) *s, size_t n, int amsgrad);
void MT_T(mt_cuda_adamw_state_free)(MT_T(mt_cuda_adamw_state) *s);

/* mt_adamw_step on device buffers: the same checks (nothing changes and
 * nothing is queued on failure), k = ++s->step, the scalars as on the CPU,
 * one kernel over the table's tensors. */
int MT_T(mt_cuda_adamw_step)(const mt_cuda_table *t, REAL *params, const REAL *grads,
                             MT_T(mt_cuda_adamw_state) *s, const mt_adamw_hparams *h,
                             int all_decay, double lr, cudaStream_t st);
