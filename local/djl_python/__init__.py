"""A local stand-in for the LMI container's `djl_python` package (Input, Output, PairList).

The real package exists only inside the DJL Serving / LMI containers (deepjavalibrary/djl-serving,
engines/python/setup/djl_python). This is the subset of its API that model.py and local/serve.py use, kept faithful
to inputs.py, outputs.py and pair_list.py there (method names, defaults, return values, the error body of
Output.error, case-insensitive Input.get_property, "data" as the default content key, every setter returning self).
What is left out: the socket wire format (Input.read / Output.encode), numpy/npz/image helpers and streaming.
local/serve.py puts this folder's parent on sys.path so that `from djl_python import Input, Output` in model.py
resolves here, as it resolves to the real package in the container.
"""

from .inputs import Input
from .outputs import Output
from .pair_list import PairList

__all__ = ["Input", "Output", "PairList"]
