#!/bin/sh
# Formats KRaft storage on first start, then runs a combined broker+controller in the foreground.
# Expects: /opt/kafka/libs (jars), JAVA_HOME, and /etc/kafka/server.properties (all mounted read-only).
set -eu
DATA_DIR="${KAFKA_DATA_DIR:-/var/lib/kafka}"
CONFIG=/tmp/server.properties
sed "s|@DATA_DIR@|${DATA_DIR}|" /etc/kafka/server.properties > "$CONFIG"
mkdir -p "$DATA_DIR"
if [ ! -f "$DATA_DIR/meta.properties" ]; then
  "$JAVA_HOME/bin/java" -cp '/opt/kafka/libs/*' kafka.tools.StorageTool format \
    -t "${KAFKA_CLUSTER_ID:-trialog-kafka-cluster1}" -c "$CONFIG" --ignore-formatted
fi
exec "$JAVA_HOME/bin/java" ${KAFKA_HEAP_OPTS:--Xmx512m -Xms128m} -XX:+UseG1GC \
  -Dlog4j2.configurationFile=/etc/kafka/log4j2.properties -cp '/opt/kafka/libs/*' kafka.Kafka "$CONFIG"
