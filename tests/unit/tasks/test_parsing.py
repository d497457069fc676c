"""`actors.tasks.parsing.parse`: one thread at a time in `ast.parse` (CPython 3.11's gh-106905)."""

from __future__ import annotations

import ast
import threading
import time
from typing import Any

import pytest

from actors.tasks import parsing


def test_parse_returns_the_module_and_raises_what_ast_parse_raises() -> None:
    tree = parsing.parse("def f():\n    return 1\n", filename="m.py")
    assert isinstance(tree.body[0], ast.FunctionDef) and tree.body[0].name == "f"
    with pytest.raises(SyntaxError) as raised:
        parsing.parse("def (:\n", filename="broken.py")
    assert raised.value.filename == "broken.py"


def test_threads_never_parse_at_the_same_time(monkeypatch: pytest.MonkeyPatch) -> None:
    inside, most = 0, 0
    count_lock = threading.Lock()
    real_parse = ast.parse

    def slow_parse(source: Any, *args: Any, **kwargs: Any) -> ast.Module:
        nonlocal inside, most
        with count_lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.002)  # long enough for another thread to enter, were it let in
        try:
            tree: ast.Module = real_parse(source, *args, **kwargs)
            return tree
        finally:
            with count_lock:
                inside -= 1

    monkeypatch.setattr(ast, "parse", slow_parse)
    trees: list[ast.Module] = []

    def work() -> None:
        for index in range(10):
            trees.append(parsing.parse(f"x = {index}\n"))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(trees) == 60
    assert most == 1  # without the lock, six threads overlap here
