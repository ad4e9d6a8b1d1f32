/* The hang guard's watchdog (see guard.h). */
#include "comm/guard.h"
#include "core/core.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG_HEARTBEAT 7101
#define TAG_FIRED 7102 /* "I am aborting the job": the others stay quiet */
#define HB_N 4 /* epoch, step, phase, progress counter */

static const char *const phase_name[MT_PHASE_COUNT_] = {"set-up", "training", "validation",
                                                         "checkpoint", "finishing"};

struct mt_guard {
  MPI_Comm comm;
  int rank, size, multiple;
  double timeout, period;
  /* the main thread's progress */
  _Atomic long epoch, step, phase, count;
  _Atomic double since; /* mt_now() of the last change                   */
  _Atomic int quit;
  pthread_t th;
  int has_thread;
  /* the watchdog waits its period on wake, so that stopping it does not
   * wait out a period (up to 5 s at the end of every run) */
  pthread_mutex_t mu;
  pthread_cond_t wake;
  int has_wake;
  /* the watchdog's view of the others (rank 0: all; others: rank 0) */
  double *heard;        /* mt_now() of the last heartbeat from each rank  */
  long (*state)[HB_N];  /* their last (epoch, step, phase, count)         */
  long out[HB_N];       /* the heartbeat being sent                       */
  MPI_Request *sends;
  /* the ranks on this host: their world ranks and pids (kill_stopped) */
  int nlocal;
  int *local_rank, *local_pid;
  /* another rank fired (TAG_FIRED): who, when */
  int fired_by;
  double fired_at;
  int fired_msg;
};

void mt_guard_mark(mt_guard *g, int epoch, long step, mt_guard_phase phase) {
  if (!g) return;
  atomic_store(&g->epoch, epoch);
  atomic_store(&g->step, step);
  atomic_store(&g->phase, (long)phase);
  atomic_fetch_add(&g->count, 1);
  atomic_store(&g->since, mt_now());
}

/* Waits s seconds or until mt_guard_stop, whichever comes first. */
static void wait_period(mt_guard *g, double s) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + s;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - floor(t)) * 1e9);
  pthread_mutex_lock(&g->mu);
  while (!atomic_load(&g->quit) && pthread_cond_timedwait(&g->wake, &g->mu, &ts) == 0) {
  }
  pthread_mutex_unlock(&g->mu);
}

/* Heartbeats out: rank 0 to every rank, the others to rank 0. A send that
 * has not completed (its receiver stopped) is not repeated. */
static void send_heartbeats(mt_guard *g) {
  int done = 1;
  for (int r = 0; r < g->size; r++) {
    if (g->sends[r] == MPI_REQUEST_NULL) continue;
    int flag = 0;
    MPI_Test(&g->sends[r], &flag, MPI_STATUS_IGNORE);
    done &= flag;
  }
  if (!done) return; /* out[] is still in use */
  g->out[0] = atomic_load(&g->epoch);
  g->out[1] = atomic_load(&g->step);
  g->out[2] = atomic_load(&g->phase);
  g->out[3] = atomic_load(&g->count);
  for (int r = 0; r < g->size; r++)
    if (r != g->rank && (g->rank == 0 || r == 0))
      MPI_Isend(g->out, HB_N, MPI_LONG, r, TAG_HEARTBEAT, g->comm, &g->sends[r]);
}

static void receive_heartbeats(mt_guard *g) {
  int flag = 0;
  MPI_Status fs;
  if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_FIRED, g->comm, &flag, &fs) == MPI_SUCCESS && flag) {
    int dummy;
    MPI_Recv(&dummy, 1, MPI_INT, fs.MPI_SOURCE, TAG_FIRED, g->comm, MPI_STATUS_IGNORE);
    g->fired_by = fs.MPI_SOURCE;
    g->fired_at = mt_now();
  }
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_HEARTBEAT, g->comm, &flag, &st) != MPI_SUCCESS || !flag) return;
    long in[HB_N];
    MPI_Recv(in, HB_N, MPI_LONG, st.MPI_SOURCE, TAG_HEARTBEAT, g->comm, MPI_STATUS_IGNORE);
    memcpy(g->state[st.MPI_SOURCE], in, sizeof(in));
    g->heard[st.MPI_SOURCE] = mt_now();
  }
}

/* Appends "r (why)" for each rank that looks absent or behind. */
static int name_missing(const mt_guard *g, double now, char *buf, size_t len) {
  const long e = atomic_load(&g->epoch), s = atomic_load(&g->step), p = atomic_load(&g->phase);
  const double silent = fmax(2.5 * g->period, 0.5 * g->timeout);
  int n = 0;
  size_t k = 0;
  buf[0] = '\0';
  for (int r = 0; r < g->size && k + 96 < len; r++) {
    if (r == g->rank || (g->rank != 0 && r != 0)) continue;
    const long *q = g->state[r];
    double quiet = now - g->heard[r];
    if (quiet > silent)
      k += (size_t)snprintf(buf + k, len - k, "%s%d (silent for %.0f s: stopped, dead or cut off)",
                            n++ ? ", " : "", r, quiet);
    else if (q[0] != e || q[1] != s || q[2] != p)
      k += (size_t)snprintf(buf + k, len - k, "%s%d (at epoch %ld, global step %ld, %s)",
                            n++ ? ", " : "", r, q[0] + 1, q[1],
                            q[2] >= 0 && q[2] < MT_PHASE_COUNT_ ? phase_name[q[2]] : "?");
  }
  return n;
}

/* 1 when process pid is stopped (SIGSTOP, SIGTSTP, a tracer): state T or
 * t in /proc/pid/stat, the character after the ") " that ends its name. */
static int is_stopped(int pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

/* SIGKILLs the stopped ranks on this host and lists them in buf. A stopped
 * process ignores everything but SIGKILL and SIGCONT: MPI_Abort's
 * termination (Open MPI 4.1: SIGCONT, 1 s, SIGTERM, 1 s, SIGKILL to its
 * own ranks) did not end such a job here while the rank stayed stopped, and
 * the firing rank is the one that knows. */
static int kill_stopped(const mt_guard *g, char *buf, size_t len) {
  int n = 0;
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; i < g->nlocal && k + 16 < len; i++) {
    const int r = g->local_rank[i], pid = g->local_pid[i];
    if (r == g->rank || pid <= 0 || !is_stopped(pid) || kill(pid, SIGKILL) != 0) continue;
    k += (size_t)snprintf(buf + k, len - k, "%s%d", n++ ? ", " : "", r);
  }
  return n;
}

static void fire(mt_guard *g, double stuck, const char *who) {
  char killed[256];
  const int n = kill_stopped(g, killed, sizeof(killed));
  fprintf(stderr,
          "mpitrain: error: hang guard (rank %d): no progress for %.0f s (-comm_timeout %g) at "
          "epoch %ld, global step %ld, %s; %s%s%s%s\n",
          g->rank, stuck, g->timeout, atomic_load(&g->epoch) + 1, atomic_load(&g->step),
          phase_name[atomic_load(&g->phase)], who, n ? "; killed the stopped rank" : "",
          n > 1 ? "s " : n ? " " : "", n ? killed : "");
  fflush(stderr);
  /* the others would print lines of their own while the abort takes its
   * seconds (one blaming this rank, alive but no longer sending) */
  for (int r = 0; g->multiple && r < g->size; r++) {
    MPI_Request req;
    if (r != g->rank && MPI_Isend(&g->fired_msg, 1, MPI_INT, r, TAG_FIRED, g->comm, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
  }
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void *watchdog(void *arg) {
  mt_guard *g = arg;
  char who[2048], list[1800];
  double last = mt_now();
  while (!atomic_load(&g->quit)) {
    wait_period(g, g->period);
    if (atomic_load(&g->quit)) break;
    const double now = mt_now();
    if (now - last > g->period + 0.5 * g->timeout) {
      /* this process was not running (stopped, then continued): the
       * silence it sees is its own; start counting again from now */
      for (int r = 0; r < g->size; r++) g->heard[r] = now;
      atomic_store(&g->since, now);
    }
    last = now;
    if (g->multiple) {
      send_heartbeats(g);
      receive_heartbeats(g);
    }
    const double stuck = now - atomic_load(&g->since);
    if (stuck <= g->timeout) continue;
    if (g->fired_by >= 0 && now - g->fired_at < g->timeout) continue; /* its abort is under way */
    if (g->fired_by >= 0) {
      snprintf(who, sizeof(who), "rank %d aborted the job %.0f s ago, but it goes on", g->fired_by,
               now - g->fired_at);
      fire(g, stuck, who);
    } else if (!g->multiple) {
      fire(g, stuck, "the other ranks cannot be named (MPI without MPI_THREAD_MULTIPLE)");
    } else if (g->rank == 0) {
      int n = name_missing(g, now, list, sizeof(list));
      if (n)
        snprintf(who, sizeof(who), "rank%s that did not arrive: %s", n > 1 ? "s" : "", list);
      else
        snprintf(who, sizeof(who), "every rank is alive at the same step: a collective that "
                 "does not complete (MPI or network trouble)");
      fire(g, stuck, who);
    } else if (name_missing(g, now, list, sizeof(list)) && strstr(list, "silent")) {
      snprintf(who, sizeof(who), "rank that did not arrive: %s", list);
      fire(g, stuck, who);
    } else if (stuck > 1.5 * g->timeout) { /* rank 0 lives but did not act */
      fire(g, stuck, "rank 0 is alive but did not name the missing ranks");
    }
  }
  return NULL;
}

int mt_guard_start(mt_guard **out, MPI_Comm world, double timeout) {
  *out = NULL;
  if (timeout <= 0) return 0;
  int level = MPI_THREAD_SINGLE;
  MT_MPI(MPI_Query_thread(&level));
  const int thread_multiple = level >= MPI_THREAD_MULTIPLE;
  mt_guard *g;
  MT_CALL(mt_calloc(&g, 1, sizeof(*g), "hang guard"));
  MT_MPI(MPI_Comm_dup(world, &g->comm));
  MPI_Comm_rank(g->comm, &g->rank);
  MPI_Comm_size(g->comm, &g->size);
  g->multiple = thread_multiple && g->size > 1;
  g->timeout = timeout;
  g->period = fmin(fmax(timeout / 4.0, 0.05), 5.0);
  g->fired_by = -1;
  MT_CALL(mt_calloc(&g->heard, (size_t)g->size, sizeof(double), "hang guard"));
  MT_CALL(mt_calloc(&g->state, (size_t)g->size, sizeof(*g->state), "hang guard"));
  MT_CALL(mt_calloc(&g->sends, (size_t)g->size, sizeof(MPI_Request), "hang guard"));
  const double now = mt_now();
  for (int r = 0; r < g->size; r++) {
    g->heard[r] = now;
    g->sends[r] = MPI_REQUEST_NULL;
  }
  atomic_store(&g->since, now);
  *out = g;
  /* the pids of the ranks on this host, for kill_stopped */
  MPI_Comm node;
  MT_MPI(MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &node));
  MPI_Comm_size(node, &g->nlocal);
  int err = mt_calloc(&g->local_rank, (size_t)g->nlocal, sizeof(int), "hang guard");
  if (!err) err = mt_calloc(&g->local_pid, (size_t)g->nlocal, sizeof(int), "hang guard");
  const int pid = (int)getpid();
  if (!err && (MPI_Allgather(&g->rank, 1, MPI_INT, g->local_rank, 1, MPI_INT, node) != MPI_SUCCESS ||
               MPI_Allgather(&pid, 1, MPI_INT, g->local_pid, 1, MPI_INT, node) != MPI_SUCCESS))
    err = MT_ERR(MT_ERR_MPI, "hang guard: cannot gather the pids of this host's ranks");
  MPI_Comm_free(&node);
  MT_CALL(err);
  pthread_condattr_t ca;
  MT_CHECK(pthread_condattr_init(&ca) == 0 && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
               pthread_cond_init(&g->wake, &ca) == 0,
           MT_ERR_STATE, "cannot make the hang guard's condition variable");
  pthread_condattr_destroy(&ca);
  MT_CHECK(pthread_mutex_init(&g->mu, NULL) == 0, MT_ERR_STATE,
           "cannot make the hang guard's mutex");
  g->has_wake = 1;
  MT_CHECK(pthread_create(&g->th, NULL, watchdog, g) == 0, MT_ERR_STATE,
           "cannot start the hang guard's thread");
  g->has_thread = 1;
  return 0;
}

int mt_guard_finish(mt_guard *g, MPI_Comm world) {
  if (!g) return 0;
  mt_guard_mark(g, (int)atomic_load(&g->epoch), atomic_load(&g->step), MT_PHASE_FINISH);
  MPI_Request req;
  MT_MPI(MPI_Ibarrier(world, &req));
  const struct timespec ms = {0, 1000000};
  for (int done = 0; !done;) {
    MT_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (!done) nanosleep(&ms, NULL);
  }
  return 0;
}

void mt_guard_stop(mt_guard **pg) {
  mt_guard *g = *pg;
  if (!g) return;
  if (g->has_wake) pthread_mutex_lock(&g->mu);
  atomic_store(&g->quit, 1);
  if (g->has_wake) {
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->mu);
  }
  if (g->has_thread) pthread_join(g->th, NULL);
  if (g->has_wake) {
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->mu);
  }
  for (int r = 0; g->sends && r < g->size; r++) {
    int flag = 0;
    if (g->sends[r] == MPI_REQUEST_NULL) continue;
    MPI_Test(&g->sends[r], &flag, MPI_STATUS_IGNORE);
    if (!flag) MPI_Request_free(&g->sends[r]); /* delivered in the background */
  }
  if (g->comm != MPI_COMM_NULL && g->comm) MPI_Comm_free(&g->comm);
  mt_free(&g->heard);
  mt_free(&g->state);
  mt_free(&g->sends);
  mt_free(&g->local_rank);
  mt_free(&g->local_pid);
  mt_free(pg);
}
