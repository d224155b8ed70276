#!/usr/bin/env bash
# Run a command against a throwaway single-node SLURM cluster on this machine.
#
#   tests/cluster/with_slurm.sh COMMAND [ARGS...]
#
# As root: installs the Debian packages when missing (slurmctld slurmd slurm-client munge slurmdbd
# mariadb-server), writes /etc/slurm/{slurm,slurmdbd,gres}.conf, starts munged, a private MariaDB,
# slurmdbd, slurmctld and slurmd on loopback in the background, runs COMMAND with
# LMGRID_SLURM_CLUSTER=<state dir>, and on exit (success, failure or signal) cancels the cluster's
# jobs and stops exactly the daemons it started, by process id. It exits with COMMAND's status.
#
# Not root, or a SLURM/munge already on this machine: runs COMMAND with LMGRID_SLURM_SKIP=<reason>
# and starts nothing, so the test skips with the reason (or fails when LMGRID_REQUIRE_CLUSTER=1).
#
# Why each setting (found on this kind of machine):
# - slurm.conf must be /etc/slurm/slurm.conf: the executor plugin's job step drops SLURM_CONF before srun.
# - proctrack/linuxproc + task/none: no cgroups in a container.
# - accounting through slurmdbd + MariaDB: the plugin's default status check is sacct (as on real clusters).
# - MinJobAge=300: finished jobs stay visible to squeue/scontrol while Snakemake polls.
# - the node offers one GPU GRES of type testgpu (File=/dev/null: no device) so that a job's `gpu` and
#   `gpu_model` resources are scheduled as on a GPU cluster; the job itself runs on the CPU.
set -euo pipefail

PACKAGES=(munge slurm-client slurmctld slurmd slurmdbd mariadb-server)
MARK="# written by lmgrid tests/cluster/with_slurm.sh (throwaway test cluster; safe to delete)"
CLUSTER_NAME=lmgridci
DB_PORT=${LMGRID_SLURM_DB_PORT:-33061}

log() { echo "[with_slurm] $*" >&2; }

[[ $# -ge 1 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

reason=""
if [[ $(id -u) -ne 0 ]]; then
    reason="needs root (installs Debian packages, writes /etc/slurm, starts daemons); run as root on a Debian machine"
elif ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then
    reason="needs a Debian/Ubuntu machine (apt-get) to install SLURM"
elif [[ -e /etc/slurm/slurm.conf ]] && ! grep -qF "$MARK" /etc/slurm/slurm.conf; then
    reason="/etc/slurm/slurm.conf exists and was not written by this script (a real cluster node?); left alone"
else
    for d in slurmctld slurmd slurmdbd munged; do
        if pgrep -x "$d" >/dev/null; then
            reason="a $d is already running on this machine; this script only manages daemons it starts"
            break
        fi
    done
fi
if [[ -n $reason ]]; then
    log "not starting a cluster: $reason"
    export LMGRID_SLURM_SKIP="$reason"
    exec "$@"
fi

# ---- packages -------------------------------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    log "installing ${missing[*]}"
    t0=$SECONDS
    # Packages must not start their services: this script starts (and stops) every daemon itself.
    own_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt_rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null; } \
        >/tmp/lmgrid-slurm-apt.log 2>&1 || apt_rc=$?
    [[ $own_policy -eq 1 ]] && rm -f /usr/sbin/policy-rc.d
    if [[ $apt_rc -ne 0 ]]; then
        tail -20 /tmp/lmgrid-slurm-apt.log >&2
        log "apt-get failed (exit $apt_rc); full log: /tmp/lmgrid-slurm-apt.log"
        exit 1
    fi
    log "installed in $((SECONDS - t0)) s"
fi

# ---- state, cleanup -------------------------------------------------------------------------------
STATE=$(mktemp -d /tmp/lmgrid-slurm.XXXXXX)
chmod 755 "$STATE"
mapfile -t STEPS_BEFORE < <(pgrep -x slurmstepd || true)
PIDS=()       # daemons started here, in start order
NAMES=()
WROTE=()      # config files written here (removed at exit)

start_daemon() {  # name, command...: start in the background, remember its pid
    local name=$1; shift
    # Own session: a signal to this script's process group (e.g. from `timeout`) must not stop the daemons
    # before cleanup has cancelled the jobs; cleanup stops them in order.
    setsid "$@" >"$STATE/$name.out" 2>&1 </dev/null &
    PIDS+=($!)
    NAMES+=("$name")
    log "started $name (pid $!)"
}

alive() { kill -0 "$1" 2>/dev/null; }

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [[ ${#PIDS[@]} -gt 0 ]] && command -v squeue >/dev/null; then
        # Cancel what is still queued or running before slurmd goes, so no job step outlives the cluster.
        local jobs
        jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
        if [[ -n ${jobs// } ]]; then
            log "cancelling leftover jobs: $jobs"
            timeout 10 scancel $jobs
            for _ in $(seq 20); do
                [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
                sleep 0.5
            done
        fi
    fi
    local i pid steps
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        pid=${PIDS[i]}
        if ! alive "$pid"; then  # e.g. `timeout` signalled the whole process group
            wait "$pid" 2>/dev/null
            log "${NAMES[i]} (pid $pid) had already exited"
            continue
        fi
        kill -TERM "$pid"
        for _ in $(seq 50); do alive "$pid" || break; sleep 0.2; done
        if alive "$pid"; then
            log "${NAMES[i]} (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL"
            kill -KILL "$pid"
        fi
        wait "$pid" 2>/dev/null
        log "stopped ${NAMES[i]} (pid $pid)"
    done
    # slurmstepd processes of this cluster's jobs (none existed before it started) must be gone too.
    for _ in $(seq 20); do
        steps=$(pgrep -x slurmstepd | grep -vxF -f <(printf '%s\n' "${STEPS_BEFORE[@]}" "") || true)
        [[ -z $steps ]] && break
        sleep 0.5
    done
    for pid in $steps; do
        local tree=$pid kids
        kids=$pid
        while [[ -n $kids ]]; do  # the job's processes too: they outlive a killed slurmstepd
            kids=$(for k in $kids; do pgrep -P "$k"; done | tr '\n' ' ')
            tree+=" $kids"
        done
        log "killing a leftover job step and its processes: $tree"
        kill -KILL $tree 2>/dev/null
    done
    for f in "${WROTE[@]}"; do rm -f "$f"; done
    if [[ $rc -ne 0 && -d $STATE ]]; then
        log "exit $rc: daemon logs kept in $STATE"
    else
        rm -rf "$STATE"
    fi
    exit "$rc"
}
CHILD=""
on_signal() {  # stop the command first (it may be mid-run), then the EXIT trap stops the daemons
    if [[ -n $CHILD ]] && alive "$CHILD"; then
        kill -TERM "$CHILD" 2>/dev/null
        wait "$CHILD" 2>/dev/null
    fi
    exit "$1"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

wait_for() {  # seconds, description, command...: poll until the command succeeds
    local limit=$1 what=$2; shift 2
    local t0=$SECONDS
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS - t0 >= limit)); then
            log "timed out after ${limit} s waiting for $what"
            for f in "$STATE"/*.out "$STATE"/*.log "$STATE"/mysqlrun/*.log; do [[ -f $f ]] && { echo "== $f"; tail -15 "$f"; } >&2; done
            return 1
        fi
        sleep 0.3
    done
}

write_conf() {  # path, mode: stdin -> path
    cat >"$1"
    chmod "$2" "$1"
    WROTE+=("$1")
}

# ---- munge ----------------------------------------------------------------------------------------
if [[ ! -s /etc/munge/munge.key ]]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 755 /run/munge
install -d -o munge -g munge -m 700 /var/lib/munge /var/log/munge
start_daemon munged setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --foreground
wait_for 20 "munged" bash -c 'munge -n | unmunge'

# ---- MariaDB (private data folder, loopback only) + slurmdbd ----------------------------------------
install -d -o mysql -g mysql -m 755 "$STATE/mysqlrun"
mariadb-install-db --no-defaults --user=mysql --datadir="$STATE/mysql" --auth-root-authentication-method=socket \
    --skip-test-db >"$STATE/mariadb-install.out" 2>&1
start_daemon mariadbd /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$STATE/mysql" \
    --socket="$STATE/mysqlrun/mysqld.sock" --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
    --pid-file="$STATE/mysqlrun/mysqld.pid" --innodb-buffer-pool-size=32M --log-error="$STATE/mysqlrun/mariadbd.log"
wait_for 60 "MariaDB" mariadb-admin --socket="$STATE/mysqlrun/mysqld.sock" ping
DB_PASS=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
mariadb --socket="$STATE/mysqlrun/mysqld.sock" -uroot -e \
    "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

mkdir -p /etc/slurm
write_conf /etc/slurm/slurmdbd.conf 600 <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
LogFile=$STATE/slurmdbd.log
PidFile=$STATE/slurmdbd.pid
EOF
start_daemon slurmdbd /usr/sbin/slurmdbd -D

# ---- slurmctld + slurmd ---------------------------------------------------------------------------
# The node line is what slurmd detects on this machine, renamed to localhost.
node=$(slurmd -C | head -1 | sed -E 's/^NodeName=[^ ]+ //')
write_conf /etc/slurm/gres.conf 644 <<EOF
$MARK
NodeName=localhost Name=gpu Type=testgpu File=/dev/null Count=1
EOF
write_conf /etc/slurm/slurm.conf 644 <<EOF
$MARK
ClusterName=$CLUSTER_NAME
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=300
KillWait=5
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoreFlags=job_comment
AccountingStorageTRES=gres/gpu
NodeName=localhost NodeAddr=127.0.0.1 $node Gres=gpu:testgpu:1 State=UNKNOWN
PartitionName=ci Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
mkdir -p "$STATE/slurmctld" "$STATE/slurmd"
wait_for 30 "slurmdbd" sacctmgr -n list cluster
sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
start_daemon slurmctld /usr/sbin/slurmctld -D -i
wait_for 30 "slurmctld" scontrol ping
start_daemon slurmd /usr/sbin/slurmd -D -N localhost
wait_for 30 "node localhost idle" bash -c '[[ $(sinfo -h -n localhost -o %T) == idle ]]'
log "cluster up: $(sinfo -h -o '%P %D %T %C %G') (state: $STATE)"

# ---- the command ------------------------------------------------------------------------------------
export LMGRID_SLURM_CLUSTER="$STATE"
set +e
"$@" </dev/null &   # in the background so that a signal reaches the traps at once
CHILD=$!
wait "$CHILD"
exit $?
