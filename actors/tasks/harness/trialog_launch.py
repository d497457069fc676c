"""The grading harness's entry point, run inside the sandbox as `python3 -I trialog_launch.py`.

It imports nothing from trialog (only pytest is installed where it runs) and prepares, before any code
under test can run, everything that code could otherwise influence:

* `-I` (isolated mode): PYTHON* variables, the user site and the script's folder are ignored, so a
  workspace sitecustomize/usercustomize or .pth file is never loaded (site runs before the workspace is
  on the path, and the workspace is never a site folder);
* the workspace goes at the END of sys.path: a `pytest` package or a module named like the standard
  library in the workspace cannot shadow the real ones;
* bytecode is read from and written to a private cache only, so a planted `__pycache__/*.pyc` is ignored;
* pytest runs with our empty config, our rootdir, no conftest.py, no plugin autoload and no cache;
* the report goes to a duplicate of the original stdout, each line tagged with a nonce read from stdin,
  so output printed by the code under test can neither forge nor hide a result without that nonce.
"""

from __future__ import annotations

import json
import os
import sys

HARNESS = os.path.dirname(os.path.abspath(__file__))


def _prepare(workspace: str) -> tuple[int, str]:
    nonce = sys.stdin.readline().strip()
    report_fd = os.dup(1)
    sys.dont_write_bytecode = True
    sys.pycache_prefix = f"/tmp/.pycache-{nonce[:12]}"
    sys.path = [HARNESS, *(p for p in sys.path if p and p != workspace), workspace]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.chdir(workspace)
    return report_fd, nonce


class _Reporter:
    """A pytest plugin object: one nonce-tagged JSON line per reported phase, on the saved stdout."""

    def __init__(self, fd: int, nonce: str) -> None:
        self._fd = fd
        self._nonce = nonce

    def _write(self, test_id: str, when: str, outcome: str) -> None:
        line = json.dumps({"id": test_id, "when": when, "outcome": outcome})
        # A leading newline: pytest's progress dots on the same stream end no line of their own.
        os.write(self._fd, f"\nTRIALOG-REPORT {self._nonce} {line}\n".encode())

    def pytest_runtest_logreport(self, report: object) -> None:
        # An xfail is reported as skipped, an xpass as passed with `wasxfail`: neither is a real pass.
        outcome = "skipped" if hasattr(report, "wasxfail") else str(getattr(report, "outcome", ""))
        self._write(str(getattr(report, "nodeid", "")), str(getattr(report, "when", "")), outcome)

    def pytest_collectreport(self, report: object) -> None:
        if getattr(report, "outcome", "") != "passed":
            self._write(str(getattr(report, "nodeid", "")), "collect", str(getattr(report, "outcome", "")))


def main() -> int:
    workspace = sys.argv[1]
    report_fd, nonce = _prepare(workspace)
    import pytest  # only now: the path is ours

    args = [
        "-q", "-p", "no:cacheprovider", "--noconftest", "--continue-on-collection-errors",
        "--rootdir", HARNESS, "-c", os.path.join(HARNESS, "pytest.ini"),
        "--confcutdir", HARNESS, os.path.join(HARNESS, "tests"),
    ]  # fmt: skip
    code = pytest.main(args, plugins=[_Reporter(report_fd, nonce)])
    os.write(report_fd, f"TRIALOG-DONE {nonce} {int(code)}\n".encode())
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
