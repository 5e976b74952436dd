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


# Notebook 07: checkpointing


def plot_resumed_runs(straight: list, resumed: dict, start: int):
    """Notebook 07: the uninterrupted loss curve and each resumed run's, which begins at step `start` (left); each
    resumed loss divided by the uninterrupted one at the same step (right). Return the figure."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    left.semilogy(straight, color="black", lw=3, alpha=0.3, label="uninterrupted")
    for (label, losses), style in zip(resumed.items(), ("--", "-", "-", ":")):
        steps = range(start, start + len(losses))
        left.semilogy(steps, losses, style, lw=1.2, label=f"resumed: {label}")
        right.plot(steps, [r / s for r, s in zip(losses, straight[start:])], style, lw=1.2, label=label)
    left.axvline(start, color="grey", lw=0.8, ls=":")
    left.set_xlabel("step")
    left.set_ylabel("training loss")
    left.legend(fontsize=8, loc="lower left")
    right.axhline(1, color="black", lw=3, alpha=0.3)
    right.set_xlabel("step")
    right.set_ylabel("resumed loss / uninterrupted loss")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_checkpoint_history(train_losses: list, val_losses: list, best_epoch: int,
                            labels: tuple = ("training loss", "validation loss")):
    """Notebook 07: training and validation loss per epoch (epochs count from 1), the best epoch marked. Return the
    figure."""
    epochs = range(1, len(val_losses) + 1)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(epochs, train_losses, "o-", label=labels[0])
    ax.plot(epochs, val_losses, "s-", label=labels[1])
    ax.axvline(best_epoch, color="grey", ls=":", label=f"best epoch ({best_epoch}): best.pt")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    ax.set_xticks(list(epochs))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_checkpoint_tradeoff(kept: dict, peak: dict, flops: dict, seconds: dict):
    """Notebook 07: gradient checkpointing by number of segments. Each dict maps a segment count to a measurement,
    and None to the run without checkpointing: activation bytes kept after forward and at the peak of backward
    (left); floating-point operations and seconds per step, relative to no checkpointing (right). Return the figure."""
    segments = [s for s in kept if s is not None]
    mib = 2.0 ** 20
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    left.plot(segments, [kept[s] / mib for s in segments], "o-", label="kept after forward")
    left.plot(segments, [peak[s] / mib for s in segments], "s-", label="peak in backward")
    left.axhline(peak[None] / mib, color="black", ls="--", label="no checkpointing")
    left.set_ylabel("activations (MiB)")
    left.set_ylim(0, 1.45 * peak[None] / mib)
    left.legend(fontsize=8, loc="upper right")
    right.plot(segments, [flops[s] / flops[None] for s in segments], "s-", label="floating-point operations")
    right.plot(segments, [seconds[s] / seconds[None] for s in segments], "o-", label="time")
    right.axhline(1, color="black", ls="--", label="no checkpointing")
    right.set_ylabel("forward + backward, relative")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(segments, [str(s) for s in segments])
        ax.set_xlabel("segments")
    fig.tight_layout()
    return fig


def plot_scaling(measured: dict):
    """Notebook 06's scaling measurement, three panels: throughput against the ideal W x T(1), the efficiency
    T(W) / (W T(1)), and each step split into compute (steps under no_sync) and the all-reduce backward did not hide.

    measured: {world size W: {"samples_per_s": ..., "step_ms": ..., "compute_ms": ...}}, W = 1 included."""
    sizes = sorted(measured)
    throughput = [measured[w]["samples_per_s"] for w in sizes]
    one = measured[1]["samples_per_s"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 2.8))
    axes[0].plot(sizes, [w * one for w in sizes], "k--", label="ideal: W x T(1)")
    axes[0].plot(sizes, throughput, "o-", label="measured")
    axes[0].set_xlabel("processes W")
    axes[0].set_ylabel("samples / s")
    axes[0].legend(fontsize=8)
    axes[1].bar([str(w) for w in sizes], [t / (w * one) for w, t in zip(sizes, throughput)])
    axes[1].axhline(1, color="k", ls="--")
    axes[1].set_ylim(0, 1.15)
    axes[1].set_title("efficiency T(W) / (W T(1))", fontsize=9)
    compute = [measured[w]["compute_ms"] for w in sizes]
    communication = [max(measured[w]["step_ms"] - measured[w]["compute_ms"], 0) for w in sizes]
    axes[2].bar([str(w) for w in sizes], compute, label="compute (no_sync)")
    axes[2].bar([str(w) for w in sizes], communication, bottom=compute, label="all-reduce not hidden")
    axes[2].set_ylabel("ms per step")
    axes[2].set_xlabel("processes W")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    return fig


# Notebook 08: the capstone


def plot_attention_masks(masks: dict):
    """Notebook 08: one panel per (T, T) bool mask, True (shaded) where query row i may attend to key column j.
    Return the figure."""
    fig, axes = plt.subplots(1, len(masks), figsize=(3.1 * len(masks), 3.0), squeeze=False)
    for ax, (title, mask) in zip(axes[0], masks.items()):
        mask = torch.as_tensor(mask).cpu()
        ax.imshow(mask.float(), cmap="Oranges", vmin=0, vmax=1.4)
        T = mask.shape[-1]
        ax.set_xticks(range(T))
        ax.set_yticks(range(T))
        ax.set_xticks([t - 0.5 for t in range(1, T)], minor=True)
        ax.set_yticks([t - 0.5 for t in range(1, T)], minor=True)
        ax.grid(which="minor", color="white", lw=1)
        ax.tick_params(labelsize=7, which="both", length=0)
        ax.set_xlabel("key position j", fontsize=8)
        ax.set_ylabel("query position i", fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_training_curves(history: dict):
    """Notebook 08: training loss (the mean over the steps since the last evaluation) and validation loss, against
    the step; history = {"step": [...], "train": [...], "val": [...]}. Return the figure."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(history["step"], history["train"], "o-", ms=3, label="training (mean since the last point)")
    ax.plot(history["step"], history["val"], "s-", ms=3, label="validation (the last 14 sonnets)")
    best = min(range(len(history["val"])), key=history["val"].__getitem__)
    ax.axvline(history["step"][best], color="grey", ls=":", label=f"lowest validation loss: step {history['step'][best]}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy per character (nats)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
