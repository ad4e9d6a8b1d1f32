/* Error chain: the first error records a message; MT_CALL adds frames on the
 * way up; only main() turns the chain into output and an exit status. */
#include "mpitrain/mpitrain.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char msg_[1024];
static _Thread_local char trace_[4096];
static _Thread_local size_t trace_len_;

static const char *names_[] = {
    "ok", "bad argument", "bad option", "file error", "bad data", "MPI error",
    "HDF5 error", "out of memory", "library error", "bad state", "numeric error",
    "write error"};
_Static_assert(sizeof(names_) / sizeof(names_[0]) == MT_ERR_COUNT_,
               "error names out of step with mt_err_code");

const char *mt_error_name(int code) {
  return (code >= 0 && code < MT_ERR_COUNT_) ? names_[code] : "unknown error";
}

static void trace_add(const char *file, int line, const char *func) {
  if (trace_len_ >= sizeof(trace_) - 1) return;
  int k = snprintf(trace_ + trace_len_, sizeof(trace_) - trace_len_, "  at %s() %s:%d\n",
                   func, file, line);
  if (k > 0) trace_len_ += (size_t)k;
  if (trace_len_ > sizeof(trace_) - 1) trace_len_ = sizeof(trace_) - 1;
}

int mt_error_set(const char *file, int line, const char *func, int code, const char *fmt, ...) {
  if (msg_[0] == '\0') {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg_, sizeof(msg_), fmt, ap);
    va_end(ap);
    trace_len_ = 0;
    trace_[0] = '\0';
  }
  trace_add(file, line, func);
  return code ? code : MT_ERR_STATE;
}

void mt_error_push(const char *file, int line, const char *func, int code) {
  if (msg_[0] == '\0') snprintf(msg_, sizeof(msg_), "%s", mt_error_name(code));
  trace_add(file, line, func);
}

const char *mt_error_message(void) { return msg_; }
const char *mt_error_traceback(void) { return trace_; }
void mt_error_clear(void) {
  msg_[0] = '\0';
  trace_[0] = '\0';
  trace_len_ = 0;
}

int mt_mpi_error(const char *file, int line, const char *func, int rc, const char *expr) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof(s), "code %d", rc);
  return mt_error_set(file, line, func, MT_ERR_MPI, "%s failed: %s", expr, s);
}
