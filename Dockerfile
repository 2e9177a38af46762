# syntax=docker/dockerfile:1
# Ferry image: `ferry coordinator | worker | portal | migrate`. The `replay` target adds a Java
# runtime for the Spark offset replay (`ferry replay`).

FROM python:3.11-slim AS build
# A C compiler for the optional speedups of the worker and the gateway (setup.py, docs/operations.md).
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY ferry ferry
COPY worker worker
COPY coordinator coordinator
COPY portal portal
COPY migrations migrations
COPY replay replay
COPY gateway gateway
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 FERRY_METRICS_HOST=0.0.0.0 FERRY_PORTAL_HOST=0.0.0.0 \
    FERRY_GATEWAY_HOST=0.0.0.0
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
 && groupadd --gid 10001 ferry && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin ferry
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080 8081 9101 9102
ENTRYPOINT ["ferry"]
CMD ["--help"]

FROM runtime AS replay
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --no-cache-dir 'pyspark>=4.0,<5' 'pyarrow>=15' 'pandas>=2.1,<3' 'matplotlib>=3.8,<4'
USER 10001:10001
ENV PYSPARK_PYTHON=python3 HOME=/tmp
