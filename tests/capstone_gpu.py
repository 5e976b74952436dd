"""Notebook 08's checks for `make gpu-check` (tests/gpu_check.py): fully masked attention rows on each of CUDA's SDPA
kernels, a CUDA memory snapshot of training steps, and section 12's table of techniques read from the executed
notebook. Each check runs on the CPU too, where it can (tests/test_gpu_check.py), and says so where it cannot.

    python tests/capstone_gpu.py [--snapshot FILE]     # the first two checks alone, printed

It needs torch alone (the notebook is read as JSON): it runs where nbformat and nbclient are not installed.
"""

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "solutions" / "08_capstone" / "08_capstone.ipynb"
LESSON_CELLS = ("setup", "corpus-code", "batches-code", "attention-code", "model-code", "model-class-code")
# the cells of section 12 that print its table and what leads to it
TABLE_CELLS = ("payoff-compile-code", "payoff-time-code", "payoff-ddp-code", "payoff-why-code", "payoff-table-code")


def capstone() -> dict:
    """The names 08's lesson cells define (corpus, batches, `attention`, the model), their printing silenced."""
    cells = {cell.get("id"): "".join(cell["source"]) for cell in json.loads(NOTEBOOK.read_text())["cells"]}
    namespace = {"__name__": "capstone"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile("\n\n".join(cells[cid] for cid in LESSON_CELLS), str(NOTEBOOK), "exec"), namespace)
    return namespace


def sdpa_alone(q, k, v, key_mask):
    """F.scaled_dot_product_attention with 08's causal and padding masks, nothing after it: what a kernel gives."""
    T = q.shape[-2]
    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril() & key_mask[:, None, None, :]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def masked_rows(device, attend=None) -> dict[str, str]:
    """`attend` (08's `attention` unless given) on a row padded at the start, on `device`, in each dtype, with the
    kernel torch picks ("default") and with each SDPA kernel forced alone: what the queries that may attend to no key
    get, and their gradients ("zeros", "NaN" or "not zeros"), or why the kernel could not run. pytorch/pytorch#110213:
    some kernels give NaN there, others values; 08's `attention` promises zeros on every kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    attend, device = attend or capstone()["attention"], torch.device(device)
    backends = [None, SDPBackend.MATH, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    backends += [SDPBackend.CUDNN_ATTENTION] if device.type == "cuda" else []
    dtypes = [torch.float32, torch.bfloat16] + ([torch.float16] if device.type == "cuda" else [])
    key_mask = torch.tensor([[False] * 3 + [True] * 5, [True] * 8], device=device)  # row 0: 3 pads, then 5 characters
    found = {}
    for backend in backends:
        for dtype in dtypes:
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(2, 2, 8, 16, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
            name = f"{backend.name if backend else 'default'} {str(dtype)[6:]}"
            try:
                with sdpa_kernel([backend]) if backend else contextlib.nullcontext():
                    out = attend(q, k, v, key_mask)
                    out.float().square().sum().backward()
            except RuntimeError as error:  # no such kernel for these inputs (flash takes no mask, say)
                found[name] = f"not run: {str(error).strip().splitlines()[0][:90]}"
                continue
            empty = [out[0, :, :3], q.grad[0, :, :3]]  # the 3 pads before the first character: no key allowed
            found[name] = (
                "NaN" if any(t.isnan().any() for t in (out, q.grad, k.grad, v.grad))
                else "zeros" if all(bool((t == 0).all()) for t in empty) else "not zeros")
    return found


def memory_snapshot(device, path: Path, steps: int = 3) -> dict:
    """Record CUDA's allocator history over `steps` training steps of 08's model and dump it to `path` (open it at
    https://pytorch.org/memory_viz). Returns the file, its size and the peak allocated, or why nothing was recorded."""
    device = torch.device(device)
    if device.type != "cuda":
        return {"skipped": f"no snapshot on {device.type}: the allocator history is CUDA's"}
    names = capstone()
    torch.manual_seed(0)
    model = names["CharTransformer"](d_model=192, n_head=6, n_layer=4).to(device)
    optimizer = torch.optim.AdamW(model.parameters())
    batches = torch.Generator().manual_seed(0)
    torch.cuda.reset_peak_memory_stats(device)
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        for _ in range(steps):
            x, y, mask = (t.to(device) for t in names["sample_batch"]("train", 32, batches))
            loss = torch.nn.functional.cross_entropy(model(x, mask).flatten(0, 1), y.flatten(), ignore_index=-100)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        torch.cuda.synchronize(device)
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return {"path": str(path), "bytes": path.stat().st_size, "peak_bytes": torch.cuda.max_memory_allocated(device)}


def report_lines(rows: dict[str, str] | None, snapshot: dict | None, table: str | None,
                 sdpa: dict[str, str] | None = None) -> list[str]:
    """The report's section on notebook 08: masked rows per kernel (08's `attention`, and `sdpa`: the kernel alone),
    the snapshot, section 12's table as printed."""
    lines = ["## 08: fully masked rows, memory snapshot, what each technique buys", ""]
    if rows is not None:
        sdpa = sdpa or {}
        lines += ["Queries with no key to attend to (a row padded at the start), per SDPA kernel and dtype "
                  "(pytorch/pytorch#110213; `default` is the kernel torch picks, the others are forced one at a time "
                  "with `sdpa_kernel`): output and gradients there. The notebook promises zeros from its `attention` "
                  "on every kernel that runs; what the kernel gives alone is reported, and fails nothing:", "",
                  "| kernel, dtype | 08's `attention` | `scaled_dot_product_attention` alone |", "|---|---|---|"]
        lines += [f"| {name} | {found.replace('|', '/')} | {sdpa.get(name, '').replace('|', '/')} |"
                  for name, found in rows.items()]
        lines.append("")
    if snapshot is not None:
        lines.append(f"CUDA memory snapshot: {snapshot['skipped']}" if "skipped" in snapshot else
                     f"CUDA memory snapshot of 3 training steps: `{snapshot['path']}` ({snapshot['bytes'] / 2**20:.1f} "
                     f"MiB; peak allocated {snapshot['peak_bytes'] / 2**20:.0f} MiB), open it at "
                     "https://pytorch.org/memory_viz")
        lines.append("")
    lines += ["Section 12 of the notebook, as it printed:", "", "```", table.strip(), "```"] if table else \
             ["Section 12 of the notebook printed nothing (not run, or failed: see above)."]
    return lines + [""]


def table_text(nb) -> str:
    """What section 12's cells printed in an executed notebook (an nbformat or JSON dict)."""
    texts = []
    for cell in nb["cells"]:
        if cell.get("id") in TABLE_CELLS:
            texts += [o["text"] if isinstance(o["text"], str) else "".join(o["text"]) for o in cell.get("outputs", [])
                      if o.get("output_type") == "stream" and o.get("name") == "stdout"]
    return "".join(texts)


def failed(rows: dict[str, str]) -> list[str]:
    """The rows where 08's `attention` gave NaN, or other than zeros, where the notebook promises zeros (a kernel that
    cannot run on these inputs fails nothing)."""
    return [name for name, found in rows.items() if found in ("NaN", "not zeros")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshot", type=Path, default=Path("capstone-memory-snapshot.pickle"))
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = masked_rows(device)
    print("\n".join(report_lines(rows, memory_snapshot(device, args.snapshot), None, masked_rows(device, sdpa_alone))))
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
