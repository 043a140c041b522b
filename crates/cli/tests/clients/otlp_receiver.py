"""An OTLP/HTTP trace receiver for the traces test: decodes each ExportTraceServiceRequest with
the official protobuf classes (PyPI's opentelemetry-proto) and prints every span as one JSON
line on stdout. The first line is `listening HOST:PORT`. Each raw request body is appended to
RAW_FILE, for the test to search for secrets.

Usage: otlp_receiver.py RAW_FILE [--delay SECONDS]   (answers each request after the delay:
a slow collector)
"""

import gzip
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

RAW_FILE = sys.argv[1]
DELAY = float(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--delay" else 0.0


def value(any_value):
    """An AnyValue as plain JSON."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return attributes(any_value.kvlist_value.values)
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(key_values):
    return {kv.key: value(kv.value) for kv in key_values}


def spans(request):
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "service": resource.get("service.name"),
                    "pid": resource.get("process.pid"),
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "status": span.status.code,
                    "attributes": attributes(span.attributes),
                    "events": [
                        {"name": e.name, "attributes": attributes(e.attributes)}
                        for e in span.events
                    ],
                }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        with open(RAW_FILE, "ab") as raw:
            raw.write(body)
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        for span in spans(request):
            print(json.dumps(span), flush=True)
        time.sleep(DELAY)
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening %s:%d" % server.server_address, flush=True)
server.serve_forever()
