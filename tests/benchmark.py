"""Print the wall time of executing each solution notebook (kernel start included), as `make bench` does."""

import sys
import time

from course import assignments, execute, source_path

BUDGET_S = 30  # the per-notebook target on a 2-core laptop CPU; reported, never asserted


def main() -> int:
    names = sys.argv[1:] or assignments()
    width = max(len(f"solutions/{a}/{source_path(a).name}") for a in names)
    print(f"{'notebook':{width}} {'seconds':>8}")
    total = time.perf_counter()
    for assignment in names:
        _, seconds = execute(source_path(assignment), timeout=600)  # 08 trains for BUDGET s, compiles, measures
        note = "" if seconds < BUDGET_S else f"  over the {BUDGET_S} s target"
        print(f"{source_path(assignment).relative_to(source_path(assignment).parents[2])!s:{width}} {seconds:8.1f}{note}", flush=True)
    print(f"{'all':{width}} {time.perf_counter() - total:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
