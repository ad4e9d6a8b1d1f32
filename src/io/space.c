/* Room for a file before it is written (see space.h). */
#define _GNU_SOURCE
#include "io/space.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

/* Whether errno e is the file system's (full, quota, I/O, read-only). */
static int errno_is_storage(int e) {
  return e == ENOSPC || e == EDQUOT || e == EIO || e == EFBIG || e == EROFS;
}

int mt_write_failed(const char *file, int line, const char *func, const char *what,
                    const char *path, int e) {
  return mt_error_set(file, line, func, errno_is_storage(e) ? MT_ERR_WRITE : MT_ERR_FILE,
                      "%s %s: %s", what, path, strerror(e));
}

/* The free bytes of the file system that holds path (UINT64_MAX: unknown). */
static uint64_t free_bytes(const char *path) {
  struct statvfs sv;
  if (statvfs(path, &sv) != 0) return UINT64_MAX;
  return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

static int no_room(const char *path, uint64_t bytes, uint64_t avail, int e) {
  char have[64] = "";
  if (avail != UINT64_MAX) snprintf(have, sizeof(have), ", %.2f MiB free", (double)avail / MIB);
  return MT_ERR(MT_ERR_WRITE, "writing %s: %s (it needs %.2f MiB%s)", path, strerror(e),
                (double)bytes / MIB, have);
}

/* The folder that holds path, in buf. */
static const char *folder_of(const char *path, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", path);
  char *slash = strrchr(buf, '/');
  if (!slash) return ".";
  if (slash == buf) slash[1] = '\0';
  else *slash = '\0';
  return buf;
}

int mt_space_reserve(const char *path, uint64_t bytes) {
  if (!bytes) return 0;
  int fd = open(path, O_WRONLY);
  if (fd < 0 && errno == ENOENT) { /* not made yet: the room only */
    char dir[MT_PATH_MAX];
    uint64_t avail = free_bytes(folder_of(path, dir, sizeof(dir)));
    return avail != UINT64_MAX && bytes > avail ? no_room(path, bytes, avail, ENOSPC) : 0;
  }
  if (fd < 0) return MT_WRITE_FAILED("cannot open", path, errno);
  struct stat sb;
  uint64_t have = fstat(fd, &sb) == 0 && sb.st_size > 0 ? (uint64_t)sb.st_size : 0;
  uint64_t avail = free_bytes(path);
  int err = 0;
  /* what is written over the file's present bytes needs no new room */
  if (avail != UINT64_MAX && bytes > have && bytes - have > avail)
    err = no_room(path, bytes, avail, ENOSPC);
  /* the blocks themselves: a later write into them cannot run out */
  if (!err && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) != 0) {
    const int e = errno;
    if (e != EOPNOTSUPP && e != ENOSYS && e != EINVAL) err = no_room(path, bytes, avail, e);
  }
  close(fd);
  return err;
}

void mt_space_release(const char *path) {
  int fd = open(path, O_WRONLY);
  if (fd < 0) return;
  struct stat sb;
  if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_blocks * 512 > (uint64_t)sb.st_size)
    /* the reserved blocks past the end; the length only has to cover them */
    (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, sb.st_size,
                    (off_t)sb.st_blocks * 512);
  close(fd);
}
