"""Serving requests: trace files and arrival generators.

A request has an arrival time (s), a prompt length and an output length (tokens).
:class:`Requests` holds them as arrays sorted by arrival.

**Trace files** (:func:`read_trace`, :func:`parse_trace`): CSV with a header line, in one of
two layouts recognised from the header (other columns are allowed and ignored):

* **Azure** (the Azure LLM inference traces): ``TIMESTAMP, ContextTokens, GeneratedTokens``;
  ``TIMESTAMP`` is an ISO 8601 date-time; one without a time zone is read as **UTC** (never
  the machine's local zone, which would shift a trace crossing a daylight-saving change);
* **generic**: ``arrival_s, prompt_tokens, output_tokens``; ``arrival_s`` in seconds
  (finite, ``0 <= arrival_s <= 1e10``).

Token counts are whole decimal numbers, prompts ``0 <= prompt <= 10^7``, outputs
``1 <= output <= 10^7``; no field may exceed 256 characters. Rows must be in arrival order
(equal times allowed): a trace that goes back in time is refused at the offending line, never
silently re-sorted (the shipped Azure trace is in order). Arrival times become seconds since
the first request. Every problem (a missing, directory or non-UTF-8 file too) is a
:class:`~trainfabric.errors.ConfigError` whose field is the argument, ``trace`` (which the CLI
shows as ``--trace``), and whose message names the file, the line and the column
(``trace.csv:17: TIMESTAMP: not an ISO 8601 date-time: 'abc'``). The file is read vectorised
(pandas ``read_csv``: the pyarrow engine when every line is one row, i.e. no quotes, no blank
lines and no bare carriage returns, so that row ``i`` is line ``i + 2``; else the C engine,
which keeps blank lines and reports ragged rows by line): a million-row Azure-layout trace
(37 MB) loads in about 2 s.
:func:`azure_trace` reads the shipped copy of the Azure 2023 code trace (CC-BY 4.0, see
``diloco/data/README.md``).

**Generators** (all seeded, rates in requests/s over ``[0, horizon_s)``): :func:`poisson`,
:func:`diurnal` (sinusoidal rate by thinning), :func:`mmpp` (two-state Markov-modulated
Poisson, bursts of ``on_s`` every ``period_s``), :func:`hawkes` (self-exciting: every
arrival raises the rate by ``alpha`` decaying at ``beta``; the request-overlap structure of
agentic and retry traffic) and :func:`segment` (a trace time-scaled so its mean rate becomes
``rate``, cut into disjoint segments of the horizon's length: segment ``i`` is run ``i``'s,
so seeds are independent samples of the trace; :func:`segments` says how many it holds) or
:func:`replay` (from a random start offset, wrapped around: seeds overlap). Token lengths
are drawn jointly from a trace's (prompt, output) pairs, so synthetic arrivals keep real
length correlations.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from trainfabric.errors import ConfigError
from trainfabric.io import read_file


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
AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
GENERIC = ("arrival_s", "prompt_tokens", "output_tokens")
MAX_TOKENS = 10_000_000  # per prompt or output: far beyond any context window
MAX_ARRIVAL_S = 1e10  # about 317 years
MAX_FIELD_CHARS = 256
MAX_HEADER_CHARS = 4096
PARSE_BYTES_PER_FILE_BYTE = 20  # peak memory of the parse per byte of CSV (string columns)


def read_trace(path: str | Path) -> Requests:
    """A trace CSV in the Azure or the generic layout (module doc); errors name the file,
    the line and the column (field ``trace``)."""
    data = read_file(path, "trace", "CSV file", parse_factor=PARSE_BYTES_PER_FILE_BYTE)
    return parse_trace(data, str(path))


def parse_trace(data: str | bytes, name: str = "trace") -> Requests:
    """Parse trace CSV text or bytes (see :func:`read_trace`); ``name`` prefixes messages."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("trace", f"{name}: not a UTF-8 text file (byte {exc.start})") from None
    raw = raw.removeprefix(b"\xef\xbb\xbf")
    layout, cols = _layout(raw, name)
    table = _read_table(raw, name)
    text = [table.iloc[:, i].fillna("").astype(str).str.strip() for i in cols]
    filled = np.logical_or.reduce([(c != "").to_numpy() for c in text])
    if not filled.any():
        raise ConfigError("trace", f"{name}: no requests (a header line and no data rows)")
    lines = table.index.to_numpy()[filled] + 2  # blank lines dropped, numbering kept
    t, prompt, output = _columns([c[filled] for c in text], lines, layout, name)
    return Requests(t - t[0], prompt, output)


def _layout(raw: bytes, name: str) -> tuple[tuple[str, ...], list[int]]:
    """The layout named by the header line and the positions of its three columns."""
    lines = raw[: 4 * MAX_HEADER_CHARS + 4].decode("utf-8", errors="ignore").splitlines()
    first = lines[0] if lines else ""
    if not first.strip():
        raise ConfigError("trace", f"{name}: empty file, expected a header line")
    if len(first) > MAX_HEADER_CHARS:
        raise ConfigError("trace", f"{name}:1: header longer than {MAX_HEADER_CHARS} characters")
    try:
        header = [h.strip() for h in next(csv.reader([first]))]
    except csv.Error as exc:
        raise ConfigError("trace", f"{name}:1: header is not a CSV line ({exc})") from None
    for layout in (AZURE, GENERIC):
        if set(layout) <= set(header):
            return layout, [header.index(c) for c in layout]
    raise ConfigError(
        "trace",
        f"{name}:1: header must name {', '.join(AZURE)} (Azure layout) or "
        f"{', '.join(GENERIC)} (generic layout), got {_short(', '.join(header))!r}",
    )


def _read_table(raw: bytes, name: str) -> pd.DataFrame:
    """All columns as strings, the header's width; data row with index ``i`` is line
    ``i + 2`` (blank lines kept as rows of empty strings)."""
    if _one_row_per_line(raw):
        try:  # every line a row: positions are line numbers; a ragged row raises
            return pd.read_csv(io.BytesIO(raw), engine="pyarrow", dtype=str, keep_default_na=False)
        except (ValueError, pa.ArrowException):
            pass  # the C engine says which line
    try:  # the header as row 0 fixes the width: a longer row anywhere is an error by line
        table = pd.read_csv(
            io.BytesIO(raw),
            engine="c",
            header=None,
            dtype=str,
            na_filter=False,
            skip_blank_lines=False,
            encoding="utf-8",
        )
    except (ValueError, pd.errors.ParserError) as exc:
        ragged = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if ragged:
            want, line, saw = ragged.groups()
            why = f"{line}: {saw} fields, the header has {want}"
        else:
            why = f" not readable as CSV ({_short(str(exc))})"
        raise ConfigError("trace", f"{name}:{why}") from None
    table = table.iloc[1:]
    table.index = table.index - 1
    return table


def _one_row_per_line(raw: bytes) -> bool:
    """No quotes, no blank lines and no bare carriage return (``\\n`` or ``\\r\\n`` ends
    every line): then the pyarrow engine's row ``i`` is line ``i + 2``."""
    blank = b"\n\n" in raw or b"\n\r\n" in raw or raw.startswith((b"\n", b"\r"))
    return b'"' not in raw and not blank and raw.count(b"\r") == raw.count(b"\r\n")


def _columns(text: list[pd.Series], lines: np.ndarray, layout, name: str) -> tuple:
    """Arrival seconds, prompt and output tokens from the stripped text of the three columns
    (row ``i`` from file line ``lines[i]``); the bad value on the earliest line raises (a
    problem is ``(bad-row mask, column position, reason)``)."""
    problems = [
        (r.str.len() > MAX_FIELD_CHARS, k, f"longer than {MAX_FIELD_CHARS} characters")
        for k, r in enumerate(text)
    ]
    t, bad_t, why_t = _arrivals(text[0], layout)
    problems.append((bad_t, 0, why_t))
    tokens = []
    for k, low in ((1, 0), (2, 1)):
        n, more = _tokens(text[k], low, k)
        tokens.append(n)
        problems += more
    _raise_first(problems, text, lines, layout, name)
    back = np.flatnonzero(np.diff(t) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise ConfigError(
            "trace",
            f"{name}:{lines[i]}: {layout[0]}: {_short(text[0].iloc[i])!r} is before the previous "
            "row's time; rows must be in arrival order",
        )
    return t, tokens[0], tokens[1]


def _arrivals(text: pd.Series, layout) -> tuple[np.ndarray, np.ndarray, str]:
    """Arrival times in seconds (relative to the first row for date-times), the mask of bad
    rows and why they are bad: ISO 8601 date-times as UTC (Azure) or seconds (generic)."""
    if layout is AZURE:
        stamp = pd.to_datetime(text, format="ISO8601", utc=True, errors="coerce")
        bad = stamp.isna().to_numpy()
        t = (stamp - stamp[~bad].min()).dt.total_seconds().to_numpy() if not bad.all() else None
        return t, bad, "not an ISO 8601 date-time"
    secs = pd.to_numeric(text.where(text != "", "x"), errors="coerce").astype(float).to_numpy()
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(secs) & (secs >= 0) & (secs <= MAX_ARRIVAL_S))
    return secs, bad, f"not a number of seconds in [0, {MAX_ARRIVAL_S:.0e}]"


def _tokens(text: pd.Series, low: int, k: int) -> tuple[np.ndarray, list]:
    """Whole token counts in ``[low, MAX_TOKENS]`` and the problems of column ``k``."""
    whole = text.str.fullmatch(r"[0-9]{1,9}").fillna(False).to_numpy(bool)
    n = text.where(whole, "0").astype(np.int64).to_numpy()
    return n, [
        (~whole, k, "not a whole number of tokens"),
        (n < low, k, f"must be >= {low}"),
        (n > MAX_TOKENS, k, f"must be <= {MAX_TOKENS:,} tokens"),
    ]


def _raise_first(problems, text: list[pd.Series], lines, layout, name: str) -> None:
    """Raise for the problem on the earliest line (the first listed one on that line)."""
    best = None
    for bad, k, why in problems:
        hits = np.flatnonzero(np.asarray(bad, bool))
        if hits.size and (best is None or hits[0] < best[0]):
            best = (int(hits[0]), k, why)
    if best is not None:
        i, k, why = best
        value = text[k].iloc[i]
        shown = repr(_short(value)) if value else "missing"
        raise ConfigError("trace", f"{name}:{lines[i]}: {layout[k]}: {why}: {shown}")


def _short(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters (a 200 KB field is not echoed back)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} chars)"


@functools.lru_cache(maxsize=1)
def azure_trace() -> Requests:
    """The shipped Azure LLM inference trace 2023, code service (8,819 requests; parsed once,
    treat as read-only)."""
    text = resources.files("trainfabric.diloco").joinpath("data/azure_llm_code_2023.csv")
    return parse_trace(text.read_bytes(), "azure_llm_code_2023.csv")


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
    starts = np.sort(np.arange(k) * period_s + rng.uniform(-jitter_s, jitter_s, k))

    def fn(t):
        """In a burst: ``0 <= t − start < on_s`` for some start. ``t − start`` falls as the
        start rises (also rounded), so the latest start at or before ``t`` decides."""
        latest = np.searchsorted(starts, t, side="right") - 1
        busy = (latest >= 0) & (t - starts[np.maximum(latest, 0)] < on_s)
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
    """``trace`` from a random start offset, wrapped around, scaled to mean ``rate`` (runs
    of different seeds overlap: use :func:`segment` for independent ones)."""
    _check(rate, horizon_s)
    span = trace.span_s + trace.span_s / max(trace.n - 1, 1)  # one mean gap closes the loop
    scale = _scale(trace, rate)  # stretch factor of the trace's time axis
    offset = rng.uniform(0.0, span)
    loops = int(np.ceil(horizon_s / (span * scale))) + 1
    t = (trace.arrival_s[None, :] + span * np.arange(loops)[:, None]).ravel() - offset
    idx = np.tile(np.arange(trace.n), loops)
    keep = (t >= 0) & (t * scale < horizon_s)
    return Requests(t[keep] * scale, trace.prompt_tokens[idx[keep]], trace.output_tokens[idx[keep]])


def _scale(trace: Requests, rate: float) -> float:
    """Stretch factor of the trace's time axis for mean ``rate``: its ``n`` requests then
    last ``n / rate`` seconds (the span plus one mean gap, which closes a loop)."""
    span = trace.span_s + trace.span_s / max(trace.n - 1, 1)
    return (trace.n / max(span, 1e-300)) / rate


def segments(trace: Requests, rate: float, horizon_s: float) -> int:
    """Disjoint segments of ``horizon_s`` seconds in ``trace`` at mean ``rate``:
    ``floor(n / (rate horizon_s))`` (the scaled trace lasts ``n / rate`` seconds)."""
    _check(rate, horizon_s)
    return int(np.floor(trace.n / (rate * horizon_s) * (1 + 1e-12)))


def segment(trace: Requests, rate: float, horizon_s: float, index: int) -> Requests:
    """Segment ``index`` of ``trace`` scaled to mean ``rate``: its requests in
    ``[index · horizon_s, (index + 1) · horizon_s)`` of the scaled trace, shifted to start at
    0. ConfigError (field ``seeds``) when the trace holds no such segment."""
    _check(rate, horizon_s)
    held = segments(trace, rate, horizon_s)
    if not 0 <= index < held:
        raise ConfigError(
            "seeds",
            f"seed {index} needs trace segment {index}, but the trace holds {held} disjoint "
            f"segments of {horizon_s:.6g} s at {rate:.4g} requests/s",
        )
    t = trace.arrival_s * _scale(trace, rate) - index * horizon_s
    keep = (t >= 0) & (t < horizon_s)
    return Requests(t[keep], trace.prompt_tokens[keep], trace.output_tokens[keep])
