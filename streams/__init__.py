"""Faust app, agents and RocksDB tables: episode state as a fold of events."""
