"""The reward configuration: the default is the brief's rule, every component is kept apart, the version
is the configuration's content, and a bad file says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.tasks import reward
from actors.tasks.reward import Outcome, Verdict, grade
from actors.tasks.reward_config import DEFAULT, RewardConfigError, compose, efficiency, load, parse


@given(st.lists(st.booleans(), min_size=1, max_size=12), st.booleans(), st.booleans())
def test_the_default_configuration_is_the_brief_rule(
    outcomes: list[bool], tampered: bool, build: bool
) -> None:
    ids = [f"t{i}" for i in range(len(outcomes))]
    reports = [(i, Outcome.PASSED if ok else Outcome.FAILED) for i, ok in zip(ids, outcomes, strict=True)]
    graded = grade(expected=ids, reports=reports, tampered_paths=["x"] if tampered else (), build_ok=build)
    composed = compose(DEFAULT, graded.verdict, graded.passed, graded.total, {"efficiency": 0.7})
    assert composed.reward == pytest.approx(graded.reward)
    assert composed.outcome == pytest.approx(graded.reward)
    assert composed.components == {"efficiency": 0.7}  # measured and kept, weighed 0


def test_a_weighted_component_adds_to_the_outcome_but_never_softens_a_penalty() -> None:
    config = parse("[weights]\nefficiency = 0.25\n")
    partial = compose(config, Verdict.PARTIAL, 1, 2, {"efficiency": efficiency(3, 10)})
    assert partial.outcome == pytest.approx(0.5 - reward.PARTIAL_PENALTY)
    assert partial.reward == pytest.approx(0.3 + 0.25 * 0.7)
    for verdict, expected in ((Verdict.TAMPERED, -1.0), (Verdict.BUILD_FAILED, -0.5)):
        assert compose(config, verdict, 0, 2, {"efficiency": 1.0}).reward == expected
    with pytest.raises(ValueError, match="efficiency"):
        compose(config, Verdict.PASS, 2, 2, {})
    # A penalty or an error is the outcome alone: nothing it lacks could change it.
    assert compose(config, Verdict.TAMPERED, 0, 2, {}).reward == -1.0
    assert compose(config, Verdict.ERROR, 0, 0, {}).reward == 0.0


def test_the_version_is_the_content_not_the_spelling() -> None:
    spelled = parse("# the brief's rule\n[outcome]\npass = 1\ntampered = -1.0\n\n[weights]\nefficiency = 0\n")
    assert spelled.version == DEFAULT.version
    assert parse("[outcome]\npartial_penalty = 0.1\n").version != DEFAULT.version
    assert parse("[weights]\nefficiency = 0.1\n").version != DEFAULT.version
    assert len(DEFAULT.version) == 64


def test_efficiency_is_the_share_of_the_step_budget_left() -> None:
    assert efficiency(0, 8) == 1.0
    assert efficiency(2, 8) == 0.75
    assert efficiency(9, 8) == 0.0
    with pytest.raises(ValueError):
        efficiency(1, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[outcome\n", "not TOML"),
        ("[bonus]\nx = 1\n", "unknown section"),
        ("[outcome]\npasss = 1.0\n", "outcome.passs"),
        ("[weights]\nstyle = 0.1\n", "weights.style"),
        ("[weights]\nefficiency = 2.0\n", "outside"),
        ("[weights]\nefficiency = true\n", "not a finite number"),
        ("[outcome]\npass = nan\n", "not a finite number"),
        ("outcome = 3\n", "must be a table"),
    ],
)
def test_a_bad_configuration_names_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(RewardConfigError, match=message):
        parse(text)


def test_a_configuration_file_loads_and_a_missing_one_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "reward.toml"
    path.write_text("[weights]\nefficiency = 0.5\n")
    assert load(path).weights == {"efficiency": 0.5}
    with pytest.raises(RewardConfigError, match="cannot read"):
        load(tmp_path / "absent.toml")


def test_each_resource_component_is_in_0_1_and_1_is_the_better() -> None:
    from actors.tasks.reward_config import memory, no_leftovers, small_change, speed

    assert speed(0.0, 30.0) == 1.0 and speed(15.0, 30.0) == 0.5 and speed(45.0, 30.0) == 0.0
    assert memory(0, 100) == 1.0 and memory(25, 100) == 0.75 and memory(200, 100) == 0.0
    assert (no_leftovers(0), no_leftovers(3)) == (1.0, 0.0)
    assert small_change(0) == 1.0 and small_change(50) == 0.5 and 0.0 < small_change(10_000) < 0.01
    for bad in (lambda: speed(1.0, 0.0), lambda: memory(-1, 10), lambda: small_change(-1)):
        with pytest.raises(ValueError):
            bad()


def test_every_component_can_be_weighed_and_an_unknown_one_is_refused() -> None:
    from actors.tasks.reward_config import COMPONENTS

    text = "[weights]\n" + "".join(f"{name} = 0.1\n" for name in COMPONENTS)
    assert set(parse(text).weights) == set(COMPONENTS)
    with pytest.raises(RewardConfigError, match=r"weights\.style"):
        parse("[weights]\nstyle = 0.1\n")


def test_the_shipped_example_weighs_every_component_and_the_cli_reads_it_or_says_why(tmp_path: Path) -> None:
    from ops.cli.kit import reward_config_of
    from ops.paths import REPO_ROOT
    from streams.errors import StackError

    example = reward_config_of(REPO_ROOT / "examples" / "reward.toml")
    assert example.version != DEFAULT.version and example.weights["efficiency"] == 0.1
    assert reward_config_of(None) is DEFAULT
    broken = tmp_path / "r.toml"
    broken.write_text("[weights]\nefficiency = 3\n")
    with pytest.raises(StackError, match="outside"):
        reward_config_of(broken)
