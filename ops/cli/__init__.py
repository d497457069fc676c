"""The `trialog` command line: the one composition root. Each module adds one command (or group) and wires
the lower packages together from the values its options name; `ops.cli.main` builds the whole parser."""
