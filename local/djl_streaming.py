"""How DJL Serving 0.27.0 sends a streamed answer (an Output with add_stream_content), for local/serve.py.

Each piece follows deepjavalibrary/djl-serving at v0.27.0:
- stream_chunks: engines/python/setup/djl_python/outputs.py#Output.send. The Python engine calls next() on the
  stream (an iterator: a list is a TypeError), passes each item through the output formatter (None: as it is),
  sends str as UTF-8, bytes/bytearray as they are and anything else as indented JSON, one chunk each, and ends with
  an empty last chunk. An exception from the stream or the formatter ends it too: its message, as plain text, is
  the last chunk. The engine reads the next request only after the stream has ended, so a worker runs one stream at
  a time and nothing else meanwhile.
- StreamedResponse.chunks: engines/python/src/main/java/ai/djl/python/engine/Connection.java#OutputDecoder (the
  chunks become a ChunkedBytesSupplier) and serving/src/main/java/ai/djl/serving/http/InferenceRequestHandler.java
  #sendOutput: the status and headers are sent with the first chunk, each chunk as HTTP/1.1 chunked content;
  waiting longer than `chunked_read_timeout` (ConfigManager, default 60 s) for a chunk is "Read chunk timeout."
  (ai.djl.inference.streaming.ChunkedBytesSupplier#nextChunk), and the frontend drops the connection.
- A streamed Output cannot answer a DJL dynamic batch: its content is one chunked entry, so PyPredictor#batchPredict
  finds "Batch output size mismatch" (local/djl_frontend.split_batch_output).
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("local.serve")

# ConfigManager#getChunkedReadTimeout: `chunked_read_timeout` in config.properties, else 60 s.
CHUNKED_READ_TIMEOUT_S = 60.0
_END = object()
# Hop-by-hop or framing headers the HTTP layer writes itself.
_FRAMING_HEADERS = ("content-type", "content-length", "transfer-encoding", "connection")


class ChunkReadTimeout(Exception):
    """No chunk came within chunked_read_timeout: DJL drops the connection."""


def is_streamed(output: Any) -> bool:
    return getattr(output, "stream_content", None) is not None


def stream_chunks(output: Any) -> Iterator[bytes]:
    """The chunks the Python engine sends for a streamed Output, in order (Output.send at v0.27.0)."""
    formatter = output.stream_output_formatter
    while True:
        try:
            data = next(output.stream_content)
            if formatter is not None:
                data = formatter(data)
            if type(data) is str:
                data = data.encode("utf-8")
            elif type(data) is bytearray:
                data = bytes(data)
            elif type(data) is not bytes:
                data = bytes(output._encode_json(data))
        except StopIteration:
            return
        except Exception as error:
            log.exception("Failed read streaming content from output")
            yield str(error).encode("utf-8")
            return
        yield data


class StreamedResponse:
    """A streamed answer: its status and headers at once, its body chunk by chunk. The worker thread drains the
    handler's stream (drain, as the Python engine does before it reads the next request); the HTTP thread reads the
    chunks (chunks, as the Java frontend does, with its read timeout)."""

    def __init__(self, output: Any, *, read_timeout: float = CHUNKED_READ_TIMEOUT_S) -> None:
        self.status = int(output.code)
        self.message = output.message
        self.headers = {str(key).lower(): str(value) for key, value in output.properties.items()}
        self.read_timeout = read_timeout
        self._output = output
        self._chunks: queue.Queue = queue.Queue()

    def drain(self) -> None:
        try:
            for chunk in stream_chunks(self._output):
                self._chunks.put(chunk)
        finally:
            self._chunks.put(_END)

    def chunks(self) -> Iterator[bytes]:
        while True:
            try:
                chunk = self._chunks.get(timeout=self.read_timeout)
            except queue.Empty:
                raise ChunkReadTimeout("Read chunk timeout.") from None
            if chunk is _END:
                return
            yield chunk

    def body(self) -> bytes:
        """The whole body (what InvokeEndpoint, which does not stream, hands the client)."""
        return b"".join(self.chunks())


def send(handler: Any, response: StreamedResponse) -> None:
    """Write `response` on a BaseHTTPRequestHandler as DJL does: headers with the first chunk, then HTTP/1.1 chunked
    content; the connection closes afterwards (and at once, with no answer, if a chunk is late)."""
    handler.close_connection = True
    chunks = response.chunks()
    try:
        first = next(chunks, None)
    except ChunkReadTimeout:
        log.warning("no first chunk within %s s: dropping the connection", response.read_timeout)
        return
    handler.protocol_version = "HTTP/1.1"  # chunked transfer coding is HTTP/1.1
    handler.send_response(response.status, response.message)
    for key, value in response.headers.items():
        if key not in _FRAMING_HEADERS:
            handler.send_header(key, value)
    handler.send_header("Content-Type", response.headers.get("content-type", "application/octet-stream"))
    handler.send_header("Transfer-Encoding", "chunked")
    handler.send_header("Connection", "close")
    handler.end_headers()
    try:
        pending = [] if first is None else [first]
        for chunk in _chained(pending, chunks):
            if chunk:  # an empty chunk would end the chunked body early (Netty writes nothing for one)
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
    except ChunkReadTimeout:
        log.warning("a chunk took longer than %s s: dropping the connection", response.read_timeout)
        return
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


def _chained(first: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from first
    yield from rest
