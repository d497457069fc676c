"""The record budget's arithmetic, on exact encoded sizes (`schemas.budget`, measured with the real codec)."""

from __future__ import annotations

import dataclasses

import pytest

from schemas.actions import WriteFile
from schemas.budget import (
    ACTION_MAX,
    BROKER_RECORD_LIMIT,
    EPISODE_OUTPUT_BUDGET,
    RECORD_BUDGET,
    STEP_MAX,
    STREAM_INLINE_FLOOR,
    STREAM_INLINE_MAX,
    fit_output,
    fit_text,
    stream_limit,
)
from schemas.codec import default_codec
from schemas.common import Output
from schemas.events import ActionProposed, StepExecuted
from schemas.testing import EpisodeScript

pytestmark = pytest.mark.unit

CODEC = default_codec()
NOT_UTF8 = bytes(range(128, 256)) * 512  # 64 KiB of bytes that are each invalid UTF-8


def test_replacement_characters_are_counted_in_encoded_bytes_not_raw_bytes() -> None:
    text = NOT_UTF8.decode("utf-8", "replace")
    assert len(text.encode()) == 3 * len(NOT_UTF8)  # why a raw-byte cap is not a wire cap
    for limit in (0, 10, 100, 1000, 4096, 16384):
        fitted = fit_text(text, limit)
        assert len(fitted.encode()) <= limit
    captured = Output.capture(NOT_UTF8, 4096)
    assert len(captured.text.encode()) <= 4096 and captured.truncated and captured.total_bytes == 65536


def test_a_fitted_text_is_a_head_a_marker_and_a_longer_tail_of_whole_characters() -> None:
    text = "début " + "é€😀" * 5000 + " fin"
    fitted = fit_text(text, 1000)
    assert len(fitted.encode()) <= 1000
    head, _, rest = fitted.partition("\n[... ")
    count, _, tail = rest.partition(" bytes not shown ...]\n")
    assert text.startswith(head) and text.endswith(tail) and tail.endswith(" fin")
    assert len(tail) > len(head) > 0
    assert int(count) == len(text.encode()) - len(head.encode()) - len(tail.encode())
    assert fit_text("short", 1000) == "short"


def test_a_fitted_output_keeps_what_it_says_about_the_stream() -> None:
    output = Output(NOT_UTF8[:8192].decode("utf-8", "replace"), False, 8192)
    fitted = fit_output(output, 2048)
    assert fitted.truncated and fitted.total_bytes == 8192 and fitted.full is None
    assert fit_output(fitted, 2048) is fitted


def test_each_step_gets_the_configured_limit_then_a_shrinking_share_then_the_floor() -> None:
    assert stream_limit(16384, 0) == 16384
    assert stream_limit(10**9, 0) == STREAM_INLINE_MAX
    assert stream_limit(16384, EPISODE_OUTPUT_BUDGET - 10_000) == 5_000
    assert stream_limit(16384, EPISODE_OUTPUT_BUDGET) == STREAM_INLINE_FLOOR
    assert stream_limit(16384, 10 * EPISODE_OUTPUT_BUDGET) == STREAM_INLINE_FLOOR


def test_the_largest_step_the_owner_appends_fits_its_share_of_the_record_budget() -> None:
    """One ActionProposed as large as the rollout makes it (a 64 KiB reply inline, a 64 KiB file inline,
    the longest sampled reply's tokens) and its StepExecuted with both streams at the per-step maximum."""
    script = EpisodeScript(CODEC)
    script.start()
    proposed = script.act(
        WriteFile("a" * 200, b"\xff" * 65536),
        response="\u00e9" * 32768,
        token_ids=(2**31 - 1,) * 4096,
        logprobs=(-1.5,) * 4096,
    )
    assert len(CODEC.encode(proposed)) <= ACTION_MAX
    noisy = Output(NOT_UTF8.decode("utf-8", "replace"), True, 10**12)
    executed = script.execute(exit_code=-(2**31))
    executed = dataclasses.replace(
        executed,
        stdout=fit_output(noisy, STREAM_INLINE_MAX),
        stderr=fit_output(noisy, STREAM_INLINE_MAX),
    )
    assert isinstance(proposed, ActionProposed) and isinstance(executed, StepExecuted)
    assert len(CODEC.encode(proposed)) + len(CODEC.encode(executed)) <= STEP_MAX
    assert RECORD_BUDGET < BROKER_RECORD_LIMIT
