#!/usr/bin/env bash
# `make test-multinode`: the multinode tests on three client hosts of this machine, set up and torn down.
#
#   1. the tools (scripts/ensure-multinode.sh: glusterfs server and client, sshfs, sshd, gcc);
#   2. the NAS harness (../shared/nas, or $NAS_HARNESS): used as it is if it is up already (a developer's),
#      else copied to build/nas (shared/ may be read-only: nas.sh builds its netdelay beside itself) and
#      brought up at $MN_RTT_US of added round trip (default 1000), and brought down again at the end;
#   3. scripts/multinode.sh up 3 (three network-namespace hosts, each with its own glusterfs mount);
#   4. pytest -m multinode tests/test_multinode.py with PFS_REQUIRE_MULTINODE=1: a test that cannot run fails;
#   5. scripts/multinode.sh down, on failure too (an EXIT trap).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
SRC=${NAS_HARNESS:-$REPO/../shared/nas}
[ -x "$SRC/nas.sh" ] || [ -f "$SRC/nas.sh" ] || { echo "test-multinode: no NAS harness at $SRC (set NAS_HARNESS)" >&2; exit 1; }
SRC=$(cd "$SRC" && pwd)
[ "$(id -u)" = 0 ] || { echo "test-multinode: needs root (network namespaces, FUSE mounts)" >&2; exit 1; }
./scripts/ensure-multinode.sh

NAS=$SRC/nas.sh started_nas=
if ! "$NAS" status >/dev/null 2>&1; then
    rm -rf build/nas && mkdir -p build/nas && cp "$SRC"/*.sh "$SRC"/*.c "$SRC"/*.py build/nas/
    NAS=$REPO/build/nas/nas.sh started_nas=1
    "$NAS" up "${MN_RTT_US:-1000}" >/dev/null
fi
cleanup() {
    local rc=$?
    ./scripts/multinode.sh down >/dev/null || rc=1
    if [ -n "$started_nas" ]; then "$NAS" down >/dev/null || rc=1; fi
    exit $rc
}
trap cleanup EXIT
# A host's glusterfs mount has once failed to come up on a loaded 2-core host (its worker then exits, and
# multinode.sh up says so at once): bring the hosts down and up once more before giving up.
if ! ./scripts/multinode.sh up 3 >/dev/null; then
    echo "test-multinode: the hosts did not come up; trying once more" >&2
    ./scripts/multinode.sh down >/dev/null || true
    ./scripts/multinode.sh up 3 >/dev/null
fi
NAS_HARNESS=$SRC PFS_REQUIRE_MULTINODE=1 .venv/bin/python -m pytest -q -m multinode tests/test_multinode.py ${PYTEST_ARGS:-}
