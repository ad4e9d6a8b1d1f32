/* -mode train (the default): the run mpitrain has always been. Reads every
 * option of the configuration. */
#include "trainer/mode.h"

static int run(const mt_config *cfg, const mt_comm *comm, mt_mode_end *end) {
  mt_trainer *t = NULL;
  int err = mt_trainer_create(&t, cfg, comm);
  if (!err) err = mt_trainer_run(t);
  if (!err && t->stopped) end->stopped = 1;
  if (t) { /* the hang guard outlives the trainer: mt_main ends the run under it */
    end->guard = t->guard;
    t->guard = NULL;
  }
  mt_trainer_destroy(&t);
  return err;
}

const mt_mode_ops mt_mode_train = {
    .name = "train",
    .help = "train a model on -data_train (the default)",
    .options = NULL,
    .run = run,
};
