"""What the exercises' tests share: checking that an answer does not call what it was told not to."""

import contextlib

_ABSENT = object()


@contextlib.contextmanager
def refused(why: str, *targets: tuple[object, str]):
    """While the block runs, each `owner.name` in `targets` raises AssertionError(why); restored afterwards."""
    def refuse(*args, **kwargs):
        raise AssertionError(why)

    # vars(), not getattr: a method inherited from a base class (Tensor.unfold) is restored by deleting the patch
    saved = [(owner, name, vars(owner).get(name, _ABSENT)) for owner, name in targets]
    for owner, name, _ in saved:
        setattr(owner, name, refuse)
    try:
        yield
    finally:
        for owner, name, original in saved:
            if original is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
