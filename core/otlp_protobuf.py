"""OTLP/protobuf trace export requests as the receivers decode them, and how deep their
messages may nest, a limit OTLP/JSON (core.otlp_json) shares.

protobuf's Python parser (upb) stops at 100 nested messages, counted from the request: a
span attribute's value may nest `arrayValue` 47 levels deep, `kvlistValue` 31. The
Collector's Go parser goes much deeper, but the one switch that lifts this limit here
(SetAllowOversizeProtos) lifts it to 65,535 levels, and a request 30,000 levels deep (a
234 KB body) then overflows the parser's stack and kills the process. So the limit stays,
and a request past it is told so in words, not in the parser's.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

MAX_NESTED_MESSAGES = 100  # upb's own depth limit, named for OTLP/JSON to share
TOO_DEEP = (
    f"request nests messages more than {MAX_NESTED_MESSAGES} levels deep, the most spanscore reads "
    "(a span attribute's value may nest arrayValue 47 levels, kvlistValue 31)"
)


class MalformedProtobuf(ValueError):
    """The body is not a valid ExportTraceServiceRequest; the message is for the client."""


def decode_request(body: bytes) -> ExportTraceServiceRequest:
    try:
        return ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        if "MaxDepth" in str(exc):  # upb: "Exceeded upb_DecodeOptions_MaxDepth"
            raise MalformedProtobuf(TOO_DEEP) from None
        raise MalformedProtobuf(f"malformed ExportTraceServiceRequest: {exc}") from None
