"""`trialog bench codec` runs end to end on a tiny batch and maintains its section of BENCHMARKS.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from ops.bench import codec as bench


def _args(output: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(["--rounds", "1", "--events", "20", "--episodes", "3", "--record", str(output)])


def test_bench_writes_a_codec_section_with_all_figures(tmp_path: Path, capsys: object) -> None:
    output = tmp_path / "BENCHMARKS.md"
    output.write_text("# Benchmarks\n\n## sandbox\n\nkeep me\n\n## codec\n\nold figures\n")
    assert bench.run(_args(output)) == 0
    text = output.read_text()
    assert "keep me" in text and "old figures" not in text
    assert text.count("## codec") == 1
    for label in (
        "raw fastavro write",
        "trialog encode_record",
        "raw fastavro read",
        "trialog decode_record",
    ):
        assert f"| {label} |" in text
    assert "fold apply (events)" in text and "cores" in text and "trialog bench codec" in text
    assert "codec / raw fastavro: write" in text


def test_write_section_appends_when_missing_and_replaces_in_place(tmp_path: Path) -> None:
    path = tmp_path / "B.md"
    bench.write_section(path, "## codec\n\nA\n")
    bench.write_section(path, "## codec\n\nB\n")
    assert path.read_text() == "# Benchmarks\n\n## codec\n\nB\n"
    path.write_text("# Benchmarks\n\n## codec\n\nA\n\n## later\n\nZ\n")
    bench.write_section(path, "## codec\n\nB\n")
    assert path.read_text() == "# Benchmarks\n\n## codec\n\nB\n\n## later\n\nZ\n"
