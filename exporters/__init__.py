"""Exporters: where scored traces go (OTLP gRPC, OTLP HTTP, OTLP/JSON file, debug), and
the score metrics (Prometheus, OTLP gRPC, OTLP HTTP)."""

from exporters.base import Exporter, ExporterConfig, ExportError
from exporters.debug import DebugExporter
from exporters.file import FileExporter
from exporters.otlp_grpc import OtlpGrpcExporter
from exporters.otlp_http import OtlpHttpExporter
from exporters.prometheus import PrometheusReader
from exporters.score_metrics import ScoreMetrics

__all__ = [
    "DebugExporter", "Exporter", "ExporterConfig", "ExportError", "FileExporter", "OtlpGrpcExporter", "OtlpHttpExporter",
    "PrometheusReader", "ScoreMetrics",
]
