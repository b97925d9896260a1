"""scaffold: generate PyTorch training projects whose loops are correct, and prove it.

The library entry point is `scaffold.render.render_project`; the command line is `scaffold.cli`.
"""

__version__ = "0.1.0"
