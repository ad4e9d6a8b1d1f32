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
