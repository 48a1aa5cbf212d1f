# syntax=docker/dockerfile:1
# The Spark image of the compose stack: master, workers and the Spark Connect server.
#
# Spark itself comes from the pyspark wheel (its jars, bin/spark-class, bin/spark-submit),
# so the Spark that runs the cluster is exactly the pyspark the provider is tested with. Executors run
# copycat tasks in Python 3.11 (the Airflow image's Python: driver and executors must share the minor
# version) at /usr/local/bin/python3 (the same path as in the Airflow image: PYSPARK_PYTHON is one
# value for both). Runs as uid 50000, gid 0 -- Airflow's user -- so files on the shared volumes
# belong to one user whichever side wrote them.
#
# Build context: the repository root (see docker/compose.yaml); spark.Dockerfile.dockerignore
# keeps the context to the files below.
FROM eclipse-temurin:17.0.13_11-jre-jammy AS java

FROM python:3.11.11-slim-bookworm

COPY --from=java /opt/java/openjdk /opt/java/openjdk
ENV JAVA_HOME=/opt/java/openjdk \
    PATH=/opt/java/openjdk/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# procps: Spark's launch scripts call ps
RUN apt-get update \
    && apt-get install -y --no-install-recommends procps \
    && rm -rf /var/lib/apt/lists/*

COPY docker/constraints.txt docker/spark/requirements.txt /opt/copycat/
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -r /opt/copycat/requirements.txt -c /opt/copycat/constraints.txt \
    && python -c "import pyspark, sys; print('pyspark', pyspark.__version__, 'python', sys.version)"

ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python3 \
    SPARK_LOG_DIR=/tmp/spark-logs \
    SPARK_PID_DIR=/tmp \
    SPARK_WORKER_DIR=/opt/spark-work
ENV PATH=$SPARK_HOME/bin:$SPARK_HOME/sbin:$PATH

COPY docker/spark/healthcheck.py /opt/copycat/healthcheck.py

# the user, its work directory and the mount points of the shared volumes (a new named volume takes
# the owner of its mount point, so both images make them 50000:0)
RUN useradd --uid 50000 --gid 0 --create-home --shell /bin/bash copycat \
    && mkdir -p /opt/spark-work /data /mnt/lake /mnt/mirror /var/log/app \
    && chown -R 50000:0 /opt/spark-work /data /mnt /var/log/app \
    && chmod -R g+rwX /opt/spark-work /data /mnt /var/log/app

USER 50000
# the Spark Connect server (a driver) may write spark-warehouse/ into its working directory
WORKDIR /home/copycat
