"""The learner across ranks, with the ranks as threads of this process (`ThreadCollective`: the
`Collective` protocol over a barrier): the same step on two ranks as on one, the followers taking rank 0's
state, a rank that differs caught, and the checkpoint recording every rank's state. The torch.distributed
implementation over gloo is exercised by tests/integration/learner/test_learner_ranks.py."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from learner import checkpoint, testing
from learner.collective import Collective, Reduction
from learner.learner import Learner, LearnerSettings, prepare
from learner.lora import Adaptation, trainable_state
from learner.objective import group_advantages
from learner.publish import MemoryAnnouncer
from learner.ranks import Leader, RanksDisagree, RankState, disagreement, follow
from learner.samples import BytesPromptEncoder, group_samples
from learner.state import PlannerConfig
from learner.step import Sample
from learner.trainer import TrainSettings, shard, train_epochs
from schemas.blobs import MemoryObjectStore
from tests.unit.actors.requests import fixed_origin
from tests.unit.learner.test_worker import feed

SETTINGS = LearnerSettings(
    run_id="run-test",
    checkpoint_dir=Path("unused"),
    planner=PlannerConfig(group_size=2, group_timeout_s=60, max_staleness=4),
    train=TrainSettings(micro_batch=2),
    adaptation=Adaptation(rank=4),
    lr=1e-2,
)
# A wait this long on the barrier means a rank is stuck: fail the test rather than hang it.
STUCK_S = 120.0


class Room:
    """Where thread ranks meet: one slot each, and a barrier."""

    def __init__(self, world_size: int) -> None:
        self.slots: list[object] = [None] * world_size
        self.barrier = threading.Barrier(world_size, timeout=STUCK_S)


class ThreadCollective:
    """A `Collective` between threads. Values are pickled on the way, as torch.distributed does."""

    def __init__(self, room: Room, rank: int) -> None:
        self.room, self.rank, self.world_size = room, rank, len(room.slots)

    def _exchange(self, value: object) -> list[object]:
        self.room.slots[self.rank] = pickle.dumps(value)
        self.room.barrier.wait()
        values = [pickle.loads(v) for v in self.room.slots if isinstance(v, bytes)]
        self.room.barrier.wait()  # nobody writes the next exchange before everyone has read this one
        return values

    def all_reduce(self, tensor: torch.Tensor, op: Reduction = "sum") -> None:
        values = [v for v in self._exchange(tensor) if isinstance(v, torch.Tensor)]
        total = values[0].clone()
        for value in values[1:]:
            total = total + value if op == "sum" else torch.maximum(total, value)
        tensor.copy_(total)

    def broadcast_tensor(self, tensor: torch.Tensor) -> None:
        first = self._exchange(tensor)[0]
        assert isinstance(first, torch.Tensor)
        tensor.copy_(first)

    def broadcast(self, value: object) -> object:
        return self._exchange(value)[0]

    def gather(self, value: object) -> list[object]:
        return self._exchange(value)


def collectives(world_size: int) -> list[Collective]:
    room = Room(world_size)
    return [ThreadCollective(room, rank) for rank in range(world_size)]


class Follower:
    """A follower rank in a thread; `errors` holds what ended it, if not `Stop`."""

    def __init__(self, model: Any, optimizer: torch.optim.Optimizer, collective: Collective) -> None:
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(model, optimizer, collective), daemon=True)
        self.thread.start()

    def _run(self, model: Any, optimizer: torch.optim.Optimizer, collective: Collective) -> None:
        try:
            follow(model, optimizer, collective)
        except BaseException as exc:
            self.errors.append(exc)


def samples(count: int = 3) -> list[Sample]:
    """The samples of `count` groups (two turns per trajectory, each group's first turns share a prompt)."""
    out: list[Sample] = []
    for g in range(count):
        trajectories = testing.group(f"g{g}", [1.0, 0.0, 0.5])
        advantages = group_advantages([t.reward for t in trajectories])
        assert advantages is not None
        usable, _ = group_samples(trajectories, advantages, BytesPromptEncoder())
        out += usable
    return out


def adapted(seed: int, model_seed: int = 0) -> tuple[Any, torch.optim.Optimizer]:
    """The tiny model with LoRA, its A matrices drawn from `seed` (ranks draw their own before `share`)."""
    model = testing.tiny_llama(seed=model_seed)
    torch.manual_seed(seed)
    return model, prepare(model, SETTINGS)


@pytest.fixture
def one_thread() -> Iterator[None]:
    # Two ranks as threads of a 2-core machine: one torch thread each, or they spin on each other.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_two_ranks_end_every_step_with_the_weights_one_process_would_have(one_thread: None) -> None:
    steps = [samples(3), samples(1), samples(2)]
    model, optimizer = adapted(seed=1)
    reference = copy.deepcopy(model)
    reference_optimizer = torch.optim.AdamW([p for p in reference.parameters() if p.requires_grad], lr=1e-2)
    lead, other = collectives(2)
    follower_model, follower_optimizer = adapted(seed=2)  # another LoRA draw: `share` replaces it
    follower = Follower(follower_model, follower_optimizer, other)
    leader = Leader(lead)
    leader.share(model, optimizer)
    for batch in steps:
        passes = leader.train(model, optimizer, batch, 2, SETTINGS.train)
        expected = train_epochs(reference, reference_optimizer, batch, 2, SETTINGS.train)
        assert [p.samples for p in passes] == [e.samples for e in expected]
        assert [p.tokens for p in passes] == [e.tokens for e in expected]
        for got, want in zip(passes, expected, strict=True):
            assert got.loss == pytest.approx(want.loss, abs=1e-6)
            assert got.approx_kl == pytest.approx(want.approx_kl, abs=1e-6)
            assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-5)
            assert got.logprob_gap_max == pytest.approx(want.logprob_gap_max, abs=1e-6)
    leader.stop()
    follower.thread.join()
    assert follower.errors == []
    mine, theirs, alone = (trainable_state(m) for m in (model, follower_model, reference))
    assert all(torch.equal(mine[name], theirs[name]) for name in mine)  # the same bits on both ranks
    for name, tensor in mine.items():
        torch.testing.assert_close(tensor, alone[name], rtol=1e-5, atol=1e-6)
    first, second = leader.agreed
    assert (first.rank, second.rank) == (0, 1) and first.digests == second.digests


def test_a_rank_with_other_base_weights_is_caught_before_anything_is_trained(one_thread: None) -> None:
    model, optimizer = adapted(seed=1)
    lead, other = collectives(2)
    stranger, stranger_optimizer = adapted(seed=1, model_seed=7)  # another model under the same LoRA
    follower = Follower(stranger, stranger_optimizer, other)
    with pytest.raises(RanksDisagree, match="rank 1: frozen weights"):
        Leader(lead).share(model, optimizer)
    assert isinstance(lead, ThreadCollective)
    lead.room.barrier.abort()  # a real rank 0 exits here; its follower's wait breaks
    follower.thread.join()
    assert [type(e) for e in follower.errors] == [threading.BrokenBarrierError]


def test_a_leader_trains_nothing_before_it_has_shared_its_state() -> None:
    model, optimizer = adapted(seed=1)
    with pytest.raises(RuntimeError, match="share"):
        Leader(collectives(1)[0]).train(model, optimizer, samples(1), 1, SETTINGS.train)
    with pytest.raises(ValueError, match="rank 0"):
        Leader(collectives(2)[1])


def test_an_idle_leader_beats_at_most_every_beat_interval(one_thread: None) -> None:
    now = [0.0]
    lead, other = collectives(2)
    model, optimizer = adapted(seed=1)
    follower = Follower(*adapted(seed=2), other)
    leader = Leader(lead, clock=lambda: now[0])
    said: list[object] = []
    broadcast: Callable[[object], object] = lead.broadcast

    def recorded(value: object) -> object:
        said.append(type(value).__name__)
        return broadcast(value)

    lead.broadcast = recorded  # type: ignore[method-assign]
    leader.share(model, optimizer)
    leader.idle()
    now[0] += 29.0
    leader.idle()
    now[0] += 1.0
    leader.idle()  # 30 s after the last command
    leader.idle()
    leader.stop()
    follower.thread.join()
    assert said == ["Share", "Beat", "Stop"] and follower.errors == []


def test_the_checkpoint_of_a_learner_of_two_ranks_holds_both_ranks_states(
    tmp_path: Path, one_thread: None
) -> None:
    lead, other = collectives(2)
    settings = dataclasses.replace(SETTINGS, checkpoint_dir=tmp_path)
    torch.manual_seed(1)
    leader = Leader(lead)
    learner = Learner(testing.tiny_llama(), BytesPromptEncoder(), MemoryObjectStore(), MemoryAnnouncer(),
                      settings, fixed_origin("learner"), ranks=leader)  # fmt: skip
    follower = Follower(*adapted(seed=2), other)
    leader.share(learner.model, learner.optimizer)
    feed(learner, "g1", [1.0, 0.0], 0)
    leader.stop()
    follower.thread.join()
    saved = checkpoint.load(tmp_path)
    assert saved is not None and saved.version == 1
    assert [s.rank for s in saved.ranks] == [0, 1] and saved.ranks == leader.agreed
    assert saved.ranks[0].digests == saved.ranks[1].digests
    assert follower.errors == []


def test_disagreement_names_each_rank_and_what_differs() -> None:
    same = RankState(0, "a", "b", "c")
    assert disagreement([same, RankState(1, "a", "b", "c")]) is None
    problem = disagreement([same, RankState(1, "x", "b", "c"), RankState(2, "a", "b", "y")])
    assert problem is not None
    assert "rank 1: trained tensors" in problem and "rank 2: frozen weights" in problem


def sample(prompt: int, prompt_len: int, response_len: int) -> Sample:
    return Sample((prompt,) * prompt_len, (7,) * response_len, (-1.0,) * response_len, 1.0)


sample_lists = st.lists(
    st.builds(sample, st.integers(0, 3), st.integers(1, 50), st.integers(0, 20)), min_size=1, max_size=30
)


@given(sample_lists, st.integers(1, 6))
def test_every_sample_has_exactly_one_rank_and_the_shares_are_balanced(
    batch: list[Sample], world_size: int
) -> None:
    shares = [shard(batch, rank, world_size) for rank in range(world_size)]
    assert sorted(map(id, (s for share in shares for s in share))) == sorted(map(id, batch))
    cost = [sum(len(s.prompt_ids) + len(s.response_ids) for s in share) for share in shares]
    largest = max(len(s.prompt_ids) + len(s.response_ids) for s in batch)
    assert max(cost) <= sum(cost) / world_size + largest  # each rank within one sample of its part
    assert shard(batch, 0, 1) == [s for p in dict.fromkeys(s.prompt_ids for s in batch) for s in batch
                                  if s.prompt_ids == p]  # fmt: skip


def test_the_turns_of_one_prompt_stay_together_when_they_fit() -> None:
    batch = [sample(1, 10, 5), sample(2, 10, 5), sample(1, 10, 5), sample(2, 10, 5)]
    assert [s.prompt_ids[0] for s in shard(batch, 0, 2)] == [1, 1]
    assert [s.prompt_ids[0] for s in shard(batch, 1, 2)] == [2, 2]
    # fewer samples than ranks: a rank may have none
    assert sorted(len(shard(batch[:1], rank, 2)) for rank in (0, 1)) == [0, 1]
    with pytest.raises(ValueError, match="rank 2"):
        shard(batch, 2, 2)
