"""Integers outside their Avro type's range are refused at encode time, naming the field.

fastavro writes any Python int into a 32-bit `int` field; Apache Avro (Java) reads 2**31 and 2**32 back
as 0, so a record written that way would silently mean something else to another reader.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from fastavro import parse_schema

from schemas.actions import Submit
from schemas.codec import Codec, EncodeError, IntegerOutOfRange, range_check
from schemas.events import StepExecuted
from schemas.testing import EpisodeScript


@pytest.fixture
def step(codec: Codec) -> StepExecuted:
    script = EpisodeScript(codec)
    script.start()
    return script.execute(stdout=b"ok\n", exit_code=0)


def _refusal(codec: Codec, obj: Any) -> str:
    with pytest.raises(EncodeError) as err:  # the one error encode raises for what does not fit the schema
        codec.encode(obj)
    assert isinstance(err.value, IntegerOutOfRange)
    return str(err.value)


@pytest.mark.parametrize("exit_code", [2**31, -(2**31) - 1, 2**32])
def test_an_int_field_outside_32_bits_is_refused_by_name(
    codec: Codec, step: StepExecuted, exit_code: int
) -> None:
    message = _refusal(codec, replace(step, exit_code=exit_code))
    assert f"exit_code = {exit_code}" in message
    assert StepExecuted.SCHEMA in message


def test_an_int_in_a_nested_record_is_refused_by_its_path(codec: Codec, step: StepExecuted) -> None:
    message = _refusal(codec, replace(step, meta=replace(step.meta, step=2**32)))
    assert "meta.step = 4294967296" in message


@pytest.mark.parametrize("exit_code", [2**31 - 1, -(2**31)])
def test_the_ends_of_the_int_range_are_written(codec: Codec, step: StepExecuted, exit_code: int) -> None:
    edge = replace(step, exit_code=exit_code)
    assert codec.decode(codec.encode(edge)) == edge


def test_a_long_field_holds_more_than_32_bits(codec: Codec, step: StepExecuted) -> None:
    long_run = replace(step, duration_us=2**40)
    assert codec.decode(codec.encode(long_run)) == long_run


def test_a_long_past_64_bits_is_refused_by_name(codec: Codec, step: StepExecuted) -> None:
    assert f"duration_us = {2**63}" in _refusal(codec, replace(step, duration_us=2**63))


def test_every_element_of_an_int_array_is_in_range(codec: Codec) -> None:
    script = EpisodeScript(codec)
    script.start()
    proposed = script.act(Submit())
    widest = replace(proposed, token_ids=(0, 2**31 - 1), logprobs=(0.0, 0.0))
    assert codec.decode(codec.encode(widest)) == widest
    tokens = replace(proposed, token_ids=(1, 2**31, 3), logprobs=(0.0, 0.0, 0.0))
    assert "token_ids[] = 2147483648" in _refusal(codec, tokens)


SCHEMA = parse_schema(
    {
        "type": "record",
        "name": "t.Outer",
        "fields": [
            {
                "name": "choice",
                "type": [
                    "null",
                    {"type": "record", "name": "t.A", "fields": [{"name": "n", "type": "int"}]},
                    {"type": "record", "name": "t.B", "fields": [{"name": "m", "type": "long"}]},
                ],
            },
            {"name": "again", "type": ["null", "t.A"]},
            {"name": "by_key", "type": {"type": "map", "values": "t.A"}},
            {"name": "when", "type": {"type": "int", "logicalType": "date"}},
        ],
    }
)


def _path_refused(record: dict[str, Any]) -> str:
    check = range_check(SCHEMA)
    assert check is not None
    with pytest.raises(IntegerOutOfRange) as err:
        check(record)
    return str(err.value)


def test_unions_maps_named_and_logical_types_are_checked() -> None:
    fine = {"choice": ("t.A", {"n": 1}), "again": {"n": 2}, "by_key": {"k": {"n": 3}}, "when": 19000}
    check = range_check(SCHEMA)
    assert check is not None
    check(fine)
    assert _path_refused({**fine, "choice": ("t.A", {"n": 2**31})}).startswith("choice.n = ")
    assert _path_refused({**fine, "choice": ("t.B", {"m": 2**63})}).startswith("choice.m = ")
    assert _path_refused({**fine, "again": {"n": 2**31}}).startswith("again.n = ")  # the only record
    assert _path_refused({**fine, "by_key": {"k": {"n": -(2**31) - 1}}}).startswith("by_key{}.n = ")
    assert _path_refused({**fine, "when": 2**31}).startswith("when = ")


def test_a_schema_without_integers_needs_no_check() -> None:
    text = parse_schema({"type": "record", "name": "t.T", "fields": [{"name": "s", "type": "string"}]})
    assert range_check(text) is None
    assert range_check(SCHEMA, ("int",)) is not None
