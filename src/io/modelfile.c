/* Model files that describe themselves (io/modelfile.h): the model's name,
 * its options and the data it was made for, as attributes beside the
 * tensors; read back into the options database before a later run reads
 * its options, so the file alone makes the model again. */
#include "io/modelfile.h"
#include "io/io.h"
#include "models/models.h"

#include <ctype.h>
#include <errno.h>
#include <petscsys.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_OPTS 32
#define PREFIX "option."
#define SHAPES ".shapes"
#define DIM_MAX (1LL << 31) /* a sample dimension the data layer would take */

/* ------------------------------------------------------------- writing */

static int attr_i64(hid_t loc, const char *name, const int64_t *v, int n) {
  hsize_t dim = (hsize_t)(n > 0 ? n : 1);
  hid_t sp = n > 0 ? H5Screate_simple(1, &dim, NULL) : H5Screate(H5S_SCALAR);
  hid_t a = sp < 0 ? -1 : H5Acreate2(loc, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT64, v);
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  MT_CHECK(st >= 0, MT_ERR_HDF5, "writing attribute %s failed", name);
  return 0;
}

int mt_model_desc_write(hid_t loc, const mt_model *m) {
  MT_CALL(mt_h5_attr_string(loc, "model", m->ops->name));
  const char *names[MAX_OPTS];
  int shapes[MAX_OPTS];
  const int n = mt_model_options_of(m->ops, names, shapes, MAX_OPTS);
  for (int i = 0; i < n; i++) {
    const char *value = NULL;
    int set = 0;
    for (int k = 0; k < mt_option_count(); k++) {
      const char *v;
      const char *name = mt_option_read(k, &v, &set);
      if (name && !strcmp(name, names[i])) value = v;
    }
    if (!value) continue;
    char attr[128];
    snprintf(attr, sizeof(attr), PREFIX "%s", names[i] + 1); /* without the '-' */
    MT_CALL(mt_h5_attr_string(loc, attr, value));
    const int64_t s = shapes[i];
    snprintf(attr, sizeof(attr), PREFIX "%s" SHAPES, names[i] + 1);
    MT_CALL(attr_i64(loc, attr, &s, 0));
  }
  const mt_data_spec *d = &m->spec;
  MT_CALL(attr_i64(loc, "data.shape", d->shape, d->ndim));
  const int64_t kind[3] = {d->nclasses, d->tokens, d->ntargets};
  MT_CALL(attr_i64(loc, "data.nclasses", &kind[0], 0));
  MT_CALL(attr_i64(loc, "data.tokens", &kind[1], 0));
  MT_CALL(attr_i64(loc, "data.ntargets", &kind[2], 0));
  MT_CALL(mt_h5_attr_string(loc, "precision", m->dtype == MT_FP64 ? "fp64" : "fp32"));
  return 0;
}

/* ------------------------------------------------------------- reading */

/* The options the user gave for the model in the file, as they were before
 * the file's went in: mt_model_file_check compares them. */
static struct {
  char name[64];
  char file[256];
  int shapes;
} given_[MAX_OPTS];
static int ngiven_;
static char model_[64];

typedef struct {
  hid_t f;
  const char *path, *option;
  int err;
} reader;

static int read_str(hid_t loc, const char *name, char *out, size_t len) {
  hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  if (a < 0) return -1;
  hid_t ty = H5Aget_type(a), mt = H5Tcopy(H5T_C_S1);
  int ok = ty >= 0 && H5Tget_class(ty) == H5T_STRING && !H5Tis_variable_str(ty) &&
           H5Tget_size(ty) < len;
  if (ok) {
    H5Tset_size(mt, H5Tget_size(ty));
    ok = H5Aread(a, mt, out) >= 0;
    out[H5Tget_size(ty)] = '\0';
  }
  H5Tclose(mt);
  if (ty >= 0) H5Tclose(ty);
  H5Aclose(a);
  return ok ? 0 : -1;
}

static int read_i64(hid_t loc, const char *name, int64_t *v, int max, int *n) {
  hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  if (a < 0) return -1;
  hid_t sp = H5Aget_space(a);
  hssize_t k = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
  int rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
  int ok = k >= 0 && k <= max && rank <= 1 && H5Aread(a, H5T_NATIVE_INT64, v) >= 0;
  if (n) *n = rank == 0 ? 0 : (int)k; /* a scalar: no dims */
  if (sp >= 0) H5Sclose(sp);
  H5Aclose(a);
  return ok ? 0 : -1;
}

/* Opens path read-only: MT_ERR_FILE naming the option and the file. */
static int open_file(const char *path, const char *option, hid_t *f) {
  MT_CHECK(access(path, R_OK) == 0, MT_ERR_FILE, "option %s: cannot read %s: %s", option, path,
           strerror(errno));
  mt_h5_lock();
  *f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  mt_h5_unlock();
  MT_CHECK(*f >= 0, MT_ERR_FILE,
           "option %s: cannot open %s as HDF5 (truncated, damaged or not an HDF5 file)", option,
           path);
  return 0;
}

/* Each option attribute: the file's value into the options database where
 * the user gave none, else kept in given_ for the check. */
static herr_t each_attr(hid_t loc, const char *name, const H5A_info_t *info, void *ctx) {
  (void)info;
  reader *r = ctx;
  const size_t np = strlen(PREFIX), ns = strlen(SHAPES), len = strlen(name);
  if (strncmp(name, PREFIX, np) || (len > ns && !strcmp(name + len - ns, SHAPES))) return 0;
  char opt[64], value[256], attr[128];
  if (len - np + 2 > sizeof(opt) || read_str(loc, name, value, sizeof(value))) {
    r->err = MT_ERR(MT_ERR_DATA, "option %s: %s: attribute %s is not a model option's value",
                    r->option, r->path, name);
    return -1;
  }
  snprintf(opt, sizeof(opt), "-%s", name + np);
  int64_t shapes = 1;
  snprintf(attr, sizeof(attr), "%s" SHAPES, name);
  if (H5Aexists(loc, attr) > 0) read_i64(loc, attr, &shapes, 1, NULL);
  PetscBool has = PETSC_FALSE;
  if (PetscOptionsHasName(NULL, NULL, opt, &has)) has = PETSC_FALSE;
  if (!has) {
    if (PetscOptionsSetValue(NULL, opt, value)) {
      r->err = MT_ERR(MT_ERR_LIB, "option %s: cannot set %s from %s", r->option, opt, r->path);
      return -1;
    }
  } else if (ngiven_ < MAX_OPTS) {
    snprintf(given_[ngiven_].name, sizeof(given_[0].name), "%s", opt);
    snprintf(given_[ngiven_].file, sizeof(given_[0].file), "%s", value);
    given_[ngiven_++].shapes = shapes != 0;
  }
  return 0;
}

int mt_model_file_options(const char *path, const char *option) {
  ngiven_ = 0;
  model_[0] = '\0';
  hid_t f;
  MT_CALL(open_file(path, option, &f));
  mt_h5_lock();
  reader r = {f, path, option, 0};
  char model[64];
  int has_model = read_str(f, "model", model, sizeof(model)) == 0;
  if (has_model) {
    snprintf(model_, sizeof(model_), "%s", model);
    char given[64] = "";
    PetscBool set = PETSC_FALSE;
    if (PetscOptionsGetString(NULL, NULL, "-model", given, sizeof(given), &set)) set = PETSC_FALSE;
    if (set && strcmp(given, model))
      r.err = MT_ERR(MT_ERR_OPTION, "option -model: %s contradicts %s (option %s), which holds "
                     "a %s model", given, path, option, model);
    else if (!set && PetscOptionsSetValue(NULL, "-model", model))
      r.err = MT_ERR(MT_ERR_LIB, "option %s: cannot set -model from %s", option, path);
    hsize_t idx = 0;
    if (!r.err) H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, &idx, each_attr, &r);
  } else if (H5Lexists(f, "x", H5P_DEFAULT) > 0 || H5Lexists(f, "tokens", H5P_DEFAULT) > 0) {
    r.err = MT_ERR(MT_ERR_DATA, "option %s: %s is a data set (/x or /tokens), not a model file",
                   option, path);
  }
  H5Fclose(f);
  mt_h5_unlock();
  return r.err;
}

/* ------------------------------------------------ comparing option values */

static void trim(char *s) {
  char *a = s;
  while (isspace((unsigned char)*a)) a++;
  size_t n = strlen(a);
  while (n && isspace((unsigned char)a[n - 1])) n--;
  memmove(s, a, n);
  s[n] = '\0';
}

/* "" too: a boolean option given bare is on (mt_model_option_bool) */
static int as_bool(const char *s, int *b) {
  static const char *const on[] = {"1", "true", "yes", "on", ""},
                           *const off[] = {"0", "false", "no", "off", NULL};
  for (int i = 0; i < 5; i++) {
    if (!strcasecmp(s, on[i])) return *b = 1, 1;
    if (off[i] && !strcasecmp(s, off[i])) return *b = 0, 1;
  }
  return 0;
}

static int as_number(const char *s, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return s[0] && !*end && !errno;
}

/* a and b mean the same value: item by item (comma-separated), as
 * booleans, then as numbers, then as words. */
static int same_value(const char *a, const char *b) {
  int ba, bb;
  if ((!a[0] || !b[0]) && as_bool(a, &ba) && as_bool(b, &bb)) return ba == bb; /* a bare flag */
  char x[256], y[256];
  snprintf(x, sizeof(x), "%s", a);
  snprintf(y, sizeof(y), "%s", b);
  char *sx = NULL, *sy = NULL;
  char *p = strtok_r(x, ",", &sx), *q = strtok_r(y, ",", &sy);
  for (; p && q; p = strtok_r(NULL, ",", &sx), q = strtok_r(NULL, ",", &sy)) {
    trim(p);
    trim(q);
    int bp, bq;
    double dp, dq;
    if (as_bool(p, &bp) && as_bool(q, &bq)) {
      if (bp != bq) return 0;
    } else if (as_number(p, &dp) && as_number(q, &dq)) {
      if (dp != dq) return 0;
    } else if (strcmp(p, q)) {
      return 0;
    }
  }
  return !p && !q;
}

int mt_model_file_check(const char *path, const char *option) {
  for (int i = 0; i < ngiven_; i++) {
    if (!given_[i].shapes) continue; /* dropout: the user's, for this training */
    const char *value = NULL;
    for (int k = 0; k < mt_option_count(); k++) {
      const char *v;
      int set;
      const char *name = mt_option_read(k, &v, &set);
      if (name && !strcmp(name, given_[i].name)) value = v;
    }
    if (!value) continue; /* not read: another model's option */
    MT_CHECK(same_value(value, given_[i].file), MT_ERR_OPTION,
             "option %s: %s contradicts %s (option %s), whose %s model was made with %s %s",
             given_[i].name, value, path, option, model_[0] ? model_ : "", given_[i].name,
             given_[i].file[0] ? given_[i].file : "(no value: on)");
  }
  return 0;
}

int mt_model_file_spec(const char *path, const char *option, mt_data_spec *spec, int *found) {
  *found = 0;
  hid_t f;
  MT_CALL(open_file(path, option, &f));
  mt_h5_lock();
  mt_data_spec s;
  memset(&s, 0, sizeof(s));
  int64_t kind[3] = {0, 0, 0};
  int nd = 0;
  int ok = H5Aexists(f, "data.shape") > 0;
  int bad = ok && (read_i64(f, "data.shape", s.shape, MT_MAX_DIMS, &nd) ||
                   read_i64(f, "data.nclasses", &kind[0], 1, NULL) ||
                   read_i64(f, "data.tokens", &kind[1], 1, NULL) ||
                   read_i64(f, "data.ntargets", &kind[2], 1, NULL));
  H5Fclose(f);
  mt_h5_unlock();
  MT_CHECK(!bad, MT_ERR_DATA, "option %s: %s: its data.* attributes are damaged", option, path);
  if (!ok) return 0;
  s.ndim = nd;
  s.sample_numel = 1;
  for (int i = 0; i < nd; i++) {
    MT_CHECK(s.shape[i] >= 1 && s.shape[i] < DIM_MAX, MT_ERR_DATA,
             "option %s: %s: data.shape[%d] = %lld is not a sample dimension", option, path, i,
             (long long)s.shape[i]);
    s.sample_numel *= s.shape[i];
  }
  MT_CHECK(s.sample_numel < DIM_MAX && kind[0] >= 0 && kind[0] <= (1 << 24) && kind[2] >= 0 &&
               kind[2] <= (1 << 24) && (kind[1] == 0 || kind[1] == 1),
           MT_ERR_DATA, "option %s: %s: its data.* attributes are damaged", option, path);
  s.nclasses = (int)kind[0];
  s.tokens = (int)kind[1];
  s.ntargets = (int)kind[2];
  *spec = s;
  *found = 1;
  return 0;
}

/* "(1,28,28) with 10 classes", "token windows of 64 with a vocabulary of
 * 256", "(8) with 3 float targets". */
static void spec_text(const mt_data_spec *s, char *out, size_t len) {
  if (s->tokens) {
    snprintf(out, len, "token windows of %lld with a vocabulary of %d", (long long)s->sample_numel,
             s->nclasses);
    return;
  }
  size_t k = (size_t)snprintf(out, len, "(");
  for (int i = 0; i < s->ndim && k < len; i++)
    k += (size_t)snprintf(out + k, len - k, "%s%lld", i ? "," : "", (long long)s->shape[i]);
  if (k < len && s->ntargets)
    snprintf(out + k, len - k, ") with %d float target%s", s->ntargets, s->ntargets > 1 ? "s" : "");
  else if (k < len)
    snprintf(out + k, len - k, ") with %d classes", s->nclasses);
}

int mt_model_file_spec_check(const char *path, const char *option, const mt_data_spec *have,
                             const char *data_option, const char *data) {
  mt_data_spec want;
  int found = 0;
  MT_CALL(mt_model_file_spec(path, option, &want, &found));
  if (!found) return 0;
  int same = want.ndim == have->ndim && want.nclasses == have->nclasses &&
             want.tokens == have->tokens && want.ntargets == have->ntargets;
  for (int i = 0; same && !want.tokens && i < want.ndim; i++) same = want.shape[i] == have->shape[i];
  if (same && want.tokens) same = want.sample_numel == have->sample_numel;
  if (same) return 0;
  char a[160], b[160];
  spec_text(&want, a, sizeof(a));
  spec_text(have, b, sizeof(b));
  return MT_ERR(MT_ERR_DATA, "option %s: %s holds samples %s; the model of %s (option %s) was made "
                "for %s", data_option, data, b, path, option, a);
}
