"""Software prefetch of a row a few SKUs ahead (a numba intrinsic over llvm.prefetch).

The chunk loop's hottest instruction (perf, session 5) was the first read of a SKU's metrics
row, whose running totals are read, added to and written back each day: 232 bytes on four
cache lines that the hardware prefetchers did not bring in time behind the long, branchy
per-SKU work. Prefetching that row 8 SKUs ahead took 5-7 ns off ~165 ns per SKU-step (1M
SKUs, 1 thread, three interleaved pairs). Prefetching every block of the SKU (parameters,
state, forecasts, features, metrics) was ~5 ns *slower*: too many hints for what they save.
A prefetch never faults and changes no value, so results are bit-identical with or without.
"""

from __future__ import annotations

import numpy as np
from llvmlite import binding, ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

LINE = 64  # bytes per cache line (x86-64 and most arm64)
# LLVM 15+ has opaque pointers: the intrinsic is mangled on "p0" instead of "p0i8".
_PREFETCH = "llvm.prefetch.p0" if binding.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"


@intrinsic
def prefetch_for_write(typingctx, arr, i, j):
    """Hint the cache line holding arr[i, j] (2-D) for writing; no bounds check, no fault."""
    sig = types.void(arr, i, j)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer2(
            context, builder, ary.data, cgutils.unpack_tuple(builder, ary.shape),
            cgutils.unpack_tuple(builder, ary.strides), aryty.layout, [args[1], args[2]],
            wraparound=False, boundscheck=False)
        i8p = ir.PointerType(ir.IntType(8))
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), _PREFETCH)
        # (address, 1 = for a write, locality 3 = keep in every cache level, 1 = data)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, inline="always")
def prefetch_row(a: np.ndarray, i: np.int64) -> None:
    """Every cache line of row i of the C-contiguous 2-D array `a` (0 <= i < rows)."""
    n = a.shape[1]
    step = max(LINE // a.itemsize, 1)
    for c in range(0, n, step):
        prefetch_for_write(a, i, c)
    prefetch_for_write(a, i, n - 1)  # a row need not start on a line boundary
