"""The local single-node stack: each component installs, starts, stops and reports its health."""
