/* The modes' table and what they share: finding one by name and refusing
 * the options a mode does not read (mode.h). */
#include "trainer/mode.h"
#include "models/models.h"

#include <petscsys.h>
#include <string.h>

static const mt_mode_ops *const modes_[] = {&mt_mode_train, &mt_mode_evaluate, &mt_mode_predict,
                                             &mt_mode_generate};
#define NMODES ((int)(sizeof(modes_) / sizeof(modes_[0])))

const mt_mode_ops *mt_mode_find(const char *name) {
  for (int i = 0; i < NMODES; i++)
    if (!strcmp(modes_[i]->name, name)) return modes_[i];
  return NULL;
}

void mt_mode_names(char *buf, size_t len) {
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; i < NMODES && k < len; i++) {
    int w = snprintf(buf + k, len - k, "%s%s", i ? ", " : "", modes_[i]->name);
    if (w > 0) k += (size_t)w;
  }
}

/* Options of the run itself, of its data reading and of its threads,
 * which every mode that uses a model reads. */
const char *const mt_mode_common[] = {
    "-mode",          "-model",   "-model_file", "-output_dir",     "-threads",
    "-thread_split",  "-val_batch_size", "-data_check", "-prefetch", "-comm_timeout",
    "-precision",     "-device",  "-memory_limit_mb", NULL};

static int listed(const char *const *list, const char *name) {
  for (int i = 0; list && list[i]; i++)
    if (!strcmp(list[i], name)) return 1;
  return 0;
}

/* An option one of the registered models' options ops read (any model's:
 * an option of another built-in is accepted as in training). */
static int model_option(const char *name) {
  char names[512], *save = NULL;
  mt_model_names(names, sizeof(names));
  for (char *tok = strtok_r(names, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    const mt_model_ops *ops = mt_model_find(tok);
    const char *opt[64];
    int shapes[64];
    int n = ops ? mt_model_options_of(ops, opt, shapes, 64) : 0;
    for (int i = 0; i < n; i++)
      if (!strcmp(opt[i], name)) return 1;
  }
  return 0;
}

int mt_mode_check_options(const mt_mode_ops *m) {
  if (!m->options) return 0; /* train reads them all */
  for (int i = 0; i < mt_option_count(); i++) {
    const char *value, *name;
    int set;
    if (!(name = mt_option_read(i, &value, &set)) || !set) continue;
    if (!strcmp(name, "-device") && !strcmp(value, "cuda"))
      return MT_ERR(MT_ERR_OPTION, "option -device cuda: -mode %s runs on the CPU", m->name);
    if (listed(mt_mode_common, name) || listed(m->options, name) || model_option(name)) continue;
    /* who reads it: train, or another mode that lists it */
    const char *who = "train";
    for (int k = 0; k < NMODES; k++)
      if (modes_[k] != m && modes_[k]->options && listed(modes_[k]->options, name))
        who = modes_[k]->name;
    return MT_ERR(MT_ERR_OPTION, "option %s: only -mode %s uses it, not -mode %s", name, who,
                  m->name);
  }
  return 0;
}
