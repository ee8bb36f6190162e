"""Binary min-heaps compiled with numba, shared by the flow and task engines' loops.

Two kinds, both on plain arrays sized by the caller (nothing here allocates but
:func:`heap_le`'s small stack):

* the **event heap** ``(time, seq, item)`` in ``ht``/``hs``/``hf``: ordered by time, then by
  the sequence number, so equal times pop in insertion order (:func:`heap_push`,
  :func:`heap_pop`);
* the **indexed heap** of keys ``hk`` and items ``hl`` with ``pos[item]`` its index (``-1``
  when absent): a key can be set, raised, lowered or removed in ``O(log n)``
  (:func:`heap_set`, :func:`heap_remove`, :func:`sift`, :func:`sift_down`), built in
  ``O(n)`` (:func:`heapify`), and its items with key ``<= x`` listed without popping them
  (:func:`heap_le`).

Every function but :func:`heap_le` is compiled without reference counting (``_nrt=False``:
they allocate nothing), so the loops calling them per flow pay no atomic count per array.
Numba's on-disk cache keys a compiled function on its own file: after editing this module,
clear the cache (``make clean-numba``) so that the loops that call it recompile.
"""

from __future__ import annotations

import numba
import numpy as np


# -- the event heap ------------------------------------------------------------------------------
@numba.njit(cache=True, _nrt=False)
def _less(ht, hs, i, j):
    return ht[i] < ht[j] or (ht[i] == ht[j] and hs[i] < hs[j])


@numba.njit(cache=True, _nrt=False)
def _swap(ht, hs, hf, i, j):
    ht[i], ht[j] = ht[j], ht[i]
    hs[i], hs[j] = hs[j], hs[i]
    hf[i], hf[j] = hf[j], hf[i]


@numba.njit(cache=True, _nrt=False)
def heap_push(ht, hs, hf, size, t, seq, f):
    """Push ``(t, seq, f)``; the arrays have room for every flow. Returns the new size."""
    i = size
    ht[i], hs[i], hf[i] = t, seq, f
    while i > 0:
        parent = (i - 1) // 2
        if not _less(ht, hs, i, parent):
            break
        _swap(ht, hs, hf, i, parent)
        i = parent
    return size + 1


@numba.njit(cache=True, _nrt=False)
def heap_pop(ht, hs, hf, size):
    """Remove the top; returns ``(flow, new size)``."""
    f = hf[0]
    size -= 1
    if size > 0:
        ht[0], hs[0], hf[0] = ht[size], hs[size], hf[size]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            if c + 1 < size and _less(ht, hs, c + 1, c):
                c += 1
            if not _less(ht, hs, c, i):
                break
            _swap(ht, hs, hf, i, c)
            i = c
    return f, size


# -- the indexed heap ---------------------------------------------------------------------------
@numba.njit(cache=True, _nrt=False)
def sift(hk, hl, pos, i, size):
    """Restore the heap property around index ``i`` (up, then down)."""
    key, link = hk[i], hl[i]
    while i > 0:
        parent = (i - 1) // 2
        if hk[parent] <= key:
            break
        hk[i], hl[i] = hk[parent], hl[parent]
        pos[hl[i]] = i
        i = parent
    hk[i], hl[i] = key, link
    sift_down(hk, hl, pos, i, size)


@numba.njit(cache=True, _nrt=False)
def sift_down(hk, hl, pos, i, size):
    """Move the item at index ``i`` down while a child has a smaller key."""
    key, link = hk[i], hl[i]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and hk[c + 1] < hk[c]:
            c += 1
        if hk[c] >= key:
            break
        hk[i], hl[i] = hk[c], hl[c]
        pos[hl[i]] = i
        i = c
    hk[i], hl[i] = key, link
    pos[link] = i


@numba.njit(cache=True, _nrt=False)
def heap_set(hk, hl, pos, size, link, key):
    """Insert ``link`` with ``key`` or change its key (indexed heap); returns the size."""
    i = pos[link]
    if i < 0:
        i = size
        size += 1
    hk[i], hl[i] = key, link
    pos[link] = i
    sift(hk, hl, pos, i, size)
    return size


@numba.njit(cache=True, _nrt=False)
def heap_remove(hk, hl, pos, size, link):
    """Remove ``link`` if present; returns the size."""
    i = pos[link]
    if i < 0:
        return size
    pos[link] = -1
    size -= 1
    if i < size:
        hk[i], hl[i] = hk[size], hl[size]
        pos[hl[i]] = i
        sift(hk, hl, pos, i, size)
    return size


@numba.njit(cache=True)
def heap_le(hk, hl, size, x, out):
    """The items of a heap whose key is <= ``x`` (into ``out``); returns their count."""
    n = 0
    if size == 0 or hk[0] > x:
        return 0
    stack = np.empty(64, np.int64)
    stack[0] = 0
    top = 1
    while top > 0:
        top -= 1
        i = stack[top]
        out[n] = hl[i]
        n += 1
        for c in (2 * i + 1, 2 * i + 2):
            if c < size and hk[c] <= x:
                if top == stack.size:
                    stack = np.concatenate((stack, np.empty(top, np.int64)))
                stack[top] = c
                top += 1
    return n


@numba.njit(cache=True, _nrt=False)
def heapify(hk, hl, pos, size):
    """Make ``hk[:size]``/``hl[:size]`` an indexed min-heap bottom-up (O(size)): sift each
    parent down, the last first."""
    for i in range(size // 2, size):
        pos[hl[i]] = i
    for i in range(size // 2 - 1, -1, -1):
        sift_down(hk, hl, pos, i, size)
