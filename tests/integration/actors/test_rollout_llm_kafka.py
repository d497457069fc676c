"""`trialog worker rollout --policy llm` on real Kafka: a tiny random llama with SmolLM2's real tokenizer
answers policy requests in batches, with behaviour log-probs, the same answers the policy gives in-process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaProducer
from transformers import AutoTokenizer

from actors.rollout.llm import load_llm_policy
from learner.model import prepare_model
from learner.testing import tiny_chat_llama
from ops.paths import REPO_ROOT, Paths
from schemas.events import ActionProposed
from schemas.topics import POLICY_REQUESTS
from tests.integration.actors.kafka_helpers import CODEC, new_run, next_records, reading
from tests.unit.actors.requests import policy_request, request_meta

MAX_NEW_TOKENS = 12


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer llama saved with the real SmolLM2 tokenizer (and chat template)."""
    tokenizer = AutoTokenizer.from_pretrained(str(prepare_model(Paths.from_env().cache)))
    folder = tmp_path_factory.mktemp("tiny-llm")
    tiny_chat_llama(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_an_llm_rollout_process_answers_with_logprobs(kafka_bootstrap: str, tiny_model_dir: Path) -> None:
    run = new_run(kafka_bootstrap, "llm")
    command = [
        sys.executable, "-m", "ops.cli", "worker", "rollout", "--policy", "llm",
        "--model", str(tiny_model_dir), "--max-new-tokens", str(MAX_NEW_TOKENS), "--batch", "4",
        "--bootstrap", kafka_bootstrap, "--run", run, "--group", f"{run}-rollout", "--instance", "llm1",
    ]  # fmt: skip
    worker = subprocess.Popen(command, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    requests = [policy_request(seed=5, meta=request_meta(episode=f"ep-{i}", step=i % 2)) for i in range(4)]
    try:
        with reading(kafka_bootstrap, run, "policy.results") as answers:
            for request in requests:
                key = request.meta.episode_id.encode()
                producer.send(POLICY_REQUESTS.of(run), key=key, value=CODEC.encode(request)).get(30)
            records = next_records(answers, 4, timeout_s=300)
    finally:
        producer.close()
        os.kill(worker.pid, signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    by_episode = {}
    for record in records:
        answer = CODEC.decode(record.value)
        assert isinstance(answer, ActionProposed)
        by_episode[answer.meta.episode_id] = answer
    policy = load_llm_policy(tiny_model_dir, max_new_tokens=MAX_NEW_TOKENS)
    for request in requests:
        answer = by_episode[request.meta.episode_id]
        assert (answer.meta.step, answer.meta.producer.instance) == (request.meta.step, "llm1")
        assert 1 <= len(answer.token_ids) <= MAX_NEW_TOKENS and len(answer.logprobs) == len(answer.token_ids)
        assert all(lp <= 0.0 for lp in answer.logprobs) and answer.prompt_tokens > 100
        assert answer.meta.policy_version == request.meta.policy_version
        expected = policy.sample(request)  # the same seed in another process: the same reply
        assert answer.token_ids == expected.token_ids and answer.response == expected.response
        assert answer.prompt_tokens == expected.prompt_tokens
