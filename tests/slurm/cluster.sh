#!/usr/bin/env bash
# tests/slurm/cluster.sh: a private one-machine Slurm cluster (munged +
# slurmctld + slurmd, Debian's slurm-wlm 22.05) living in one folder.
#
# Sourced (tests/test_slurm.sh):
#   slurm_cluster_start DIR [CPUS]  writes DIR/slurm.conf from slurm.conf.in,
#       starts the three daemons and waits until the node is idle; exports
#       SLURM_CONF. Status 0, or 1 with the reason in SLURM_CLUSTER_WHY
#       (what is missing, or the tail of a daemon's log).
#   slurm_cluster_stop DIR  cancels every job of the cluster, waits for them
#       to end, then stops the daemons by the pids in their pid files (TERM,
#       then KILL), and kills what is left of the job steps (processes that
#       carry this cluster's mark in their environment), by pid.
# Run (by hand, as root):
#   bash tests/slurm/cluster.sh start DIR [CPUS]   then: export SLURM_CONF=DIR/slurm.conf
#   bash tests/slurm/cluster.sh stop DIR
#
# Nothing is written outside DIR: state, spool, logs, pid files, PMIx
# temporary files (TmpFS) and the munge socket and key are under it, and the
# two Slurm ports are picked free, so it clashes neither with a site's Slurm
# or munge nor with another copy of itself. No systemd, no cgroups.

SLURM_CLUSTER_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SLURM_CLUSTER_WHY=

# _sc_free_port: prints a TCP port nobody listens on (20000-59999).
_sc_free_port() {
  local p _
  for _ in $(seq 1 50); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    if [ -z "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# _sc_alive PID: the process exists and is not a zombie (where nobody reaps
# orphans, a daemon that has exited can stay a zombie).
_sc_alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st%% *}" != Z ] && [ "${st%% *}" != X ]
}

# _sc_pid FILE: the pid in FILE if that process is alive.
_sc_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && _sc_alive "$pid" && echo "$pid"
}

# _sc_wait SECONDS COMMAND...: retries COMMAND every 0.2 s until it succeeds.
_sc_wait() {
  local n=$(($1 * 5))
  shift
  while [ "$n" -gt 0 ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
    n=$((n - 1))
  done
  return 1
}

# _sc_up PIDFILE LOG: the daemon runs, or its log says why it will not
# (stops the wait early; the caller checks _sc_pid again).
_sc_up() {
  _sc_pid "$1" >/dev/null || grep -q 'fatal' "$2" 2>/dev/null
}

# _sc_fail DIR WHY LOG: sets SLURM_CLUSTER_WHY to WHY and LOG's tail.
_sc_fail() {
  SLURM_CLUSTER_WHY=$2
  if [ -n "${3:-}" ] && [ -s "$3" ]; then
    SLURM_CLUSTER_WHY+=$'\n'"last lines of $3:"$'\n'$(tail -n 8 "$3")
  fi
  return 1
}

_sc_no_jobs() {
  local q
  q=$(timeout 5 squeue -h -o %i 2>/dev/null) && [ -z "$q" ]
}

_sc_node_idle() {
  [ "$(timeout 10 sinfo -h -N -o %T 2>/dev/null)" = idle ]
}

slurm_cluster_start() {
  local dir=$1 cpus=${2:-2} p host node=mt1 ctld_port slurmd_port
  SLURM_CLUSTER_WHY=
  [ "$(id -u)" = 0 ] || { SLURM_CLUSTER_WHY="not root (munged, slurmctld and slurmd must start as root)"; return 1; }
  for p in munged slurmctld slurmd srun sbatch scontrol scancel sinfo squeue ss runuser; do
    command -v "$p" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v "$p" >/dev/null 2>&1 ||
      { SLURM_CLUSTER_WHY="$p not found (apt-get install slurmctld slurmd slurm-client munge)"; return 1; }
  done
  export PATH=$PATH:/usr/sbin:/sbin
  getent passwd munge >/dev/null || { SLURM_CLUSTER_WHY="no user munge (apt-get install munge)"; return 1; }
  host=$(hostname -s 2>/dev/null || hostname)
  ctld_port=$(_sc_free_port) && slurmd_port=$(_sc_free_port) ||
    { SLURM_CLUSTER_WHY="no free TCP port found"; return 1; }
  [ "$ctld_port" != "$slurmd_port" ] || slurmd_port=$((ctld_port + 1))
  mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || { SLURM_CLUSTER_WHY="cannot create $dir"; return 1; }
  for p in munge/munged.pid run/slurmctld.pid run/slurmd.pid; do
    ! _sc_pid "$dir/$p" >/dev/null || { SLURM_CLUSTER_WHY="a cluster is already running in $dir ($p)"; return 1; }
  done
  mkdir -p "$dir"/{state,spool/$node,log,run,tmp,munge} || { SLURM_CLUSTER_WHY="cannot create folders in $dir"; return 1; }
  # munged runs as munge: it must reach its folder (and nothing else of ours)
  chmod 0711 "$dir" && chown munge: "$dir/munge" && chmod 0700 "$dir/munge" ||
    { SLURM_CLUSTER_WHY="cannot set up $dir/munge for user munge"; return 1; }
  p=$dir
  while [ "$p" != / ]; do # every folder above must let munge through
    p=$(dirname "$p")
    [ -x "$p" ] && runuser -u munge -- test -x "$p" 2>/dev/null ||
      { SLURM_CLUSTER_WHY="user munge cannot enter $p"; return 1; }
  done
  sed -e "s|@DIR@|$dir|g" -e "s|@HOST@|$host|g" -e "s|@NODE@|$node|g" -e "s|@CPUS@|$cpus|g" \
    -e "s|@CTLD_PORT@|$ctld_port|g" -e "s|@SLURMD_PORT@|$slurmd_port|g" \
    "$SLURM_CLUSTER_HERE/slurm.conf.in" >"$dir/slurm.conf" || { SLURM_CLUSTER_WHY="cannot write $dir/slurm.conf"; return 1; }
  export SLURM_CONF=$dir/slurm.conf

  # munged with a fresh key of its own
  (umask 077 && head -c 1024 /dev/urandom >"$dir/munge/munge.key") && chown munge: "$dir/munge/munge.key" &&
    chmod 0400 "$dir/munge/munge.key" || { SLURM_CLUSTER_WHY="cannot write the munge key"; return 1; }
  timeout 20 runuser -u munge -- munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" \
    --num-threads=2 --force </dev/null >>"$dir/munge/munged.out" 2>&1 ||
    { _sc_fail "$dir" "munged did not start" "$dir/munge/munged.out"; return 1; }
  _sc_wait 10 _sc_up "$dir/munge/munged.pid" "$dir/munge/munged.log" && _sc_pid "$dir/munge/munged.pid" >/dev/null ||
    { _sc_fail "$dir" "munged did not write its pid file" "$dir/munge/munged.log"; return 1; }
  if command -v munge >/dev/null && command -v unmunge >/dev/null; then
    timeout 10 munge -n -S "$dir/munge/munge.socket" 2>"$dir/log/munge-test.err" |
      timeout 10 unmunge -S "$dir/munge/munge.socket" >/dev/null 2>>"$dir/log/munge-test.err" ||
      { _sc_fail "$dir" "munge credentials do not round-trip" "$dir/log/munge-test.err"; return 1; }
  fi

  # slurmctld, then slurmd; both fork into the background themselves
  # MT_SLURM_CLUSTER marks the daemons' processes: slurmd passes it on to
  # the slurmstepd of each job step, so that stop finds steps left behind
  timeout 30 env MT_SLURM_CLUSTER="$dir" slurmctld -f "$SLURM_CONF" -i </dev/null >"$dir/log/slurmctld.out" 2>&1 ||
    { _sc_fail "$dir" "slurmctld did not start" "$dir/log/slurmctld.out"; return 1; }
  _sc_wait 15 _sc_up "$dir/run/slurmctld.pid" "$dir/log/slurmctld.log" && _sc_pid "$dir/run/slurmctld.pid" >/dev/null ||
    { _sc_fail "$dir" "slurmctld is not running" "$dir/log/slurmctld.log"; return 1; }
  _sc_wait 20 timeout 5 scontrol ping ||
    { _sc_fail "$dir" "slurmctld does not answer" "$dir/log/slurmctld.log"; return 1; }
  timeout 30 env MT_SLURM_CLUSTER="$dir" slurmd -f "$SLURM_CONF" -N "$node" </dev/null >"$dir/log/slurmd.out" 2>&1 ||
    { _sc_fail "$dir" "slurmd did not start" "$dir/log/slurmd.out"; return 1; }
  _sc_wait 15 _sc_up "$dir/run/slurmd.pid" "$dir/log/slurmd.log" && _sc_pid "$dir/run/slurmd.pid" >/dev/null ||
    { _sc_fail "$dir" "slurmd is not running" "$dir/log/slurmd.log"; return 1; }
  _sc_wait 30 _sc_node_idle ||
    { _sc_fail "$dir" "node $node is not idle: $(timeout 10 sinfo -h -N -o '%T %E' 2>&1)" "$dir/log/slurmd.log"; return 1; }
  return 0
}

# _sc_marked DIR: pids of processes whose environment has MT_SLURM_CLUSTER=DIR.
_sc_marked() {
  local e pid
  for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}
    pid=${pid%/environ}
    { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qxF "MT_SLURM_CLUSTER=$1" && echo "$pid"
  done
  return 0
}

# _sc_tree PID...: those pids and all their descendants.
_sc_tree() {
  local all=" $* " more=1 pid ppid
  while [ "$more" = 1 ]; do
    more=0
    while read -r pid ppid; do
      case "$all" in *" $ppid "*) case "$all" in *" $pid "*) ;; *) all+="$pid " more=1 ;; esac ;; esac
    done < <(ps -e -o pid=,ppid=)
  done
  echo $all
}

# _sc_stop_pidfile FILE: TERM, up to 10 s, then KILL.
_sc_stop_pidfile() {
  local pid n
  pid=$(_sc_pid "$1") || return 0
  kill -TERM "$pid" 2>/dev/null
  for n in $(seq 1 50); do
    _sc_alive "$pid" || return 0
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null
  return 0
}

slurm_cluster_stop() {
  local dir=$1 pids pid
  [ -f "$dir/slurm.conf" ] || return 0
  export SLURM_CONF=$dir/slurm.conf
  if _sc_pid "$dir/run/slurmctld.pid" >/dev/null; then
    timeout 10 scancel --quiet --user="$(id -un)" >/dev/null 2>&1
    _sc_wait 20 _sc_no_jobs
  fi
  _sc_stop_pidfile "$dir/run/slurmd.pid"
  _sc_stop_pidfile "$dir/run/slurmctld.pid"
  # job steps left behind (slurmstepd inherits slurmd's environment) and
  # whatever they started
  pids=$(_sc_marked "$dir")
  if [ -n "$pids" ]; then
    for pid in $(_sc_tree $pids); do
      kill -KILL "$pid" 2>/dev/null
    done
  fi
  _sc_stop_pidfile "$dir/munge/munged.pid"
  return 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
  start)
    [ -n "${2:-}" ] || { echo "usage: $0 start DIR [CPUS]" >&2; exit 2; }
    if slurm_cluster_start "$2" "${3:-2}"; then
      echo "cluster up; export SLURM_CONF=$SLURM_CONF"
    else
      echo "cluster not started: $SLURM_CLUSTER_WHY" >&2
      slurm_cluster_stop "$2"
      exit 1
    fi
    ;;
  stop)
    [ -n "${2:-}" ] || { echo "usage: $0 stop DIR" >&2; exit 2; }
    slurm_cluster_stop "$2"
    ;;
  *)
    echo "usage: $0 start DIR [CPUS] | stop DIR" >&2
    exit 2
    ;;
  esac
fi
