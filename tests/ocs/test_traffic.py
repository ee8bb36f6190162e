"""Time-varying traffic: exact l1 variation of every generator, positivity, laziness, reader."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.limits import memory_limit
from trainfabric.ocs import traffic as tr


def _measured_v1(d: np.ndarray) -> float:
    """Brute force: ``Σ_t Σ_ij |D_t,ij − D_t−1,ij|`` with explicit loops over slots."""
    return sum(float(np.abs(d[t] - d[t - 1]).sum()) for t in range(1, d.shape[0]))


@settings(max_examples=30)
@given(
    kind=st.sampled_from(tr.GENERATORS),
    slots=st.integers(4, 300),
    pods=st.integers(3, 9),
    share=st.floats(0.0, 0.5),
    seed=st.integers(0, 10_000),
)
def test_v1_is_the_requested_value(kind, slots, pods, share, seed):
    # requested V1 as a share of the total traffic of one slot (within every generator's range)
    v1 = share * pods * (pods - 1) * 1e8
    seq = tr.generate(kind, slots, v1, pods=pods, seed=seed, jumps=min(3, slots - 1))
    d = seq.array()
    assert d.shape == (slots, pods, pods)
    assert (d >= 0).all() and np.isfinite(d).all()
    assert not np.diagonal(d, axis1=1, axis2=2).any()
    assert _measured_v1(d) == pytest.approx(v1, rel=1e-9, abs=1e-6)


def test_blocks_agree_with_the_whole_array_and_across_block_sizes():
    seq = tr.generate("random-walk", 9_000, 3e9, pods=6, seed=3)
    whole = seq.array()
    assert np.array_equal(np.concatenate([b for _, b in seq.blocks(777)]), whole)
    assert tr.variation(seq) == pytest.approx(_measured_v1(whole), rel=1e-12)
    assert tr.per_slot_variation(seq).sum() == pytest.approx(_measured_v1(whole), rel=1e-12)


def test_same_seed_same_sequence_and_fixed_v1_refines_the_same_walk():
    coarse = tr.generate("random-walk", 81, 2e9, pods=5, seed=7)
    a = coarse.array()
    assert np.array_equal(a, tr.generate("random-walk", 81, 2e9, pods=5, seed=7).array())
    fine = tr.generate("random-walk", 801, 2e9, pods=5, seed=7)
    # 8 macro steps land on slots of both: the finer sequence passes through the coarse
    # one's slots (the same path sampled at 10x the resolution, the same amplitude)
    assert coarse.info["macro_steps"] == fine.info["macro_steps"] == 8
    assert np.allclose(fine.block(0, 801)[::10], a, rtol=1e-12)


def test_generators_do_what_they_say():
    jumps = tr.generate("jumps", 100, 1e9, pods=4, seed=1, jumps=4)
    d = jumps.array()
    changes = np.flatnonzero(np.abs(np.diff(d, axis=0)).sum(axis=(1, 2)) > 0) + 1
    assert changes.tolist() == jumps.info["jump_slots"] == [20, 40, 60, 80]
    job = tr.generate("job-arrival", 90, 1e9, pods=6, seed=2)
    d = job.array()
    assert job.info["events"] == [30, 60]
    assert np.array_equal(d[0], d[29]) and np.array_equal(d[30], d[59])
    assert np.array_equal(d[0], d[89]) and d[30].sum() > d[0].sum()
    moe = tr.generate("moe-phases", 200, 5e9, pods=8, seed=0)
    d = moe.array()
    hot = d.sum(axis=1).argmax(axis=1)  # the most loaded destination pod moves
    assert len(set(hot.tolist())) >= 2
    assert np.allclose(d.sum(axis=(1, 2)), d[0].sum())  # the job's volume is constant


def test_refusals_name_the_field():
    with pytest.raises(ConfigError) as e:
        tr.generate("walk", 10, 1.0)
    assert e.value.field == "traffic"
    with pytest.raises(ConfigError) as e:
        tr.generate("random-walk", 1, 1.0)
    assert e.value.field == "slots"
    with pytest.raises(ConfigError) as e:
        tr.generate("jumps", 10, 1e15, pods=4)  # would drive traffic negative
    assert e.value.field == "v1"
    with pytest.raises(ConfigError) as e:
        tr.generate("jumps", 10, 1e6, pods=4, jumps=10)
    assert e.value.field == "jumps"
    with memory_limit(1e-6), pytest.raises(ConfigError) as e:
        tr.generate("jumps", 100_000, 1e6, pods=32).array()
    assert e.value.field == "slots"


def test_reader_round_trips_npy_and_csv(tmp_path):
    d = tr.generate("jumps", 7, 1e9, pods=4, seed=5, jumps=2).array()
    d[3, 1, 2] = 0.0  # an absent CSV row
    np.save(tmp_path / "seq.npy", d)
    assert np.array_equal(tr.read_sequence(tmp_path / "seq.npy"), d)
    t, s, r = np.nonzero(d)
    rows = ["slot,src,dst,bytes"] + [
        f"{a},{b},{c},{float(d[a, b, c])!r}" for a, b, c in zip(t, s, r, strict=True)
    ]
    (tmp_path / "seq.csv").write_text("\n".join(rows) + "\n")
    assert np.array_equal(tr.read_sequence(tmp_path / "seq.csv"), d)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("slot,src,dst,bytes\n0,0,1,5\n0,1,0,-3\n", "line 3: bytes must be >= 0"),
        ("slot,src,dst,bytes\n0,0,1,nan\n", "line 2: bytes must be a finite number"),
        ("slot,src,dst,bytes\n0,0,1,5\n1,0.5,1,2\n", "line 3: src must be a non-negative integer"),
        ("slot,src,dst,bytes\n0,0,1,5\n0,1,0,3,9\n", "line 3"),  # ragged
        ("slot,src,dst,bytes\n0,0,1,5\n0,0,1,6\n", "line 3: duplicate"),
        ("slot,src,bytes\n0,0,1\n", "header must be slot,src,dst,bytes"),
        ("slot,src,dst,bytes\n", "has no rows"),
    ],
)
def test_reader_rejects_bad_csv_naming_file_and_line(tmp_path, body, needle):
    f = tmp_path / "bad.csv"
    f.write_text(body)
    with pytest.raises(ConfigError) as e:
        tr.read_sequence(f)
    assert e.value.field == "traffic"
    assert str(f) in e.value.message and needle in e.value.message


@pytest.mark.parametrize(
    ("array", "needle"),
    [
        (np.full((2, 3, 3), -1.0), "entry [slot, src, dst] = [0, 0, 0] is negative"),
        (np.full((2, 3, 3), np.nan), "is not finite"),
        (np.zeros((2, 3, 4)), "shape [slots, n, n]"),
        (np.array(["a", "b"]), "numeric"),
    ],
)
def test_reader_rejects_bad_npy(tmp_path, array, needle):
    f = tmp_path / "bad.npy"
    np.save(f, array)
    with pytest.raises(ConfigError) as e:
        tr.read_sequence(f)
    assert e.value.field == "traffic" and needle in e.value.message and str(f) in e.value.message


def test_reader_refuses_missing_and_pickled_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        tr.read_sequence(tmp_path / "none.npy")
    np.save(tmp_path / "obj.npy", np.array([[1, 2], [3]], dtype=object), allow_pickle=True)
    with pytest.raises(ConfigError, match="not a NumPy array file"):
        tr.read_sequence(tmp_path / "obj.npy")


def test_walk_memory_guard_counts_bytes_not_entries():
    """The walk's [steps+1, n, n] int64 arrays: 100 steps of 100 pods hold 1e6 entries, 16 MB
    at the peak; a 10 MB limit must refuse them (the guard once counted entries, 1 MB)."""
    from trainfabric.errors import ConfigError
    from trainfabric.limits import memory_limit

    with memory_limit(0.01), pytest.raises(ConfigError, match="slots"):
        tr.generate("random-walk", 101, 1e15, pods=100, seed=0)


def test_blocks_of_many_pods_stay_small_and_cover_the_horizon(monkeypatch):
    """block_slots caps a block at BLOCK_ENTRIES entries; the blocks tile the horizon and
    equal the sequence materialised in one piece."""
    assert tr.block_slots(16) == tr.BLOCK and tr.block_slots(64) == tr.BLOCK
    assert tr.block_slots(4096) == 1 and tr.block_slots(1024) * 1024**2 <= tr.BLOCK_ENTRIES
    monkeypatch.setattr(tr, "BLOCK_ENTRIES", 4 * 30 * 30)  # 30 pods: 4 slots per block
    seq = tr.generate("moe-phases", 9, 1e9, pods=30, seed=1)
    got = list(seq.blocks())
    assert [t0 for t0, _ in got] == [0, 4, 8] and got[-1][1].shape == (1, 30, 30)
    np.testing.assert_array_equal(np.concatenate([b for _, b in got]), seq.block(0, 9))
