"""In-process pieces: the generated corpus, the model's causality, checkpoint bookkeeping."""

import re

import torch

from trainfabric.diloco.train import checkpoint, corpus
from trainfabric.diloco.train.model import GPT

from .conftest import TINY


def test_corpus_deterministic_ascii_and_arithmetic_true():
    a = corpus.generate(50_000, 3)
    assert a == corpus.generate(50_000, 3) and a != corpus.generate(50_000, 4)
    assert len(a) == 50_000 and a.isascii()
    facts = re.findall(r"(\d+) (plus|minus) (\d+) is (\d+)\.", a.decode())
    assert len(facts) > 100
    for x, op, y, z in facts:
        assert int(z) == (int(x) + int(y) if op == "plus" else int(x) - int(y))
    # subject-verb agreement: a plural subject never takes a singular verb
    assert not re.search(r"The (?:\w+ )?\w+s (?:sees|likes|helps|finds|watches) ", a.decode())
    held = corpus.tokens(20_000, corpus.HELDOUT_SEED)
    assert held.dtype.name == "uint8" and bytes(held[:200]) not in a


def test_model_is_causal():
    torch.manual_seed(0)
    model = GPT(TINY).double()
    x = torch.randint(0, 256, (2, TINY.context))
    y = x.clone()
    y[:, 9:] = torch.randint(0, 256, (2, TINY.context - 9))  # change only the future
    with torch.no_grad():
        a, b = model(x), model(y)
    assert torch.equal(a[:, :9], b[:, :9])
    assert not torch.allclose(a[:, 9:], b[:, 9:])


def test_common_step_and_keep(tmp_path):
    for step in (5, 10, 15):
        checkpoint.save(tmp_path, 0, step, {"s": step})
    checkpoint.save(tmp_path, 1, 5, {"s": 5})
    checkpoint.save(tmp_path, 1, 10, {"s": 10})
    assert sorted(checkpoint.steps(tmp_path)[0]) == [10, 15]  # only the last KEEP = 2 kept
    assert checkpoint.common_step(tmp_path, 2) == 10
    assert checkpoint.common_step(tmp_path, 3) is None
    assert checkpoint.load(tmp_path, 1, 10)["s"] == 10
    assert not list(tmp_path.glob("*.tmp*"))


def test_relative_run_directory_is_made_absolute(tmp_path, monkeypatch):
    """Spawned learners rendezvous through a file in the run directory: a relative path left
    them waiting forever (seen with `diloco live`'s default `runs/...`)."""
    from trainfabric.diloco.train.launch import TrainingRun

    from .conftest import tiny_config

    monkeypatch.chdir(tmp_path)
    run = TrainingRun(tiny_config(), "runs/rel")
    assert run.run_dir.is_absolute() and run.run_dir == tmp_path / "runs" / "rel"
