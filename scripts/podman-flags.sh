# Sourced by scripts/build-image.sh (and read by tests/test_image.py): the podman flags these machines need.
# crun, podman's default runtime, fails here (its default RLIMIT_NOFILE exceeds the hard limit of 20000, then
# "cgroups in hybrid mode not supported"); runc with explicit ulimits works. Host network: no CNI/netavark set-up.
PODMAN_FLAGS=(--runtime runc --ulimit nofile=1024:20000 --ulimit nproc=1024:4096 --network host)
