/* The trainer of the modes that use a trained model (mode.h): the model
 * (from a model file or a checkpoint) and its threads' models, nothing of
 * training. The evaluation passes
 * (validate.c) and the rank's compute (compute.c) are the trainer's own;
 * only what they read is set up here. */
#include "trainer/mode.h"
#include "io/ckpt_read.h"
#include "io/modelfile.h"
#include "models/models.h"
#include "trainer/amp.h"
#include "trainer/own.h"

#include <omp.h>

int mt_mode_model_spec(const mt_config *c, const mt_comm *comm, const char *first,
                       mt_data_spec *spec) {
  int found = 0;
  MT_CALL(mt_agree(comm->world, mt_model_file_spec(c->model_file, "-model_file", spec, &found)));
  if (found) return 0;
  /* a file written before descriptions: the model is made for the data */
  mt_dataset d;
  MT_CALL(mt_dataset_open(&d, first, comm->world, NULL, mt_model_window(c->model), c->data_check));
  *spec = d.spec;
  mt_dataset_close(&d);
  return 0;
}

/* Whether path is a checkpoint (its tensors in the group /params and the
 * buffers in the trainer state), not a model file (tensors at the root). */
static int is_checkpoint(const char *path) {
  mt_h5_lock();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  int yes = f >= 0 && H5Lexists(f, MT_CKPT_STATE_GROUP, H5P_DEFAULT) > 0 &&
            H5Lexists(f, "params", H5P_DEFAULT) > 0;
  if (f >= 0) H5Fclose(f);
  mt_h5_unlock();
  return yes;
}

/* The parameters and buffers of a checkpoint: its params group read
 * collectively as a restart reads it (the checksums verified), the buffers
 * (batch norm's statistics) from its trainer state. Collective. */
static int load_checkpoint(mt_trainer *t) {
  const char *path = t->cfg->model_file;
  mt_ckpt_buf buf = {"params", t->params};
  const mt_ckpt_tensors ts = {&t->model->params, &buf, 1, mt_ckpt_replicated(), t->dtype};
  mt_ckpt_state st = {0};
  int err = mt_ckpt_read(t->comm->world, path, &ts, NULL, &st);
  const size_t nb = t->model->buffers.total;
  const double *d = NULL;
  size_t n = 0;
  if (!err && nb) err = mt_ckpt_state_get_f64s(&st, "model_buffers", &d, &n);
  if (!err && nb && n != nb)
    err = MT_ERR(MT_ERR_DATA, "option -model_file: checkpoint %s holds %zu buffer values, the "
                 "model has %zu", path, n, nb);
  for (size_t i = 0; !err && i < nb; i++) {
    if (t->dtype == MT_FP64) t->model->buf64[i] = d[i];
    else t->model->buf[i] = (float)d[i];
  }
  mt_ckpt_state_free(&st);
  return err;
}

/* The model, its parameters from -model_file and the threads' models. */
static int make_model(mt_trainer *t) {
  const mt_config *c = t->cfg;
  int nthr, split;
  int err = mt_compute_make_model(t, 0, 0, &nthr, &split);
  if (!err) err = mt_calloc(&t->params, t->model->params.total, t->esz, "parameters");
  /* the buffers (batch norm's statistics) start as the model's own, and
   * the file's replace them with the parameters */
  if (!err) err = mt_model_init(t->model, t->params, c->seed);
  if (!err && !is_checkpoint(c->model_file))
    err = mt_h5_load_model(c->model_file, "-model_file", t->model, t->params);
  if (!err) err = mt_compute_setup(t, t->max_batch, nthr);
  if (split) omp_set_num_threads(c->threads);
  return err;
}

int mt_trainer_create_use(mt_trainer **out, const mt_config *c, const mt_comm *comm,
                          const mt_data_spec *spec) {
  mt_trainer *t;
  *out = NULL;
  MT_CALL(mt_agree(comm->world, mt_calloc(&t, 1, sizeof(*t), "trainer")));
  *out = t;
  t->cfg = c;
  t->comm = comm;
  t->train.file = t->train.dx = H5I_INVALID_HID;
  t->train.spec = *spec; /* what the model is made for (compute.c reads it) */
  t->device = -1;
  t->dtype = (mt_dtype)c->dtype;
  t->esz = t->dtype == MT_FP64 ? sizeof(double) : sizeof(float);
  t->owner = &mt_owner_replicated;
  t->window = mt_model_window(c->model);
  MT_CALL(mt_agree(comm->world, mt_compute_create(t)));
  MT_CALL(mt_amp_policy(t)); /* fp32: the modes take no -backend *-amp */
  MT_CALL(mt_agree(comm->world, make_model(t)));
  if (is_checkpoint(c->model_file)) MT_CALL(mt_agree(comm->world, load_checkpoint(t)));
  MT_CALL(mt_eval_setup(t));
  return 0;
}
