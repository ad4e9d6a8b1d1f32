# tests/multihost/hosts.sh: simulated hosts on one machine, for the tests
# and benchmarks that run mpitrain "across hosts". Sourced (bash), not run.
#
# Each host is a network namespace (<tag>-h1 .. <tag>-hN) with one interface,
# eth0, at 10.77.0.K/24; eth0 is one end of a veth pair whose other end (vK)
# sits on a bridge (br0) in a namespace of its own (<tag>-sw), so the hosts
# reach each other and nothing else. Open MPI starts its daemons there through
# an rsh agent (written into the cluster folder) that runs
#   ip netns exec <tag>-hK unshare --uts sh -c 'hostname hK; ...'
# so every host also has its own host name (and so its own Open MPI session
# folder and node identity). The file system and the CPUs are shared.
# Needs root, iproute2 (ip, tc) and util-linux's unshare; measured facts in
# ../shared/notes/local-cluster.md ("Simulated hosts").
#
#   mh_usable               status 0 if namespaces, veth, a bridge and UTS
#                           namespaces work here; else MH_WHY says why
#   mh_up DIR N             N hosts; state (hostfile, agent, namespace list)
#                           in DIR; status 1 with MH_WHY on failure (whatever
#                           was made is removed again)
#   mh_mpirun NP LIMIT PROGRAM ARGS...
#                           mpirun started on h1, ranks mapped round-robin
#                           over the hosts (rank r on host r mod N + 1), TCP
#                           only, killed after LIMIT s; MH_MPIRUN_EXTRA (an
#                           array) adds mpirun options
#   mh_cap RATE             caps every host's egress (tc tbf), e.g. 1gbit
#   mh_uncap                removes the caps
#   mh_pids                 pids of every process in the hosts' namespaces
#   mh_down                 kills what runs in the namespaces (by namespace,
#                           never by name), deletes them; safe to call twice
#                           and from an EXIT trap
#
# Variables: MH_DIR, MH_N, MH_TAG, MH_NS (namespaces, switch last),
# MH_SUBNET (10.77.0.0/24), MPIRUN (default mpirun).

MH_SUBNET=10.77.0.0/24
MH_NET=10.77.0
MH_DIR=
MH_N=0
MH_TAG=
MH_NS=()
MH_WHY=
[ -n "${MH_MPIRUN_EXTRA+x}" ] || MH_MPIRUN_EXTRA=()
export PATH=$PATH:/usr/sbin:/sbin

mh_usable() {
  MH_WHY=
  [ "$(id -u)" = 0 ] || { MH_WHY="not root (network namespaces need root)"; return 1; }
  local c
  for c in ip tc unshare timeout hostname; do
    command -v "$c" >/dev/null 2>&1 || { MH_WHY="$c not found"; return 1; }
  done
  local p=mhprobe$$ out
  if ! out=$(ip netns add "$p" 2>&1); then
    MH_WHY="ip netns add does not work: $out"
    return 1
  fi
  if ! out=$(ip -n "$p" link add v0 type veth peer name v1 2>&1); then
    ip netns del "$p" 2>/dev/null
    MH_WHY="veth pairs do not work in a network namespace: $out"
    return 1
  fi
  if ! out=$(ip -n "$p" link add br0 type bridge 2>&1); then
    ip netns del "$p" 2>/dev/null
    MH_WHY="bridges do not work in a network namespace: $out"
    return 1
  fi
  if ! out=$(timeout 10 ip netns exec "$p" unshare --uts sh -c 'hostname mhprobe && [ "$(hostname)" = mhprobe ]' 2>&1); then
    ip netns del "$p" 2>/dev/null
    MH_WHY="unshare --uts (own host name per namespace) does not work: $out"
    return 1
  fi
  ip netns del "$p" 2>/dev/null
  return 0
}

# _mh_try COMMAND...: runs it; on failure records it in MH_WHY (status 1).
_mh_try() {
  local out
  if ! out=$("$@" 2>&1); then
    MH_WHY="'$*' failed: $out"
    return 1
  fi
}

mh_up() {
  local dir=$1 n=$2 k sw h
  MH_DIR=$dir MH_N=$n MH_TAG=mt$$r$RANDOM MH_NS=() MH_WHY=
  mkdir -p "$dir" || { MH_WHY="cannot create $dir"; return 1; }
  sw=$MH_TAG-sw
  : >"$dir/namespaces"
  : >"$dir/hostfile"
  : >"$dir/map"
  _mh_try ip netns add "$sw" || return 1
  echo "$sw" >>"$dir/namespaces"
  _mh_try ip -n "$sw" link add br0 type bridge || { mh_down; return 1; }
  _mh_try ip -n "$sw" link set br0 up || { mh_down; return 1; }
  for k in $(seq 1 "$n"); do
    h=$MH_TAG-h$k
    _mh_try ip netns add "$h" || { mh_down; return 1; }
    MH_NS+=("$h")
    echo "$h" >>"$dir/namespaces"
    _mh_try ip -n "$sw" link add "v$k" type veth peer name eth0 netns "$h" &&
      _mh_try ip -n "$sw" link set "v$k" master br0 &&
      _mh_try ip -n "$sw" link set "v$k" up &&
      _mh_try ip -n "$h" addr add "$MH_NET.$k/24" dev eth0 &&
      _mh_try ip -n "$h" link set eth0 up &&
      _mh_try ip -n "$h" link set lo up || { mh_down; return 1; }
    echo "$MH_NET.$k slots=64" >>"$dir/hostfile"
    echo "$MH_NET.$k $h h$k" >>"$dir/map"
  done
  MH_NS+=("$sw")
  # plm_rsh agent: [options] HOST COMMAND...; runs COMMAND (a shell command
  # line, as ssh would) in HOST's namespace under its host name
  cat >"$dir/agent.sh" <<EOF
#!/bin/sh
while [ \$# -gt 1 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1
shift
line=\$(grep "^\$host " "$dir/map") || { echo "agent.sh: unknown host \$host" >&2; exit 1; }
set -- "\$line" "\$@"
ns=\$(echo "\$1" | cut -d' ' -f2)
name=\$(echo "\$1" | cut -d' ' -f3)
shift
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0"; eval "\$*"' "\$name" "\$@"
EOF
  chmod +x "$dir/agent.sh"
  # every host has its address (bridge ports forward at once without STP)
  for k in $(seq 1 "$n"); do
    ip -n "$MH_TAG-h$k" -4 addr show dev eth0 | grep -q "$MH_NET.$k/" || { MH_WHY="h$k has no address"; mh_down; return 1; }
  done
  return 0
}

mh_mpirun() {
  local np=$1 t=$2
  shift 2
  [ "$MH_N" -gt 0 ] || { echo "mh_mpirun: no hosts (mh_up first)" >&2; return 99; }
  # in the background + wait, so that a trapped signal (the caller's
  # watchdog, ^C) runs its trap at once instead of after the launch
  timeout -k 10 "$t" ip netns exec "$MH_TAG-h1" unshare --uts sh -c 'hostname h1; exec "$@"' sh \
    "${MPIRUN:-mpirun}" -np "$np" --hostfile "$MH_DIR/hostfile" --map-by node --oversubscribe --bind-to none \
    --mca plm_rsh_agent "$MH_DIR/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$MH_SUBNET" \
    --mca oob_tcp_if_include "$MH_SUBNET" --mca mpi_yield_when_idle 1 \
    "${MH_MPIRUN_EXTRA[@]}" "$@" </dev/null &
  wait $!
}

mh_cap() {
  local k
  for k in $(seq 1 "$MH_N"); do
    # burst: at least a few 64 KiB GSO segments, and rate x 4 ms
    ip -n "$MH_TAG-h$k" link set eth0 gso_max_size 65536 2>/dev/null
    _mh_try ip netns exec "$MH_TAG-h$k" tc qdisc replace dev eth0 root tbf rate "$1" burst 1mb latency 100ms || return 1
  done
}

mh_uncap() {
  local k
  for k in $(seq 1 "$MH_N"); do
    ip netns exec "$MH_TAG-h$k" tc qdisc del dev eth0 root 2>/dev/null
  done
  return 0
}

mh_pids() {
  local ns
  [ -n "$MH_DIR" ] && [ -f "$MH_DIR/namespaces" ] || return 0
  while read -r ns; do
    [ -n "$ns" ] && ip netns pids "$ns" 2>/dev/null
  done <"$MH_DIR/namespaces"
}

mh_down() {
  [ -n "$MH_DIR" ] && [ -f "$MH_DIR/namespaces" ] || return 0
  local ns pids i
  for i in 1 2 3; do
    pids=$(mh_pids)
    [ -n "$pids" ] || break
    # stopped ranks (the hang guard test) first get to run again
    kill -CONT $pids 2>/dev/null
    kill -KILL $pids 2>/dev/null
    sleep 0.2
  done
  while read -r ns; do
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
  done <"$MH_DIR/namespaces"
  rm -f "$MH_DIR/namespaces"
  MH_N=0 MH_NS=()
  return 0
}
