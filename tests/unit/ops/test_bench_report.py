from __future__ import annotations

from pathlib import Path

from ops.bench.report import write_section


def test_each_benchmark_replaces_only_its_own_section(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    write_section(path, "## codec\n\nc1\n")
    write_section(path, "## sandbox\n\ns1\n")
    write_section(path, "## codec\n\nc2\n")
    assert path.read_text() == "# Benchmarks\n\n## codec\n\nc2\n\n## sandbox\n\ns1\n"
    write_section(path, "## sandbox\n\ns2\n")
    assert path.read_text() == "# Benchmarks\n\n## codec\n\nc2\n\n## sandbox\n\ns2\n"
