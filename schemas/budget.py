"""Record budgets: every record an episode produces stays under the broker's record limit, whatever it ran.

Why: Kafka refuses a record over the producer's `max_request_size` (1 MiB for Faust's and kafka-python's
producers). The episodes row, the PolicyRequest (it carries the history), TrajectoryCompleted and
TrajectoryFailed (they carry the steps) all grow with the episode. Before these budgets, ten steps of 16 KiB
of non-UTF-8 output came to 1.09 MB (each invalid byte decodes to U+FFFD, three bytes in UTF-8): the
streams worker's batch could not be written, its retries ended in a raise, and recovery replayed the same
input into the same raise, a crash loop that took the grade with it.

The mechanism, decided by the episode's owner (`streams.owner`) from the folded state alone, so that a
resumed owner decides the same:

* **Per-episode inline output budget.** `EPISODE_OUTPUT_BUDGET` bytes of stdout and stderr text (UTF-8
  as encoded on the wire, not the raw stream's length) are kept inline over the whole episode. The owner
  asks each step for `stream_limit(...)` bytes per stream: the episode's `output_limit_bytes`, capped at
  `STREAM_INLINE_MAX`, shrinking to `STREAM_INLINE_FLOOR` once the budget is spent. The observation the
  policy saw is the inline text, so the learner trains on exactly what the policy was shown; the whole
  stream can sit in the object store (`Output.full`, a BlobRef) for audit.
* **Answers are fitted, not trusted.** A sandbox keeps up to the limit in *raw* bytes, which can decode to
  three times as many; the owner cuts each stream of a StepExecuted to the limit in encoded bytes
  (`fit_output`: a head and a longer tail, the model reads the end of a stream, with a marker saying how
  much was left out) before appending it. `truncated`, `total_bytes` and `full` stay true to the stream.
* **Per-episode log budget.** Once the events an episode has logged exceed `EPISODE_LOG_BUDGET`, the owner
  asks for no further action: the episode is truncated by size exactly as at the step limit (the
  workspace is graded as it is and the episode completes). That bounds every record for any number of
  steps, as long as one step stays under `STEP_MAX` (an ActionProposed over `ACTION_MAX` is refused, never
  appended).

The arithmetic (checked by tests/unit/schemas/test_budget.py on real encodings): a record holds at most the
episode's logged events (`EPISODE_LOG_BUDGET`) plus one step (`STEP_MAX`) plus the grade and the end
(`TAIL_MAX`), which is `RECORD_BUDGET`, well under `BROKER_RECORD_LIMIT`.

What remains possible: a task instruction is copied into every PolicyRequest and TrajectoryCompleted; a
huge instruction (the task author's, validated before the run) is not budgeted here. The grade's lists
(failed tests, tampered paths, tamper signals) are capped (`fit_reward`: `LINES_MAX` items of `LINE_MAX`
bytes) by the verifier and again by the owner; the verifier's report in the object store keeps them whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from schemas.common import Output
from schemas.events import RewardAssigned
from schemas.fsnames import to_wire

KIB = 1024
BROKER_RECORD_LIMIT = 1024 * KIB  # Faust's / kafka-python's default producer max_request_size
EPISODE_OUTPUT_BUDGET = 192 * KIB  # inline stdout + stderr text of a whole episode, encoded bytes
STREAM_INLINE_MAX = 32 * KIB  # one stream of one step, encoded bytes
STREAM_INLINE_FLOOR = 1 * KIB  # one stream of one step once the episode's budget is spent
EPISODE_LOG_BUDGET = 640 * KIB  # logged event bytes after which no further action is asked for
ACTION_MAX = (
    192 * KIB
)  # an encoded ActionProposed: a 64 KiB reply and a 64 KiB file inline, 4096 tokens: 168 KB
STEP_MAX = ACTION_MAX + 2 * (STREAM_INLINE_MAX + 256) + 4 * KIB  # one ActionProposed + its StepExecuted
TAIL_MAX = 64 * KIB  # RewardAssigned (capped lists) + EpisodeCompleted + the record's own header
RECORD_BUDGET = EPISODE_LOG_BUDGET + STEP_MAX + TAIL_MAX

CUT_MARKER = "\n[... {} bytes not shown ...]\n"
_MARKER_MAX = len(CUT_MARKER.format(10**12).encode())


def encoded_size(output: Output) -> int:
    """Bytes of the inline text on the wire (UTF-8)."""
    return len(output.text.encode("utf-8"))


def stream_limit(configured: int, used: int) -> int:
    """Bytes per stream a step may keep inline, given `used` inline bytes of the episode so far."""
    share = (EPISODE_OUTPUT_BUDGET - used) // 2
    return max(STREAM_INLINE_FLOOR, min(configured, STREAM_INLINE_MAX, share))


def fit_text(text: str, limit: int) -> str:
    """`text` if its UTF-8 encoding fits in `limit` bytes, else a head and a (three times longer) tail of
    it with a marker between them, together at most `limit` bytes; no character is split."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    if limit < 2 * _MARKER_MAX:  # no room for a marker worth its bytes: the end only
        return data[len(data) - max(0, limit) :].decode("utf-8", "ignore")
    room = limit - _MARKER_MAX
    head = data[: room // 4].decode("utf-8", "ignore")  # a cut inside a character drops that character
    tail = data[len(data) - (room - room // 4) :].decode("utf-8", "ignore")
    shown = len(head.encode()) + len(tail.encode())
    return head + CUT_MARKER.format(len(data) - shown) + tail


def fit_output(output: Output, limit: int) -> Output:
    """`output` with its inline text fitted to `limit` encoded bytes (marked truncated when cut)."""
    fitted = fit_text(output.text, limit)
    if fitted is output.text:
        return output
    return dataclasses.replace(output, text=fitted, truncated=True)


def inline_output_bytes(outputs: Iterable[Output]) -> int:
    return sum(encoded_size(output) for output in outputs)


LINES_MAX = 32  # items of each list of a RewardAssigned (failed tests, tampered paths, tamper signals)
LINE_MAX = 512  # encoded bytes of one item on the wire


def cap_lines(items: Sequence[str], *, wire: Callable[[str], str] = lambda s: s) -> tuple[str, ...]:
    """At most `LINES_MAX` items of at most `LINE_MAX` bytes each in their wire form `wire(item)`; the
    last kept item says how many more there were (the verifier's report holds them all)."""
    kept = list(items[:LINES_MAX])
    if len(items) > LINES_MAX:
        kept[-1] = f"... and {len(items) - LINES_MAX + 1} more (see the report)"
    return tuple(_cap_line(item, wire) for item in kept)


def _cap_line(item: str, wire: Callable[[str], str]) -> str:
    if len(wire(item).encode("utf-8")) <= LINE_MAX:
        return item
    cut = LINE_MAX // 4  # four bytes is the most one character (or one escaped byte) takes on the wire
    while cut < len(item) and len(wire(item[: cut + 1] + "...").encode("utf-8")) <= LINE_MAX:
        cut += 1
    return item[:cut] + "..."


def fit_reward(reward: RewardAssigned) -> RewardAssigned:
    """`reward` with its lists capped (`cap_lines`), so that the grade always fits its record budget."""
    return dataclasses.replace(
        reward,
        failed_tests=cap_lines(reward.failed_tests),
        tampered_paths=cap_lines(reward.tampered_paths, wire=to_wire),
        tamper_signals=cap_lines(reward.tamper_signals, wire=to_wire),
    )
