# The compactor with Java 17 for Spark. Build: docker build -t kafka-lake-compactor .
FROM python:3.12-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/compactor
COPY pyproject.toml README.md ./
COPY compactor ./compactor
COPY streaming ./streaming
RUN pip install --no-cache-dir . \
 && useradd --create-home --uid 10001 compactor \
 && mkdir -p /data && chown compactor /data
USER compactor
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
ENTRYPOINT ["compactor"]
CMD ["run", "--config", "/etc/compactor/compactor.properties"]
