#!/bin/bash
# Probe the NAS harness: pstat at several concurrencies on one tree's file paths, caches
# dropped (nas.sh remount) before each run, then an auto-tuned `pfs scan` of the same tree.
#   run_probe.sh [TREE] [CONCURRENCIES...]     default /mnt/nas/bal20k  1 8 32 64 128
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NAS=${NAS_SH:-/work/shared/nas/nas.sh}
TREE=${1:-/mnt/nas/bal20k}; shift || true
LEVELS=${*:-1 8 32 64 128}
OUT=${PROBE_OUT:-/tmp/pstat-probe}
mkdir -p "$OUT"
cold() {  # nas.sh remount, or (mount busy: another session) drop the kernel caches; gluster's own expire in 1 s
    if "$NAS" remount >/dev/null 2>&1; then COLD=remount; else sync; echo 3 > /proc/sys/vm/drop_caches; sleep 2; COLD=drop_caches; fi
}
gcc -O2 -Wall -Wextra -pthread -o "$OUT/pstat" "$HERE/pstat.c"
LIST="$OUT/$(basename "$TREE").paths"
if [ ! -s "$LIST" ]; then
    cold
    find "$TREE" -type f > "$LIST"   # taken once; every run stats the same list
fi
echo "# $(date -u +%FT%TZ) tree=$TREE paths=$(wc -l < "$LIST") load=$(cut -d' ' -f1-3 /proc/loadavg)"
for t in $LEVELS; do
    cold
    echo "$("$OUT/pstat" -t "$t" < "$LIST") load=$(cut -d' ' -f1 /proc/loadavg) caches=$COLD"
done
if [ -z "${NO_SCAN:-}" ]; then
    # pfs scan on a running 2-worker cluster (start-up is not the storage's), auto-tuned
    # (no PFS_THREADS), caches dropped after the cluster is up.
    env -u PFS_THREADS NAS_SH="$NAS" "$REPO/.venv/bin/python" "$HERE/scan_probe.py" "$TREE" "$OUT/scan"
fi
