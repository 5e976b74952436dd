"""Pictures of tensors: which cells of the storage a view reads."""

import matplotlib.pyplot as plt
import torch


def storage_positions(view: torch.Tensor) -> torch.Tensor:
    """For each element of `view`, its position (in elements) in the underlying storage."""
    # Replay the view's size/stride/offset on a storage of 0, 1, 2, ...: each element then
    # reads its own storage index. No arithmetic of ours, so the picture cannot disagree with torch.
    n = view.untyped_storage().nbytes() // view.element_size()
    return torch.arange(n).as_strided(view.shape, view.stride(), view.storage_offset())


def _cell(ax, x, y, label, shade):
    ax.add_patch(plt.Rectangle((x, y), 1, 1, facecolor=plt.cm.Oranges(shade) if shade else "white", edgecolor="black"))
    ax.text(x + 0.5, y + 0.5, label, ha="center", va="center", fontsize=8)


def plot_storage(view: torch.Tensor):
    """Draw the storage as a row of cells (shaded where `view` reads) above the view's elements; return the figure."""
    positions = storage_positions(view)
    n = view.untyped_storage().nbytes() // view.element_size()
    reads = torch.bincount(positions.flatten(), minlength=n) if positions.numel() else torch.zeros(n, dtype=torch.long)
    grid = positions.reshape(-1, positions.shape[-1]) if positions.dim() >= 2 else positions.reshape(1, -1)
    rows, cols = grid.shape
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(min(0.45 * max(n, cols) + 1, 14), 1.6 + 0.45 * min(rows, 12)),
                                      gridspec_kw={"height_ratios": [1.6, max(min(rows, 12), 1)]})
    for i in range(n):
        k = int(reads[i])
        _cell(top, i, 0, str(i), 0.25 + 0.2 * min(k, 3) if k else 0)
        if k > 1:  # stride 0 (expand) reads one cell several times
            top.text(i + 0.5, 1.1, f"x{k}", ha="center", va="bottom", fontsize=7)
    top.set_title(f"storage, {n} elements (shaded: read by the view; below, each element shows its cell)", fontsize=9, loc="left")
    for r in range(min(rows, 12)):  # one picture row per view row (leading dimensions flattened)
        for c in range(cols):
            _cell(bottom, c, -r, str(int(grid[r, c])), 0.45)
    bottom.set_title(f"view {tuple(view.shape)}  strides {view.stride()}  offset {view.storage_offset()}", fontsize=9, loc="left")
    for ax, width, low, high in ((top, n, 0, 1.6), (bottom, cols, 1 - min(rows, 12), 1)):
        ax.set_xlim(0, max(width, 1))
        ax.set_ylim(low, high)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.tight_layout()
    return fig
