# syntax=docker/dockerfile:1
# pfs image: the pfs CLI and dask (scheduler, worker) with the s3 and sftp extras, versions pinned by
# requirements-dev.lock. Runs as the non-root user 10001 and works with a read-only root file system.
#   docker build -t pfs:0.1.0 .
#   docker build --build-arg EXTRA_PACKAGES="bokeh>=3.1 jupyterlab" -t pfs-jupyter:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ARG UV_VERSION=0.13.9
# Extra packages not in the lock: bokeh serves the Dask dashboard; add jupyterlab for the chart's Jupyter.
ARG EXTRA_PACKAGES="bokeh>=3.1"
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_NO_CACHE=1 VIRTUAL_ENV=/opt/pfs
# cargo builds the compiled core (native/, maturin is the build backend); only this stage has it.
RUN apt-get update && apt-get install -y --no-install-recommends cargo && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir "uv==${UV_VERSION}" && uv venv --python /usr/local/bin/python3.11 /opt/pfs
WORKDIR /src
# Dependencies first (cached layer): the project's s3,sftp dependency set, constrained to the lock's pins.
COPY pyproject.toml requirements-dev.lock ./
RUN uv pip install -c requirements-dev.lock -r pyproject.toml --extra s3 --extra sftp ${EXTRA_PACKAGES}
# Then the package itself.
COPY . .
RUN uv pip install --no-deps . && /opt/pfs/bin/pfs --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="pfs" \
      org.opencontainers.image.description="Parallel file-system tools on Dask" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 10001 pfs && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/pfs pfs
COPY --from=build /opt/pfs /opt/pfs
ENV PATH=/opt/pfs/bin:$PATH VIRTUAL_ENV=/opt/pfs HOME=/home/pfs PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 DASK_TEMPORARY_DIRECTORY=/tmp PFS_THREADS=64
USER 10001:10001
WORKDIR /home/pfs
# 8786 scheduler, 8787 dashboard, 8888 Jupyter.
EXPOSE 8786 8787 8888
# `docker run IMAGE scan ...` runs pfs; `--entrypoint dask IMAGE scheduler|worker ...` runs Dask
# (the Helm chart sets the command per container).
ENTRYPOINT ["pfs"]
CMD ["--help"]
