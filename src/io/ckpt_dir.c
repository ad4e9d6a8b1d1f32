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

/* The words for an errno that makes a folder unwritable, or NULL. */
static const char *unwritable(int e) {
  return e == EROFS ? "read-only file system"
         : e == EACCES || e == EPERM ? "permission denied" : NULL;
}

int mt_ckpt_mkdir_p(const char *dir) {
  char buf[MT_PATH_MAX];
  int k = snprintf(buf, sizeof(buf), "%s", dir);
  MT_CHECK(k > 0 && (size_t)k < sizeof(buf), MT_ERR_ARG,
           "checkpoint directory name too long (%d characters, at most %d): %.200s...", k,
           MT_PATH_MAX - 1, dir);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char c = *p;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
      int e = errno;
      if (unwritable(e))
        return MT_ERR(MT_ERR_FILE, "checkpoint directory %s is not writable (%s): cannot create %s",
                      dir, unwritable(e), buf);
      return MT_ERR(MT_ERR_FILE, "checkpoint directory %s: cannot create %s: %s", dir, buf,
                    strerror(e));
    }
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

/* The run_id attribute of checkpoint path into id ("" when it has none: a
 * file older than run ids); -1 when path is not a readable checkpoint
 * (not HDF5, truncated, no format attribute). A serial open, rank 0. */
static int file_run_id(const char *path, char *id, size_t cap) {
  int rc = -1;
  id[0] = '\0';
  mt_h5_lock();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f >= 0) {
    htri_t ex = H5Aexists(f, "format") > 0 ? H5Aexists(f, "run_id") : -1;
    char *v = NULL;
    if (ex == 0) {
      rc = 0;
    } else if (ex > 0 && mt_ckpt_attr_read_str(f, "run_id", &v) == 0) {
      snprintf(id, cap, "%s", v);
      free(v);
      rc = 0;
    }
    H5Fclose(f);
  }
  mt_h5_unlock();
  if (rc) mt_error_clear();
  return rc;
}

/* Unreadable files are named once per process, not at every checkpoint;
 * past the table's size they are still left alone, silently. */
static uint64_t warned_[64];
static int nwarned_;

static void warn_unreadable(const char *path) {
  uint64_t h = mt_hash_bytes(path, strlen(path), 0);
  for (int i = 0; i < nwarned_; i++)
    if (warned_[i] == h) return;
  if (nwarned_ == (int)(sizeof(warned_) / sizeof(warned_[0]))) return;
  warned_[nwarned_++] = h;
  fprintf(stderr, "mpitrain: warning: %s is not a readable checkpoint: it is never removed, nor "
          "counted among the kept\n", path);
}

void mt_ckpt_prune(const char *dir, int keep, const char *run_id, int64_t written) {
  /* the checkpoints: only this run's (keep-K counts the step numbers of
   * this run alone; another run's files in DIR say nothing about ours) */
  int64_t *steps = NULL;
  int n = 0;
  if (keep > 0 && run_id && run_id[0] && scan_dir(dir, 1, &steps, &n)) {
    fprintf(stderr, "mpitrain: warning: %s\n", mt_error_message());
    mt_error_clear();
  }
  for (int i = 0, kept = 1 /* the one just written */; i < n; i++) {
    char p[MT_PATH_MAX + 16], id[64];
    if (steps[i] == written) continue;
    snprintf(p, sizeof(p), "%s/ckpt-%lld.h5", dir, (long long)steps[i]);
    if (file_run_id(p, id, sizeof(id))) {
      warn_unreadable(p);
      continue;
    }
    if (strcmp(id, run_id)) continue; /* another run's, or older than run ids */
    if (kept < keep) {
      kept++;
      continue;
    }
    if (unlink(p) != 0 && errno != ENOENT)
      fprintf(stderr, "mpitrain: warning: cannot remove old checkpoint %s: %s\n", p,
              strerror(errno));
  }
  free(steps);
  /* stale temporaries of crashed saves: never complete, never a restart's */
  if (scan_dir(dir, 2, &steps, &n)) {
    fprintf(stderr, "mpitrain: warning: %s\n", mt_error_message());
    mt_error_clear();
    return;
  }
  for (int i = 0; i < n; i++) {
    char p[MT_PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/ckpt-%lld.h5.tmp", dir, (long long)steps[i]);
    if (unlink(p) != 0 && errno != ENOENT)
      fprintf(stderr, "mpitrain: warning: cannot remove the stale %s: %s\n", p, strerror(errno));
  }
  free(steps);
}

/* ============================================================ at start */

/* Rank 0: DIR is writable: access() and a probe file, since access() alone
 * does not see every read-only mount (and root passes its mode checks). */
static int check_writable(const char *dir) {
  int e = 0;
  if (access(dir, W_OK) != 0) {
    e = errno;
  } else {
    char p[MT_PATH_MAX + 48];
    snprintf(p, sizeof(p), "%s/.mpitrain-probe-%ld", dir, (long)getpid());
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      e = errno;
    } else {
      close(fd);
      unlink(p);
    }
  }
  if (!e) return 0;
  if (unwritable(e))
    return MT_ERR(MT_ERR_FILE, "checkpoint directory %s is not writable (%s)", dir, unwritable(e));
  return MT_ERR(MT_ERR_FILE, "checkpoint directory %s: cannot write a file in it: %s", dir,
                strerror(e));
}

/* Rank 0: removes DIR's checkpoints of kind (1: complete, 2: .tmp). */
static int remove_all(const char *dir, int kind) {
  int64_t *steps = NULL;
  int n = 0, err = scan_dir(dir, kind, &steps, &n);
  for (int i = 0; !err && i < n; i++) {
    char p[MT_PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/ckpt-%lld.h5%s", dir, (long long)steps[i], kind == 2 ? ".tmp" : "");
    if (unlink(p) != 0 && errno != ENOENT)
      err = MT_ERR(MT_ERR_FILE, "option -checkpoint_overwrite: cannot remove %s: %s", p,
                   strerror(errno));
  }
  free(steps);
  return err;
}

static int prepare(const char *dir, int fresh, int overwrite) {
  MT_CALL(mt_ckpt_mkdir_p(dir));
  MT_CALL(check_writable(dir));
  if (!fresh) return 0;
  int64_t *steps = NULL;
  int n = 0;
  MT_CALL(scan_dir(dir, 1, &steps, &n));
  if (!n) return 0;
  char names[96];
  if (n == 1)
    snprintf(names, sizeof(names), "ckpt-%lld.h5", (long long)steps[0]);
  else
    snprintf(names, sizeof(names), "ckpt-%lld.h5 and %d more", (long long)steps[0], n - 1);
  free(steps);
  if (!overwrite)
    return MT_ERR(MT_ERR_OPTION,
                  "checkpoint directory %s already holds %d checkpoint%s of an earlier run (%s), "
                  "and this run starts fresh (-restart none): continue that run with -restart "
                  "auto, or write to another -checkpoint_dir (or -output_dir), or remove them "
                  "with -checkpoint_overwrite", dir, n, n == 1 ? "" : "s", names);
  MT_CALL(remove_all(dir, 1));
  MT_CALL(remove_all(dir, 2));
  char latest[MT_PATH_MAX + 16];
  snprintf(latest, sizeof(latest), "%s/latest", dir);
  if (unlink(latest) != 0 && errno != ENOENT)
    return MT_ERR(MT_ERR_FILE, "option -checkpoint_overwrite: cannot remove %s: %s", latest,
                  strerror(errno));
  mt_print0("-checkpoint_overwrite: removed the %d checkpoint%s of an earlier run in %s (%s)\n",
            n, n == 1 ? "" : "s", dir, names);
  return 0;
}

int mt_ckpt_dir_prepare(MPI_Comm comm, const char *dir, int fresh, int overwrite) {
  int rank;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  return mt_agree(comm, rank == 0 ? prepare(dir, fresh, overwrite) : 0);
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
