"""The tiny random Llama that vLLM serves here, built once into a cache directory.

:func:`tiny_model` runs ``build_tiny_model.py`` (this package) with the serving virtualenv's
Python (it needs transformers, tokenizers and torch, which the project's own environment
does not import) into a temporary sibling directory and renames it into place, so a reader
never sees a half-written model and two concurrent builders leave one complete copy. The
model is rebuilt only when the directory is missing; the seed is part of its name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from trainfabric.diloco.serve.env import ServeError, cache_dir, serve_python

BUILDER = Path(__file__).with_name("build_tiny_model.py")
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
BUILD_TIMEOUT_S = 600


def tiny_model(directory: str | Path | None = None, seed: int = 0) -> Path:
    """Path of the tiny model (built when missing): ``directory`` or
    ``<cache>/tiny-llama-s<seed>`` (see :func:`~trainfabric.diloco.serve.env.cache_dir`)."""
    out = Path(directory) if directory is not None else cache_dir() / f"tiny-llama-s{seed}"
    if all((out / f).is_file() for f in FILES):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        res = subprocess.run(
            [str(serve_python()), str(BUILDER), str(tmp), "--seed", str(seed)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            env=os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
        )
        if res.returncode != 0:
            tail = " | ".join(res.stderr.strip().splitlines()[-3:])
            raise ServeError(f"building the tiny model failed: {tail}")
        try:
            os.rename(tmp, out)  # atomic; fails when a concurrent build got there first
        except OSError:
            if not all((out / f).is_file() for f in FILES):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
