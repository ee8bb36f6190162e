"""DiLoCo fixtures shared by the serving and the live tests."""

import pytest


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """The real vLLM OpenAI server (``.venv-serve``, the tiny Llama, context 8,192) on
    127.0.0.1 at a free port, started once per session: a
    :class:`trainfabric.diloco.serve.server.Server` (``url``, ``kind == "vllm"``, ``model``).

    Never skipped: if ``.venv-serve`` is missing (``make .venv-serve``) or vLLM does not
    answer ``/health`` within 400 s, every test using it FAILS with the reason and the log's
    tail. At the end of the session the server's whole process group is stopped."""
    from trainfabric.diloco.serve.server import serve

    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    try:
        ctx = serve("vllm", port=0, start_timeout_s=400.0, log_path=log)
        server = ctx.__enter__()
    except Exception as exc:  # ServeError and anything else: fail loudly, never skip
        pytest.fail(f"the real vLLM server could not be started: {exc}", pytrace=False)
    try:
        yield server
    finally:
        ctx.__exit__(None, None, None)
