/* torch.optim.AdamW on a flat buffer for float and double (the template
 * adamw_t.h): the hyper-parameters here, the state and the step there. */
#include "optim/optim.h"

#include <math.h>

mt_adamw_hparams mt_adamw_defaults(void) {
  return (mt_adamw_hparams){.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2,
                            .amsgrad = 0};
}

int mt_adamw_check(const mt_adamw_hparams *h) {
  MT_CHECK(h->beta1 >= 0.0 && h->beta1 < 1.0, MT_ERR_OPTION,
           "-adam_beta1 %g: must be in [0, 1)", h->beta1);
  MT_CHECK(h->beta2 >= 0.0 && h->beta2 < 1.0, MT_ERR_OPTION,
           "-adam_beta2 %g: must be in [0, 1)", h->beta2);
  MT_CHECK(h->eps >= 0.0 && isfinite(h->eps), MT_ERR_OPTION, "-adam_eps %g: must be >= 0",
           h->eps);
  MT_CHECK(h->weight_decay >= 0.0 && isfinite(h->weight_decay), MT_ERR_OPTION,
           "-weight_decay %g: must be >= 0", h->weight_decay);
  return 0;
}

#define MT_TEMPLATE "optim/adamw_t.h"
#include "core/real_t.h"
