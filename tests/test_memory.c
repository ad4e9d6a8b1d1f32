/* The memory forecast's pieces (trainer/memory.c):
 * - the allocator's plan mode (core/alloc.c): a large block is counted and
 *   not allocated, a small one allocated; an overflowing request and a
 *   failing one are errors naming the buffer and its bytes;
 * - a dry run of each built-in model's setup (mlp, cnn with batch norm and
 *   dropout, gpt, in float and double) counts what the real setup
 *   allocates, within 1% and a page per block;
 * - the parameter table refuses a size that overflows;
 * - the cgroup limit (core/sysmem.c) from fake /proc/self/cgroup files and
 *   cgroup trees: v2 memory.max of the process's cgroup or a parent ("max":
 *   none), the root's when the path is not visible (a container), v1
 *   memory.limit_in_bytes (its huge "no limit"), none at all. */
#include "core/core.h"
#include "models/models.h"
#include "model_hparams.h"
#include "testutil.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static void plan_mode(void) {
  char *big = (char *)1, *small = NULL;
  size_t before = mt_alloc_bytes();
  mt_alloc_plan_begin();
  int rc = mt_calloc(&big, 1 << 20, 4, "a big block");
  int rc2 = mt_calloc(&small, 100, 1, "a small block");
  size_t planned = mt_alloc_plan_end();
  CHECK(rc == 0 && big == NULL, "plan mode: a 4 MiB block is not allocated (rc %d)", rc);
  CHECK(rc2 == 0 && small != NULL, "plan mode: a 100-byte block is allocated");
  CHECK(planned >= (4u << 20) + 100 && planned < (4u << 20) + 4096,
        "plan mode: %zu bytes counted for 4 MiB + 100", planned);
  mt_free(&small);
  mt_free(&big);
  CHECK(mt_alloc_bytes() == before, "plan mode: the counter is back where it was");
  rc = mt_calloc(&big, 1 << 20, 4, "a big block");
  CHECK(rc == 0 && big != NULL && big[(4 << 20) - 1] == 0, "after the plan: allocated, zeroed");
  mt_free(&big);

  rc = mt_calloc(&big, SIZE_MAX / 8, 16, "the overflowing buffer");
  CHECK(rc == MT_ERR_MEM && strstr(mt_error_message(), "the overflowing buffer") &&
            strstr(mt_error_message(), "overflows"),
        "an overflowing size is refused naming the buffer: %s", mt_error_message());
  mt_error_clear();
  rc = mt_calloc(&big, (size_t)1 << 62, 1, "the impossible buffer");
  CHECK(rc == MT_ERR_MEM && strstr(mt_error_message(), "the impossible buffer") &&
            strstr(mt_error_message(), "4611686018427387904 bytes"),
        "a failed allocation names the buffer and its bytes: %s", mt_error_message());
  mt_error_clear();
}

/* A dry run of model name's setup against the real one. */
static void model_plan(const char *what, const char *name, const mt_model_hparams *hp,
                       const mt_data_spec *sp, int batch, mt_dtype dt) {
  mt_model *m = NULL;
  size_t a0 = mt_alloc_bytes();
  mt_alloc_plan_begin();
  int rc = mt_model_create_hp(name, hp, sp, batch, dt, &m);
  double dry = (double)mt_alloc_plan_end();
  size_t np = rc ? 0 : m->params.total;
  mt_model_destroy(&m);
  CHECK(rc == 0, "%s: the dry run of its setup (%s)", what, rc ? mt_error_message() : "ok");
  mt_error_clear();
  CHECK(mt_alloc_bytes() == a0, "%s: the dry model gives back what it allocated", what);
  a0 = mt_alloc_bytes();
  rc = mt_model_create_hp(name, hp, sp, batch, dt, &m);
  double real = (double)(mt_alloc_bytes() - a0);
  CHECK(rc == 0 && m->params.total == np, "%s: the real model, %zu parameters", what, np);
  mt_model_destroy(&m);
  double d = dry - real < 0 ? real - dry : dry - real;
  CHECK(real > (1 << 20) && d <= 0.01 * real + 64 * 4096.0,
        "%s: the dry run counts %.0f bytes, the setup allocates %.0f", what, dry, real);
}

static void models(void) {
  const int hid[2] = {512, 256};
  mt_data_spec flat = {.ndim = 1, .shape = {784}, .sample_numel = 784, .nclasses = 10};
  mt_model_hparams h = mlp_hp(hid, 2, 0.0);
  model_plan("mlp", "mlp", &h, &flat, 256, MT_FP32);
  h = mlp_hp(hid, 2, 0.3);
  model_plan("mlp with dropout, fp64", "mlp", &h, &flat, 128, MT_FP64);
  const int ch[2] = {8, 16};
  mt_data_spec img = {.ndim = 3, .shape = {1, 28, 28}, .sample_numel = 784, .nclasses = 10};
  h = cnn_hp(ch, 2, 3, 64, 1, 0.25);
  model_plan("cnn with batch norm and dropout", "cnn", &h, &img, 32, MT_FP32);
  h = cnn_hp(ch, 2, 3, 64, 0, 0.0);
  model_plan("cnn, fp64", "cnn", &h, &img, 32, MT_FP64);
  mt_data_spec tok = {.ndim = 1, .shape = {32}, .sample_numel = 32, .nclasses = 256, .tokens = 1};
  h = gpt_hp(2, 2, 64, 32, 1, 0.1);
  model_plan("gpt with dropout", "gpt", &h, &tok, 8, MT_FP32);
}

static void table_overflow(void) {
  mt_param_table t = {0};
  const int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  int rc = mt_param_table_add(&t, "w", 2, huge, 0);
  CHECK(rc != 0 && strstr(mt_error_message(), "overflow"),
        "a tensor of 2^40 x 2^40 elements is refused: %s", mt_error_message());
  mt_error_clear();
  const int64_t big[1] = {INT64_C(1) << 57};
  rc = mt_param_table_add(&t, "a", 1, big, 0);
  int rc2 = rc ? 0 : mt_param_table_add(&t, "b", 1, big, 0);
  CHECK(rc == 0 && rc2 != 0 && strstr(mt_error_message(), "overflow"),
        "two tensors of 2^57 elements overflow the layout: %s", mt_error_message());
  mt_error_clear();
  mt_param_table_free(&t);
}

/* ------------------------------------------------------------- cgroups */

static char root_[512];

static void put(const char *rel, const char *text) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", root_, rel);
  for (char *s = path + strlen(root_) + 1; (s = strchr(s, '/')); s++) {
    *s = '\0';
    mkdir(path, 0700);
    *s = '/';
  }
  FILE *f = fopen(path, "w");
  if (!f) tu_fatal("cannot write", path);
  fputs(text, f);
  fclose(f);
}

static double limit(const char *proc, const char *tree) {
  char p[1024], r[1024];
  snprintf(p, sizeof(p), "%s/%s", root_, proc);
  snprintf(r, sizeof(r), "%s/%s", root_, tree);
  return mt_sys_cgroup_limit(p, r);
}

static void cgroups(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(root_, sizeof(root_), "%s/test_memory.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(root_)) tu_fatal("mkdtemp failed", root_);
  const double G = 1024.0 * 1024.0 * 1024.0;
  /* v2: the process's cgroup, a parent, the root */
  put("p1", "0::/job/step\n");
  put("a/job/step/memory.max", "1073741824\n");
  put("a/job/memory.max", "max\n");
  CHECK(limit("p1", "a") == G, "v2: memory.max of the process's cgroup: %.0f", limit("p1", "a"));
  put("b/job/step/memory.max", "max\n");
  put("b/job/memory.max", "536870912\n");
  CHECK(limit("p1", "b") == G / 2, "v2: a parent's smaller limit binds");
  put("c/memory.max", "2147483648\n"); /* a container: /job/step not visible */
  CHECK(limit("p1", "c") == 2 * G, "v2: the root's limit when the path is not visible");
  put("d/unified/job/step/memory.max", "3221225472\n"); /* hybrid */
  CHECK(limit("p1", "d") == 3 * G, "v2 in a hybrid tree: unified/");
  put("e/job/step/memory.max", "max\n");
  CHECK(limit("p1", "e") == 0, "v2: max is no limit");
  /* v1: the memory controller, alone or with others */
  put("p2", "5:cpu,cpuacct:/x\n4:memory:/job\n0::/\n");
  put("f/memory/job/memory.limit_in_bytes", "4294967296\n");
  CHECK(limit("p2", "f") == 4 * G, "v1: memory.limit_in_bytes: %.0f", limit("p2", "f"));
  put("g/memory/memory.limit_in_bytes", "9223372036854771712\n");
  CHECK(limit("p2", "g") == 0, "v1: the huge page-rounded value is no limit");
  put("p3", "7:cpuset:/\n3:memory,hugetlb:/job\n");
  CHECK(limit("p3", "f") == 4 * G, "v1: memory among other controllers");
  CHECK(limit("p3", "nothing") == 0 && limit("missing", "f") == 0,
        "no cgroup files: no limit");
  CHECK(mt_sys_node_memory() > 0, "the node's memory: %.0f MiB", mt_sys_node_memory() / 1048576);
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root_);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", root_);
}

/* Under AddressSanitizer (scripts/check.sh's second build) an impossible
 * allocation must come back NULL, as it does from glibc, for the check of
 * its message above; ASan aborts instead unless told so. Not called in
 * other builds. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

int main(void) {
  plan_mode();
  models();
  table_overflow();
  cgroups();
  return tu_finish("test_memory");
}
