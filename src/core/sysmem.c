/* The memory a rank can really have: the node's physical memory and the
 * limit of the process's cgroup (trainer/memory.c's default for
 * -memory_limit_mb). */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A limit file's value in bytes, or 0 when it is absent, unreadable or
 * says none ("max" in v2; v1 says none with a huge page-rounded number). */
static double read_limit(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char buf[64] = "";
  char *ok = fgets(buf, sizeof(buf), f);
  fclose(f);
  if (!ok || !strncmp(buf, "max", 3)) return 0;
  char *end;
  double v = strtod(buf, &end);
  if (end == buf || v <= 0 || v >= 0x1p60) return 0;
  return v;
}

/* The smallest limit named file in base/path and each folder above it up
 * to base itself (a parent's limit binds its children; in a container the
 * process's path is often not visible and base is its cgroup). */
static double walk(const char *base, const char *path, const char *file, double best) {
  char dir[MT_PATH_MAX], full[MT_PATH_MAX + 64];
  snprintf(dir, sizeof(dir), "%s", path);
  for (;;) {
    size_t n = strlen(dir);
    while (n > 0 && dir[n - 1] == '/') dir[--n] = '\0';
    snprintf(full, sizeof(full), "%s%s%s/%s", base, dir[0] == '/' || !n ? "" : "/", dir, file);
    double v = read_limit(full);
    if (v > 0 && (best <= 0 || v < best)) best = v;
    if (!n) break;
    char *slash = strrchr(dir, '/');
    if (slash)
      *slash = '\0';
    else
      dir[0] = '\0';
  }
  return best;
}

double mt_sys_cgroup_limit(const char *proc_cgroup, const char *root) {
  FILE *f = fopen(proc_cgroup, "r");
  if (!f) return 0;
  char line[MT_PATH_MAX + 128], base[MT_PATH_MAX + 32];
  double best = 0;
  while (fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    /* hierarchy-id:controllers:path */
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c1 = *c2 = '\0';
    const char *ctl = c1 + 1, *path = c2 + 1;
    if (!strcmp(line, "0") && !ctl[0]) { /* v2: unified, or hybrid's unified/ */
      snprintf(base, sizeof(base), "%s", root);
      best = walk(base, path, "memory.max", best);
      snprintf(base, sizeof(base), "%s/unified", root);
      best = walk(base, path, "memory.max", best);
      continue;
    }
    int memory = 0; /* v1: the memory controller, alone or with others */
    char ctls[256];
    snprintf(ctls, sizeof(ctls), "%s", ctl);
    char *save = NULL;
    for (char *tok = strtok_r(ctls, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
      memory |= !strcmp(tok, "memory");
    if (!memory) continue;
    snprintf(base, sizeof(base), "%s/memory", root);
    best = walk(base, path, "memory.limit_in_bytes", best);
  }
  fclose(f);
  return best;
}

double mt_sys_node_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}
