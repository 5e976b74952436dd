"""Helpers the course notebooks import: device choice, seeding, plots and widgets.

Nothing is imported or computed here: each notebook imports the module it needs
(`from torchcourse.widgets import stride_explorer`), so `import torchcourse` stays
instant and never touches torch, matplotlib or a GPU.
"""

__version__ = "0.1.0"
