"""Interactive explorers used in the lessons."""

import html
import io

import ipywidgets as widgets
import matplotlib
import torch

from torchcourse.plots import plot_storage, storage_positions

VIEWS = ["x", "x.t()", "x.permute(1, 0)", "x[1:, ::2]", "x[:, 1]", "x[::2]", "x.unsqueeze(1)", "x[:, :1].expand(-1, 4)", "x.flatten()"]


def describe(view: torch.Tensor) -> str:
    """The properties that decide how a view walks its storage, and the storage index of each element."""
    return (f"shape {tuple(view.shape)}   strides {view.stride()}   offset {view.storage_offset()}   "
            f"contiguous {view.is_contiguous()}\nstorage index of each element:\n{storage_positions(view)}")


def png(fig) -> bytes:
    """The figure as PNG bytes, closed afterwards so that notebooks do not also show it inline."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    matplotlib.pyplot.close(fig)
    return buffer.getvalue()


def stride_explorer(shape: str = "3, 4", view: str = "x.t()") -> widgets.VBox:
    """Pick a shape and a view expression of `x`; see its strides, offset and the storage cells it reads."""
    shape_box = widgets.Text(value=shape, description="shape of x")
    view_box = widgets.Combobox(value=view, options=VIEWS, description="view", ensure_option=False)
    text = widgets.HTML()
    picture = widgets.Image(format="png")

    def redraw(_=None):
        try:
            dims = tuple(int(d) for d in shape_box.value.strip("()[] ").split(",") if d.strip())
            x = torch.arange(torch.Size(dims).numel()).reshape(dims)
            # The reader's own expression, in their own kernel, with only `x` and `torch` in scope.
            v = eval(view_box.value, {"torch": torch}, {"x": x})
            text.value = f"<pre>{html.escape(describe(v))}</pre>"
            picture.value = png(plot_storage(v))
        except Exception as error:  # a half-typed shape or view is normal while typing: say so, keep the old picture
            text.value = f"<pre>{type(error).__name__}: {html.escape(str(error))}</pre>"

    shape_box.observe(redraw, names="value")
    view_box.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([shape_box, view_box]), text, picture])
