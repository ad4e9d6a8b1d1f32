/* The picture of the run (io/plot.h). gnuplot reads the CSV files the run
 * writes anyway, so the picture adds no state to the trainer and nothing to
 * the checkpoints; a user redraws it with `cd OUTPUT_DIR && gnuplot
 * curve.gp`. gnuplot runs by posix_spawn (no fork of a rank's address
 * space, no shell) in its own process group, so that a stuck one and any
 * children it made can be killed together. */
#include "io/plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static int warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "mpitrain: warning: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "; no curve.png for the rest of this run (-plot 0 turns it off)\n");
  va_end(ap);
  return 0;
}

/* An executable regular file. */
static int runnable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The program to run into path: MT_GNUPLOT's (a path, or a name looked up
 * on PATH as a shell would), else gnuplot on PATH; 0 when there is none. */
static int find_gnuplot(char *path, size_t n, const char **name) {
  const char *e = getenv("MT_GNUPLOT");
  *name = e && *e ? e : "gnuplot";
  if (strchr(*name, '/')) {
    snprintf(path, n, "%s", *name);
    return runnable(path);
  }
  const char *dirs = getenv("PATH");
  if (!dirs) return 0;
  for (const char *d = dirs;; d++) {
    const char *end = strchr(d, ':');
    size_t k = end ? (size_t)(end - d) : strlen(d);
    /* an empty entry is the current folder */
    if ((size_t)snprintf(path, n, "%.*s%s%s", (int)k, k ? d : ".", "/", *name) < n && runnable(path))
      return 1;
    if (!end) return 0;
    d = end;
  }
}

/* s as a gnuplot string in single quotes (a quote doubled; no line breaks). */
static void quoted(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
  }
  fputc('\'', f);
}

/* Line colours: training and the lr, then one per validation set (the
 * same in the loss and accuracy panels). */
static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                     "#9467bd", "#8c564b", "#e377c2", "#17becf"};
#define NCOLORS (int)(sizeof(colors) / sizeof(colors[0]))

static const char *base_name(const char *s) {
  const char *b = strrchr(s, '/');
  return b && b[1] ? b + 1 : s;
}

/* Columns of curve.csv (io/curve.c): 1 epoch, 3 train_loss, 4 lr, 7 val_set,
 * 9 val_loss, 10 val_acc; one row per epoch and validation set (val_set -1
 * without any), so the training columns are read from the rows of set -1 or
 * 0. A filtered-out row is NaN, which `set datafile missing NaN` makes a
 * missing point: the line runs on past it instead of breaking. */
static void script(FILE *f, const mt_plot_spec *p) {
  int acc = 0; /* classification: a validation accuracy (regression: NaN) */
  for (int i = 0; i < p->nrows; i++)
    if (p->rows[i].set >= 0 && isfinite(p->rows[i].val_acc)) acc = 1;
  const int panels = 1 + acc + (p->dp != 0) + (p->loss_scale != 0);
  fprintf(f, "# mpitrain's picture of the run, rewritten after every epoch from the CSV files\n"
             "# beside it. Redraw: cd OUTPUT_DIR && gnuplot curve.gp\n"
             "if (!exists(\"out\")) out = 'curve.png'\n"
             "set terminal png size %d,%d noenhanced\n"
             "set output out\n"
             "set datafile separator ','\n"
             "set datafile missing NaN\n"
             "set multiplot layout %d,%d title ",
          MT_PLOT_WIDTH, MT_PLOT_HEIGHT, panels > 2 ? 2 : panels, panels > 2 ? 2 : 1);
  quoted(f, p->title);
  fprintf(f, "\nset grid\nset key below Left reverse samplen 2\nset xrange [0:*]\n"
             "set title 'loss and learning rate by epoch'\nset ylabel 'loss'\n"
             "set y2label 'learning rate'\nset ytics nomirror\nset y2tics\n"
             "plot 'curve.csv' skip 1 using 1:($7 <= 0 ? $3 : NaN) with linespoints lw 2 "
             "lc rgb 'black' title 'train'");
  for (int i = 0; i < p->nval; i++) {
    fprintf(f, ", \\\n  '' skip 1 using 1:($7 == %d ? $9 : NaN) with linespoints lw 2 lc rgb '%s' "
               "title ", i, colors[i % NCOLORS]);
    char t[MT_PATH_MAX + 16];
    snprintf(t, sizeof(t), "val: %s", base_name(p->val_names[i]));
    quoted(f, t);
  }
  fprintf(f, ", \\\n  '' skip 1 using 1:($7 <= 0 ? $4 : NaN) axes x1y2 with lines "
             "lc rgb 'gray60' title 'lr (right)'\n"
             "unset y2label\nunset y2tics\nset ytics mirror\n");
  if (acc) {
    fprintf(f, "set title 'validation accuracy by epoch'\nset ylabel 'accuracy'\nplot ");
    for (int i = 0; i < p->nval; i++) {
      fprintf(f, "%s'curve.csv' skip 1 using 1:($7 == %d ? $10 : NaN) with linespoints lw 2 "
                 "lc rgb '%s' title ", i ? ", \\\n  " : "", i, colors[i % NCOLORS]);
      quoted(f, base_name(p->val_names[i]));
    }
    fprintf(f, "\n");
  }
  if (p->dp)
    fprintf(f, "set title 'privacy spent (DP-SGD) by epoch'\nset ylabel 'epsilon'\n"
               "plot 'dp.csv' skip 1 using 1:3 with linespoints lw 2 lc rgb 'black' title 'epsilon'\n");
  if (p->loss_scale)
    /* loss_scale.csv: step (from 0), scale, found_inf, skipped; the scale
     * a step used, drawn at the step's end in epochs */
    fprintf(f, "set title 'loss scale by epoch'\nset ylabel 'loss scale'\nset logscale y 2\nset format y '2^%%L'\n"
               "S = %.17g\n"
               "plot 'loss_scale.csv' skip 1 using (($1 + 1) / S):2 with steps lw 2 lc rgb 'black' "
               "title 'loss scale', \\\n"
               "  '' skip 1 using (($1 + 1) / S):($4 > 0 ? $2 : NaN) with points pt 7 lc rgb '#d62728' "
               "title 'skipped step'\n"
               "unset logscale y\nset format y '%%g'\n",
            p->steps_per_epoch > 0 ? p->steps_per_epoch : 1.0);
  fprintf(f, "unset multiplot\n");
}

/* DIR/NAME into buf; 0 when it does not fit. */
static int join(char *buf, size_t n, const char *dir, const char *name) {
  return (size_t)snprintf(buf, n, "%s/%s", dir, name) < n;
}

static int write_script(const mt_plot_spec *p) {
  char path[MT_PATH_MAX + 32], tmp[MT_PATH_MAX + 40];
  if (!join(path, sizeof(path), p->dir, "curve.gp") || !join(tmp, sizeof(tmp), p->dir, "curve.gp.tmp"))
    return warn("the path of %s/curve.gp is too long", p->dir);
  FILE *f = fopen(tmp, "w");
  if (!f) return warn("cannot write %s: %s", tmp, strerror(errno));
  script(f, p);
  int bad = fflush(f) != 0 || ferror(f), e = errno;
  if (fclose(f) != 0 && !bad) bad = 1, e = errno;
  if (bad || rename(tmp, path) != 0) {
    if (!bad) e = errno;
    unlink(tmp);
    return warn("cannot write %s: %s", path, strerror(e));
  }
  return 1;
}

/* Runs prog on DIR/curve.gp; 1 when it exited 0 within the timeout. */
static int run_gnuplot(const mt_plot_spec *p, const char *prog, const char *log) {
  /* gnuplot changes into DIR itself, so the script names its files
   * relative to it and DIR needs no quoting beyond gnuplot's own */
  char *cmd = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&cmd, &len);
  if (!m) return warn("out of memory for gnuplot's command line");
  fprintf(m, "cd ");
  quoted(m, p->dir);
  fprintf(m, "; out = 'curve.png.tmp'");
  if (fclose(m) != 0) {
    free(cmd);
    return warn("out of memory for gnuplot's command line");
  }
  char *const argv[] = {(char *)prog, "-e", cmd, "curve.gp", NULL};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  /* the ranks block their stop signals for a signal thread (trainer/
   * resume.c): gnuplot gets the default mask and dispositions back */
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int e = posix_spawn(&pid, prog, &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  free(cmd);
  if (e) return warn("cannot run %s: %s", prog, strerror(e));
  const double start = mt_now();
  struct timespec nap = {0, 1000000}; /* 1 ms, doubling to 64 ms */
  int st = 0;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return warn("waiting for %s: %s", prog, strerror(errno));
    if (mt_now() - start > p->timeout) {
      kill(-pid, SIGKILL);
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      return warn("%s took more than %g s (-plot_timeout, at most half of -comm_timeout) and was stopped",
                  prog, p->timeout);
    }
    nanosleep(&nap, NULL);
    if (nap.tv_nsec < 64000000) nap.tv_nsec *= 2;
  }
  if (WIFSIGNALED(st))
    return warn("%s was killed by signal %d (its messages: %s)", prog, WTERMSIG(st), log);
  if (WEXITSTATUS(st) != 0)
    return warn("%s exited with status %d (its messages: %s)", prog, WEXITSTATUS(st), log);
  return 1;
}

int mt_plot_curve(const mt_plot_spec *p) {
  char prog[MT_PATH_MAX + 32], log[MT_PATH_MAX + 32], png[MT_PATH_MAX + 32], tmp[MT_PATH_MAX + 40];
  const char *name;
  if (!find_gnuplot(prog, sizeof(prog), &name)) {
    if (strchr(name, '/')) return warn("MT_GNUPLOT=%s is not an executable file", name);
    return warn("%s is not on PATH (Debian's package gnuplot-nox%s)", name,
                strcmp(name, "gnuplot") ? "; the name is MT_GNUPLOT's" : "");
  }
  if (!join(log, sizeof(log), p->dir, "curve.gp.log") || !join(png, sizeof(png), p->dir, "curve.png") ||
      !join(tmp, sizeof(tmp), p->dir, "curve.png.tmp"))
    return warn("the path of %s/curve.png is too long", p->dir);
  if (!write_script(p)) return 0;
  unlink(tmp); /* a picture gnuplot did not finish must not be renamed */
  if (!run_gnuplot(p, prog, log)) {
    unlink(tmp);
    return 0;
  }
  struct stat st;
  if (stat(tmp, &st) != 0 || st.st_size == 0) {
    unlink(tmp);
    return warn("%s wrote no picture (its messages: %s)", prog, log);
  }
  if (rename(tmp, png) != 0) {
    int e = errno;
    unlink(tmp);
    return warn("cannot rename %s: %s", tmp, strerror(e));
  }
  unlink(log); /* nothing to read when it worked (gnuplot warns of one-point ranges) */
  return 1;
}
