#!/usr/bin/env bash
# What the multinode tests need besides Python packages (tests/test_multinode.py, `make test-multinode`):
# the ../shared/nas harness's tools (glusterfs server and client, sshfs, OpenSSH server, gcc for its
# netdelay link) and util-linux (unshare, nsenter, mountpoint). Installs what is missing (as root, apt).
set -euo pipefail
missing=()
command -v glusterd >/dev/null 2>&1 || missing+=(glusterfs-server)
command -v mount.glusterfs >/dev/null 2>&1 || [ -x /sbin/mount.glusterfs ] || missing+=(glusterfs-client)
command -v sshfs >/dev/null 2>&1 || missing+=(sshfs)
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "ensure-multinode.sh: needs root to install: ${missing[*]}" >&2; exit 1; }
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null
fi
