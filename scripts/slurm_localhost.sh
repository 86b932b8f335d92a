#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for the tests (tests/cluster/conftest.py) and for trying
# `--executor slurm` by hand, configured in a folder we own: /etc/slurm is neither read nor written.
#
#   scripts/slurm_localhost.sh start DIR   # prints `export SLURM_CONF=DIR/slurm.conf` on its last line
#   scripts/slurm_localhost.sh stop DIR
#
# start writes DIR/slurm.conf (state in DIR/state, slurmd's spool in DIR/spool, logs DIR/slurmctld.log and
# DIR/slurmd.log, pid files DIR/*.pid), starts munged if it is not running (it is left running by stop), starts
# slurmctld and slurmd as root on ports 6917/6918 (not the default ones, so a system SLURM cannot clash), and waits
# until the node is idle (SLURM_START_TIMEOUT seconds, 30 unless set). Each start is a clean one: a cluster already
# running for DIR is stopped first, and the daemons start with -c (no jobs or node states carried over from an
# earlier start; job ids go on counting). Two clusters at once (two folders) need different ports:
# SLURM_LOCALHOST_PORT=7917 (slurmd takes the next port); start refuses ports already taken.
# stop cancels the jobs still queued or running (they would be orphaned otherwise), then stops slurmd and slurmctld
# by their pid files. Both need root and Debian's packages: apt-get install slurmctld slurmd slurm-client munge.
# Accounting is not configured (no slurmdbd), so sacct fails: the cluster's own state is all there is.
#
# Measured on a 2-core Intel(R) Xeon(R) Processor (lscpu's model name) while another test run kept it busy (load
# 2.7): start from nothing running, munged included, until the node is idle: 0.1 to 1.2 s; stop: 0.1 to 0.2 s, with a
# running job to cancel first. A job then starts within about a second of sbatch (the scheduler's one-second tick).
set -euo pipefail

CTLD_PORT=${SLURM_LOCALHOST_PORT:-6917}  # slurmctld's; slurmd listens on the next one
SLURMD_PORT=$((CTLD_PORT + 1))
START_TIMEOUT=${SLURM_START_TIMEOUT:-30}  # seconds until the node must be idle

STARTED=  # set once start has launched daemons: a failing start stops them again
die() {  # die MESSAGE [LOG...]: one line on stderr, then the end of each log named (without the PMIx noise)
    echo "slurm_localhost.sh: $1" >&2
    shift
    for log in "$@"; do
        if [[ -s $log ]]; then
            echo "--- last lines of $log:" >&2
            grep -v -e pmix -e 'MPI: Cannot create context' "$log" | tail -n 20 >&2 || true
        fi
    done
    if [[ -n $STARTED ]]; then
        STARTED=
        stop quiet
    fi
    exit 1
}

live() {  # live PID NAME: PID is a live process called NAME (not a zombie waiting to be reaped)
    local _ name state
    [[ $1 =~ ^[0-9]+$ ]] || return 1
    read -r _ name state _ <"/proc/$1/stat" 2>/dev/null || return 1
    [[ $name == "($2)" && $state != Z ]]
}

alive() {  # alive PIDFILE NAME: the pid file names a live process called NAME
    [[ -s $1 ]] && live "$(<"$1")" "$2"
}

launched() {  # launched NAME: the pids of the live NAMEs started with our slurm.conf, found by their command line
    # (the command we ran, while it forks, and the daemon it forks). The daemon writes its pid file only once it has
    # set itself up, which on a busy machine can come after our first look: until then its pid file cannot tell a
    # daemon starting from one gone. Fails where there is none.
    local proc name cmd found=1
    for proc in /proc/[0-9]*; do
        name=$(cat "$proc/comm" 2>/dev/null) || continue
        [[ $name == "$1" ]] || continue
        cmd=$(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null) || continue
        if [[ $cmd == *" -f $CONF "* ]]; then  # a zombie's command line is empty
            echo "${proc#/proc/}"
            found=0
        fi
    done
    return $found
}

write_conf() {
    local host cpus mem_mb
    host=$(hostname -s)
    # Every CPU of the machine: nproc alone obeys OMP_NUM_THREADS, which the tests set to 1.
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
    mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)  # a little under the machine's
    : >"$DIR/plugstack.conf"  # no SPANK plugins (the default would read /etc/slurm/plugstack.conf)
    cat >"$CONF" <<EOF
# Written by scripts/slurm_localhost.sh: a single-node cluster on $host.
ClusterName=localhost
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/plugstack.conf
MailProg=/bin/true
MpiDefault=none
# No cgroups: processes are tracked through /proc, tasks are not bound, no accounting is gathered.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# Cores are the resource scheduled: two 1-CPU jobs run side by side on two cores, memory is not reserved.
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=5
JobRequeue=1
MessageTimeout=10
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=2
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
    if munge -n >/dev/null 2>&1; then
        return 0
    fi
    [[ -r /etc/munge/munge.key ]] || die "no munge key at /etc/munge/munge.key (create one with mungekey)"
    mkdir -p /run/munge
    chown munge:munge /run/munge
    chmod 755 /run/munge
    runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 ||
        die "munged failed to start" /var/log/munge/munged.log
    for _ in $(seq 50); do
        munge -n >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "munged started but does not answer" /var/log/munge/munged.log
}

node_state() {
    SLURM_CONF=$CONF timeout 10 sinfo -h -o %T 2>/dev/null | head -n 1 || true
}

start() {
    local missing=() bin port state deadline
    for bin in slurmctld slurmd sinfo squeue scancel munged munge runuser; do
        command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
    done
    [[ ${#missing[@]} -eq 0 ]] ||
        die "not found: ${missing[*]} (Debian: apt-get install slurmctld slurmd slurm-client munge)"
    [[ $(id -u) -eq 0 ]] || die "must run as root (the daemons run as root here)"

    stop quiet
    for port in "$CTLD_PORT" "$SLURMD_PORT"; do  # another cluster's daemons there would answer our sinfo
        if timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
            die "port $port is taken (a cluster started for another folder? stop it, or set SLURM_LOCALHOST_PORT)"
        fi
    done
    mkdir -p "$DIR/state" "$DIR/spool"
    write_conf
    start_munge

    STARTED=1
    # Both daemonize; their stdio goes to their logs, so that no caller's pipe is held open by them.
    slurmctld -c -f "$CONF" </dev/null >>"$DIR/slurmctld.log" 2>&1 ||
        die "slurmctld failed to start" "$DIR/slurmctld.log"
    slurmd -c -f "$CONF" </dev/null >>"$DIR/slurmd.log" 2>&1 || die "slurmd failed to start" "$DIR/slurmd.log"

    state=
    deadline=$((SECONDS + START_TIMEOUT))
    while ((SECONDS < deadline)); do
        state=$(node_state)
        [[ $state == idle ]] && break
        alive "$DIR/slurmctld.pid" slurmctld || launched slurmctld >/dev/null ||
            die "slurmctld exited" "$DIR/slurmctld.log"
        alive "$DIR/slurmd.pid" slurmd || launched slurmd >/dev/null || die "slurmd exited" "$DIR/slurmd.log"
        sleep 0.2
    done
    [[ $state == idle ]] ||
        die "the node is not idle after ${START_TIMEOUT} s (state: ${state:-no answer})" \
            "$DIR/slurmctld.log" "$DIR/slurmd.log"
    alive "$DIR/slurmctld.pid" slurmctld && alive "$DIR/slurmd.pid" slurmd ||
        die "the node is idle but our daemons are gone" "$DIR/slurmctld.log" "$DIR/slurmd.log"
    echo "export SLURM_CONF=$CONF"
}

stop_daemon() {  # stop_daemon NAME: SIGTERM, then SIGKILL after 15 s; a daemon still starting (no pid file yet) too
    local pidfile=$DIR/$1.pid pids=() pid left
    alive "$pidfile" "$1" && pids+=("$(<"$pidfile")")
    mapfile -t -O "${#pids[@]}" pids < <(launched "$1" || true)
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for _ in $(seq 150); do
        left=()
        for pid in "${pids[@]}"; do
            live "$pid" "$1" && left+=("$pid")
        done
        [[ ${#left[@]} -eq 0 ]] && { rm -f "$pidfile"; return 0; }
        sleep 0.1
    done
    echo "slurm_localhost.sh: $1 (${left[*]}) ignored SIGTERM for 15 s: killing it" >&2
    kill -KILL "${left[@]}" 2>/dev/null || true
    rm -f "$pidfile"
}

stop() {
    if alive "$DIR/slurmctld.pid" slurmctld && alive "$DIR/slurmd.pid" slurmd; then
        local jobs
        jobs=$(SLURM_CONF=$CONF timeout 10 squeue -h -o %i 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            [[ ${1:-} == quiet ]] || echo "cancelling the jobs left: $(echo "$jobs" | tr '\n' ' ')" >&2
            # shellcheck disable=SC2086
            SLURM_CONF=$CONF timeout 10 scancel $jobs 2>/dev/null || true
            for _ in $(seq 100); do  # KillWait=5 plus the time to clean up
                [[ -z $(SLURM_CONF=$CONF timeout 10 squeue -h -o %i 2>/dev/null || true) ]] && break
                sleep 0.2
            done
        fi
    fi
    stop_daemon slurmd
    stop_daemon slurmctld
}

[[ $# -eq 2 && ($1 == start || $1 == stop) ]] || die "usage: $0 start|stop DIR"
export PATH=$PATH:/usr/sbin:/sbin  # the daemons live in sbin, which a non-login root shell may lack
if [[ $1 == stop && ! -d $2 ]]; then
    exit 0  # nothing was started there
fi
mkdir -p "$2"
DIR=$(cd "$2" && pwd -P)
CONF=$DIR/slurm.conf
"$1"
