"""`python -m ops.cli ...`: the same as `trialog ...` (worker processes are started this way)."""

from ops.cli.main import main

raise SystemExit(main())
