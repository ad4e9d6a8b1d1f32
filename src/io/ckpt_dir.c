/* Checkpoint files, the folder: the names ckpt-<step>.h5 in a directory,
 * listing them, making the directory, syncing, DIR/latest, keeping the
 * newest K (pruning), and finding the newest checkpoint that verifies.
 * mt_ckpt_save (ckpt_write.c) calls the helpers here; find_latest calls
 * mt_ckpt_verify (ckpt_read.h). Contracts: ckpt_dir.h. */
#include "io/ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ============================================================== listing */

int mt_ckpt_path(const char *dir, int64_t step, char *buf, size_t cap) {
  int k = snprintf(buf, cap, "%s/ckpt-%lld.h5", dir, (long long)step);
  MT_CHECK(k > 0 && (size_t)k < cap, MT_ERR_ARG, "checkpoint path too long: %s/ckpt-%lld.h5",
           dir, (long long)step);
  return 0;
}

/* Whether name is ckpt-<step>.h5 (kind 1) or ckpt-<step>.h5.tmp (kind 2). */
static int parse_name(const char *name, int64_t *step) {
  if (strncmp(name, "ckpt-", 5) || !(name[5] >= '0' && name[5] <= '9')) return 0;
  char *end;
  errno = 0;
  long long v = strtoll(name + 5, &end, 10);
  if (errno) return 0;
  *step = v;
  if (!strcmp(end, ".h5")) return 1;
  if (!strcmp(end, ".h5.tmp")) return 2;
  return 0;
}

static int step_desc(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a > b ? -1 : a < b ? 1 : 0;
}

/* Rank 0: the steps of DIR's complete (kind 1) or temporary (kind 2) files,
 * newest first. A missing DIR holds none. */
static int scan_dir(const char *dir, int kind, int64_t **steps, int *n) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return 0;
    return MT_ERR(MT_ERR_FILE, "checkpoint directory %s: cannot be listed: %s", dir,
                  strerror(errno));
  }
  int cap = 0, err = 0;
  struct dirent *de;
  while (!err && (de = readdir(d))) {
    int64_t s;
    if (parse_name(de->d_name, &s) != kind) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 32;
      int64_t *ns = realloc(*steps, (size_t)cap * sizeof(int64_t));
      if (!ns) {
        err = MT_ERR(MT_ERR_MEM, "listing checkpoint directory %s", dir);
        break;
      }
      *steps = ns;
    }
    (*steps)[(*n)++] = s;
  }
  closedir(d);
  if (err) {
    free(*steps);
    *steps = NULL;
    *n = 0;
    return err;
  }
  if (*n > 1) qsort(*steps, (size_t)*n, sizeof(int64_t), step_desc);
  return 0;
}

int mt_ckpt_list(MPI_Comm comm, const char *dir, int64_t **steps, int *n) {
  int rank;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  *steps = NULL;
  *n = 0;
  int64_t *loc = NULL;
  int nl = 0, err = 0;
  if (rank == 0) err = scan_dir(dir, 1, &loc, &nl);
  err = mt_agree(comm, err);
  if (!err && MPI_Bcast(&nl, 1, MPI_INT, 0, comm) != MPI_SUCCESS)
    err = MT_ERR(MT_ERR_MPI, "MPI_Bcast of the checkpoint count failed");
  if (!err && nl > 0) err = mt_calloc(steps, (size_t)nl, sizeof(int64_t), "checkpoint list");
  if (!err && rank == 0 && nl > 0) memcpy(*steps, loc, (size_t)nl * sizeof(int64_t));
  free(loc);
  err = mt_agree(comm, err);
  if (!err && nl > 0 && MPI_Bcast(*steps, nl, MPI_INT64_T, 0, comm) != MPI_SUCCESS)
    err = MT_ERR(MT_ERR_MPI, "MPI_Bcast of the checkpoint list failed");
  err = mt_agree(comm, err);
  if (err) {
    mt_free(steps);
    return err;
  }
  *n = nl;
  return 0;
}

/* ======================================================= making, syncing */

int mt_ckpt_mkdir_p(const char *dir) {
  char buf[MT_PATH_MAX];
  int k = snprintf(buf, sizeof(buf), "%s", dir);
  MT_CHECK(k > 0 && (size_t)k < sizeof(buf), MT_ERR_ARG, "checkpoint directory name too long");
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char c = *p;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return MT_ERR(MT_ERR_FILE, "checkpoint directory %s: cannot create %s: %s", dir, buf,
                    strerror(errno));
    *p = c;
    if (!c) break;
  }
  struct stat sb;
  MT_CHECK(stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode), MT_ERR_FILE,
           "checkpoint directory %s is not a directory", dir);
  return 0;
}

int mt_ckpt_sync_path(const char *path, int dir) {
  int fd = open(path, O_RDONLY | (dir ? O_DIRECTORY : 0));
  if (fd < 0) return MT_ERR(MT_ERR_FILE, "cannot open %s to sync it: %s", path, strerror(errno));
  int rc = fsync(fd), e = errno;
  close(fd);
  if (rc != 0 && !(dir && (e == EINVAL || e == ENOTSUP)))
    return MT_ERR(MT_ERR_FILE, "fsync of %s failed: %s", path, strerror(e));
  return 0;
}

int mt_ckpt_write_latest(const char *dir, const char *file) {
  char tmp[MT_PATH_MAX + 16], fin[MT_PATH_MAX + 16];
  snprintf(tmp, sizeof(tmp), "%s/latest.tmp", dir);
  snprintf(fin, sizeof(fin), "%s/latest", dir);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0) return MT_ERR(MT_ERR_FILE, "cannot create %s: %s", tmp, strerror(errno));
  char line[MT_PATH_MAX];
  int len = snprintf(line, sizeof(line), "%s\n", file);
  int ok = len > 0 && write(fd, line, (size_t)len) == (ssize_t)len && fsync(fd) == 0;
  int e = errno;
  if (close(fd) != 0) ok = 0;
  if (!ok) {
    unlink(tmp);
    return MT_ERR(MT_ERR_FILE, "writing %s failed: %s", tmp, strerror(e));
  }
  if (rename(tmp, fin) != 0) {
    e = errno;
    unlink(tmp);
    return MT_ERR(MT_ERR_FILE, "cannot rename %s to %s: %s", tmp, fin, strerror(e));
  }
  return mt_ckpt_sync_path(dir, 1);
}

void mt_ckpt_prune(const char *dir, int keep) {
  for (int kind = 1; kind <= 2; kind++) {
    int64_t *steps = NULL;
    int n = 0;
    if (scan_dir(dir, kind, &steps, &n)) {
      fprintf(stderr, "mpitrain: warning: %s\n", mt_error_message());
      mt_error_clear();
      continue;
    }
    for (int i = kind == 1 ? (keep > 0 ? keep : n) : 0; i < n; i++) {
      char p[MT_PATH_MAX + 16];
      snprintf(p, sizeof(p), "%s/ckpt-%lld.h5%s", dir, (long long)steps[i],
               kind == 2 ? ".tmp" : "");
      if (unlink(p) != 0 && errno != ENOENT)
        fprintf(stderr, "mpitrain: warning: cannot remove old checkpoint %s: %s\n", p,
                strerror(errno));
    }
    free(steps);
  }
}

/* ================================================ the newest good one */

int mt_ckpt_find_latest(MPI_Comm comm, const char *dir, mt_ckpt_check level, char *path,
                        size_t cap, int64_t *step) {
  int rank, n = 0, bad = 0;
  int64_t *steps = NULL;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  MT_CALL(mt_ckpt_list(comm, dir, &steps, &n));
  char p[MT_PATH_MAX], first_bad[MT_PATH_MAX] = "";
  for (int i = 0; i < n; i++) {
    int err = mt_ckpt_path(dir, steps[i], p, sizeof(p));
    if (!err) err = mt_ckpt_verify(comm, p, level);
    if (!err) {
      int64_t s = steps[i];
      mt_free(&steps);
      MT_CHECK(strlen(p) < cap, MT_ERR_ARG, "checkpoint path %s does not fit", p);
      snprintf(path, cap, "%s", p);
      if (step) *step = s;
      if (bad && rank == 0)
        fprintf(stderr, "mpitrain: warning: restarting from the older checkpoint %s\n", p);
      return 0;
    }
    if (rank == 0)
      fprintf(stderr, "mpitrain: warning: skipping a damaged checkpoint: %s\n",
              mt_error_message());
    if (!bad) snprintf(first_bad, sizeof(first_bad), "%s", p);
    bad++;
    mt_error_clear();
  }
  mt_free(&steps);
  if (!n) return MT_ERR(MT_ERR_FILE, "no checkpoint (ckpt-<step>.h5) in %s", dir);
  return MT_ERR(MT_ERR_FILE, "none of the %d checkpoints in %s verifies (the newest, %s, is "
                "damaged)", n, dir, first_bad);
}
