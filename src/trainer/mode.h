/* What a run does (-mode): train (the default), or use a trained model
 * (-model_file) to evaluate, predict or generate (a gpt's text). One file
 * per mode (mode_NAME.c) fills an mt_mode_ops and is listed in mode.c's
 * table; app.c finds the mode by name after initialization, refuses the
 * options only other modes read (mt_mode_check_options), and runs it.
 *
 * A new mode (as generate was) is a file with its ops and one line in
 * mode.c: its own options (-prompt ...) are read by its options op before
 * the configuration (so -help lists them and they are not unknown), the
 * configuration's options it reads besides the common ones are named in
 * its options list, and its run op does the work. */
#ifndef MT_MODE_H
#define MT_MODE_H

#include "comm/guard.h"
#include "trainer/trainer.h"

/* What a run leaves to mt_main: stopped by a signal after a checkpoint
 * (the job requeues), and the hang guard that outlives the run (mt_main
 * ends the run under it, mt_guard_finish); both stay 0 / NULL in a mode
 * that has neither. */
typedef struct {
  int stopped;
  mt_guard *guard;
} mt_mode_end;

typedef struct {
  const char *name; /* what -mode takes                                   */
  const char *help; /* one line for -help                                 */
  /* the configuration's options this mode reads besides the common ones
   * (mt_mode_common) and the model's own, NULL-terminated; any other the
   * user gave is refused naming it. NULL: every option (train). */
  const char *const *options;
  /* the mode's own options, read with mt_option_* before the
   * configuration (NULL: none); errors name the option */
  int (*read_options)(void);
  /* the run, once the configuration is read, checked and printed;
   * collective, errors agreed */
  int (*run)(const mt_config *cfg, const mt_comm *comm, mt_mode_end *end);
} mt_mode_ops;

extern const mt_mode_ops mt_mode_train, mt_mode_evaluate, mt_mode_predict, mt_mode_generate;

/* The mode named name, or NULL; mt_mode_names writes "train, evaluate,
 * ..." into buf. */
const mt_mode_ops *mt_mode_find(const char *name);
void mt_mode_names(char *buf, size_t len);
/* The configuration's options every mode that uses a trained model reads
 * (-model_file, -output_dir, -threads, ...), NULL-terminated. */
extern const char *const mt_mode_common[];
/* Refuses, naming it, every option the user gave that mode m does not
 * read (-lr under -mode evaluate: "option -lr: only -mode train uses it,
 * not -mode evaluate"), and -device cuda (the modes run on the CPU).
 * Not collective: every rank has the same options. */
int mt_mode_check_options(const mt_mode_ops *m);

/* (use.c) The trainer of a mode that uses a trained model: the model
 * made from the configuration (its options set from -model_file's
 * description, io/modelfile.h) for data of spec, its parameters and
 * buffers read from -model_file, the rank's threads' models for forwards
 * of -val_batch_size samples, the evaluation state; no training data,
 * backend, optimizer, best model or mixed precision. Collective, agreed;
 * freed by mt_trainer_destroy. */
int mt_trainer_create_use(mt_trainer **t, const mt_config *cfg, const mt_comm *comm,
                          const mt_data_spec *spec);
/* (use.c) The data spec -model_file's model was made for: its
 * description's, else (a file written before descriptions) that of the
 * data file first (opened and closed). Collective, agreed. */
int mt_mode_model_spec(const mt_config *cfg, const mt_comm *comm, const char *first,
                       mt_data_spec *spec);

#endif
