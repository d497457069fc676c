"""What a policy's action runs in a sandbox: the command line and its stdin (decision code, no I/O but
fetching a large payload from the object store by its hash)."""

from __future__ import annotations

from dataclasses import dataclass

from sandbox_agent.paths import PathOutsideWorkspace, workspace_relative
from schemas.actions import ApplyPatch, RunCommand, SandboxAction, WriteFile
from schemas.blobs import BlobRef, ObjectStore

# "$1" is the workspace-relative path; the content arrives on stdin, so it is never part of a command line.
WRITE_FILE_SCRIPT = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
# An action that cannot run still gets an observation: this prints why ("$1") and fails like a command.
REFUSE_SCRIPT = 'printf "%s\\n" "$1" >&2; exit 2'
APPLY_PATCH_ARGV = ("git", "apply", "--verbose", "--whitespace=nowarn", "-")


@dataclass(frozen=True, slots=True)
class Invocation:
    argv: tuple[str, ...]
    stdin: bytes | None = None


def invocation_for(action: SandboxAction, objects: ObjectStore) -> Invocation:
    if isinstance(action, RunCommand):
        return Invocation(("bash", "-c", action.command))
    if isinstance(action, WriteFile):
        try:
            path = workspace_relative(action.path)
        except PathOutsideWorkspace as exc:
            return Invocation(("sh", "-c", REFUSE_SCRIPT, "write_file", f"write_file refused: {exc}"))
        return Invocation(
            ("sh", "-c", WRITE_FILE_SCRIPT, "write_file", path), _payload(action.content, objects)
        )
    if isinstance(action, ApplyPatch):
        diff = action.diff
        return Invocation(APPLY_PATCH_ARGV, diff.encode() if isinstance(diff, str) else objects.get(diff))
    raise TypeError(f"not an action a sandbox runs: {action!r}")


def _payload(content: bytes | BlobRef, objects: ObjectStore) -> bytes:
    return content if isinstance(content, bytes) else objects.get(content)
