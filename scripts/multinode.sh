#!/bin/bash
# multinode.sh: a pfs "cluster" of client hosts on this one machine, for real multi-node runs.
#
#   multinode.sh up [N]   N client hosts (default 3, max 9); hosts above N are stopped (idempotent)
#   multinode.sh status   each part's state; exit 1 unless all are up
#   multinode.sh env      print PFS_SCHEDULER=... and MN_MOUNT=... for the driver
#   multinode.sh down     stop workers, scheduler, mounts, namespaces; undo routes (idempotent)
#
# Each client host is a network namespace pfs-hostI (10.202.0.1I on a bridge pfsmn0, 10.202.0.1 in
# the root namespace) running one `dask worker` in a private mount namespace, with its OWN glusterfs
# FUSE client of the ../shared/nas volume mounted at $MN_MOUNT (the same path on every host, as on a
# real cluster). The scheduler and the driver's own mount (same path) are in the root namespace.
# Hosts reach the NAS (10.201.0.2, through the harness's delay link) with the root namespace as
# router: forwarding is enabled on pfsmn0 and nas0 only, and the nas namespace gets a route back.
# Needs root and the NAS harness up: /work/shared/nas/nas.sh up 1000.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${MN_PYTHON:-$REPO/.venv/bin/python}
DASK=${MN_DASK:-$(dirname "$PY")/dask}
NET=10.202.0 BR=pfsmn0 PORT=${MN_PORT:-8797}
ROOT_IP=$NET.1 NAS_NS=nas NAS_IP=10.201.0.2 NAS_NET=10.201.0.0/24 NAS_DEV=nas0 NAS_PEER=nas1
# "IP:vol", not "IP:/vol": nas.sh reaps leftover clients whose command line says --volfile-id=/vol.
VOLSPEC=$NAS_IP:vol
MNT=${MN_MOUNT:-/mnt/nas-mn}
RUN=/run/pfs-multinode
THREADS=${MN_NTHREADS:-4}  # Dask task slots per worker; PFS_THREADS (I/O threads) passes through if set
SCHED=tcp://$ROOT_IP:$PORT

die() { echo "multinode.sh: $*" >&2; exit 1; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() { for _ in $(seq "${2:-50}"); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
hostns() { echo "pfs-host$1"; }
has_ns() { ip netns list | grep -qw "^$1"; }
# Workers the scheduler knows, as "name address" lines (empty when it does not answer).
sched_workers() {
    "$PY" - "$SCHED" <<'EOF' 2>/dev/null
import sys
from distributed import Client
with Client(sys.argv[1], timeout="5s") as c:
    for addr, w in sorted(c.scheduler_info(n_workers=-1)["workers"].items()):
        print(w["name"], addr)
EOF
}
up_hosts() { local i; for i in 1 2 3 4 5 6 7 8 9; do has_ns "$(hostns $i)" && echo $i; done; }

check_nas() {
    [ "$(id -u)" = 0 ] || die "must run as root (network namespaces, mounts)"
    has_ns $NAS_NS && ip link show $NAS_DEV >/dev/null 2>&1 ||
        die "the NAS harness is not up: run /work/shared/nas/nas.sh up 1000"
    ip netns exec $NAS_NS ip link show $NAS_PEER >/dev/null 2>&1 || die "no $NAS_PEER in netns $NAS_NS"
    [ -x "$DASK" ] || die "no $DASK: run make setup"
}

net_up() {
    mkdir -p $RUN
    if ! ip link show $BR >/dev/null 2>&1; then
        ip link add $BR type bridge && ip addr add $ROOT_IP/24 dev $BR && ip link set $BR up ||
            die "cannot create bridge $BR"
    fi
    # Forward only between the bridge and the NAS link (not eth0); remember nas0's old setting.
    [ -s $RUN/nas0.forwarding ] || sysctl -n net.ipv4.conf.$NAS_DEV.forwarding > $RUN/nas0.forwarding
    sysctl -qw net.ipv4.conf.$BR.forwarding=1 net.ipv4.conf.$NAS_DEV.forwarding=1 ||
        die "cannot enable forwarding on $BR/$NAS_DEV"
    ip netns exec $NAS_NS ip route replace $NET.0/24 via 10.201.0.1 dev $NAS_PEER ||
        die "cannot add the route back to $NET.0/24 in netns $NAS_NS"
}

# The driver's mount (root namespace, "login node"): same path as on the hosts.
driver_mount() {
    mountpoint -q $MNT && return 0
    mkdir -p $MNT
    mount -t glusterfs -o log-file=$RUN/driver-glusterfs.log $VOLSPEC $MNT ||
        die "mount -t glusterfs $VOLSPEC $MNT failed (see $RUN/driver-glusterfs.log)"
}

scheduler_up() {
    alive $RUN/scheduler.pid && return 0
    PYTHONPATH=$REPO setsid "$DASK" scheduler --host $ROOT_IP --port $PORT --no-dashboard \
        >$RUN/scheduler.log 2>&1 </dev/null &
    echo $! > $RUN/scheduler.pid
    wait_for "grep -q 'Scheduler at' $RUN/scheduler.log" 100 ||
        die "scheduler did not start on $SCHED: $(tail -5 $RUN/scheduler.log)"
    echo "$SCHED" > $RUN/scheduler
}

host_up() {  # I
    local i=$1 ns ip veth
    ns=$(hostns "$i") ip=$NET.1$i veth=pfsmn-h$i
    if ! has_ns "$ns"; then
        ip netns add "$ns" || die "ip netns add $ns failed"
    fi
    if ! ip link show $veth >/dev/null 2>&1; then
        ip link add $veth type veth peer name eth0 netns "$ns" &&
            ip link set $veth master $BR up &&
            ip netns exec "$ns" ip addr add $ip/24 dev eth0 &&
            ip netns exec "$ns" ip link set eth0 up &&
            ip netns exec "$ns" ip link set lo up &&
            ip netns exec "$ns" ip route add $NAS_NET via $ROOT_IP || die "cannot wire $ns ($veth, $ip)"
    fi
    ip netns exec "$ns" timeout 5 bash -c "exec 3<>/dev/tcp/$NAS_IP/24007" 2>/dev/null ||
        die "$ns cannot reach glusterd at $NAS_IP:24007 (route via $ROOT_IP, forwarding on $BR/$NAS_DEV)"
    alive $RUN/host$i.pid && return 0
    mkdir -p $RUN/host$i
    # Private mount namespace: this host's own FUSE client at $MNT, invisible to the others.
    # shellcheck disable=SC2016
    ip netns exec "$ns" setsid unshare -m --propagation private sh -c '
        if mountpoint -q "$1"; then umount -l "$1" || exit 96; fi  # inherited driver mount
        mkdir -p "$1" && mount -t glusterfs -o log-file="$2/glusterfs.log" "$3" "$1" || exit 97
        exec env PYTHONPATH="$4" "$5" worker "$6" --host "$7" --name "host$8" --nworkers 1 --nthreads "$9" \
            --no-dashboard --memory-limit 0 --local-directory "$2"' \
        sh "$MNT" $RUN/host$i "$VOLSPEC" "$REPO" "$DASK" "$SCHED" "$ip" "$i" "$THREADS" \
        >$RUN/host$i.log 2>&1 </dev/null &
    echo $! > $RUN/host$i.pid
}

host_down() {  # I: every process in the namespace (worker, nanny, glusterfs client), then the namespace
    local i=$1 ns pids
    ns=$(hostns "$i")
    if has_ns "$ns"; then
        pids=$(ip netns pids "$ns")
        [ -n "$pids" ] && kill $pids 2>/dev/null
        wait_for '[ -z "$(ip netns pids '"$ns"')" ]' 75 || { kill -9 $(ip netns pids "$ns") 2>/dev/null; sleep 0.5; }
        [ -z "$(ip netns pids "$ns")" ] || die "processes in $ns did not exit: $(ip netns pids "$ns" | tr '\n' ' ')"
        ip netns del "$ns" || die "ip netns del $ns failed"
    fi
    ip link show pfsmn-h$i >/dev/null 2>&1 && ip link del pfsmn-h$i
    rm -rf $RUN/host$i $RUN/host$i.pid $RUN/host$i.log
}

up() {
    local n=${1:-3} i want
    [[ $n =~ ^[1-9]$ ]] || die "usage: multinode.sh up [N], 1 <= N <= 9"
    check_nas
    net_up
    driver_mount
    scheduler_up
    for i in $(up_hosts); do [ "$i" -gt "$n" ] && host_down "$i"; done
    for i in $(seq "$n"); do host_up "$i"; done
    want=$(seq -f 'host%g' "$n" | sort | tr '\n' ' ')
    local tries=0
    until [ "$(sched_workers | cut -d" " -f1 | sort | tr "\n" " ")" = "$want" ]; do
        for i in $(seq "$n"); do  # a host whose mount or worker failed: say so now, not after the wait
            alive $RUN/host$i.pid || die "host$i worker exited: $(tail -3 $RUN/host$i.log 2>/dev/null)"
        done
        tries=$((tries + 1))
        [ $tries -lt 150 ] ||
            die "the scheduler does not list exactly: $want(it lists: $(sched_workers | cut -d' ' -f1 | tr '\n' ' '))"
        sleep 0.2
    done
    status
}

status() {
    local bad=0 i ns pid src
    ok() { printf '%-10s %s\n' "$1" "$2"; }
    no() { printf '%-10s DOWN %s\n' "$1" "$2"; bad=1; }
    ip link show $BR >/dev/null 2>&1 && ok bridge "$BR $ROOT_IP/24" || no bridge $BR
    mountpoint -q $MNT && ok driver "$VOLSPEC on $MNT (root namespace)" || no driver "$MNT"
    alive $RUN/scheduler.pid && ok scheduler "$SCHED (pid $(cat $RUN/scheduler.pid))" || no scheduler "$SCHED"
    for i in $(up_hosts); do
        ns=$(hostns "$i")
        if alive $RUN/host$i.pid; then
            pid=$(cat $RUN/host$i.pid)
            src=$(nsenter -t "$pid" -m findmnt -n -o SOURCE,FSTYPE "$MNT" 2>/dev/null | tr -s ' ')
            [ -n "$src" ] && ok host$i "$ns $NET.1$i: worker pid $pid, $src on $MNT" || no host$i "$ns: no mount on $MNT"
        else
            no host$i "$ns: worker not running (log: $RUN/host$i.log)"
        fi
    done
    [ -n "$(up_hosts)" ] || no hosts "none"
    alive $RUN/scheduler.pid && ok workers "$(sched_workers | awk '{printf "%s=%s ", $1, $2}')"
    return $bad
}

down() {
    local i
    for i in $(up_hosts); do host_down "$i"; done
    if alive $RUN/scheduler.pid; then
        kill "$(cat $RUN/scheduler.pid)"
        wait_for "! alive $RUN/scheduler.pid" 50 || kill -9 "$(cat $RUN/scheduler.pid)" 2>/dev/null
    fi
    if mountpoint -q $MNT; then umount $MNT || die "umount $MNT failed (busy? see fuser -vm $MNT)"; fi
    ip link show $BR >/dev/null 2>&1 && ip link del $BR
    if has_ns $NAS_NS; then ip netns exec $NAS_NS ip route del $NET.0/24 2>/dev/null; fi
    if [ -s $RUN/nas0.forwarding ] && ip link show $NAS_DEV >/dev/null 2>&1; then
        sysctl -qw net.ipv4.conf.$NAS_DEV.forwarding="$(cat $RUN/nas0.forwarding)"
    fi
    rm -rf $RUN
    echo "multinode: down"
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) down ;;
    status) status ;;
    env) echo "PFS_SCHEDULER=$SCHED"; echo "MN_MOUNT=$MNT" ;;
    *) sed -n '2,7s/^# \{0,1\}//p' "$0"; exit 2 ;;
esac
