"""The strict JSON encoder and the atomic, durable writes of :mod:`trainfabric.io`."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric import io


def test_strict_loads_refuses_what_python_accepts(strict_loads):
    assert json.loads("[NaN]")[0] != json.loads("[NaN]")[0]  # Python's parser takes it
    for text in ("[NaN]", '{"a": Infinity}', "-Infinity"):
        with pytest.raises(ValueError, match="not strict JSON"):
            strict_loads(text)


def test_nonfinite_dict_values_become_null_with_a_reason(strict_loads):
    obj = {"a": float("inf"), "b": float("-inf"), "c": float("nan"), "d": 1.5}
    assert strict_loads(io.dumps(obj)) == {
        "a": None,
        "a_nonfinite": "inf",
        "b": None,
        "b_nonfinite": "-inf",
        "c": None,
        "c_nonfinite": "nan",
        "d": 1.5,
    }


def test_nonfinite_in_lists_and_nested_structures(strict_loads):
    obj = {"xs": [1.0, float("nan"), float("inf")], "inner": {"gap": np.float64("-inf")}}
    assert strict_loads(io.dumps(obj)) == {
        "xs": [1.0, None, None],
        "inner": {"gap": None, "gap_nonfinite": "-inf"},
    }


def test_numpy_values_and_paths(strict_loads):
    obj = {
        "i": np.int64(7),
        "f": np.float32(0.5),
        "b": np.bool_(True),
        "arr": np.array([[1, 2], [3, 4]]),
        "farr": np.array([1.0, np.nan]),
        "scalar_inf": np.float64(np.inf),
        "path": Path("/tmp/x"),
        "tuple": (1, 2),
        np.int64(3): "numpy key",
    }
    assert strict_loads(io.dumps(obj)) == {
        "i": 7,
        "f": 0.5,
        "b": True,
        "arr": [[1, 2], [3, 4]],
        "farr": [1.0, None],
        "scalar_inf": None,
        "scalar_inf_nonfinite": "inf",
        "path": "/tmp/x",
        "tuple": [1, 2],
        "3": "numpy key",
    }


def test_top_level_nonfinite_and_indent(strict_loads):
    assert io.dumps(float("nan")) == "null"
    assert io.dumps({"a": [1]}, indent=2) == '{\n  "a": [\n    1\n  ]\n}'


def test_sibling_clash_and_unencodable_objects_are_errors():
    with pytest.raises(ValueError, match="x_nonfinite"):
        io.dumps({"x": float("nan"), "x_nonfinite": "mine"})
    with pytest.raises(TypeError):
        io.dumps({"s": {1, 2}})


def test_write_json_is_strict_and_sorted(tmp_path, strict_loads):
    path = io.write_json(tmp_path / "m.json", {"b": float("inf"), "a": np.arange(2)})
    text = path.read_text()
    assert text.endswith("\n") and "Infinity" not in text
    assert list(strict_loads(text)) == ["a", "b", "b_nonfinite"]


def test_atomic_write_fsyncs_file_then_directory_around_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def spy(fd):
        events.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    def replace(src, dst):
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", spy)
    monkeypatch.setattr(os, "replace", replace)
    io.write_text(tmp_path / "t.txt", "hello")
    assert events == ["file", "dir", "rename", "dir"]
    assert (tmp_path / "t.txt").read_text() == "hello"


def test_failed_write_leaves_target_and_no_temporary(tmp_path):
    target = io.write_text(tmp_path / "t.txt", "old")

    def boom(path: Path) -> None:
        path.write_text("half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        io.atomic_write(target, boom)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


def test_mode_follows_the_umask_read_at_import(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    assert mask == io.UMASK
    path = io.write_bytes(tmp_path / "b.bin", b"\x00")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_concurrent_writes_keep_the_umask(tmp_path):
    """Writers in threads never see a zero umask (the old code flipped it per write)."""
    before = io.UMASK
    frame = pd.DataFrame({"x": [1.0]})

    def writer(i: int) -> None:
        for j in range(20):
            io.write_parquet(tmp_path / f"{i}-{j}.parquet", frame)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    modes = {stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {0o666 & ~before}
    assert len(list(tmp_path.iterdir())) == 80


def test_parquet_header_metadata_round_trips_as_strict_json(tmp_path):
    import pyarrow.parquet as pq

    path = io.write_parquet(
        tmp_path / "t.parquet",
        {"a": np.arange(3, dtype=np.int64)},
        {"lower_bound_s": 1.25, "gap": float("inf"), "name": "x"},
    )
    meta = pq.read_schema(path).metadata
    assert {k.decode(): io.loads(v) for k, v in meta.items()} == {
        "lower_bound_s": 1.25,
        "gap": None,
        "name": "x",
    }
    assert pq.read_table(path).column("a").to_pylist() == [0, 1, 2]
    with pytest.raises(TypeError):
        io.write_parquet(tmp_path / "f.parquet", pd.DataFrame({"a": [1]}), {"k": 1})


@given(
    st.lists(st.text(max_size=12), max_size=20),
    st.lists(st.floats(allow_nan=False, width=64), max_size=20),
)
def test_mapping_columns_round_trip_strings_and_numbers_as_pandas_reads_them(
    tmp_path_factory, words, values
):
    """String columns (packed as UTF-8 with offsets, no pandas import) read back equal to
    what pandas writes for the same table: non-ASCII, empty strings and empty tables."""
    n = min(len(words), len(values))
    cols = {"w": np.array(words[:n], dtype=str), "x": np.array(values[:n], dtype=float)}
    d = tmp_path_factory.mktemp("cols")
    ours = pd.read_parquet(io.write_parquet(d / "a.parquet", cols))
    theirs = pd.read_parquet(io.write_parquet(d / "b.parquet", pd.DataFrame(cols)))
    assert ours["w"].tolist() == theirs["w"].tolist() == list(cols["w"])
    assert ours["x"].tolist() == theirs["x"].tolist()


def test_mapping_refuses_object_and_2d_columns(tmp_path):
    for bad in (np.array([1, "a"], dtype=object), np.zeros((2, 2))):
        with pytest.raises(TypeError, match="1-D numeric or str"):
            io.write_parquet(tmp_path / "x.parquet", {"a": bad})
