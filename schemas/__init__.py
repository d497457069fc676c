"""Avro schemas, the registry-free codec and the event model of trialog."""
