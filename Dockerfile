# mirrorgate's container image: one image for `mirrorgate serve`, `serve --no-worker` and
# `worker`, with the sqs and pubsub extras installed so one build serves every queue backend,
# and the otel extra, so traces need only the OTEL_* variables (off without them), and the
# postgres extra, for a fleet's state store (MIRRORGATE_DATABASE_URL).
#
# Two stages. The first builds mirrorgate's wheel and installs it, with its extras, into a venv
# at /opt/mirrorgate; the second copies only that venv onto the same slim base, so no compiler,
# pip cache, source tree or wheel reaches the shipped image. Both stages use the same exact
# base tag (the venv's interpreter is a link to the base image's python). Pin it further by
# digest when you build for production: python:3.11.14-slim-bookworm@sha256:<digest>.
#
# The process runs as the numeric user 10001 (so Kubernetes' runAsNonRoot can verify it) and
# writes nothing outside MIRRORGATE_DATA_DIR (the embedded file store, when used), so the
# root filesystem can be mounted read-only.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src

# The venv gets no pip or setuptools of its own: the base image's pip installs into it
# (--python), so the shipped venv holds mirrorgate and its dependencies only. The wheel is
# installed by its exact path, never by name from an index, with both queue extras, otel and
# postgres (the fleet's state store).
RUN python -m venv --without-pip /opt/mirrorgate \
 && python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && wheel="$(ls /wheels/mirrorgate-*.whl)" \
 && python -m pip --python /opt/mirrorgate/bin/python install --no-cache-dir \
        "${wheel}[sqs,pubsub,otel,postgres]" \
 && /opt/mirrorgate/bin/mirrorgate --help > /dev/null


FROM ${PYTHON_IMAGE}

RUN groupadd --system --gid 10001 mirrorgate \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/mirrorgate --create-home \
        --shell /usr/sbin/nologin mirrorgate \
 && install --directory --owner 10001 --group 10001 --mode 0750 /var/lib/mirrorgate

COPY --from=build /opt/mirrorgate /opt/mirrorgate

# Listen on every interface inside the container (the code's default is loopback only), log
# JSON lines, and keep the embedded file store in a directory the user owns.
ENV PATH=/opt/mirrorgate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MIRRORGATE_LISTEN=0.0.0.0:8080 \
    MIRRORGATE_WORKER_LISTEN=0.0.0.0:8081 \
    MIRRORGATE_DATA_DIR=/var/lib/mirrorgate \
    MIRRORGATE_LOG_FORMAT=json

USER 10001:10001
WORKDIR /home/mirrorgate
EXPOSE 8080 8081

ENTRYPOINT ["mirrorgate"]
CMD ["serve"]
