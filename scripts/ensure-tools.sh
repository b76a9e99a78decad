#!/usr/bin/env bash
# System tools the test suite uses besides Python packages: OpenSSH server (SFTP tests),
# setpriv (util-linux, permission tests), strace (counting the system calls of a pruned scan)
# and helm (chart tests). Installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v strace >/dev/null 2>&1 || missing+=(strace)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null
fi
if [ -x scripts/ensure-helm.sh ]; then ./scripts/ensure-helm.sh; fi
