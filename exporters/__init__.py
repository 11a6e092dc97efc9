"""Exporters: where scored traces go (OTLP gRPC, OTLP HTTP, OTLP/JSON file, debug), and
the score metrics (Prometheus, OTLP gRPC, OTLP HTTP)."""

from spanscore.exporters.base import Exporter, ExporterConfig, ExportError
from spanscore.exporters.debug import DebugExporter
from spanscore.exporters.file import FileExporter
from spanscore.exporters.otlp_grpc import OtlpGrpcExporter
from spanscore.exporters.otlp_http import OtlpHttpExporter
from spanscore.exporters.prometheus import PrometheusReader
from spanscore.exporters.score_metrics import ScoreMetrics

__all__ = [
    "DebugExporter",
    "Exporter",
    "ExporterConfig",
    "ExportError",
    "FileExporter",
    "OtlpGrpcExporter",
    "OtlpHttpExporter",
    "PrometheusReader",
    "ScoreMetrics",
]
