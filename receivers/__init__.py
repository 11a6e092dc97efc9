"""Receivers: where spans come in. `otlp` takes OTLP over gRPC and HTTP."""
