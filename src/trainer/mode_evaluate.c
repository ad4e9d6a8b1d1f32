/* -mode evaluate -model_file F -data_val X[,Y...]: the loss and accuracy
 * (a regression's mean squared error) of a trained model on each set,
 * printed on rank 0 and written to OUTPUT_DIR/evaluate.csv as curve.csv
 * writes its validation columns (%.9g), so the two compare as strings;
 * with -outputs val the per-sample outputs of each set in
 * OUTPUT_DIR/outputs/val<i>.h5. The sums are exact (validate.c): the same
 * file gives the same figures at any rank count, and the training run's
 * last validation row. */
#include "trainer/mode.h"
#include "io/space.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

static const char *const options_[] = {"-data_val", "-outputs", "-outputs_logits", NULL};

typedef struct {
  double loss, acc;
  int64_t count;
} row;

/* OUTPUT_DIR/evaluate.csv (replaced), rank 0. */
static int write_csv(const mt_config *c, const row *r) {
  char path[MT_PATH_MAX + 16], tmp[MT_PATH_MAX + 24];
  MT_CALL(mt_mkdir_p(c->output_dir));
  snprintf(path, sizeof(path), "%s/evaluate.csv", c->output_dir);
  FILE *f;
  MT_CALL(mt_replace_open(path, tmp, sizeof(tmp), &f));
  fprintf(f, "set,file,model_file,val_loss,val_acc,samples\n");
  for (int i = 0; i < c->nval; i++)
    fprintf(f, "%d,%s,%s,%.9g,%.9g,%lld\n", i, c->data_val[i], c->model_file, r[i].loss,
            r[i].acc, (long long)r[i].count);
  return mt_replace_commit(f, tmp, path);
}

static int evaluate(mt_trainer *t, const mt_data_spec *spec) {
  const mt_config *c = t->cfg;
  MPI_Comm w = t->comm->world;
  char whose[MT_PATH_MAX + 64];
  snprintf(whose, sizeof(whose), "the model of %s (-model_file)", c->model_file);
  row r[MT_MAX_VAL];
  for (int i = 0; i < c->nval; i++) {
    const mt_dataset_how how = {spec, whose, t->window, (mt_data_check)c->data_check, 0};
    MT_CALL(mt_dataset_open_as(&t->val[i], c->data_val[i], w, &how));
    t->nval_open = i + 1;
    MT_CALL(mt_agree(w, mt_loader_create(&t->val_loader[i], &t->val[i],
                                         mt_eval_rows(c->val_batch_size, mt_eval_piece(t)),
                                         c->prefetch)));
  }
  for (int i = 0; i < c->nval; i++) {
    char path[MT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/outputs/val%d.h5", c->output_dir, i);
    const mt_eval_write out = {path, "val", i, 0, 0, 0};
    MT_CALL(mt_eval_pass(t, &t->val[i], t->val_loader[i], c->outputs ? &out : NULL, &r[i].loss,
                         &r[i].acc, &r[i].count));
    if (spec->ntargets)
      mt_print0("evaluate val[%d] %s: mse %.6g (%lld samples)\n", i, c->data_val[i], r[i].loss,
                (long long)r[i].count);
    else
      mt_print0("evaluate val[%d] %s: loss %.6g accuracy %.6g (%lld samples)\n", i,
                c->data_val[i], r[i].loss, r[i].acc, (long long)r[i].count);
  }
  MT_CALL(mt_agree(w, t->comm->rank == 0 ? write_csv(c, r) : 0));
  return 0;
}

static int run(const mt_config *c, const mt_comm *comm, mt_mode_end *end) {
  (void)end;
  mt_data_spec spec;
  MT_CALL(mt_mode_model_spec(c, comm, c->data_val[0], &spec));
  mt_trainer *t = NULL;
  int err = mt_trainer_create_use(&t, c, comm, &spec);
  if (!err) err = evaluate(t, &spec);
  mt_trainer_destroy(&t);
  return err;
}

const mt_mode_ops mt_mode_evaluate = {
    .name = "evaluate",
    .help = "loss and accuracy of -model_file on each -data_val set (OUTPUT_DIR/evaluate.csv)",
    .options = options_,
    .run = run,
};
