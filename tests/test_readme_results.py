"""README.md's measured figures match ``benchmarks/results/`` (``benchmarks/readme.py``).

* the README's rendered blocks are exactly what the results files render (the failure message
  is the renderer's unified diff of the first differing block: run
  ``python benchmarks/readme.py`` after a benchmark rewrote its results);
* the check can fail: a changed number inside a block is reported;
* a key missing from a results file is an error naming the file and the key;
* outside the rendered blocks the README holds no measured number: a number with a unit of
  time, ratio, percentage, size or rate next to a measurement word, or any bare decimal with two
  or more places, fails unless it is one of a few input or definition phrases listed below.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import readme as R  # noqa: E402

README = ROOT / "README.md"

# Inputs and definitions typed outside the rendered blocks. Each entry is a phrase of the README
# (matched literally) and must still occur there, so the list cannot go stale.
ALLOWED = (
    "Python 3.11",  # the required interpreter
    "32k GPUs / 1M flows",  # what fabric_scale.py's F6 case simulates (its inputs)
    ">= 0.98 of the max-flow bound",  # the F3 target
    "<= 1.01 x optimum",  # a test's tolerance
    "100 Gb/s: 0.57 s",  # the sync model's closed form for its default inputs
    "slows co-located serving 2x",  # the interference factor, a model parameter
    "betas 0.9/0.95",  # the pinned AdamW recipe
    "fall back to 5 Gb/s",  # the OCS fallback rate, an input
    "δ = 25 ms",  # the rewire-or-defer study's reconfiguration delay, an input
)

NUMBER = r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"
UNIT = (
    r"(?:\s?(?:s|ms|us|µs|min|minutes|hours|GB|GiB|MB|TB|Gb/s|Mbit/s|Tb/s|Pb/s|pp|nats|M"
    r"|tokens/s|req/s|events/s)(?![\w/])|x(?!\w)|%)"
)
WITH_UNIT = re.compile(NUMBER + UNIT)
BARE_DECIMAL = re.compile(r"(?<![\w.])\d+\.\d{2,}(?![\w.])")
MEASURE_WORDS = re.compile(
    r"(?<![\w-])(?:measured|measures|took|takes|taking|wall|median|mean|average|worst|p50|p9[059]"
    r"|faster|slower|speed-?ups?|ratio|gap|error|peak|about|around|in under|costs?|slowdown"
    r"|violations|loss|regret|apart|reaches|gives|finish(?:es)?)(?![\w-])|~",
    re.IGNORECASE,
)
BLOCK = re.compile(r"<!-- results:([a-z0-9-]+) -->.*?<!-- /results:\1 -->", re.DOTALL)


def test_readme_matches_results():
    diff = R.check(README.read_text(encoding="utf-8"), R.Results(R.RESULTS))
    assert diff is None, "README.md differs from benchmarks/results/:\n" + diff


def _first_number_in_block(text: str) -> tuple[str, re.Match]:
    name = R.find_blocks(text.splitlines(keepends=True))[0].name
    start = text.index(f"<!-- results:{name} -->")
    m = re.compile(r"\d+\.\d+").search(text, start)
    assert m is not None
    return name, m


def test_a_changed_number_in_a_block_fails_the_check():
    text = README.read_text(encoding="utf-8")
    name, m = _first_number_in_block(text)
    typed = f"{float(m.group()) + 1:.{len(m.group().split('.')[1])}f}"
    changed = text[: m.start()] + typed + text[m.end() :]
    diff = R.check(changed, R.Results(R.RESULTS))
    assert diff is not None
    assert f"<!-- results:{name} -->" in diff
    removed = [line for line in diff.splitlines() if line.startswith("-") and typed in line]
    added = [line for line in diff.splitlines() if line.startswith("+") and m.group() in line]
    assert removed and added


def test_main_check_exits_1_with_the_diff(tmp_path, capsys):
    text = README.read_text(encoding="utf-8")
    _, m = _first_number_in_block(text)
    readme = tmp_path / "README.md"
    readme.write_text(text[: m.start()] + "999.5" + text[m.end() :], encoding="utf-8")
    assert R.main(["--check", "--readme", str(readme)]) == 1
    assert "999.5" in capsys.readouterr().out
    assert R.main(["--readme", str(readme)]) == 0  # rewrite in place
    assert readme.read_text(encoding="utf-8") == text
    assert R.main(["--check", "--readme", str(readme)]) == 0


def test_a_missing_key_names_the_file_and_the_key(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(R.RESULTS, results)
    path = results / "ocs_scale.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    del doc["seconds_at_256"]
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(R.ResultsKeyError) as err:
        R.check(README.read_text(encoding="utf-8"), R.Results(results))
    assert err.value.file.endswith("ocs_scale.json")
    assert err.value.key == "seconds_at_256"
    assert "ocs_scale.json" in str(err.value) and "seconds_at_256" in str(err.value)


def test_the_last_object_of_a_file_is_read_and_provenance_is_rendered(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(R.RESULTS, results)
    path = results / "diloco_reference.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    newer = {
        **doc,
        "outer_steps": 7,
        "provenance": {
            "commit": "abc1234def",
            "dirty": False,
            "utc": "2026-12-06T10:00:00+00:00",
            "argv": ["benchmarks/diloco_reference.py", "--quick"],
        },
    }
    path.write_text(json.dumps(doc) + "\n" + json.dumps(newer) + "\n", encoding="utf-8")
    older = results / "packet_speed.json"  # as a file written before provenance existed
    doc = json.loads(older.read_text(encoding="utf-8"))
    older.write_text(json.dumps({k: v for k, v in doc.items() if k != "provenance"}))
    new, blocks = R.render(README.read_text(encoding="utf-8"), R.Results(results))
    (rendered,) = [b for name, _, b in blocks if name == "diloco-reference"]
    assert "after 7 outer steps" in rendered
    assert "commit abc1234, 2026-12-06, `--quick`" in rendered
    assert "packet_speed.json`, no provenance (older run)" in new


@pytest.mark.parametrize(
    "text, message",
    [
        ("<!-- results:nope -->\n<!-- /results:nope -->\n", "no renderer"),
        ("<!-- results:ocs-plan -->\nx\n", "never closed"),
        ("<!-- results:ocs-plan -->\n<!-- /results:ocs-moe-256 -->\n", "without its opening"),
        ("text <!-- results:ocs-plan --> inline\n", "malformed"),
    ],
)
def test_malformed_markers_are_errors(text, message):
    with pytest.raises(R.ReadmeError, match=message):
        R.render(text, R.Results(R.RESULTS))


def _outside_blocks() -> str:
    return " ".join(BLOCK.sub(" ", README.read_text(encoding="utf-8")).split("\n"))


def _allowed_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    for phrase in ALLOWED:
        spans += [(m.start(), m.end()) for m in re.finditer(re.escape(phrase), text)]
    return spans


def test_allowlist_phrases_still_occur():
    text = _outside_blocks()
    assert [p for p in ALLOWED if p not in text] == []


def test_no_measured_number_outside_rendered_blocks():
    text = _outside_blocks()
    allowed = _allowed_spans(text)

    def ok(m: re.Match) -> bool:
        return any(a <= m.start() and m.end() <= b for a, b in allowed)

    hits = []
    for m in WITH_UNIT.finditer(text):
        window = text[max(0, m.start() - 60) : m.end() + 40]
        if MEASURE_WORDS.search(window) and not ok(m):
            hits.append(window)
    hits += [
        text[max(0, m.start() - 60) : m.end() + 40]
        for m in BARE_DECIMAL.finditer(text)
        if not ok(m)
    ]
    assert hits == [], "measured numbers outside rendered blocks (move them into a block):\n" + (
        "\n".join(hits)
    )


def test_guard_catches_a_typed_measurement():
    text = "The plan took 1.07 s at 256 pods, a 2.3x speed-up."
    hits = [m.group() for m in WITH_UNIT.finditer(text) if MEASURE_WORDS.search(text)]
    assert hits == ["1.07 s", "2.3x"]
    assert BARE_DECIMAL.search("a ratio of 0.976 against htsim")
