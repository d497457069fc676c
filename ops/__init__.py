"""Operations: the `trialog` CLI and the local stack (Docker, Kafka, Jaeger, images)."""
