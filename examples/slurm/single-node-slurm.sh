#!/usr/bin/env bash
# Start a throw-away single-node Slurm (munged + slurmctld + slurmd) for trying the examples and for the
# `slurm`-marked test. Needs root and Debian's slurm-wlm and munge packages:
#   apt-get install slurm-wlm munge
#   eval "$(examples/slurm/single-node-slurm.sh start)"   # exports SLURM_CONF
#   sinfo; sbatch ...; examples/slurm/single-node-slurm.sh stop
# Everything lives under $PFS_SLURM_DIR (default /tmp/pfs-slurm); /etc/slurm is not touched.
set -euo pipefail
DIR=${PFS_SLURM_DIR:-/tmp/pfs-slurm}
CONF=$DIR/slurm.conf
cmd=${1:-start}

stop() {
    for p in slurmd slurmctld munged; do
        if [ -f "$DIR/$p.pid" ]; then
            kill "$(cat "$DIR/$p.pid")" 2>/dev/null || true
            rm -f "$DIR/$p.pid"
        fi
    done
}

if [ "$cmd" = stop ]; then
    stop
    exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "single-node-slurm: needs root" >&2; exit 1; }
for b in munged slurmctld slurmd sinfo; do
    command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || { echo "single-node-slurm: $b missing (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
PATH=/usr/sbin:$PATH
mkdir -p "$DIR"/{state,spool,log,munge,munge-key}
chmod 755 "$DIR/munge"; chmod 700 "$DIR/munge-key"
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10 ))

cat > "$CONF" <<CONF
ClusterName=pfs-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# cgroup.conf is read even with the non-cgroup plugins.
printf "CgroupPlugin=autodetect\nIgnoreSystemd=yes\n" > "$DIR/cgroup.conf"

stop
[ -f "$DIR/munge-key/munge.key" ] || { dd if=/dev/urandom of="$DIR/munge-key/munge.key" bs=1024 count=1 status=none; chmod 400 "$DIR/munge-key/munge.key"; }
munged --force --key-file="$DIR/munge-key/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge-key/munge.seed"
export SLURM_CONF=$CONF
slurmctld -f "$CONF"
slurmd -f "$CONF"
for _ in $(seq 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        echo "export SLURM_CONF=$CONF"
        exit 0
    fi
    sleep 0.5
done
echo "single-node-slurm: node did not become idle; see $DIR/log" >&2
sinfo >&2 || true
exit 1
