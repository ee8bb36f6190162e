"""Per-tensor quantisation of outer gradients (torch): fp8 e4m3 and emulated int4.

Each tensor ``x`` is sent as a byte payload plus one scale ``s`` (a scalar of ``x``'s dtype):

* ``fp8``: ``s = max|x| / 448`` (448 is the largest finite ``float8_e4m3fn``); the payload is
  ``x / s`` rounded to ``torch.float8_e4m3fn`` (1 byte per element); ``x̂ = q · s``.
  Bound, elementwise: ``|x̂ − x| ≤ 2^-4 |x| + 2^-10 s + 2^-21 |x|``. E4M3 keeps 3 mantissa
  bits, so rounding a normal number (``|x/s| ≥ 2^-6``) to nearest moves it by at most half
  an ulp, ``2^-4`` of its magnitude; below ``2^-6`` the subnormal spacing is ``2^-9``, an
  absolute error of at most ``2^-10`` in the scaled domain, ``2^-10 s`` after rescaling. The
  last term covers the other roundings: torch converts float64 to float8 through float32
  (a relative ``2^-24`` first), plus ``x / s``, ``q · s`` and the clamp to ±448 in the working
  dtype (float32 or float64: at most a few ``2^-24``); ``2^-21`` bounds their sum.
* ``int4``: emulated, torch has no 4-bit dtype: ``s = max|x| / 7``, ``q = round(x / s)``
  clamped to ``[-7, 7]`` (symmetric), stored as the nibble ``q + 8`` and packed two per byte
  (element ``2i`` in the low nibble, ``2i+1`` in the high one; an odd count ends with the
  nibble of 0), ``⌈n/2⌉`` bytes. Bound: ``|x̂ − x| ≤ s/2 + 2^-21 (|x| + s)`` (half a step of
  rounding; the last term, as above, the working-dtype roundings of ``x / s`` and ``q · s``).

An all-zero tensor gets ``s = 1`` and an all-zero payload (``x̂ = 0`` exactly).
"""

from __future__ import annotations

from typing import Literal

import torch

Mode = Literal["fp8", "int4"]
FP8_MAX = 448.0
INT4_MAX = 7


def scale(x: torch.Tensor, mode: Mode) -> torch.Tensor:
    """The per-tensor scale ``max|x| / 448`` (fp8) or ``max|x| / 7`` (int4); 1 for zeros."""
    amax = x.abs().max() if x.numel() else x.new_zeros(())
    s = amax / (FP8_MAX if mode == "fp8" else INT4_MAX)
    return torch.where(s > 0, s, torch.ones_like(s))


def quantize(x: torch.Tensor, mode: Mode) -> tuple[torch.Tensor, torch.Tensor]:
    """``(payload, s)``: ``payload`` a flat uint8 tensor (``n`` bytes for fp8, ``⌈n/2⌉`` for
    int4) and ``s`` the scale, a 0-d tensor of ``x``'s dtype."""
    s = scale(x, mode)
    y = (x.reshape(-1) / s).clamp(-FP8_MAX, FP8_MAX)
    if mode == "fp8":
        return y.to(torch.float8_e4m3fn).view(torch.uint8), s
    return pack_int4(torch.round(y).clamp(-INT4_MAX, INT4_MAX).to(torch.int8)), s


def dequantize(
    payload: torch.Tensor, s: torch.Tensor, mode: Mode, shape: torch.Size
) -> torch.Tensor:
    """``x̂ = q · s`` in ``s``'s dtype, reshaped to ``shape``."""
    n = shape.numel()
    if mode == "fp8":
        q = payload.view(torch.float8_e4m3fn).to(s.dtype)
    else:
        q = unpack_int4(payload, n).to(s.dtype)
    return (q * s).reshape(shape)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Pack integers in ``[-8, 7]`` (a flat int8 tensor) two per byte as nibbles ``q + 8``."""
    nib = (q.to(torch.int16) + 8).to(torch.uint8)
    if nib.numel() % 2:
        nib = torch.cat([nib, nib.new_full((1,), 8)])
    return nib[0::2] | (nib[1::2] << 4)


def unpack_int4(payload: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` integers (int8) of a :func:`pack_int4` payload."""
    low = (payload & 0x0F).to(torch.int8) - 8
    high = (payload >> 4).to(torch.int8) - 8
    return torch.stack([low, high], dim=1).reshape(-1)[:n]


def payload_len(n: int, mode: Mode) -> int:
    """Bytes of the quantised payload of ``n`` elements (the scale not included)."""
    return n if mode == "fp8" else (n + 1) // 2


def bound(x: torch.Tensor, s: torch.Tensor, mode: Mode) -> torch.Tensor:
    """The elementwise error bound of the module docstring, for ``x`` quantised with scale
    ``s``."""
    tiny = 2.0**-21
    if mode == "fp8":
        return 2.0**-4 * x.abs() + 2.0**-10 * s + tiny * x.abs()
    return s / 2 + tiny * (x.abs() + s)
