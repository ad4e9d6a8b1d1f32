/* Options for models and backends plugged in through the public API. Each
 * read marks the option used (so it is not reported as unknown) and prints a
 * help line under -help. */
#include "core/core.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <petscsys.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_;
uint64_t mt_option_hash(void) { return hash_; }

/* Every option read so far with the value it resolved to, for naming the
 * options that differ when the ranks' configurations do
 * (mt_config_check_same). Held for the life of the process: a table of
 * names, not of data. */
#define MAX_READ 512
static struct {
  char *name, *value;
  int set;
} read_[MAX_READ];
static int nread_;

void mt_option_record(const char *name, const char *value, int set) {
  int i = 0;
  while (i < nread_ && strcmp(read_[i].name, name)) i++;
  if (i == nread_) {
    if (nread_ == MAX_READ) return; /* past it, the hash alone tells */
    char *n = strdup(name);
    if (!n) return;
    read_[nread_++].name = n;
  }
  char *v = strdup(value);
  if (!v) return; /* the old value stays: a difference is then missed, not invented */
  free(read_[i].value);
  read_[i].value = v;
  read_[i].set = set != 0;
}

int mt_option_count(void) { return nread_; }

const char *mt_option_read(int i, const char **value, int *set) {
  if (i < 0 || i >= nread_ || !read_[i].value) return NULL;
  *value = read_[i].value;
  *set = read_[i].set;
  return read_[i].name;
}

static int help_line(const char *name, const char *def, const char *help) {
  PetscBool h = PETSC_FALSE;
  PetscOptionsHasHelp(NULL, &h);
  if (h) mt_print0("  %s <%s>: %s\n", name, def, help);
  return 0;
}

int mt_option_string(const char *name, const char *help, const char *def, char *out, size_t len) {
  MT_CHECK(name && name[0] == '-' && len > 0, MT_ERR_ARG, "option names start with '-'");
  help_line(name, def, help);
  char buf[4096];
  PetscBool set = PETSC_FALSE;
  if (PetscOptionsGetString(NULL, NULL, name, buf, sizeof(buf), &set))
    return MT_ERR(MT_ERR_LIB, "option %s: cannot read the options database", name);
  const char *v = set ? buf : def;
  hash_ = mt_hash_bytes(name, strlen(name) + 1, hash_ ? hash_ : 1);
  hash_ = mt_hash_bytes(v, strlen(v) + 1, hash_);
  mt_option_record(name, v, set);
  MT_CHECK(strlen(v) < len, MT_ERR_OPTION, "option %s: value longer than %zu characters", name, len - 1);
  memcpy(out, v, strlen(v) + 1);
  return 0;
}

int mt_option_int(const char *name, const char *help, long def, long lo, long hi, long *out) {
  char d[32], s[256], *end;
  snprintf(d, sizeof(d), "%ld", def);
  MT_CALL(mt_option_string(name, help, d, s, sizeof(s)));
  errno = 0;
  long v = strtol(s, &end, 10);
  MT_CHECK(s[0] && !errno && !*end, MT_ERR_OPTION, "option %s: '%s' is not an integer (allowed: %ld..%ld)",
           name, s, lo, hi);
  MT_CHECK(v >= lo && v <= hi, MT_ERR_OPTION, "option %s: %ld is out of range (allowed: %ld..%ld)",
           name, v, lo, hi);
  *out = v;
  return 0;
}

int mt_option_real(const char *name, const char *help, double def, double lo, double hi,
                   double *out) {
  char d[64], s[256], *end;
  snprintf(d, sizeof(d), "%g", def);
  MT_CALL(mt_option_string(name, help, d, s, sizeof(s)));
  errno = 0;
  double v = strtod(s, &end);
  MT_CHECK(s[0] && !errno && !*end && isfinite(v), MT_ERR_OPTION,
           "option %s: '%s' is not a number (allowed: [%g, %g])", name, s, lo, hi);
  MT_CHECK(v >= lo && v <= hi, MT_ERR_OPTION, "option %s: %g is out of range (allowed: [%g, %g])",
           name, v, lo, hi);
  *out = v;
  return 0;
}

int mt_parse_long(const char *s, long *v) {
  char *end;
  errno = 0;
  while (isspace((unsigned char)*s)) s++;
  if (!*s) return -1;
  *v = strtol(s, &end, 10);
  if (errno || *end) return -1;
  return 0;
}

int mt_parse_double(const char *s, double *v) {
  char *end;
  errno = 0;
  while (isspace((unsigned char)*s)) s++;
  if (!*s) return -1;
  *v = strtod(s, &end);
  if (errno || *end || !isfinite(*v)) return -1;
  return 0;
}

int mt_list_empty_entry(const char *s) {
  if (!s || !*s) return 0; /* no entries at all */
  int blank = 1;           /* the entry read so far is empty or blanks */
  for (const char *p = s;; p++) {
    if (*p == ',' || !*p) {
      if (blank) return 1;
      if (!*p) return 0;
      blank = 1;
    } else if (!isspace((unsigned char)*p)) {
      blank = 0;
    }
  }
}
