"""Issue 14, attack 1 through the real CLI: `trialog tasks validate` on a task whose repo/ holds a link
chain that climbs out (`q -> .`, `p -> q/q/q/q/../../../../outside`) and whose solution writes p/evil.txt.

Before the fix the survey passed, the task validated, and the gold run wrote the file outside the task copy.
Now the survey refuses the task (exit 2, the link named) before any sandbox starts, and nothing is written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ops.paths import REPO_ROOT

SOURCE = REPO_ROOT / "examples" / "tasks" / "easy-fix-range"
EVIL = "diff --git a/p/evil.txt b/p/evil.txt\nnew file mode 100644\n--- /dev/null\n+++ b/p/evil.txt\n"
EVIL += "@@ -0,0 +1 @@\n+pwned\n"


def test_tasks_validate_refuses_a_link_chain_out_of_repo(tmp_path: Path) -> None:
    task = tmp_path / "set" / "escape"
    shutil.copytree(SOURCE, task)
    os.symlink(".", task / "repo" / "q")
    os.symlink("q/q/q/q/../../../../outside", task / "repo" / "p")
    (task / "solution.patch").write_text((task / "solution.patch").read_text() + EVIL)
    trialog = Path(sys.executable).with_name("trialog")
    done = subprocess.run(
        [str(trialog), "tasks", "validate", "--runs", "1", str(tmp_path / "set")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{task / 'repo' / 'p'}: is a symbolic link that leaves repo/" in done.stderr
    assert "nothing was run" in done.stderr
    for outside in (tmp_path / "outside", tmp_path / "set" / "outside", task / "outside", Path("/outside")):
        assert not outside.exists()
