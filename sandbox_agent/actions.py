"""What a policy's action runs in a sandbox: the command line and its stdin (decision code, no I/O but
fetching a large payload from the object store by its hash), and when an action is invalid."""

from __future__ import annotations

from dataclasses import dataclass

from sandbox_agent.paths import PathOutsideWorkspace, workspace_relative
from schemas.actions import ApplyPatch, RunCommand, SandboxAction, WriteFile
from schemas.blobs import BlobRef, ObjectStore

# "$1" is the workspace-relative path; the content arrives on stdin, so it is never part of a command line.
WRITE_FILE_SCRIPT = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
APPLY_PATCH_ARGV = ("git", "apply", "--verbose", "--whitespace=nowarn", "-")


class InvalidAction(ValueError):
    """An action no sandbox can carry out as asked (a write outside the workspace, a patch that does not
    apply): the episode fails with `invalid_action`, since every retry would fail the same way."""


@dataclass(frozen=True, slots=True)
class Invocation:
    argv: tuple[str, ...]
    stdin: bytes | None = None


def invocation_for(action: SandboxAction, objects: ObjectStore) -> Invocation:
    """What runs for `action`; raises `InvalidAction` for one that must not run."""
    if isinstance(action, RunCommand):
        return Invocation(("bash", "-c", action.command))
    if isinstance(action, WriteFile):
        try:
            path = workspace_relative(action.path)
        except PathOutsideWorkspace as exc:
            raise InvalidAction(f"write_file refused: {exc}") from None
        return Invocation(
            ("sh", "-c", WRITE_FILE_SCRIPT, "write_file", path), _payload(action.content, objects)
        )
    if isinstance(action, ApplyPatch):
        diff = action.diff
        return Invocation(APPLY_PATCH_ARGV, diff.encode() if isinstance(diff, str) else objects.get(diff))
    raise TypeError(f"not an action a sandbox runs: {action!r}")


def invalid_outcome(action: SandboxAction, exit_code: int, timed_out: bool, stderr: str) -> str | None:
    """Why an executed action turns out invalid, or None. `git apply` changes nothing unless the whole
    patch applies, so a patch that failed left the workspace as it was: the episode fails, not the step."""
    if isinstance(action, ApplyPatch) and exit_code != 0 and not timed_out:
        return f"apply_patch: the patch does not apply (git apply exit {exit_code}): {stderr.strip()[-500:]}"
    return None


def _payload(content: bytes | BlobRef, objects: ObjectStore) -> bytes:
    return content if isinstance(content, bytes) else objects.get(content)
