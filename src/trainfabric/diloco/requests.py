"""Serving requests: trace files and arrival generators.

A request has an arrival time (s), a prompt length and an output length (tokens).
:class:`Requests` holds them as arrays sorted by arrival.

**Trace files** (:func:`read_trace`): CSV with a header naming a timestamp column and the two
token columns, in the common public LLM-serving layout: ``TIMESTAMP, ContextTokens,
GeneratedTokens`` (Azure LLM inference traces) or ``timestamp, prompt_tokens,
output_tokens``. Timestamps are ISO date-times or seconds; they become seconds since the
first request. A malformed row is a :class:`~trainfabric.errors.FormatError` naming its line.
:func:`azure_trace` reads the shipped copy of the Azure 2023 code trace (CC-BY 4.0, see
``diloco/data/README.md``).

**Generators** (all seeded, rates in requests/s over ``[0, horizon_s)``): :func:`poisson`,
:func:`diurnal` (sinusoidal rate by thinning), :func:`mmpp` (two-state Markov-modulated
Poisson, bursts of ``on_s`` every ``period_s``), :func:`hawkes` (self-exciting: every
arrival raises the rate by ``alpha`` decaying at ``beta``; the request-overlap structure of
agentic and retry traffic) and :func:`replay` (a trace from a random start offset, wrapped
around, time-scaled so its mean rate becomes ``rate``). Token lengths are drawn jointly from
a trace's (prompt, output) pairs, so synthetic arrivals keep real length correlations.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path

import numpy as np

from trainfabric.errors import ConfigError, FormatError

COLUMNS = {
    "timestamp": ("timestamp", "TIMESTAMP", "arrival_time", "time"),
    "prompt": ("prompt_tokens", "ContextTokens", "input_tokens", "prompt_len"),
    "output": ("output_tokens", "GeneratedTokens", "generated_tokens", "output_len"),
}


@dataclass(frozen=True, eq=False)
class Requests:
    """Arrival times (s, sorted), prompt and output tokens (>= 1) of ``n`` requests."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __post_init__(self):
        order = np.argsort(np.asarray(self.arrival_s, float), kind="stable")
        for name, dtype in (("arrival_s", float), ("prompt_tokens", np.int64)):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype)[order])
        object.__setattr__(self, "output_tokens", np.asarray(self.output_tokens, np.int64)[order])
        if not (self.arrival_s.shape == self.prompt_tokens.shape == self.output_tokens.shape):
            raise ConfigError("requests", "arrival, prompt and output arrays differ in length")
        if np.any(self.prompt_tokens < 0) or np.any(self.output_tokens < 1):
            raise ConfigError("requests", "prompt tokens must be >= 0, output tokens >= 1")

    @property
    def n(self) -> int:
        return int(self.arrival_s.size)

    @property
    def span_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if self.n > 1 else 0.0


# -- files -----------------------------------------------------------------------------------------
def read_trace(path: str | Path) -> Requests:
    """A trace CSV (module doc); errors name the file and the line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("trace", f"file not found: {path}") from None
    return parse_trace(text, str(path))


def parse_trace(text: str, name: str = "trace") -> Requests:
    """Parse trace CSV text (see :func:`read_trace`)."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header:
        raise FormatError("trace", f"{name}: empty file, expected a header line")
    cols = {}
    for key, names in COLUMNS.items():
        hits = [i for i, h in enumerate(header) if h.strip() in names]
        if not hits:
            raise FormatError("trace", f"{name}: line 1: no {key} column (one of {names})")
        cols[key] = hits[0]
    times, prompt, output = [], [], []
    for line, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        try:
            t = _seconds(row[cols["timestamp"]])
            p = int(row[cols["prompt"]])
            o = int(row[cols["output"]])
        except (IndexError, ValueError) as exc:
            raise FormatError("trace", f"{name}: line {line}: {_why(exc)}: {row!r}") from None
        if p < 0 or o < 1:
            raise FormatError("trace", f"{name}: line {line}: prompt tokens >= 0, output >= 1")
        times.append(t)
        prompt.append(p)
        output.append(o)
    if not times:
        raise FormatError("trace", f"{name}: no requests")
    t = np.asarray(times)
    return Requests(t - t.min(), np.asarray(prompt), np.asarray(output))


def _seconds(value: str) -> float:
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        pass
    if "." in value:  # fractional seconds beyond microseconds (the Azure traces use 7 digits)
        head, frac = value.split(".", 1)
        value = f"{head}.{frac[:6]}"
    return datetime.fromisoformat(value).timestamp()


def _why(exc: Exception) -> str:
    return "missing column" if isinstance(exc, IndexError) else "not a number or a date-time"


@functools.lru_cache(maxsize=1)
def azure_trace() -> Requests:
    """The shipped Azure LLM inference trace 2023, code service (8,819 requests; parsed once,
    treat as read-only)."""
    text = resources.files("trainfabric.diloco").joinpath("data/azure_llm_code_2023.csv")
    return parse_trace(text.read_text(encoding="utf-8"), "azure_llm_code_2023.csv")


# -- generators ------------------------------------------------------------------------------------
def _lengths(n: int, rng: np.random.Generator, source: Requests | None):
    source = source or azure_trace()
    pick = rng.integers(source.n, size=n)
    return source.prompt_tokens[pick], source.output_tokens[pick]


def _check(rate: float, horizon_s: float) -> None:
    if not rate > 0:
        raise ConfigError("rate", f"must be > 0 requests/s, got {rate}")
    if not horizon_s > 0:
        raise ConfigError("horizon_s", f"must be > 0, got {horizon_s}")


def _make(times: np.ndarray, rng, lengths: Requests | None) -> Requests:
    p, o = _lengths(times.size, rng, lengths)
    return Requests(times, p, o)


def poisson(rate: float, horizon_s: float, rng: np.random.Generator, lengths=None) -> Requests:
    """Homogeneous Poisson arrivals at ``rate``."""
    _check(rate, horizon_s)
    n = rng.poisson(rate * horizon_s)
    return _make(np.sort(rng.uniform(0.0, horizon_s, n)), rng, lengths)


def _thinned(rate_fn, peak: float, horizon_s: float, rng, lengths) -> Requests:
    n = rng.poisson(peak * horizon_s)
    t = np.sort(rng.uniform(0.0, horizon_s, n))
    keep = rng.uniform(0.0, peak, n) < rate_fn(t)
    return _make(t[keep], rng, lengths)


def diurnal(
    rate: float,
    horizon_s: float,
    rng: np.random.Generator,
    *,
    amplitude: float = 0.6,
    period_s: float = 3600.0,
    lengths=None,
) -> Requests:
    """Rate ``rate · (1 + amplitude · sin(2π t / period_s))`` (mean ``rate``)."""
    _check(rate, horizon_s)
    if not 0 <= amplitude < 1:
        raise ConfigError("amplitude", "must be in [0, 1)")

    def fn(t):
        return rate * (1 + amplitude * np.sin(2 * np.pi * t / period_s))

    return _thinned(fn, rate * (1 + amplitude), horizon_s, rng, lengths)


def mmpp(
    rate: float,
    horizon_s: float,
    rng: np.random.Generator,
    *,
    burst_factor: float = 4.0,
    on_s: float = 30.0,
    period_s: float = 120.0,
    jitter_s: float = 10.0,
    lengths=None,
) -> Requests:
    """Bursts: ``burst_factor`` x the quiet rate for ``on_s`` seconds once every ``period_s``
    (start jittered uniformly by ``±jitter_s``, seeded); the mean rate is ``rate``."""
    _check(rate, horizon_s)
    if not (burst_factor >= 1 and 0 < on_s < period_s):
        raise ConfigError("burst_factor", "need burst_factor >= 1 and 0 < on_s < period_s")
    quiet = rate * period_s / (period_s + (burst_factor - 1) * on_s)
    k = int(np.ceil(horizon_s / period_s)) + 1
    starts = np.arange(k) * period_s + rng.uniform(-jitter_s, jitter_s, k)

    def fn(t):
        phase = t[:, None] - starts[None, :]
        busy = ((phase >= 0) & (phase < on_s)).any(axis=1)
        return np.where(busy, quiet * burst_factor, quiet)

    return _thinned(fn, quiet * burst_factor, horizon_s, rng, lengths)


def hawkes(
    rate: float,
    horizon_s: float,
    rng: np.random.Generator,
    *,
    branching: float = 0.5,
    decay_s: float = 2.0,
    lengths=None,
) -> Requests:
    """Self-exciting arrivals: immigrants at ``rate·(1 − branching)``, each arrival spawning
    Poisson(``branching``) children after Exp(``decay_s``) delays (mean rate ``rate``)."""
    _check(rate, horizon_s)
    if not 0 <= branching < 1:
        raise ConfigError("branching", "must be in [0, 1)")
    gen = np.sort(rng.uniform(0.0, horizon_s, rng.poisson(rate * (1 - branching) * horizon_s)))
    times = [gen]
    while gen.size:
        kids = rng.poisson(branching, gen.size)
        gen = np.repeat(gen, kids) + rng.exponential(decay_s, kids.sum())
        gen = gen[gen < horizon_s]
        times.append(gen)
    return _make(np.sort(np.concatenate(times)), rng, lengths)


def replay(trace: Requests, rate: float, horizon_s: float, rng: np.random.Generator) -> Requests:
    """``trace`` from a random start offset, wrapped around, scaled to mean ``rate``."""
    _check(rate, horizon_s)
    span = trace.span_s + trace.span_s / max(trace.n - 1, 1)  # one mean gap closes the loop
    scale = (trace.n / span) / rate  # stretch factor of the trace's time axis
    offset = rng.uniform(0.0, span)
    loops = int(np.ceil(horizon_s / (span * scale))) + 1
    t = (trace.arrival_s[None, :] + span * np.arange(loops)[:, None]).ravel() - offset
    idx = np.tile(np.arange(trace.n), loops)
    keep = (t >= 0) & (t * scale < horizon_s)
    return Requests(t[keep] * scale, trace.prompt_tokens[idx[keep]], trace.output_tokens[idx[keep]])
