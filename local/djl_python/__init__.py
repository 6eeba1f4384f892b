"""A local stand-in for the `djl_python` package of the LMI 0.27.0 image (djl-inference:0.27.0-deepspeed0.12.6-cu121).

The real package exists only inside the DJL Serving / LMI containers. This is the subset of its API that model.py
and local/serve.py use, kept to deepjavalibrary/djl-serving at tag v0.27.0 (branch 0.27.0-dlc), files
engines/python/setup/djl_python/{inputs,outputs,pair_list}.py:
- Input: properties (case-insensitive get_property) and content; get_as_bytes reads "data", else the first entry;
  is_batch / get_batch_size / get_batches split a DJL dynamic batch by its `batch_NNN.` prefixes, the requests'
  properties and content going to each request and the engine's own properties (model_dir, device_id,
  tensor_parallel_degree) staying on the batch;
- Output: code/message/properties/content, every setter returning self; error() gives the body
  {"code", "message", "error"} with 424 "prediction failure" by default; add/add_as_json take batch_index and key the
  entry `batch_<i>.<key>`, which DJL's PyPredictor splits by; JSON is written with allow_nan=False, so NaN or inf in
  an answer raises; there is no get_property/get_properties (added after 0.27.0); add_stream_content(iterator,
  output_formatter) answers with a stream instead (default formatter: {"outputs": item} and a newline);
- PairList: add() drops only None (an empty body is content: an HTTP request always has "data", even b"").
What the engine and the Java frontend do around the handler (what a None return becomes, how batches are formed
and split, escaped exceptions, how a stream is sent) is in local/djl_frontend.py. Left out: the socket wire format
(Input.read / Output.send), numpy/npz/image helpers, finalize.
local/serve.py puts this folder's parent on sys.path so that `from djl_python import Input, Output` in model.py
resolves here, as it resolves to the real package in the container.
"""

from .inputs import Input
from .outputs import Output
from .pair_list import PairList

__all__ = ["Input", "Output", "PairList"]
