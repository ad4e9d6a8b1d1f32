/* The typed part of optim.h, declared for REAL = float (plain names) and
 * double (_f64) through core/real_t.h. */

/* ------------------------------------------------------------------- SGD */

/* One step of torch.optim.SGD on the whole flat buffer, PyTorch's rule:
 *   g = grad + wd * p                    (wd only where t->p[i].decay or all_decay)
 *   buf = g on the first step, else momentum * buf + (1 - dampening) * g
 *   g = g + momentum * buf if nesterov, else buf
 *   p -= lr * g
 * buf may be NULL when momentum == 0. all_decay = 0 is -weight_decay_skip_1d:
 * 1-d tensors (biases, norm scales; decay == 0 in the table) get no decay,
 * as PyTorch does with a second param group of weight_decay 0. */
int MT_T(mt_sgd_step)(const mt_param_table *t, REAL *params, const REAL *grads, REAL *buf,
                      int first_step, const mt_sgd_hparams *h, int all_decay, double lr);

/* ----------------------------------------------------------------- AdamW */

/* AdamW state: two (three with amsgrad) flat buffers of n values (float,
 * or double for mt_adamw_state_f64) with the layout of the parameters, and
 * the number of steps taken. PyTorch keeps a
 * step count per tensor; every tensor of the table steps together here, so
 * one count is the same thing. A checkpoint stores the buffers and step. */
typedef struct {
  REAL *exp_avg;        /* first moment m                                   */
  REAL *exp_avg_sq;     /* second moment v                                  */
  REAL *max_exp_avg_sq; /* running max of v (amsgrad only, else NULL)       */
  size_t n;             /* values in each buffer                            */
  long step;            /* steps taken; the next step is step + 1           */
} MT_T(mt_adamw_state);

/* Allocates zeroed buffers of n values (64-byte aligned) and sets step = 0.
 * On failure nothing stays allocated. Free with mt_adamw_state_free, which
 * accepts a zeroed or already freed state. */
int MT_T(mt_adamw_state_init)(MT_T(mt_adamw_state) *s, size_t n, int amsgrad);
void MT_T(mt_adamw_state_free)(MT_T(mt_adamw_state) *s);

/* One step of torch.optim.AdamW (1.13, foreach or not) on the flat buffer.
 * With k = ++s->step, per element, in this order:
 *   p *= 1 - lr * wd                   (wd only where t->p[i].decay or all_decay)
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   vmax = max(vmax, v) and v' = vmax with amsgrad, else v' = v
 *   p -= lr / (1 - beta1^k) * m / (sqrt(v') / sqrt(1 - beta2^k) + eps)
 * lr may change between calls (schedules). Scalars are formed in double,
 * elements are updated in the buffers' type (float: the scalars rounded to
 * float once, as PyTorch's kernels do with a Python scalar). Returns MT_ERR_ARG when the state is
 * missing a buffer or is smaller than t->total, MT_ERR_OPTION for bad
 * hyper-parameters (mt_adamw_check); nothing is changed then. */
int MT_T(mt_adamw_step)(const mt_param_table *t, REAL *params, const REAL *grads,
                        MT_T(mt_adamw_state) *s, const mt_adamw_hparams *h, int all_decay,
                        double lr);

/* -------------------------------------------------------------- clipping */

/* Global L2 norm of n values (accumulated in double). */
double MT_T(mt_l2_norm)(const REAL *g, size_t n);
/* torch.nn.utils.clip_grad_norm_: scales g by max / (norm + 1e-6) when that
 * is below 1; returns the norm before clipping. */
double MT_T(mt_clip_grad_norm)(REAL *g, size_t n, double max_norm);
/* The same with the norm given: the norm of a whole gradient of which g is
 * a shard (fsdp: from the shards' squared norms). */
double MT_T(mt_clip_grad_norm_given)(REAL *g, size_t n, double norm, double max_norm);
/* torch.nn.utils.clip_grad_value_: clamps every element into [-c, c] with c
 * = clip_value in the buffers' type; NaN stays NaN, +-inf become +-c. MT_ERR_ARG unless
 * clip_value > 0 (g is then unchanged). Element-wise, so a shard may clip
 * its own range; but clip the reduced (global) gradient, as PyTorch does
 * after DDP's backward: clipping per-rank gradients before the sum differs. */
int MT_T(mt_clip_grad_value)(REAL *g, size_t n, double clip_value);
