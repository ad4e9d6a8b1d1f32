/* mpitrain's program, in the library so a user's own executable can
 * register models and backends and then run it: initialize, read options,
 * create, run, destroy, finalize. */
#include "comm/comm.h"
#include "config/mt_config.h"
#include "cuda/device.h"
#include "core/core.h"
#include "io/io.h"
#include "nn/gemm_matmul.h"
#include "trainer/mode.h"
#include "trainer/trainer.h"

#include <omp.h>
#include <petscsys.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "mpitrain: data-parallel training of neural networks on HDF5 data.\n"
    "  mpirun -np 2 mpitrain -backend ddp -data_train train.h5 -data_val test.h5 -epochs 5\n"
    "  mpirun -np 2 mpitrain -mode evaluate -model_file model_final.h5 -data_val test.h5\n"
    "  mpirun -np 2 mpitrain -mode predict -model_file model_final.h5 -data new.h5\n"
    "  mpitrain -mode generate -model_file model_final.h5 -prompt \"Once\" -max_new_tokens 100\n"
    "Options come from the command line, -options_file FILE and PETSC_OPTIONS.\n\n";

/* mpitrain -version (or --version): mpitrain's version and the libraries'
 * it runs with, on rank 0; PETSc would print only its own, so this is
 * answered before PetscInitialize. */
static void print_version(void) {
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = "", dev[256];
  int n = 0, major = 0, minor = 0;
  unsigned hmaj = 0, hmin = 0, hrel = 0;
  if (MPI_Get_library_version(mpi, &n) != MPI_SUCCESS) snprintf(mpi, sizeof(mpi), "unknown");
  mpi[strcspn(mpi, "\n")] = '\0'; /* its first line: Open MPI's goes on for several */
  MPI_Get_version(&major, &minor);
  H5get_libversion(&hmaj, &hmin, &hrel);
  mt_device_versions(dev, sizeof(dev));
  printf("mpitrain %s\n  PETSc %d.%d.%d\n  HDF5 %u.%u.%u\n  MPI %d.%d: %s\n%s%s%s",
         MPITRAIN_VERSION, PETSC_VERSION_MAJOR, PETSC_VERSION_MINOR, PETSC_VERSION_SUBMINOR, hmaj,
         hmin, hrel, major, minor, mpi, dev[0] ? "  " : "", dev, dev[0] ? "\n" : "");
  fflush(stdout);
}

/* -mode (trainer/mode.h), looked up before the configuration is read:
 * the mode's own options are read first, and an unknown mode is refused
 * before anything else is said about the options. */
static int find_mode(const mt_mode_ops **m) {
  char name[64] = "train";
  PetscBool set = PETSC_FALSE;
  if (PetscOptionsGetString(NULL, NULL, "-mode", name, sizeof(name), &set))
    return MT_ERR(MT_ERR_LIB, "option -mode: cannot read the options database");
  if (!(*m = mt_mode_find(name))) {
    char names[256];
    mt_mode_names(names, sizeof(names));
    return MT_ERR(MT_ERR_OPTION, "option -mode: '%s' is not one of: %s", name, names);
  }
  return (*m)->read_options ? (*m)->read_options() : 0;
}

/* The run of the mode; what it leaves to mt_main in *end. */
static int run(mt_comm *comm, mt_mode_end *end) {
  mt_config cfg;
  int help_only = 0;
  const mt_mode_ops *mode = NULL;
  MT_CALL(mt_agree(comm->world, find_mode(&mode)));
  MT_CALL(mt_config_from_options(comm->world, &cfg, &help_only));
  if (help_only) return 0;
  MT_CALL(mt_config_check_same(comm->world, &cfg));
  MT_CALL(mt_agree(comm->world, mt_mode_check_options(mode)));
  cfg.threads = mt_comm_default_threads(comm, cfg.threads);
  omp_set_num_threads(cfg.threads);
  if (comm->rank == 0) mt_config_print(&cfg, stdout);
  /* a warning, not an error: tests and small machines run so on purpose */
  if (comm->rank == 0 && comm->local_size * cfg.threads > comm->node_cores)
    fprintf(stderr,
            "mpitrain: warning: %d rank%s x %d thread%s on the %d core%s this node's ranks may "
            "use: they share cores, and MPI's waits poll, so ranks slow each other down (give "
            "every rank cores of its own: srun -c, mpirun --map-by, -threads)\n",
            comm->local_size, comm->local_size > 1 ? "s" : "", cfg.threads,
            cfg.threads > 1 ? "s" : "", comm->node_cores, comm->node_cores > 1 ? "s" : "");
  return mode->run(&cfg, comm, end);
}

int mt_main(int argc, char **argv) {
  int provided;
  /* before MPI, PMIx, OpenMP and the loader start threads: they inherit
   * the mask, and one signal thread takes SIGUSR1/SIGTERM (resume.c) */
  mt_trainer_signals_install();
  /* MULTIPLE: the hang guard's thread sends heartbeats (src/comm/guard.h) */
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "mpitrain: error: MPI_Init_thread failed\n");
    return 1;
  }
  mt_mark_launch();
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-version") || !strcmp(argv[i], "--version")) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank == 0) print_version();
      MPI_Finalize();
      return 0;
    }
  /* PETSc reports an unreadable options file as a multi-line traceback
   * from PetscInitialize; find it first and say it in one line. */
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "-options_file") && access(argv[i + 1], R_OK) != 0) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank == 0)
        fprintf(stderr, "mpitrain: error: option -options_file: cannot read %s\n", argv[i + 1]);
      MPI_Finalize();
      return 1;
    }
  PETSC_COMM_WORLD = MPI_COMM_WORLD;
  if (PetscInitialize(&argc, &argv, NULL, help)) {
    fprintf(stderr, "mpitrain: error: PETSc initialisation failed\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  mt_h5_quiet();
  mt_comm comm;
  int err = mt_comm_create(&comm);
  mt_mode_end end = {0, NULL};
  if (!err) err = run(&comm, &end);
  mt_guard *guard = end.guard;
  /* stopped by SIGUSR1/SIGTERM after a checkpoint: job scripts requeue */
  int rc = end.stopped ? MT_EXIT_REQUEUE : 0;
  if (err) {
    PetscBool trace = PETSC_FALSE;
    PetscOptionsHasName(NULL, NULL, "-mt_traceback", &trace);
    if (mt_error_is_collective()) {
      /* every rank failed the same way: one message, clean exit */
      if (comm.rank == 0) {
        fprintf(stderr, "mpitrain: error: %s\n", mt_error_message());
        if (trace) fputs(mt_error_traceback(), stderr);
      }
      rc = err == MT_ERR_WRITE ? MT_EXIT_WRITE : 1;
    } else {
      /* one rank failed alone: the others would wait for it forever */
      fprintf(stderr, "mpitrain: error (rank %d): %s\n", comm.rank, mt_error_message());
      if (trace) fputs(mt_error_traceback(), stderr);
      fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  /* every rank meets here under the hang guard: one that never arrives
   * (stopped, dead) is named and the job aborted, where MPI_Finalize would
   * wait for it without a word. MT_TEST_STOP_AT_FINISH=RANK (tests only:
   * tests/test_hang_guard.sh) has that rank stop itself here, after the
   * final checkpoint, where a test cannot reliably catch it from outside */
  const char *hold = getenv("MT_TEST_STOP_AT_FINISH");
  if (hold && *hold && atoi(hold) == comm.rank) raise(SIGSTOP);
  if (mt_guard_finish(guard, comm.world)) {
    if (comm.rank == 0) fprintf(stderr, "mpitrain: error: %s\n", mt_error_message());
    rc = 1;
  }
  mt_guard_stop(&guard);
  mt_comm_destroy(&comm);
  mt_sgemm_matmul_free(); /* the forward's kept oneDNN primitives */
  PetscFinalize(); /* the signals stay blocked: a late one cannot kill a clean stop */
  MPI_Finalize();
  return rc;
}
