"""Notebook 01: plausible wrong answers (each must lose its exercise's points) and right answers that write to stderr."""

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
    },
    "ex4_sliding_window": {
        "a window that copies": '''
def sliding_window(x, size, step=1):
    return torch.stack([x[i:i + size] for i in range(0, len(x) - size + 1, step)])
''',
        "unfold itself, not as_strided": '''
def sliding_window(x, size, step=1):
    return x.unfold(0, size, step)
''',
        "the input's own stride ignored": '''
def sliding_window(x, size, step=1):
    count = (len(x) - size) // step + 1
    return x.as_strided((count, size), (step, 1))
''',
        "one window short": '''
def sliding_window(x, size, step=1):
    count = (len(x) - size) // step
    return x.as_strided((count, size), (step * x.stride(0), x.stride(0)))
''',
    },
}

NOISY_BUT_RIGHT = {
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
def sliding_window(x, size, step=1):
    count = (len(x) - size) // step + 1
    out = torch.tensor([], dtype=x.dtype, device=x.device)
    return out.set_(x.storage(), x.storage_offset(), (count, size), (step * x.stride(0), x.stride(0)))
''',
    },
}
