"""The hash chain (audit view over interleaved episodes), replay's strictness, and the log file framing."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.actions import RunCommand, Submit
from schemas.chain import digest, verify_chain
from schemas.codec import Codec
from schemas.common import GENESIS_HASH
from schemas.fold import fold
from schemas.logfile import LogFormatError, encode_log, iter_log, read_log, write_log
from schemas.replay import ReplayError, accepted_digests, replay, replay_file
from schemas.testing import EpisodeScript


def _episode(codec: Codec, episode_id: str, steps: int) -> EpisodeScript:
    script = EpisodeScript(codec, episode_id=episode_id)
    script.start()
    for step in range(steps):
        script.act(RunCommand(f"echo {step}"))
        script.execute(stdout=f"{step}\n".encode())
    script.act(Submit())
    script.reward()
    script.complete()
    return script


def _interleave(*logs: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for index in range(max(map(len, logs))):
        out += [log[index] for log in logs if index < len(log)]
    return out


def test_a_partition_of_interleaved_episodes_verifies(codec: Codec) -> None:
    a, b = _episode(codec, "ep-a", 2), _episode(codec, "ep-b", 3)
    records = _interleave(a.records, b.records)
    report = verify_chain(records, codec)
    assert report.ok and report.records == len(records) and report.duplicates == 0
    assert report.heads == {"ep-a": a.head, "ep-b": b.head}


def test_redelivered_records_are_counted_not_flagged(codec: Codec) -> None:
    a = _episode(codec, "ep-a", 1)
    records = a.records
    report = verify_chain([records[0], records[1], records[0], records[2], records[1], *records[3:]], codec)
    assert report.ok and report.duplicates == 2


def test_the_first_broken_link_is_reported(codec: Codec) -> None:
    a, b = _episode(codec, "ep-a", 2), _episode(codec, "ep-b", 2)
    records = _interleave(a.records, b.records)
    del records[5]  # b2 (a0 b0 a1 b1 a2 b2 a3 b3 ...): b3 moves to index 6 and links to the missing b2
    report = verify_chain(records, codec)
    assert report.first_break is not None
    assert (report.first_break.index, report.first_break.episode_id) == (6, "ep-b")
    assert "record #6 (episode ep-b)" in str(report.first_break)


def test_undecodable_records_break_the_chain(codec: Codec) -> None:
    a = _episode(codec, "ep-a", 1)
    records = [*a.records[:2], b"garbage", *a.records[2:]]
    report = verify_chain(records, codec)
    assert report.first_break is not None and report.first_break.index == 2
    assert "undecodable" in report.first_break.reason


def test_verification_can_continue_from_known_heads(codec: Codec) -> None:
    a = _episode(codec, "ep-a", 2)
    assert verify_chain(a.records[3:], codec, heads={"ep-a": digest(a.records[2])}).ok
    assert not verify_chain(a.records[3:], codec).ok  # without the head, the first link points nowhere


def test_replay_refuses_an_altered_duplicate(codec: Codec) -> None:
    a = _episode(codec, "ep-a", 1)
    records = a.records
    original = records[1]
    altered = original.replace(b"echo 0", b"echo 9")
    assert altered != original and codec.decode(altered) != codec.decode(original)
    assert replay([*records[:3], original, *records[3:]], codec) == fold(a.entries)
    with pytest.raises(ReplayError) as err:
        replay([*records[:3], altered, *records[3:]], codec)
    assert (err.value.index, err.value.code) == (3, "altered_duplicate")


def test_replay_from_a_snapshot_still_checks_duplicates(codec: Codec) -> None:
    a = _episode(codec, "ep-a", 2)
    snapshot = fold(a.entries[:4])
    assert accepted_digests(snapshot) == {digest(r) for r in a.records[:4]}
    tail = [a.records[2], *a.records[4:]]  # a redelivery of a pre-snapshot event first
    assert replay(tail, codec, snapshot) == fold(a.entries)
    assert GENESIS_HASH not in accepted_digests(snapshot)


def test_replay_checks_the_expected_head(codec: Codec) -> None:
    a = _episode(codec, "ep-a", 1)
    assert replay(a.records, codec, expected_head=a.head).head_hash == a.head
    with pytest.raises(ReplayError) as err:
        replay(a.records, codec, expected_head="0" * 64)
    assert (err.value.index, err.value.code) == (len(a.records) - 1, "head_mismatch")


def test_log_files_round_trip_and_report_broken_framing(codec: Codec, tmp_path: Path) -> None:
    a = _episode(codec, "ep-a", 1)
    path = tmp_path / "a.log"
    write_log(path, a.records)
    assert read_log(path) == a.records
    assert replay_file(path, codec, expected_head=a.head) == fold(a.entries)
    data = encode_log(a.records)
    with pytest.raises(LogFormatError, match="record #5"):
        list(iter_log(data[:-3]))
    with pytest.raises(LogFormatError, match="stray bytes"):
        list(iter_log(data + b"\x00\x00"))
    path.write_bytes(data[:-3])
    with pytest.raises(ReplayError) as err:
        replay_file(path, codec)
    assert (err.value.index, err.value.code) == (5, "bad_framing")
