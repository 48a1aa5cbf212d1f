# syntax=docker/dockerfile:1
# Airflow 3 with the airflow-copycat provider, installed from this repository's source, and a Java
# runtime for spark-submit (the Spark provider's SparkSubmitHook runs the Spark driver here, in
# client deploy mode, on the Airflow worker: with the LocalExecutor of docker/compose.yaml, the
# scheduler's container).
#
# Versions: the base tag pins Airflow and Python; docker/constraints.txt pins every package the
# provider needs (the versions `make test` ran against), shared with docker/spark.Dockerfile so
# the driver and the executors run the same pyspark, pyarrow and confluent-kafka.
#
# Build context: the repository root (see docker/compose.yaml); airflow.Dockerfile.dockerignore
# keeps the context to the files below.
FROM eclipse-temurin:17.0.13_11-jre-jammy AS java

FROM apache/airflow:3.3.2-python3.11

USER root
COPY --from=java /opt/java/openjdk /opt/java/openjdk
# the mount points of the shared volumes, owned by Airflow's user as in the Spark image, and the
# provider's source tree (pip builds it in place)
RUN mkdir -p /data /mnt/lake /mnt/mirror /var/log/app /opt/copycat/src /opt/copycat/spark-conf \
    && chown -R airflow:0 /data /mnt /var/log/app /opt/copycat \
    && chmod -R g+rwX /data /mnt /var/log/app
USER airflow

ENV JAVA_HOME=/opt/java/openjdk \
    PATH=/opt/java/openjdk/bin:$PATH \
    PYSPARK_PYTHON=/usr/local/bin/python3 \
    SPARK_CONF_DIR=/opt/copycat/spark-conf

COPY --chown=airflow:0 docker/constraints.txt /opt/copycat/constraints.txt
COPY --chown=airflow:0 docker/airflow/spark-defaults.conf /opt/copycat/spark-conf/spark-defaults.conf
COPY --chown=airflow:0 pyproject.toml README.md /opt/copycat/src/
COPY --chown=airflow:0 airflow_copycat /opt/copycat/src/airflow_copycat
COPY --chown=airflow:0 spark_apps /opt/copycat/src/spark_apps

# The Spark provider pulls pyspark-client, which ships the same pyspark/*.py files as pyspark (an
# older version) and overwrites part of it: reinstall pyspark from the constraints afterwards
# (never uninstall pyspark-client: that deletes pyspark's files). The pip cache keeps pyspark's
# wheel, built once from its sdist.
RUN --mount=type=cache,target=/home/airflow/.cache/pip,uid=50000,gid=0 \
    pip install "apache-airflow==${AIRFLOW_VERSION}" -c /opt/copycat/constraints.txt "/opt/copycat/src[jdbc,cdc,distcp]" \
    && pip install --no-deps --force-reinstall "$(grep '^pyspark==' /opt/copycat/constraints.txt)" \
    && python -c "import airflow, pyspark, airflow_copycat, spark_apps; \
print('airflow', airflow.__version__, 'pyspark', pyspark.__version__)" \
    && test "pyspark==$(python -c 'import pyspark; print(pyspark.__version__)')" \
            = "$(grep '^pyspark==' /opt/copycat/constraints.txt)" \
    && java -version
