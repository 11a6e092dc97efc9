"""What decoding a request costs in memory, per byte of its body: the decoding factors
the receivers reserve with (receivers/ingest.py).

    python bench/decoding_memory.py [--megabytes 60]

For protobuf and OTLP/JSON, a body of agent-like spans (bench/agent_spans.py) is
decoded in a fresh process; printed: the peak resident memory over what the process
held with the body alone (VmHWM, reset before decoding), and what the decoded request
still holds, each per byte of body.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.agent_spans import AgentRequests  # noqa: E402
from spanscore.core.otlp_json import encode_request  # noqa: E402

DECODE = """
import sys
from pathlib import Path
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from spanscore.core.otlp_json import decode_request

def status_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

body = Path(sys.argv[2]).read_bytes()
Path("/proc/self/clear_refs").write_text("5")
base = status_kib("VmRSS")
request = decode_request(body) if sys.argv[1] == "json" else ExportTraceServiceRequest.FromString(body)
print((status_kib("VmHWM") - base) / len(body), (status_kib("VmRSS") - base) / len(body))
"""


def body(encoding: str, megabytes: float) -> bytes:
    template = ExportTraceServiceRequest.FromString(AgentRequests(spans_per_request=512).template.tobytes())
    encode = (lambda r: encode_request(r).encode()) if encoding == "json" else (lambda r: r.SerializeToString())
    request = ExportTraceServiceRequest()
    for _ in range(max(1, round(megabytes * 1e6 / len(encode(template))))):
        request.resource_spans.extend(template.resource_spans)
    return encode(request)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        for encoding in ("protobuf", "json"):
            path = Path(workdir) / encoding
            data = body(encoding, args.megabytes)
            path.write_bytes(data)
            out = subprocess.run(
                [sys.executable, "-c", DECODE, encoding, str(path)], check=True, capture_output=True, text=True
            ).stdout.split()
            peak, held = float(out[0]), float(out[1])
            print(
                f"{encoding}: {len(data) / 1e6:.1f} MB body; decoding peaks at {peak:.1f}x the body, "
                f"the decoded request holds {held:.1f}x"
            )


if __name__ == "__main__":
    main()
