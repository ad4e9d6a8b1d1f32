/* World and per-node communicators. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "comm/comm.h"

#include <sched.h>
#include <string.h>
#include <unistd.h>

int mt_comm_create(mt_comm *c) {
  memset(c, 0, sizeof(*c));
  c->world = c->node = MPI_COMM_NULL;
  MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c->world));
  MT_MPI(MPI_Comm_rank(c->world, &c->rank));
  MT_MPI(MPI_Comm_size(c->world, &c->size));
  MT_MPI(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &c->node));
  MT_MPI(MPI_Comm_rank(c->node, &c->local_rank));
  MT_MPI(MPI_Comm_size(c->node, &c->local_size));
  /* node id: number of node leaders with a lower world rank */
  int leader = c->local_rank == 0, before = 0;
  MT_MPI(MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, c->world));
  if (c->rank == 0) before = 0;
  c->node_id = before;
  MT_MPI(MPI_Bcast(&c->node_id, 1, MPI_INT, 0, c->node));
  MT_MPI(MPI_Allreduce(&leader, &c->nnodes, 1, MPI_INT, MPI_SUM, c->world));
  MT_MPI(MPI_Allreduce(&c->local_size, &c->node_min, 1, MPI_INT, MPI_MIN, c->world));
  MT_MPI(MPI_Allreduce(&c->local_size, &c->node_max, 1, MPI_INT, MPI_MAX, c->world));
  /* the cores this job may use here: sched_getaffinity, so that a Slurm
   * allocation of 4 cores on a 64-core node counts 4 (sysconf counts 64,
   * and 16 threads on each core poll one another to a crawl) */
  cpu_set_t mine, all;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++) CPU_SET((int)i, &mine);
  }
  MT_MPI(MPI_Allreduce(&mine, &all, (int)sizeof(cpu_set_t), MPI_BYTE, MPI_BOR, c->node));
  c->rank_cores = CPU_COUNT(&mine) > 0 ? CPU_COUNT(&mine) : 1;
  c->node_cores = CPU_COUNT(&all) > 0 ? CPU_COUNT(&all) : 1;
  return 0;
}

void mt_comm_destroy(mt_comm *c) {
  if (c->node != MPI_COMM_NULL) MPI_Comm_free(&c->node);
  if (c->world != MPI_COMM_NULL) MPI_Comm_free(&c->world);
}

int mt_comm_default_threads(const mt_comm *c, int requested) {
  if (requested > 0) return requested;
  int t = c->node_cores / (c->local_size > 0 ? c->local_size : 1);
  if (t > c->rank_cores) t = c->rank_cores;
  return t > 0 ? t : 1;
}
