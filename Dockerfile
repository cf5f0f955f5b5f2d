# dra-solver container image: one image for all three components (the solver service, the
# companion controllers and the kubelet plugin); the manifests in deploy/ pick the subcommand.
#
#   docker build -t dra-solver:dev .
#
# Two stages so the final image holds the installed virtualenv and nothing used to build it:
# no pip cache, no source tree, no compilers (every dependency ships manylinux wheels, so the
# build stage needs none either).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/dra-solver
WORKDIR /src
# Dependencies first, from the project metadata alone (with empty stand-in packages), so that
# editing the source does not re-download OR-Tools and friends.
# dra_solver/ is the one import name: an __init__ and a symbolic link per folder below.
COPY pyproject.toml README.md ./
COPY dra_solver/ dra_solver/
RUN /opt/dra-solver/bin/pip install --upgrade pip \
 && mkdir model service controllers kubeletplugin cli \
 && touch model/__init__.py service/__init__.py controllers/__init__.py kubeletplugin/__init__.py cli/__init__.py \
 && /opt/dra-solver/bin/pip install . \
 && /opt/dra-solver/bin/pip uninstall -y dra-solver \
 && rm -rf model service controllers kubeletplugin cli build
COPY model/ model/
COPY service/ service/
COPY controllers/ controllers/
COPY kubeletplugin/ kubeletplugin/
COPY cli/ cli/
RUN /opt/dra-solver/bin/pip install --no-deps . \
 && /opt/dra-solver/bin/dra-solver --help >/dev/null \
 && /opt/dra-solver/bin/dra-solver serve --help >/dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="dra-solver" \
      org.opencontainers.image.description="Exact, fast, optimal Kubernetes DRA device allocation with CP-SAT" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/dra-solver/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/dra-solver /opt/dra-solver
# Numeric non-root user (the distroless "nonroot" id) so runAsNonRoot can verify it without
# /etc/passwd. The kubelet plugin DaemonSet overrides this to root: it writes sockets and CDI
# specs into root-owned host directories.
USER 65532:65532
EXPOSE 50051 9090
ENTRYPOINT ["dra-solver"]
CMD ["--help"]
