#!/usr/bin/env bash
# Starts and stops a private one-node Slurm cluster on loopback, for tests.
#
#   scripts/slurm-local.sh start DIR   # prints `export ...` lines, also writes DIR/env.sh
#   scripts/slurm-local.sh stop DIR
#
#   eval "$(scripts/slurm-local.sh start "$dir")" && srun -n 4 ./a.out
#
# Debian packages it installs when missing (add them to scripts/install-deps.sh to
# skip the install here):
#   slurmctld slurmd slurm-client munge
#
# Everything lives under DIR: slurm.conf, state, spool, logs, pid files, and a
# private munged with its own key and socket. Nothing is read from or written to
# /etc/slurm, /etc/munge or /run/munge (installing the packages does create
# /etc/munge/munge.key and enable the units, but that is the packages, not us).
#
# The daemons run as the user who calls start. As root, jobs may run as anyone;
# as anybody else, only as that user (enough for tests), and the packages must
# already be installed unless passwordless sudo is there to install them.
#
# Exit status of `start`: 0 when the node is idle and jobs can run; 77 with one
# line on stderr when Slurm cannot run here (packages missing and no root, sudo
# or apt to install them, apt-get failing), so a test can skip with that reason;
# 1 when everything was there but the cluster did not come up (a bug worth
# seeing: the line says why, DIR/log/ has the rest). On failure nothing is left
# running. `stop` on a DIR with nothing running is a no-op.
#
# Knobs (environment):
#   SLURM_LOCAL_PORT_BASE  first port to try; slurmctld gets an even/odd pair
#                          (base, base+1) of free ports at or above it.
#                          Default: a random even port in 20000-29998.
#   SLURM_LOCAL_CPUS       CPUs the node advertises (default 8, whatever the
#                          hardware has; tasks are not bound, so they share cores).
#   SLURM_LOCAL_TIMEOUT    seconds to wait for the node to become idle (default 60).
#   SLURM_LOCAL_PROCTRACK  pgid (default) or linuxproc, see slurm.conf below.
#   SLURM_LOCAL_AUTH       munge (default) or none. auth/none lets anyone who can
#                          reach the ports run jobs as any uid, root included,
#                          so it is only for machines where munged cannot run.
set -euo pipefail

readonly PACKAGES=(slurmctld slurmd slurm-client munge)
readonly ME="slurm-local"

die_skip() { echo "$ME: $*" >&2; exit 77; }
die() { echo "$ME: $*" >&2; exit 1; }
note() { echo "$ME: $*" >&2; }

# Signals end the script through exit, so the EXIT traps below still clean up.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

usage() {
  echo "usage: $0 start|stop DIR" >&2
  exit 2
}

# The sbin tools are not on a non-root PATH; look there too rather than failing.
find_tool() {
  local t
  t=$(command -v "$1" 2>/dev/null) || t=""
  if [ -z "$t" ] && [ -x "/usr/sbin/$1" ]; then t="/usr/sbin/$1"; fi
  printf '%s' "$t"
}

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0

  command -v apt-get >/dev/null || die_skip "Slurm packages missing (${missing[*]}) and no apt-get to install them"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      die_skip "Slurm packages missing (${missing[*]}); need root or passwordless sudo to install them"
    fi
  fi

  # The packages' postinst would start a system-wide munged (and try slurmd and
  # slurmctld) against /etc; a policy-rc.d that says 101 keeps them from doing so.
  # Docker images ship one; elsewhere we add one for the duration of the install
  # only, and never replace an existing one.
  local policy=/usr/sbin/policy-rc.d added_policy=""
  if [ ! -e "$policy" ]; then
    # shellcheck disable=SC2016
    "${sudo[@]}" sh -c 'printf "#!/bin/sh\n# added by slurm-local.sh during apt-get install\nexit 101\n" > "$1" && chmod 755 "$1"' sh "$policy"
    added_policy=1
    # shellcheck disable=SC2064
    trap "${sudo[*]} rm -f $policy" EXIT
  fi

  note "installing ${missing[*]}"
  local log rc=0
  log=$(mktemp)
  {
    # Another apt may be running (install-deps.sh in a parallel job): wait for its lock.
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq &&
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
        install -y -qq --no-install-recommends "${missing[@]}"
  } >"$log" 2>&1 || rc=$?

  if [ -n "$added_policy" ]; then
    "${sudo[@]}" rm -f "$policy"
    trap - EXIT
  fi
  if [ $rc -ne 0 ]; then
    tail -n 20 "$log" >&2
    rm -f "$log"
    die_skip "apt-get install ${missing[*]} failed (exit $rc)"
  fi
  rm -f "$log"
}

port_free() {
  local p=$1
  if command -v ss >/dev/null; then
    if ss -Htan "sport = :$p" 2>/dev/null | grep -q .; then return 1; fi
  else
    # Only sees listeners, which is what a bind() would collide with anyway.
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then return 1; fi
  fi
}

pick_ports() {
  local base=${SLURM_LOCAL_PORT_BASE:-$((20000 + 2 * (RANDOM % 5000)))} p
  for ((p = base; p < base + 400 && p < 65534; p += 2)); do
    if port_free "$p" && port_free $((p + 1)); then
      echo "$p"
      return 0
    fi
  done
  die "no two free ports in $base-$((base + 400))"
}

# A pid file is only trusted while its process still has the expected name, so a
# stale file never makes us signal some unrelated process that reused the pid.
live_pid() {
  local pid
  # The daemons remove their own pid file when they exit.
  pid=$(tr -dc '0-9' 2>/dev/null <"$1") || return 1
  pid_alive "$pid" "$2" && echo "$pid"
}

pid_alive() {
  local pid=$1 name=$2 comm state
  [ -n "$pid" ] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [ "$comm" = "$name" ] || return 1
  # A zombie is gone for our purposes; who reaps it is up to its parent.
  state=$(awk '/^State:/{print $2}' "/proc/$pid/status" 2>/dev/null) || return 1
  [ "$state" != Z ]
}

# TERM, wait up to $3 seconds, then KILL and wait a little more. The wait is on
# the process, not on the pid file, which the daemons remove before they are done.
stop_pid() {
  local file=$1 name=$2 grace=$3 pid i
  pid=$(live_pid "$file" "$name") || { rm -f "$file"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do
    pid_alive "$pid" "$name" || { rm -f "$file"; return 0; }
    sleep 0.1
  done
  note "$name (pid $pid) ignored SIGTERM for ${grace}s, killing it"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    pid_alive "$pid" "$name" || { rm -f "$file"; return 0; }
    sleep 0.1
  done
  note "$name (pid $pid) still there after SIGKILL"
  return 1
}

# slurmstepd processes of this cluster: they carry our SLURM_CONF, inherited from
# the slurmd we started. Matching on the name alone could hit another cluster's.
our_stepds() {
  local conf=$1 d comm
  for d in /proc/[0-9]*; do
    # read, not cat: this runs in a polling loop, over every process.
    read -r comm 2>/dev/null <"$d/comm" || continue
    [ "$comm" = slurmstepd ] || continue
    if grep -qzxF "SLURM_CONF=$conf" "$d/environ" 2>/dev/null; then
      echo "${d#/proc/}"
    fi
  done
}

# Processes of jobs of this cluster that outlived their step: a task's children
# whose parent died are re-parented away from slurmstepd, out of reach of
# proctrack/linuxproc. They carry our SLURM_CONF and a SLURM_JOB_ID. This script
# and its ancestors are spared: a test running inside a job may call stop.
our_task_orphans() {
  local conf=$1 d pid spare=" " p=$$
  while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    spare+="$p "
    p=$(awk '/^PPid:/{print $2}' "/proc/$p/status" 2>/dev/null) || break
  done
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [[ "$spare" == *" $pid "* ]] && continue
    if grep -qzxF "SLURM_CONF=$conf" "$d/environ" 2>/dev/null &&
      grep -qz '^SLURM_JOB_ID=' "$d/environ" 2>/dev/null; then
      echo "$pid"
    fi
  done
}

kill_task_orphans() {
  local pids
  pids=$(our_task_orphans "$1")
  [ -n "$pids" ] || return 0
  note "killing leftover job processes: ${pids//$'\n'/ }"
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

cmd_stop() {
  local dir=$1 conf i rc=0 pids
  [ -d "$dir" ] || return 0
  dir=$(cd "$dir" && pwd -P)
  conf="$dir/slurm.conf"

  # Cancel jobs first: killing slurmd leaves its slurmstepds and their tasks behind.
  if live_pid "$dir/run/slurmctld.pid" slurmctld >/dev/null &&
    live_pid "$dir/run/slurmd.pid" slurmd >/dev/null; then
    local jobs
    jobs=$(SLURM_CONF=$conf timeout 10 squeue -h -o %i 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      SLURM_CONF=$conf timeout 10 scancel $jobs 2>/dev/null || true
    fi
    # KillWait in our slurm.conf is 5 s; steps are gone a little after that,
    # unless orphaned task processes hold their output open.
    for ((i = 0; i < 70; i++)); do
      [ -z "$(our_stepds "$conf")" ] && break
      sleep 0.1
    done
    kill_task_orphans "$conf"
    for ((i = 0; i < 30; i++)); do
      [ -z "$(our_stepds "$conf")" ] && break
      sleep 0.1
    done
  fi

  stop_pid "$dir/run/slurmd.pid" slurmd 15 || rc=1
  stop_pid "$dir/run/slurmctld.pid" slurmctld 15 || rc=1

  # Whatever slurmstepd is left (slurmd was not answering, or the cancel timed out).
  pids=$(our_stepds "$conf")
  if [ -n "$pids" ]; then
    note "killing leftover slurmstepd: ${pids//$'\n'/ }"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
  fi

  kill_task_orphans "$conf"
  stop_pid "$dir/run/munged.pid" munged 10 || rc=1

  if [ -L "$dir/run/short" ]; then
    rm -f "$(readlink "$dir/run/short")"
    rm -f "$dir/run/short"
  fi
  rm -f "$dir/env.sh"
  return $rc
}

# The line of the daemons' logs most likely to say why they stopped: a fatal one,
# else the last error that is not noise of every start (PMIx, empty state).
last_complaint() {
  local line
  # The line before a fatal one usually says what it was about.
  line=$(grep -h -B1 'fatal' "$@" 2>/dev/null | grep -v '^--$' | tail -n 2 | tr '\n' ' ')
  [ -n "$line" ] || line=$(grep -h 'error' "$@" 2>/dev/null |
    grep -v -e pmix -e PMIx -e 'MPI:' -e 'state file' -e 'backup state' -e 'Domain socket' | tail -n 1)
  printf '%s' "${line:-nothing in the logs}"
}

# True when NAME resolves, and only to 127.0.0.0/8.
loopback_name() {
  local addrs
  addrs=$(getent ahostsv4 "$1" 2>/dev/null | awk '{print $1}' | sort -u) || return 1
  [ -n "$addrs" ] && ! grep -qv '^127\.' <<<"$addrs"
}

cmd_start() {
  local dir=$1
  local cpus=${SLURM_LOCAL_CPUS:-8} wait_s=${SLURM_LOCAL_TIMEOUT:-60}
  local auth=${SLURM_LOCAL_AUTH:-munge}
  local t0=$SECONDS

  case "$auth" in munge | none) ;; *) die "SLURM_LOCAL_AUTH must be munge or none, not '$auth'" ;; esac

  # The daemons run as whoever starts them (SlurmUser/SlurmdUser below). As root,
  # jobs may run as anyone; as another user, only as that user, which is all
  # tests need. Slurm looks users up by name, so a uid without one won't do.
  local user
  user=$(id -un 2>/dev/null) || die_skip "uid $(id -u) has no user name, which Slurm needs"

  install_packages
  local slurmctld slurmd sinfo munged
  slurmctld=$(find_tool slurmctld)
  slurmd=$(find_tool slurmd)
  sinfo=$(find_tool sinfo)
  munged=$(find_tool munged)
  if [ -z "$slurmctld" ] || [ -z "$slurmd" ] || [ -z "$sinfo" ]; then
    die_skip "slurmctld/slurmd/sinfo not found after install"
  fi
  if [ "$auth" = munge ] && [ -z "$munged" ]; then die_skip "munged not found after install"; fi

  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  # A cluster left running in DIR (a test that died before stop) is replaced.
  cmd_stop "$dir" || true
  rm -rf "$dir/state" "$dir/spool" "$dir/run" "$dir/munge" "$dir/log"
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/run"

  # Whatever fails from here on, leave no daemon behind.
  # shellcheck disable=SC2064
  trap "cmd_stop $(printf '%q' "$dir") >/dev/null 2>&1 || true" EXIT

  # Unix socket paths are limited to 107 bytes and slurmstepd puts
  # "NODE_JOBID.STEPID" sockets in the spool dir; a deep DIR (a CI workspace)
  # would overflow that, so sockets then go through a short link in /tmp.
  local sockdir=$dir
  if [ ${#dir} -gt 48 ]; then
    local short
    short=$(mktemp -u /tmp/slurm-local.XXXXXX)
    ln -s "$dir" "$short"
    ln -s "$short" "$dir/run/short"
    sockdir=$short
  fi

  local node
  node=$(hostname -s 2>/dev/null || true)
  # Slurm node names are used in hostlists; anything odd is replaced by a plain name.
  [[ "$node" =~ ^[A-Za-z][A-Za-z0-9-]*$ ]] || node=localhost

  # NoInAddrAny makes slurmctld, slurmd and srun bind to what the host name
  # resolves to instead of to every interface. That keeps the cluster off the
  # network, but only where the name resolves to loopback; where it resolves
  # elsewhere it gains nothing, and where it does not resolve (some CI
  # containers) nothing can bind at all. Jobs still need munge's key either way.
  local commparams="# Host name does not resolve to loopback only: daemons bind to every interface."
  if loopback_name "$(hostname)" && loopback_name "$node"; then
    commparams="# Bind to the loopback address the host name resolves to, not to every interface.
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny"
  fi

  local authconf
  if [ "$auth" = munge ]; then
    # munged wants its socket directory world-searchable and its key private.
    mkdir -p "$dir/munge/private"
    chmod 755 "$dir/munge"
    chmod 700 "$dir/munge/private"
    (umask 077 && head -c 1024 /dev/urandom >"$dir/munge/private/munge.key")
    # --force: DIR's parents may be mode 700 (mktemp -d), which munged would
    # otherwise refuse; then only their owner reaches the socket, which is fine.
    # --origin: no lookup of the host name, which may not resolve on CI.
    "$munged" --force --origin=127.0.0.1 \
      --socket="$sockdir/munge/munge.socket" \
      --key-file="$dir/munge/private/munge.key" \
      --seed-file="$dir/munge/private/munged.seed" \
      --pid-file="$dir/run/munged.pid" \
      --log-file="$dir/log/munged.log" \
      </dev/null >>"$dir/log/munged.out" 2>&1 ||
      die "munged failed to start: $(tail -n 1 "$dir/log/munged.log" 2>/dev/null)"
    authconf="AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sockdir/munge/munge.socket"
  else
    authconf="AuthType=auth/none
CredType=cred/none"
  fi

  local attempt port=0
  for attempt in 1 2 3; do
    port=$(pick_ports)
    # %-free paths throughout: the file is rewritten on every start.
    cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm-local.sh; rewritten on every start.
ClusterName=local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
$commparams
$authconf
SlurmUser=$user
SlurmdUser=$user
StateSaveLocation=$dir/state
SlurmdSpoolDir=$sockdir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# The default is /etc/slurm/plugstack.conf; an empty one of our own keeps /etc out.
PlugStackConfig=$dir/plugstack.conf
# No cgroups: works in containers and on cgroup v1 or v2 alike, and needs no cgroup.conf.
# pgid rather than linuxproc: when srun forwards SIGKILL (srun got SIGTERM), linuxproc
# let shell tasks outlive it long enough to start children that were then orphaned,
# kept the step COMPLETING until they ended and so blocked the node. pgid kills the
# tasks' process group (all tasks share one) at once; what calls setsid escapes it.
ProctrackType=proctrack/${SLURM_LOCAL_PROCTRACK:-pgid}
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
# CPUs are the only consumable; memory is not tracked, so jobs never wait for it.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Take the node's CPUs from this file, not from the hardware: the node has
# $cpus CPUs however many cores the machine has.
SlurmdParameters=config_overrides
ReturnToService=2
# Time between SIGTERM and SIGKILL on scancel/timeout; short so stop is quick.
KillWait=5
MinJobAge=30
NodeName=$node NodeHostname=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
# FORCE:4 lets up to 4 jobs share each CPU, so tests running in parallel don't queue.
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
    : >"$dir/plugstack.conf"
    : >"$dir/log/slurmctld.log"
    : >"$dir/log/slurmd.log"

    # stdio to files: a daemon holding the caller's stdout open would make
    # $(slurm-local.sh start DIR) wait forever. -c: never recover jobs of a
    # previous run from state/.
    SLURM_CONF=$dir/slurm.conf "$slurmctld" -c </dev/null >>"$dir/log/slurmctld.out" 2>&1 ||
      die "slurmctld failed to start: $(last_complaint "$dir/log/slurmctld.log" "$dir/log/slurmctld.out")"
    SLURM_CONF=$dir/slurm.conf "$slurmd" -N "$node" </dev/null >>"$dir/log/slurmd.out" 2>&1 ||
      die "slurmd failed to start: $(last_complaint "$dir/log/slurmd.log" "$dir/log/slurmd.out")"

    local state="" deadline=$((SECONDS + wait_s))
    while [ $SECONDS -lt $deadline ]; do
      # A daemon that died (a port taken since we looked, a fatal config error)
      # will not come back; slurmctld writes its pid file a moment after forking.
      if ! live_pid "$dir/run/slurmctld.pid" slurmctld >/dev/null ||
        ! live_pid "$dir/run/slurmd.pid" slurmd >/dev/null; then
        sleep 0.2
        if ! live_pid "$dir/run/slurmctld.pid" slurmctld >/dev/null ||
          ! live_pid "$dir/run/slurmd.pid" slurmd >/dev/null; then
          state="dead"
          break
        fi
      fi
      # sinfo retries an unreachable controller for many seconds; keep each try short.
      state=$(SLURM_CONF=$dir/slurm.conf timeout 5 "$sinfo" -h -n "$node" -o %t 2>/dev/null || true)
      [ "$state" = idle ] && break
      sleep 0.1
    done
    [ "$state" = idle ] && break

    if grep -qi "address already in use" "$dir/log/slurmctld.log" "$dir/log/slurmd.log" 2>/dev/null &&
      [ $attempt -lt 3 ] && [ -z "${SLURM_LOCAL_PORT_BASE:-}" ]; then
      note "port $port or $((port + 1)) was taken meanwhile, trying others"
      stop_pid "$dir/run/slurmd.pid" slurmd 5 || true
      stop_pid "$dir/run/slurmctld.pid" slurmctld 5 || true
      continue
    fi
    local why="node $node is '${state:-unreachable}' after ${wait_s}s"
    if [ "$state" = dead ]; then
      why="slurmctld or slurmd exited: $(last_complaint "$dir/log/slurmctld.log" "$dir/log/slurmd.log")"
    fi
    die "$why, see $dir/log/slurmctld.log and $dir/log/slurmd.log"
  done

  trap - EXIT
  cat >"$dir/env.sh" <<EOF
export SLURM_CONF=$dir/slurm.conf
export SLURM_LOCAL_NODE=$node
export SLURM_LOCAL_DIR=$dir
EOF
  note "node $node idle with $cpus CPUs, slurmctld on 127.0.0.1:$port, up in $((SECONDS - t0))s"
  cat "$dir/env.sh"
}

[ $# -eq 2 ] || usage
case "$1" in
  start) cmd_start "$2" ;;
  stop) cmd_stop "$2" ;;
  *) usage ;;
esac
