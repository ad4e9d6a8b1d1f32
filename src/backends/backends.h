/* Built-in backends. */
#ifndef MT_BACKENDS_H
#define MT_BACKENDS_H

#include "mpitrain/mpitrain.h"

extern const mt_backend_ops mt_sp_ops;
extern const mt_backend_ops mt_ddp_ops;
/* DP-SGD (dp.c): sp-dp, ddp-dp; 1 when name is a DP backend ("-dp" suffix). */
extern const mt_backend_ops mt_sp_dp_ops;
extern const mt_backend_ops mt_ddp_dp_ops;
int mt_backend_is_dp(const char *name);
/* fsdp.c; the trainer drives its shards (fsdp.h). */
extern const mt_backend_ops mt_fsdp_ops;
extern const mt_backend_ops mt_fsdp_amp_ops;

#endif
