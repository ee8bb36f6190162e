"""Real serving for the live DiLoCo runs: a vLLM server, its emulator, a metrics sidecar and a
trace replayer.

* :func:`serve` (``server``): start/stop the real vLLM OpenAI server (its own virtualenv,
  ``.venv-serve``) or the emulator; a context manager yielding the base URL and the kind.
* :func:`tiny_model` (``model``): the tiny random Llama vLLM serves here, built once.
* :class:`Emulator` (``emulator``): vLLM's HTTP surface driven by the simulator's engine model.
* :class:`Sidecar` (``sidecar``): scrapes ``/metrics`` into the policies' telemetry.
* :func:`replay` (``replay``): open-loop trace replay measuring TTFT/TPOT from the stream.

Every server started here binds 127.0.0.1 unless a host is given explicitly.
"""

from trainfabric.lazy import exports

EXPORTS = {
    "serve": "server",
    "Server": "server",
    "tiny_model": "model",
    "Emulator": "emulator",
    "ServeError": "env",
}
__getattr__, __dir__ = exports(__name__, EXPORTS)
