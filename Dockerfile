# syntax=docker/dockerfile:1
# pfs image: the pfs CLI and dask (scheduler, worker, dashboard) with the s3 and sftp extras, versions pinned by
# requirements-dev.lock. Runs as the non-root user 10001 and works with a read-only root file system.
# Build it with `make image` (scripts/build-image.sh): it builds the pfs wheel (the compiled core included) on
# the host with maturin, picks the base image, and runs podman (or docker) build; see docs/deploy.md.
#   BASE_IMAGE: any Debian-like image with CPython 3.11 and its venv module (python:3.11-slim, or the
#               Debian bookworm base scripts/build-image.sh makes with mmdebstrap when no registry is reachable)
#   PYTHON:     the interpreter in BASE_IMAGE (/usr/local/bin/python3.11 in python:3.11-slim,
#               /usr/bin/python3.11 in Debian's)
ARG BASE_IMAGE=python:3.11-slim
ARG PYTHON=/usr/local/bin/python3.11

FROM ${BASE_IMAGE} AS build
ARG PYTHON
ARG UV_VERSION=0.13.9
# Extra packages not in pfs's dependencies, e.g. "jupyterlab" for the chart's Jupyter (unpinned: not in the lock).
ARG EXTRA_PACKAGES=""
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never VIRTUAL_ENV=/opt/pfs
# The build host's CA bundle, as a build secret (scripts/build-image.sh passes it): PyPI behind a TLS-inspecting
# proxy then works; the final image keeps only the base's own certificates.
ENV CA=/run/secrets/cacert
# uv from PyPI through the interpreter's own venv/pip (the Debian base has no pip of its own).
RUN --mount=type=secret,id=cacert if [ -s $CA ]; then export SSL_CERT_FILE=$CA PIP_CERT=$CA; fi \
    && ${PYTHON} -m venv /opt/uv && /opt/uv/bin/pip install --no-cache-dir --disable-pip-version-check -q \
        "uv==${UV_VERSION}" && /opt/uv/bin/uv venv -q --python ${PYTHON} /opt/pfs
# strip (binutils) for the last step; python:3.11-slim and the Debian base both have apt.
RUN command -v strip >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends binutils \
        >/dev/null && rm -rf /var/lib/apt/lists/*)
WORKDIR /src
# Dependencies first (a cached layer while the lock does not change): the runtime set of pyproject.toml with the
# s3 and sftp extras, constrained to the lock's pins.
COPY pyproject.toml requirements-dev.lock ./
RUN --mount=type=cache,target=/root/.cache/uv --mount=type=secret,id=cacert \
    if [ -s $CA ]; then export SSL_CERT_FILE=$CA; fi && /opt/uv/bin/uv pip install -c requirements-dev.lock -r pyproject.toml --extra s3 --extra sftp ${EXTRA_PACKAGES}
# Then pfs itself: the wheel scripts/build-image.sh built on the host (maturin, the host's cargo: Debian
# bookworm's cargo 1.63 is older than the core's rust-version).
COPY build/image/*.whl /src/wheels/
RUN /opt/uv/bin/uv pip install --no-deps --no-cache /src/wheels/*.whl
# What the image never uses, measured in docs/deploy.md: tests, C headers and sources of the binary packages;
# pyarrow's Flight RPC, its own S3/GCS/Azure/HDFS file systems and ORC (pfs reads object stores through fsspec;
# pyarrow.fs then lists them as not imported); bokeh's source maps and its extension compiler. Then the debug
# symbols of pyarrow's libraries (not of libraries auditwheel patched: numpy's OpenBLAS no longer loads), and
# pyarrow's duplicate copies of one library (wheels cannot hold symlinks). The imports at the end check the result.
RUN cd /opt/pfs/lib/python3.11/site-packages \
    && rm -rf pyarrow/include pyarrow/src pyarrow/tests numpy/_core/include numpy/_core/tests numpy/*/tests \
        pyarrow/*flight* pyarrow/libarrow_s3.so* pyarrow/_s3fs.* pyarrow/_gcsfs.* pyarrow/_azurefs.* \
        pyarrow/_hdfs.* pyarrow/_orc.* pyarrow/_dataset_orc.* pyarrow/_pyarrow_cpp_tests.* \
        bokeh/server/static/js/*.map bokeh/server/static/js/compiler* \
    && find . \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' \) -delete \
    && find pyarrow -name '*.so*' -type f -exec strip --strip-unneeded {} + \
    && (cd pyarrow && for f in lib*.so.*.*.*; do b=${f%.*.*}; for d in "$b" "${b%.*}"; do \
        if [ "$d" != "$f" ] && cmp -s "$f" "$d"; then ln -sf "$f" "$d"; fi; done; done) \
    && cd / && /opt/pfs/bin/pfs --help >/dev/null \
    && /opt/pfs/bin/python -c "import operators._native, s3fs, paramiko, pyarrow.dataset, pyarrow.fs, pyarrow.parquet, \
        duckdb, numpy, PIL.Image, distributed.dashboard.scheduler"

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="pfs" \
      org.opencontainers.image.description="Parallel file-system tools on Dask" \
      org.opencontainers.image.licenses="Apache-2.0"
# The user by hand: Debian's minbase may lack useradd.
RUN echo "pfs:x:10001:10001:pfs:/home/pfs:/usr/sbin/nologin" >> /etc/passwd \
    && echo "pfs:x:10001:" >> /etc/group && mkdir -p /home/pfs && chown 10001:10001 /home/pfs
COPY --from=build /opt/pfs /opt/pfs
ENV PATH=/opt/pfs/bin:$PATH VIRTUAL_ENV=/opt/pfs HOME=/home/pfs PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 DASK_TEMPORARY_DIRECTORY=/tmp PFS_THREADS=64
USER 10001:10001
WORKDIR /home/pfs
# 8786 scheduler, 8787 dashboard, 8788 worker HTTP (/health, /metrics), 8888 Jupyter.
EXPOSE 8786 8787 8788 8888
# `podman run IMAGE scan ...` runs pfs; `--entrypoint dask IMAGE scheduler|worker ...` runs Dask
# (the Helm chart sets the command per container).
ENTRYPOINT ["pfs"]
CMD ["--help"]
