/* Hang guard: a watchdog thread per rank that turns a stall into a clear
 * error naming the step and the ranks that did not arrive, and aborts the
 * job instead of letting it hang until the wall-clock limit.
 *
 * The main thread only records its progress (mt_guard_mark: a few atomic
 * stores, no MPI). The watchdog threads exchange heartbeats on their own
 * communicator (a duplicate of the world's): every rank tells rank 0 where
 * it is (epoch, global step, phase) about every timeout/4 seconds (at most
 * 5 s), and rank 0 tells every rank. When a rank has made no progress for
 * -comm_timeout seconds:
 *   rank 0 names the ranks it has not heard from for a while (stopped,
 *   killed, or cut off) and those behind it (still in an earlier step or
 *   phase), prints one error line and calls MPI_Abort;
 *   another rank does the same when rank 0 itself has gone silent, and
 *   otherwise waits half a timeout more for rank 0 to act before aborting
 *   with what it knows.
 * The heartbeats need MPI_THREAD_MULTIPLE; without it the guard only
 * watches its own rank and cannot name the others.
 *
 * Before it aborts, the firing rank kills (SIGKILL) the ranks on its own
 * host that are stopped (SIGSTOP, state T in /proc): MPI_Abort alone leaves
 * a job with a stopped rank hanging until it is continued. A rank whose
 * watchdog finds it was itself not running for a while (stopped, then
 * continued) forgets what it heard before and blames nobody for that gap.
 * The guard covers the run until MPI_Finalize: mt_guard_finish is a barrier
 * under the guard, so a rank that never reaches the end is named too. */
#ifndef MT_GUARD_H
#define MT_GUARD_H

#include <mpi.h>

typedef enum {
  MT_PHASE_SETUP = 0,
  MT_PHASE_TRAIN,
  MT_PHASE_VALIDATE,
  MT_PHASE_CHECKPOINT,
  MT_PHASE_FINISH,
  MT_PHASE_COUNT_
} mt_guard_phase;

typedef struct mt_guard mt_guard;

/* Collective over world (duplicates it). timeout <= 0: no guard (*g NULL). */
int mt_guard_start(mt_guard **g, MPI_Comm world, double timeout);
/* Progress of the main thread: where it is now. Cheap; g may be NULL. */
void mt_guard_mark(mt_guard *g, int epoch, long step, mt_guard_phase phase);
/* The run's end under the guard: marks MT_PHASE_FINISH and waits in a
 * barrier over world, polled, so that a rank which never arrives is named
 * and the job aborted instead of every other rank waiting in MPI_Finalize.
 * Collective; g NULL: returns at once (no barrier). */
int mt_guard_finish(mt_guard *g, MPI_Comm world);
/* Stops the watchdog and frees the guard (not collective). */
void mt_guard_stop(mt_guard **g);

#endif
