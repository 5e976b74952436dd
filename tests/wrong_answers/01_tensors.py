"""Notebook 01: plausible wrong answers (each must lose its exercise's points) and right answers other than the
solution (other readings of the statement, answers that write to stderr)."""

WRONG = {
    "ex1_row_major_strides": {
        "strides in bytes, as NumPy counts them": '''
def row_major_strides(shape):
    strides, step = [], 4  # bytes of a float32
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
''',
        "reversed order: the last dimension gets the largest stride": '''
def row_major_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(strides)
''',
        "a list instead of a tuple": '''
def row_major_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.insert(0, step)
        step *= max(size, 1)
    return strides
''',
        "a size-0 dimension zeroes the strides before it": '''
def row_major_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))
''',
        "the reference itself: allocates a tensor, so a shape too large for memory raises": '''
def row_major_strides(shape):
    return torch.empty(shape).stride()
''',
        "the reference on the meta device: no memory, but torch's int64 sizes still overflow": '''
def row_major_strides(shape):
    return torch.empty(shape, device="meta").stride()
''',
        "a cumulative product in an int64 tensor: overflows past 2**63": '''
def row_major_strides(shape):
    if not shape:
        return ()
    sizes = torch.tensor([max(s, 1) for s in shape[1:]] + [1], dtype=torch.int64)
    return tuple(sizes.flip(0).cumprod(0).flip(0).tolist())
''',
    },
    "ex2_storage_index": {
        "the storage offset forgotten": '''
def storage_index(index, strides, offset=0):
    return sum(i * s for i, s in zip(index, strides))
''',
        "strides paired with the index in reverse": '''
def storage_index(index, strides, offset=0):
    return offset + sum(i * s for i, s in zip(index, reversed(strides)))
''',
    },
    "ex3_broadcast_shape": {
        "broadcasting from the left": '''
def broadcast_shape(a, b):
    n = max(len(a), len(b))
    a, b = tuple(a) + (1,) * (n - len(a)), tuple(b) + (1,) * (n - len(b))
    result = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        result.append(y if x == 1 else x)
    return tuple(result)
''',
        "never raises: takes the larger size": '''
def broadcast_shape(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    return tuple(max(x, y) for x, y in zip(a, b))
''',
        "torch.broadcast_shapes passed through: its RuntimeError is not a ValueError": '''
def broadcast_shape(a, b):
    return tuple(torch.broadcast_shapes(a, b))
''',
        "takes the larger size, so 1 against 0 gives 1 instead of 0": '''
def broadcast_shape(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise ValueError(f"shapes {a} and {b} do not broadcast")
    return tuple(max(x, y) for x, y in zip(a, b))
''',
        "a list instead of a tuple": '''
def broadcast_shape(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise ValueError(f"shapes {a} and {b} do not broadcast")
    return [y if x == 1 else x for x, y in zip(a, b)]
''',
        "the error names no shapes": '''
def broadcast_shape(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise ValueError("shapes do not broadcast")
    return tuple(y if x == 1 else x for x, y in zip(a, b))
''',
        "torch.broadcast_shapes wrapped, its RuntimeError turned into a ValueError naming both shapes": '''
def broadcast_shape(a, b):
    try:
        return tuple(torch.broadcast_shapes(a, b))
    except RuntimeError:
        raise ValueError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast") from None
''',
        "names the leftmost clash, as a negative index": '''
def broadcast_shape(a, b):
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    for k, (x, y) in enumerate(zip(pa, pb)):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast: {x} against {y} in dimension {k - n}")
    return tuple(y if x == 1 else x for x, y in zip(pa, pb))
''',
        "a torch.Size, not a plain tuple": '''
def broadcast_shape(a, b):
    result = []
    for k in range(1, max(len(a), len(b)) + 1):
        x = a[-k] if k <= len(a) else 1
        y = b[-k] if k <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast: {x} against {y} in dimension {-k}")
        result.append(y if x == 1 else x)
    return torch.Size(reversed(result))
''',
    },
    "ex4_sliding_window": {
        "a window that copies": '''
def sliding_window(x, size, step=1, dilation=1):
    span = (size - 1) * dilation + 1
    return torch.stack([x[i:i + span:dilation] for i in range(0, len(x) - span + 1, step)])
''',
        "unfold, which has no dilation: right for dilation=1 only": '''
def sliding_window(x, size, step=1, dilation=1):
    return x.unfold(0, size, step)
''',
        "the input's own stride ignored": '''
def sliding_window(x, size, step=1, dilation=1):
    count = (len(x) - (size - 1) * dilation - 1) // step + 1
    return x.as_strided((count, size), (step, dilation), x.storage_offset())
''',
        "one window short": '''
def sliding_window(x, size, step=1, dilation=1):
    count = (len(x) - (size - 1) * dilation - 1) // step
    return x.as_strided((count, size), (step * x.stride(0), dilation * x.stride(0)), x.storage_offset())
''',
        "the count of windows forgets the dilation: the last windows run past the end of x": '''
def sliding_window(x, size, step=1, dilation=1):
    count = (len(x) - size) // step + 1
    return x.as_strided((count, size), (step * x.stride(0), dilation * x.stride(0)), x.storage_offset())
''',
    },
}

ALSO_RIGHT = {
    "ex1_row_major_strides": {
        "prints debugging output to stderr": '''
import sys

def row_major_strides(shape):
    print("debug: shape", shape, file=sys.stderr)
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
''',
    },
    "ex4_sliding_window": {
        "uses the deprecated x.storage(), which warns": '''
def sliding_window(x, size, step=1, dilation=1):
    count = (len(x) - (size - 1) * dilation - 1) // step + 1
    out = torch.tensor([], dtype=x.dtype, device=x.device)
    return out.set_(x.storage(), x.storage_offset(), (count, size), (step * x.stride(0), dilation * x.stride(0)))
''',
        "unfold, then every dilation-th element of a longer window: a view too": '''
def sliding_window(x, size, step=1, dilation=1):
    return x.unfold(0, (size - 1) * dilation + 1, step)[:, ::dilation]
''',
    },
}
