"""Files the grading harness places next to the frozen tests (outside the workspace)."""

from pathlib import Path

HARNESS_DIR = Path(__file__).parent
REPORT_PLUGIN = HARNESS_DIR / "trialog_report.py"
