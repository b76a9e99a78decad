#!/usr/bin/env bash
# The compiled core's Rust checks (`make test` runs them before pytest): clippy with warnings as
# errors, `cargo test` of the library crate (native/core: temp trees, FIFOs, EMFILE, forks, ...), and
# the thread pool's tests under miri, which checks the borrowed-work protocol for undefined
# behaviour (the fork test is skipped there: miri does not fork).
set -euo pipefail
cd "$(dirname "$0")/../native"
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test -p pfs-core --quiet
if cargo +nightly miri --version >/dev/null 2>&1; then
    # pool threads live for the process (leaks by design); the sysroot is built once (cargo miri setup; needs rust-src, installed with the miri component)
    RUST_BACKTRACE=0 MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-ignore-leaks}" cargo +nightly miri test -p pfs-core --quiet --test pool
else
    # scripts/ensure-tools.sh (run by `make test` first) installs miri where rustup and the network allow;
    # where they do not, the pool's tests have run natively above and the suite goes on.
    echo "test-native: miri is not available (scripts/ensure-tools.sh could not install it: rustup component add --toolchain nightly miri rust-src); the pool's tests ran natively only" >&2
fi
