#!/bin/bash
# A stand-in for a rank that records which signals it gets and when, to
# measure what a launcher does on SIGTERM or SIGUSR1 (the table in
# doc/checkpoints-and-jobs.md#signals was measured with it):
#   mpirun -np 2 tools/signal-logger.sh DIR &      then: kill -TERM <mpirun's pid>
#   sbatch -n 2 --wrap "srun tools/signal-logger.sh DIR"   then: scancel [--signal=TERM] JOB
#   cat DIR/rank.*    (start, then one line per signal: name and time, s)
# It ignores the signals it logs (a rank that takes them to checkpoint), so
# SIGKILL ends it: its log then has no "exit" line; with RC=N it exits N on
# the first SIGTERM or SIGUSR1 instead (a rank that stopped cleanly). HOLD
# is how long it runs untouched (default 120 s).
dir=${1:?usage: signal-logger.sh DIR}
mkdir -p "$dir" || exit 1
r=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-$$}}
log=$dir/rank.$r
t0=$(date +%s.%N)
echo "start pid $$ $t0" >"$log"
stamp() { echo "$1 $(echo "$(date +%s.%N) - $t0" | bc)" >>"$log"; }
for s in CONT HUP INT USR2; do trap "stamp $s" "$s"; done
for s in TERM USR1; do trap "stamp $s; [ -n \"\${RC:-}\" ] && exit \$RC" "$s"; done
trap 'stamp exit' EXIT
end=$((SECONDS + ${HOLD:-120}))
while [ $SECONDS -lt $end ]; do sleep 0.05; done
