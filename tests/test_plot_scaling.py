"""torchcourse.plots.plot_scaling, the picture of notebook 06's scaling measurement."""

import matplotlib
import pytest

from torchcourse.plots import plot_scaling

matplotlib.use("Agg")

MEASURED = {1: {"samples_per_s": 1000.0, "step_ms": 10.0, "compute_ms": 9.0},
            2: {"samples_per_s": 1600.0, "step_ms": 13.0, "compute_ms": 10.0},
            4: {"samples_per_s": 2000.0, "step_ms": 25.0, "compute_ms": 26.0}}


def test_three_panels_show_throughput_efficiency_and_the_split_of_a_step():
    fig = plot_scaling(MEASURED)
    throughput, efficiency, split = fig.axes
    ideal, measured = throughput.get_lines()
    assert list(ideal.get_ydata()) == [1000.0, 2000.0, 4000.0]
    assert list(measured.get_ydata()) == [1000.0, 1600.0, 2000.0]
    assert [bar.get_height() for bar in efficiency.patches] == pytest.approx([1.0, 0.8, 0.5])
    heights = [bar.get_height() for bar in split.patches]
    assert heights == pytest.approx([9.0, 10.0, 26.0, 1.0, 3.0, 0.0])  # compute, then all-reduce (never negative)


def test_world_sizes_in_any_order_are_drawn_in_increasing_order():
    fig = plot_scaling({w: MEASURED[w] for w in (4, 1, 2)})
    assert list(fig.axes[0].get_lines()[1].get_xdata()) == [1, 2, 4]
