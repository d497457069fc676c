"""Golden logs: committed bytes replay to the committed final state; any damage is reported by position."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from schemas.actions import InvalidReply, Submit
from schemas.codec import Codec
from schemas.events import ActionProposed, StepExecuted
from schemas.logfile import encode_log, read_log
from schemas.replay import ReplayError, replay, replay_file
from schemas.state import Phase
from tests.golden.make_golden import GOLDEN_DIR, LOGS, log_path, state_path, to_json

NAMES = sorted(LOGS)


def expected(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(state_path(name).read_text())
    return loaded


def test_every_scripted_log_is_committed() -> None:
    assert {p.stem for p in GOLDEN_DIR.glob("*.log")} == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_replaying_a_golden_log_gives_the_committed_state(codec: Codec, name: str) -> None:
    want = expected(name)
    state = replay_file(log_path(name), codec, expected_head=want["head_hash"])
    assert len(read_log(log_path(name))) == want["records"]
    assert to_json(state.to_record()) == want["state"]


def test_the_v1_golden_log_is_read_through_resolution_and_upcasting(codec: Codec) -> None:
    records = read_log(log_path("v1_steps"))
    versions = [codec.schema_of(r) for r in records if codec.schema_of(r)[0] == StepExecuted.SCHEMA]
    assert versions == [(StepExecuted.SCHEMA, 1)] * 2
    state = replay(records, codec)
    assert [(r.result.exit_code, r.result.oom_killed) for r in state.history if r.result] == [
        (0, False),
        (137, True),
    ]


def _boundaries(data: bytes) -> list[tuple[int, int]]:
    """(start, end) byte ranges of each framed record, length prefix included."""
    spans, offset = [], 0
    while offset < len(data):
        (size,) = struct.unpack_from(">I", data, offset)
        spans.append((offset, offset + 4 + size))
        offset += 4 + size
    return spans


def _accepted_after(records: list[bytes]) -> list[int]:
    """For each record, the index of the next record that is not a redelivery (else the last record)."""
    first = {data: index for index, data in reversed(list(enumerate(records)))}
    new = [i for i, data in enumerate(records) if first[data] == i]
    return [next((j for j in new if j > i), len(records) - 1) for i in range(len(records))]


def _positions(spans: list[tuple[int, int]]) -> list[int]:
    """Every framing and header byte of every record, and every 5th body byte."""
    picked: set[int] = set()
    for start, end in spans:
        picked.update(range(start, min(start + 14, end)))
        picked.update(range(start + 14, end, 5))
        picked.add(end - 1)
    return sorted(picked)


@pytest.mark.parametrize("name", NAMES)
def test_one_changed_byte_fails_loudly_with_its_position(codec: Codec, name: str, tmp_path: Path) -> None:
    data = log_path(name).read_bytes()
    records = read_log(log_path(name))
    spans = _boundaries(data)
    next_new = _accepted_after(records)
    head = expected(name)["head_hash"]
    damaged = tmp_path / "damaged.log"
    positions = _positions(spans)
    assert len(positions) > 150
    for position in positions:
        index = next(i for i, (start, end) in enumerate(spans) if start <= position < end)
        flipped = bytearray(data)
        flipped[position] ^= 0x01
        damaged.write_bytes(bytes(flipped))
        with pytest.raises(ReplayError) as err:
            replay_file(damaged, codec, expected_head=head)
        # The damaged record itself fails to decode or to apply, or the next new record's link breaks (a
        # redelivery in between may be the first to differ), or for the last record the head does not match.
        assert index <= err.value.index <= max(next_new[index], index), (position, str(err.value))
        assert str(err.value).startswith(f"record #{err.value.index}: ")


@pytest.mark.parametrize("name", [n for n in NAMES if n != "redelivered"])
def test_one_removed_event_fails_loudly_with_its_position(codec: Codec, name: str) -> None:
    records = read_log(log_path(name))
    head = expected(name)["head_hash"]
    for index in range(len(records)):
        with pytest.raises(ReplayError) as err:
            replay(records[:index] + records[index + 1 :], codec, expected_head=head)
        last = index == len(records) - 1
        assert err.value.index == (index - 1 if last else index), str(err.value)
        assert err.value.code in ({"head_mismatch"} if last else {"broken_chain", "out_of_order"})


def _first_copies(records: list[bytes]) -> list[bytes]:
    return list(dict.fromkeys(records))


def test_removing_a_redelivery_is_harmless_removing_a_fact_is_not(codec: Codec) -> None:
    records = read_log(log_path("redelivered"))
    want = expected("redelivered")
    harmless = 0
    for index in range(len(records)):
        shorter = records[:index] + records[index + 1 :]
        if _first_copies(shorter) == _first_copies(records):  # every fact is still there, in order
            harmless += 1
            state = replay(shorter, codec, expected_head=want["head_hash"])
            assert to_json(state.to_record()) == want["state"]
        else:
            with pytest.raises(ReplayError):
                replay(shorter, codec, expected_head=want["head_hash"])
    assert 0 < harmless < len(records)


def test_the_generator_is_deterministic(codec: Codec) -> None:
    for name, script in LOGS.items():
        assert encode_log(script(codec)) == encode_log(script(codec)), name


def test_logs_from_before_invalid_reply_hold_v1_actions_and_the_new_ones_v2(codec: Codec) -> None:
    def action_versions(name: str) -> set[int]:
        schemas = (codec.schema_of(r) for r in read_log(log_path(name)))
        return {version for schema, version in schemas if schema == ActionProposed.SCHEMA}

    assert action_versions("completed") == action_versions("v1_steps") == {1}
    assert action_versions("invalid_reply") == action_versions("truncated") == {2}
    state = replay_file(log_path("invalid_reply"), codec)
    invalid = state.history[1]
    assert isinstance(invalid.action.action, InvalidReply) and invalid.result is not None
    assert invalid.result.exit_code == 2 and invalid.result.meta.producer.kind == "streams"
    truncated = replay_file(log_path("truncated"), codec)
    assert truncated.phase is Phase.COMPLETED and truncated.reward is not None
    assert not any(isinstance(step.action.action, Submit) for step in truncated.steps)


def test_the_components_golden_log_keeps_each_part_of_its_reward(codec: Codec) -> None:
    """RewardAssigned v4 as written when the reward configuration first composed rewards."""
    from schemas.events import RewardAssigned

    records = read_log(log_path("components"))
    assert (RewardAssigned.SCHEMA, 4) in [codec.schema_of(r) for r in records]
    state = replay(records, codec)
    reward = state.reward
    assert reward is not None and (reward.reward, reward.outcome_reward) == (1.1, 1.0)
    assert dict(reward.components)["efficiency"] == 0.75 and len(reward.components) == 5
    assert reward.versions is not None and reward.versions.reward_config == "c" * 64
